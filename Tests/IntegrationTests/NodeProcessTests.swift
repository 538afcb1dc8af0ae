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

  /// `withNodes(seeds:)` starts the nodes in order and gives node `i` a `--peer` for each earlier node it names; a
  /// seed that is not an earlier node is refused before any node starts.
  @Test func seededNodesStartInOrderWithPeerArgumentsForEarlierNodes() async throws {
    try await withNodes(count: 3, seeds: .first) { nodes in
      #expect(!nodes[0].commandLine.contains("--peer"))
      for node in nodes.dropFirst() {
        let peers = node.commandLine.indices.dropLast().filter { node.commandLine[$0] == "--peer" }
        #expect(peers.map { node.commandLine[$0 + 1] } == [nodes[0].meshAddress], "\(node.commandLine)")
      }
    }
    await #expect(throws: TestSupportError.self) {
      try await withNodes(count: 2, seeds: MeshSeeds { $0 == 0 ? [1] : [] }) { _ in }
    }
  }
}
