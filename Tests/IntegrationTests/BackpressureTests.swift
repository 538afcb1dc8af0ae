import Foundation
import MeshgateTestSupport
import Synchronization
import Testing

/// Backpressure instead of disconnection: a burst on a mesh link slows its sender and never tears the link
/// down; other peers on the link stay fast; slow event readers are cut off with a real close frame; replays are paced.
/// Flags shared by the threads of the burst test.
private final class BurstFlags: Sendable {
  let burstDone = Atomic<Bool>(false)
  let readerReady = Atomic<Bool>(false)
  let smallSent = Atomic<Int>(-1)
}

@Suite(.timeLimit(.minutes(6)))
struct BackpressureTests {
  /// `POST /sessions/{id}/data?mode=reliable` with a raw body, allowing for the node holding the answer.
  static func sendReliable(_ peer: MeshPeer, _ sessionID: String, to target: String, _ body: [UInt8]) throws
    -> HTTPResponse
  {
    try HTTPClient.post(
      port: peer.node.port, path: "/api/v1/sessions/\(sessionID)/data?mode=reliable&to=\(target)", body: body,
      contentType: "application/octet-stream", token: peer.token, timeout: .seconds(60))
  }

  @Test func aBurstOfReliableDataSlowsItsSenderAndNeverTearsDownTheLink() async throws {
    try await withNodes(count: 2, seeds: .allEarlier, linked: true) { nodes in
      let alice = try nodes[0].meshPeer("alice")
      let carol = try nodes[0].meshPeer("carol")
      let bob = try nodes[1].meshPeer("bob")
      let dave = try nodes[1].meshPeer("dave")
      let sessionID = try #require(try alice.createSession()["id"] as? String)
      for invitee in [bob, dave, carol] { try await inviteAndAccept(alice, invitee, sessionID: sessionID) }
      let start = try [alice, bob, carol, dave].map { try $0.lastEventID() }

      // alice: 24 back-to-back 1 MiB messages to bob. carol: a small message to dave every 20 ms meanwhile; dave's
      // socket, read on its own thread, stamps when each arrives.
      let count = 24
      let flags = BurstFlags()
      let daveNode = nodes[1]
      let reader = Task {
        try await onDedicatedThread {
          let (socket, _) = try daveNode.openEvents(dave.peer)
          defer { socket.close() }
          flags.readerReady.store(true, ordering: .releasing)
          var arrivals: [Int: ContinuousClock.Instant] = [:]
          let deadline = ContinuousClock.now + .seconds(240)
          while ContinuousClock.now < deadline {
            let expected = flags.smallSent.load(ordering: .acquiring)
            if expected >= 0 && arrivals.count >= expected { break }
            guard let message = try socket.receive(timeout: .milliseconds(200)), case .text(let text) = message else {
              continue
            }
            let now = ContinuousClock.now
            guard let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any],
              object["type"] as? String == "session.data",
              let body = (object["data"] as? [String: Any])?["text"] as? String, body.hasPrefix("small-"),
              let index = Int(body.dropFirst("small-".count))
            else { continue }
            arrivals[index] = now
          }
          return arrivals
        }
      }
      try await eventuallyAsync(timeout: .seconds(60), message: "dave's event socket is open") {
        flags.readerReady.load(ordering: .acquiring)
      }
      let burst = Task {
        try await onDedicatedThread {
          defer { flags.burstDone.store(true, ordering: .releasing) }
          var statuses: [Int] = []
          for index in 0..<count {
            var body = Array(String(format: "burst-%02d:", index).utf8)
            body += [UInt8](repeating: UInt8(ascii: "x"), count: (1 << 20) - body.count)
            statuses.append(try Self.sendReliable(alice, sessionID, to: bob.id, body).status)
          }
          return statuses
        }
      }
      let small = Task {
        try await onDedicatedThread {
          var sentAt: [ContinuousClock.Instant] = []
          defer { flags.smallSent.store(sentAt.count, ordering: .releasing) }
          // Keep going a little after the burst's answers: its frames may still be on the link.
          var extra = 10
          while extra > 0 && sentAt.count < 2000 {
            if flags.burstDone.load(ordering: .acquiring) { extra -= 1 }
            sentAt.append(.now)
            let response = try Self.sendReliable(
              carol, sessionID, to: dave.id, Array("small-\(sentAt.count - 1)".utf8))
            guard response.status == 202 else {
              throw TestSupportError.unexpectedMessage("carol's small message answered \(response)")
            }
            Thread.sleep(forTimeInterval: 0.02)
          }
          return sentAt
        }
      }
      let statuses = try await burst.value
      let sentAt = try await small.value
      let receivedAt = try await reader.value

      #expect(statuses == Array(repeating: 202, count: count), "alice's answers: \(statuses)")
      // Every accepted message reached bob once and in order (his log read a little at a time: 2.4 MB events).
      var received: [String] = []
      var bobBad: [MeshEvent] = []
      var cursor = start[1]
      try await eventuallyAsync(timeout: .seconds(120), message: "bob has alice's \(count) messages") {
        let page = try bob.get("/api/v1/events?since=\(cursor)&limit=2").jsonObject()
        for event in try (page["events"] as? [[String: Any]] ?? []).map(MeshEvent.init) {
          cursor = max(cursor, event.id)
          if event.type == "session.data" { received.append(String((event.text ?? "").prefix(9))) }
          if ["node.unlinked", "session.peer.state", "session.send.failed"].contains(event.type) {
            bobBad.append(event)
          }
        }
        return received.count >= count
      }
      let expected = (0..<count).map { String(format: "burst-%02d:", $0) }
      #expect(
        sequenceProblem(received, expected: expected) == nil, "\(sequenceProblem(received, expected: expected) ?? "")")
      // Nobody noticed anything: no link loss, no member state change, no failed send, no link closed for a queue.
      #expect(bobBad.isEmpty, "bob saw \(bobBad)")
      for (peer, since) in zip([alice, carol, dave], [start[0], start[2], start[3]]) {
        let log = try peer.allEvents(since: since, pageSize: 4)
        let bad = log.filter { ["node.unlinked", "session.peer.state", "session.send.failed"].contains($0.type) }
        #expect(bad.isEmpty, "\(peer) saw \(bad)")
      }
      #expect(!nodes[0].stderrText().contains("send queue full"))
      #expect(try alice.memberStates(sessionID).values.allSatisfy { $0 == "connected" })

