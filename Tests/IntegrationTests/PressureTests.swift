import Foundation
import Glibc
import MeshgateTestSupport
import Testing

/// Disk and data-directory pressure on real nodes: concurrent file offers against a small disk
/// (a tmpfs the test mounts; skipped, saying why, where mounting is not allowed) and a data directory deleted under a
/// running node.
@Suite(.timeLimit(.minutes(4)))
struct PressureTests {
  /// Mounts a tmpfs of `size` (e.g. `96m`) for the body, and unmounts it afterwards.
  static func withTmpfs<T>(
    size: String, isolation: isolated (any Actor)? = #isolation, _ body: (String) async throws -> T
  ) async throws -> T {
    let mountPoint = FileManager.default.temporaryDirectory.appendingPathComponent("meshgate-disk-\(UUID().uuidString)")
      .path
    try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
    let mounted = NodeFaultTests.run(["mount", "-t", "tmpfs", "-o", "size=\(size)", "tmpfs", mountPoint])
    try #require(mounted.status == 0, "mount failed: \(mounted.output)")
    defer {
      NodeFaultTests.run(["umount", "-l", mountPoint])
      try? FileManager.default.removeItem(atPath: mountPoint)
    }
    return try await body(mountPoint)
  }

  static func freeBytes(_ path: String) -> UInt64 {
    var info = statvfs()
    guard statvfs(path, &info) == 0 else { return 0 }
    return UInt64(info.f_bavail) * UInt64(info.f_frsize)
  }

  /// Three 30 MiB files offered at once by one sender to a node whose data directory is a 96 MiB disk keeping 16 MiB
  /// free (about 75 MiB for files, the event ring and the store taking the rest): the first fits, the second would
  /// take the sender past half of that space (docs/security.md: one sender may hold half, so no sender can reserve the
  /// whole disk) and the third past it and the reserve. Both are refused with 507 before any byte moves, naming what
  /// is promised, and the accepted one finishes whole. (Before: each offer was checked against the free space of the
  /// moment, all three were accepted, the disk filled to 0 bytes and the transfers failed.)
  @Test(.enabled(if: NodeFaultTests.tmpfsAvailable, "needs root and permission to mount a tmpfs (CAP_SYS_ADMIN)"))
  func concurrentOffersReserveTheDiskAndTheOneThatWouldBreakTheReserveGets507() async throws {
    try await Self.withTmpfs(size: "96m") { mountPoint in
      // The sender is paced so that all three offers are answered while the first bytes are still on their way.
      try await withNodes(
        count: 2, perNodeArguments: { $0 == 0 ? ["--min-free-bytes", "16777216"] : ["--transfer-rate", "8388608"] },
        names: ["receiver", "sender"], dataDirectories: [mountPoint + "/data", nil], seeds: .allEarlier, linked: true
      ) { nodes in
        let (receiver, sender) = (nodes[0], nodes[1])
        let (alice, bob, results, digest) = try await Self.uploadAtOnce(3, named: "file", from: sender, to: receiver)
        let accepted = results.filter { $0.0 == 202 }
        let refused = results.filter { $0.0 == 507 }
        #expect(accepted.count == 1 && refused.count == 2, "statuses: \(results.map(\.0)) \(results.map(\.1))")
        for (_, body) in refused {
          #expect(body.contains("insufficient_storage") && body.contains("promised"), "\(body)")
        }
        for (_, body) in accepted {
          let received = try await bob.awaitTransfer(
            try Self.transferID(body), state: "finished", timeout: .seconds(90))
          #expect(received["sha256"] as? String == digest)
        }
        #expect(try alice.events("transfer.failed").isEmpty && bob.events("transfer.failed").isEmpty)
        // The refused offer never reached bob, and the reserve held.
        #expect(try bob.events("transfer.started").count == 1)
        #expect(Self.freeBytes(mountPoint) >= 16 << 20, "free: \(Self.freeBytes(mountPoint))")
        #expect(receiver.isRunning && sender.isRunning)
      }
    }
  }

