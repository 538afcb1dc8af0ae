import Foundation
import Glibc
import MeshgateTestSupport
import Testing

/// The test harness itself: a node killed by a test must be seen to exit at once, whatever other children of the
/// test process do meanwhile (it was not, with Foundation's `Process`: see ``ChildProcess``).
@Suite(.timeLimit(.minutes(1)))
struct NodeProcessTests {
  @Test func aKilledNodeIsSeenToExitWhileAnotherChildClosedItsInheritedDescriptors() async throws {
    // A Foundation child that closes every inherited descriptor and lives on: Foundation then blocks its shared
    // reaping thread in waitpid until this child exits (8 s).
    let blocker = Process()
    blocker.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
    blocker.arguments = ["-c", "import os, time; os.closerange(3, 65536); time.sleep(8)"]
    try blocker.run()
    defer { kill(blocker.processIdentifier, SIGKILL) }
    try await Task.sleep(for: .milliseconds(300))

    let node = try NodeProcess()
    defer { node.cleanup() }
    try await onDedicatedThread { try node.start() }
    // Measured on the thread that waits, so a busy test run's scheduling does not count.
    let took = try await onDedicatedThread {
      let started = ContinuousClock.now
      node.kill9()
      return ContinuousClock.now - started
    }
    #expect(!node.isRunning)
    #expect(node.exitStatus == 128 + SIGKILL)
    #expect(took < .seconds(4), "SIGKILL took \(took) to be seen")
    // And the node starts again at once (restart() stops a node it still believes running).
    try await onDedicatedThread { try node.restart() }
    #expect(node.isRunning)
  }
}