      // carol's small messages stayed fast during the burst: latency from her send to dave's event.
      let latencies = sentAt.indices.compactMap { index in
        receivedAt[index].map {
          Double(($0 - sentAt[index]).components.attoseconds) / 1e15 + Double(($0 - sentAt[index]).components.seconds)
            * 1000
        }
      }.sorted()
      #expect(latencies.count == sentAt.count, "dave got \(latencies.count) of \(sentAt.count) small messages")
      let p50 = latencies[latencies.count / 2]
      let p99 = latencies[min(latencies.count - 1, Int(Double(latencies.count) * 0.99))]
      print(
        "backpressure: \(latencies.count) small messages during a \(count) MiB burst: p50 \(String(format: "%.1f", p50)) ms, "
          + "p99 \(String(format: "%.1f", p99)) ms, max \(String(format: "%.1f", latencies.last ?? 0)) ms")
      // The link hands carol's frame on behind at most one of alice's (LinkSchedulerTests prove the order; the kernel
      // holds at most 128 KiB unsent), and the receiving node's event log writes dave's small event before bob's
      // queued large ones (PublishQueueTests). Before those two fixes a release build measured p50 ~500 ms, p99
      // 600–900 ms here; after, p50 25–40 ms, p99 70–90 ms on a loaded 2-core machine. The 100 ms bound is asserted
      // where timing means something: `make test` runs this test once more against release-built nodes with
      // MESHGATE_STRICT_TIMING=1 (a debug-built node spends most of its time in unoptimised code).
      if ProcessInfo.processInfo.environment["MESHGATE_STRICT_TIMING"] == "1" {
        #expect(p99 < 100, "small messages during the burst: p50 \(p50) ms, p99 \(p99) ms")
      }
    }
  }
}