  /// The sending node spools every upload before it streams it on: two 30 MiB uploads at once on a 64 MiB disk that
  /// keeps 8 MiB free cannot both be spooled, so the second is refused with 507 before its body is read, and the
  /// first arrives whole.
  @Test(.enabled(if: NodeFaultTests.tmpfsAvailable, "needs root and permission to mount a tmpfs (CAP_SYS_ADMIN)"))
  func concurrentUploadsReserveTheSendersSpoolSpace() async throws {
    try await Self.withTmpfs(size: "64m") { mountPoint in
      try await withNodes(
        count: 2, perNodeArguments: { $0 == 0 ? [] : ["--min-free-bytes", "8388608", "--transfer-rate", "8388608"] },
        names: ["receiver", "sender"], dataDirectories: [nil, mountPoint + "/data"], seeds: .allEarlier, linked: true
      ) { nodes in
        let (receiver, sender) = (nodes[0], nodes[1])
        let (alice, bob, results, _) = try await Self.uploadAtOnce(2, named: "spool", from: sender, to: receiver)
        let statuses = results.map(\.0).sorted()
        #expect(statuses == [202, 507], "statuses: \(results)")
        for (status, body) in results where status == 507 {
          #expect(body.contains("insufficient_storage") && body.contains("stores the upload"), "\(body)")
        }
        for (status, body) in results where status == 202 {
          _ = try await bob.awaitTransfer(try Self.transferID(body), state: "finished", timeout: .seconds(90))
        }
        #expect(try alice.events("transfer.failed").isEmpty)
        #expect(Self.freeBytes(mountPoint) >= 8 << 20, "free: \(Self.freeBytes(mountPoint))")
      }
    }
  }

  /// Alice on `sender` and bob on `receiver` share a session, and alice uploads one 30 MiB file to bob `count` times
  /// at once (`<prefix>-<n>.bin`). Returns the two peers, each upload's status and body, and the file's SHA-256.
  static func uploadAtOnce(_ count: Int, named prefix: String, from sender: NodeProcess, to receiver: NodeProcess)
    async throws -> (alice: MeshPeer, bob: MeshPeer, results: [(Int, String)], digest: String)
  {
    let alice = try sender.meshPeer("alice")
    let bob = try receiver.meshPeer("bob")
    let sessionID = try #require(try alice.createSession(encryption: "none")["id"] as? String)
    try await inviteAndAccept(alice, bob, sessionID: sessionID)

    let directory = NSTemporaryDirectory() + "meshgate-pressure-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let path = "\(directory)/thirty-mib.bin"
    try await runTool("/bin/sh", ["-c", "head -c 31457280 /dev/urandom > '\(path)'"])
    let digest = try await sha256OfFile(path)
    let results = try await withThrowingTaskGroup(of: (Int, String).self) { group in
      for index in 0..<count {
        group.addTask { try await alice.uploadFile(sessionID, to: bob, name: "\(prefix)-\(index).bin", path: path) }
      }
      var results: [(Int, String)] = []
      for try await result in group { results.append(result) }
      return results
    }
    return (alice, bob, results, digest)
  }

  /// The transfer id in an accepted upload's answer.
  static func transferID(_ body: String) throws -> String {
    let object = try #require(try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any])
    return try #require((object["transfer"] as? [String: Any])?["id"] as? String)
  }

  /// The data directory deleted under a running node: within seconds /healthz answers 503 with the reason, writes
  /// answer 503 `data_directory_lost` (before: 201 into a deleted file, and everything gone after a restart), reads
  /// still work, and one error line says what happened.
  @Test func aDeletedDataDirectoryMakesTheNodeUnhealthyAndRefusesWrites() async throws {
    try await withNode(name: "doomed") { node in
      let first = try HTTPClient.post(port: node.port, path: "/api/v1/peers", json: #"{"displayName":"before"}"#)
      #expect(first.status == 201, "\(first)")
      #expect(try HTTPClient.get(port: node.port, path: "/healthz").status == 200)

      try FileManager.default.removeItem(atPath: node.dataDirectory)
      var health: HTTPResponse?
      try await eventuallyAsync(timeout: .seconds(15), message: "/healthz after the data directory was deleted") {
        health = try HTTPClient.get(port: node.port, path: "/healthz")
        return health?.status == 503
      }
      let unhealthy = try #require(health)
      #expect(errorCode(unhealthy) == "data_directory_lost", "\(unhealthy)")
      #expect(errorMessage(unhealthy)?.contains(node.dataDirectory) == true, "\(unhealthy)")
      let write = try HTTPClient.post(port: node.port, path: "/api/v1/peers", json: #"{"displayName":"after"}"#)
      #expect(write.status == 503 && errorCode(write) == "data_directory_lost", "\(write)")
      #expect(errorMessage(write)?.contains("restart") == true, "\(write)")
      #expect(try HTTPClient.get(port: node.port, path: "/api/v1/node").status == 200)
      let log = try String(contentsOfFile: node.stderrPath, encoding: .utf8)
      #expect(log.contains("The data directory was lost"), "\(log)")
      #expect(node.isRunning)
    }
  }

  /// `--ws-ping-interval 2`: a WebSocket client that does not answer PINGs is sent one after 2 s and closed 10 s
  /// later; one that answers (as browsers and WebSocket libraries do) stays connected. (Before, the interval was
  /// lws's fixed 300 s, and the close came after 310 s.)
  @Test func webSocketsThatDoNotAnswerPingsAreClosedAfterTheConfiguredInterval() async throws {
    try await withNode(arguments: ["--ws-ping-interval", "2"], name: "pinger") { node in
      let peer = try node.createPeer("scripted")
      let port = node.port
      let path = "/api/v1/ws?token=\(peer.token)"
      let outcome = try await onDedicatedThread {
        () -> (closedAfter: Double?, silentPings: Int, answerPings: Int, alive: Bool) in
        let silent = try WebSocketClient(port: port, path: path)
        silent.autoReplyToPings = false
        let answering = try WebSocketClient(port: port, path: path)
        let started = ContinuousClock.now
        var closedAfter: Double?
        // Both read all along (so the answering one answers); the bound only stops a hung test.
        while closedAfter == nil, ContinuousClock.now - started < .seconds(40) {
          do {
            if case .close? = try silent.receive(timeout: .milliseconds(100)) {
              closedAfter = Double((ContinuousClock.now - started).components.seconds)
            }
          } catch TestSupportError.webSocketClosed {
            closedAfter = Double((ContinuousClock.now - started).components.seconds)
          }
          _ = try answering.receive(timeout: .milliseconds(100))
        }
        // Past the silent one's close (more than one ping interval later): the answering one still works.
        for _ in 0..<30 { _ = try answering.receive(timeout: .milliseconds(100)) }
        try answering.send(text: #"{"op":"ping"}"#)
        let pong = try answering.receiveJSONObject(timeout: .seconds(10), where: { $0["type"] as? String == "pong" })
        return (closedAfter, silent.pingsReceived, answering.pingsReceived, pong["type"] as? String == "pong")
      }
      let closedAfter = try #require(outcome.closedAfter, "the socket that ignores PINGs was never closed")
      #expect(outcome.silentPings >= 1, "the node PINGed the silent socket before closing it")
      #expect(closedAfter >= 10 && closedAfter <= 30, "closed after \(closedAfter) s (PING at 2 s, then 10 s of grace)")
      #expect(outcome.answerPings >= 2 && outcome.alive, "the socket that answers PINGs stays: \(outcome)")
      #expect(node.isRunning)
    }
  }
}