extension BackpressureTests {
  /// A leave is a control frame, and control frames pass queued bulk data on a link: a peer that sends and then leaves
  /// at once must not have its data dropped by the receiving node as coming from a peer that is no longer a member
  /// (a job sent on accept is delivered exactly so: the sender leaves the offer's session right after the job).
  @Test func dataQueuedBeforeALeaveArrivesBeforeIt() async throws {
    try await withNodes(count: 2, seeds: .allEarlier, linked: true) { nodes in
      let alice = try nodes[0].meshPeer("alice")
      let bob = try nodes[1].meshPeer("bob")
      let sessionID = try #require(try alice.createSession()["id"] as? String)
      try await inviteAndAccept(alice, bob, sessionID: sessionID)
      let start = try bob.lastEventID()
      let count = 6
      for index in 0..<count {
        var body = Array(String(format: "last-%02d:", index).utf8)
        body += [UInt8](repeating: UInt8(ascii: "y"), count: (1 << 20) - body.count)
        #expect(try Self.sendReliable(alice, sessionID, to: bob.id, body).status == 202)
      }
      #expect(try alice.delete("/api/v1/sessions/\(sessionID)/members/me").status == 204)
      var received: [String] = []
      var cursor = start
      var sawLeave = false
      try await eventuallyAsync(timeout: .seconds(60), message: "bob has alice's messages and her leave") {
        let page = try bob.get("/api/v1/events?since=\(cursor)&limit=2").jsonObject()
        for event in try (page["events"] as? [[String: Any]] ?? []).map(MeshEvent.init) {
          cursor = max(cursor, event.id)
          if event.type == "session.data" { received.append(String((event.text ?? "").prefix(8))) }
          if event.type == "session.peer.state" { sawLeave = true }
        }
        return sawLeave && received.count >= count
      }
      #expect(received == (0..<count).map { String(format: "last-%02d:", $0) })
    }
  }
}

// MARK: - Slow event readers and paced replay

extension BackpressureTests {
  /// One node with alice and bob in one session: alice's 1 MiB messages become ~1.4 MB `session.data` events in
  /// bob's log (the payload is not UTF-8, so the event carries only `dataBase64`).
  static func withPair(
    arguments: [String] = [], isolation: isolated (any Actor)? = #isolation,
    _ body: (NodeProcess, MeshPeer, MeshPeer, String) async throws -> Void
  ) async throws {
    try await withNode(arguments: arguments) { node in
      let alice = try node.meshPeer("alice")
      let bob = try node.meshPeer("bob")
      let sessionID = try #require(try alice.createSession()["id"] as? String)
      try await inviteAndAccept(alice, bob, sessionID: sessionID)
      try await body(node, alice, bob, sessionID)
    }
  }

  /// alice sends `count` 1 MiB messages to bob, tagged with their index in the first two bytes.
  static func flood(_ alice: MeshPeer, _ bob: MeshPeer, _ sessionID: String, count: Int, from first: Int = 0) throws {
    for index in first..<(first + count) {
      var body = [UInt8](repeating: 0xFF, count: 1 << 20)
      body[0] = UInt8(index >> 8)
      body[1] = UInt8(index & 0xFF)
      let response = try sendReliable(alice, sessionID, to: bob.id, body)
      guard response.status == 202 else {
        throw TestSupportError.unexpectedMessage("message \(index) answered \(response)")
      }
    }
  }

  /// The index alice put into a `session.data` event's payload.
  static func floodIndex(_ event: [String: Any]) -> Int? {
    guard let encoded = (event["data"] as? [String: Any])?["dataBase64"] as? String,
      let bytes = Data(base64Encoded: String(encoded.prefix(8)))
    else { return nil }
    return Int(bytes[0]) << 8 | Int(bytes[1])
  }

  @Test(arguments: 1...2)
  func aWebSocketClientThatStopsReadingGetsARealCloseFrame4008(round: Int) async throws {
    try await Self.withPair { node, alice, bob, sessionID in
      let (socket, _) = try node.openEvents(bob.peer)
      defer { socket.abort() }
      let before = try node.metric("meshgate_slow_consumer_disconnects_total") ?? 0
      // bob reads nothing while ~34 MB of events are pushed at him: more than the socket buffers and the 8 MiB bound.
      try Self.flood(alice, bob, sessionID, count: 24)
      try await eventuallyAsync(timeout: .seconds(30), message: "the node cuts off the slow reader") {
        try node.metric("meshgate_slow_consumer_disconnects_total") ?? 0 > before
      }
      // Reading on, bob gets the events his socket already held, in order, then a close frame 4008 (not 1006).
      var indices: [Int] = []
      var close: (UInt16?, String)?
      while close == nil {
        switch try socket.receive(timeout: .seconds(30)) {
        case .text(let text):
          let event = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
          if let index = Self.floodIndex(event) { indices.append(index) }
        case .close(let code, let reason): close = (code, reason)
        case .binary, .pong: continue
        case nil:
          Issue.record("no close frame within 30 s after \(indices.count) events")
          return
        }
      }
      #expect(close?.0 == 4008, "closed with \(String(describing: close))")
      #expect(close?.1.contains("since") == true)
      #expect(indices == Array(0..<indices.count), "events before the close: \(indices)")
      #expect(indices.count < 24)
      // What it missed is in the log: a reconnect with since= the last event it got gets the rest.
      let last = try bob.allEvents(pageSize: 4).filter { $0.type == "session.data" }[indices.count - 1].id
      let (again, _) = try node.openEvents(bob.peer, since: String(last))
      defer { again.close() }
      for expected in indices.count..<24 {
        let event = try again.receiveJSONObject(timeout: .seconds(30)) { $0["type"] as? String == "session.data" }
        #expect(Self.floodIndex(event) == expected)
      }
    }
  }

  @Test func anSSEClientThatStopsReadingGetsAFinalEventSayingWhy() async throws {
    try await Self.withPair { node, alice, bob, sessionID in
      let stream = try HTTPStreamReader(port: node.port, path: "/api/v1/events/stream", token: bob.token)
      defer { stream.close() }
      // A stream without `since` is live from its hello's cursor on: flooding before the hello would put the first
      // messages before that cursor, where this stream does not show them.
      let hello = try #require(try stream.nextEvent(timeout: .seconds(30)))
      #expect(hello.event == "hello", "first event: \(hello)")
      let before = try node.metric("meshgate_slow_consumer_disconnects_total") ?? 0
      try Self.flood(alice, bob, sessionID, count: 24)
      try await eventuallyAsync(timeout: .seconds(30), message: "the node cuts off the slow reader") {
        try node.metric("meshgate_slow_consumer_disconnects_total") ?? 0 > before
      }
      var events: [SSEEvent] = []
      do {
        while let event = try stream.nextEvent(timeout: .seconds(30)) { events.append(event) }
        Issue.record("the stream did not end within 30 s after \(events.count) events")
      } catch TestSupportError.connectionClosed {
        // The stream ended.
      }
      let final = try #require(events.last)
      #expect(final.event == "error", "last event: \(final)")
      let data = try final.jsonObject()["data"] as? [String: Any]
      #expect(data?["code"] as? String == "slow_consumer")
      #expect((data?["message"] as? String)?.contains("Last-Event-ID") == true)
      let indices = try events.filter { $0.event == "session.data" }.compactMap { Self.floodIndex(try $0.jsonObject()) }
      #expect(indices == Array(0..<indices.count))
    }
  }

  @Test func aFullSpeedReaderCatchesUpA64MiBBacklogInOneConnection() async throws {
    try await Self.withPair { node, alice, bob, sessionID in
      let start = try bob.lastEventID()
      try Self.flood(alice, bob, sessionID, count: 64)
      var indices: [Int] = []
      let (socket, _) = try node.openEvents(bob.peer, since: String(start))
      defer { socket.close() }
      while indices.count < 64 {
        let event = try socket.receiveJSONObject(timeout: .seconds(60)) { $0["type"] as? String == "session.data" }
        indices.append(Self.floodIndex(event) ?? -1)
      }
      #expect(indices == Array(0..<64))
      // Still open, and live afterwards.
      try socket.send(text: #"{"op":"ping"}"#)
      #expect(try socket.receiveJSONObject(timeout: .seconds(30))["type"] as? String == "pong")
      #expect(try node.metric("meshgate_slow_consumer_disconnects_total") == 0)
    }
  }

  @Test func aFullSpeedSSEReaderCatchesUpA64MiBBacklogInOneStream() async throws {
    try await Self.withPair { node, alice, bob, sessionID in
      let start = try bob.lastEventID()
      try Self.flood(alice, bob, sessionID, count: 64)
      let stream = try HTTPStreamReader(port: node.port, path: "/api/v1/events/stream?since=\(start)", token: bob.token)
      defer { stream.close() }
      var indices: [Int] = []
      while indices.count < 64 {
        guard let event = try stream.nextEvent(timeout: .seconds(60)) else {
          Issue.record("the stream went quiet after \(indices.count) of 64 events")
          return
        }
        #expect(event.event != "error", "the replay was cut off: \(event)")
        if event.event == "session.data" { indices.append(Self.floodIndex(try event.jsonObject()) ?? -1) }
      }
      #expect(indices == Array(0..<64))
      #expect(try node.metric("meshgate_slow_consumer_disconnects_total") == 0)
    }
  }
}
