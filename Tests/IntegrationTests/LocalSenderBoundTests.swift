import Foundation
import MeshgateTestSupport
import Synchronization
import Testing

/// Local senders are held at the event queue's documented bounds (docs/security.md): a peer sending large reliable
/// data to members on its own node as fast as it can is slowed (answers held, then `503 event_queue_full`), the
/// node's `meshgate_event_queue_bytes` stays under the per-sender bound, and every send answered `202` is delivered.
/// Set once the senders are done (read by the metrics sampler).
private final class SamplerFlag: Sendable {
  let done = Atomic<Bool>(false)
}

@Suite(.timeLimit(.minutes(4)))
struct LocalSenderBoundTests {
  /// What one sender may have waiting in the event queue (docs/security.md), plus the one message that crossed it
  /// (a 100 KiB binary message is a ~140 KB event; a fan-out is queued once).
  static let senderBound = (8 << 20) + (1 << 20)

  /// Samples `meshgate_event_queue_bytes` until `done` and returns the largest value seen.
  fileprivate static func sampleQueueBytes(port: Int, flag: SamplerFlag) throws -> Int {
    var largest = 0
    while !flag.done.load(ordering: .acquiring) {
      let text = String(decoding: try HTTPClient.get(port: port, path: "/metrics").body, as: UTF8.self)
      for line in text.split(separator: "\n") where line.hasPrefix("meshgate_event_queue_bytes ") {
        largest = max(largest, Int(line.split(separator: " ")[1]) ?? 0)
      }
      Thread.sleep(forTimeInterval: 0.02)
    }
    return largest
  }

  @Test func aFastRESTSenderToLocalMembersIsHeldAtItsBound() async throws {
    try await withNode { node in
      let alice = try node.meshPeer("alice")
      let members = try (0..<5).map { try node.meshPeer("member\($0)") }
      let sessionID = try #require(try alice.createSession()["id"] as? String)
      for member in members { try await inviteAndAccept(alice, member, sessionID: sessionID) }
      let start = try members[0].lastEventID()

      // alice: 4 keep-alive connections, each sending 100 KiB binary messages back to back for 6 s.
      let flag = SamplerFlag()
      let port = node.port
      let sampler = Task { try await onDedicatedThread { try Self.sampleQueueBytes(port: port, flag: flag) } }
      let senders = (0..<4).map { connectionIndex in
        Task {
          try await onDedicatedThread {
            let connection = try HTTPConnection(port: port)
            var answers: [(index: Int, status: Int, code: String?, retryAfter: String?)] = []
            let until = ContinuousClock.now + .seconds(6)
            var index = connectionIndex
            while ContinuousClock.now < until {
              var body = Array(String(format: "m%06d:", index).utf8)
              body += [UInt8](repeating: 0xFF, count: (100 << 10) - body.count)
              let response = try connection.send(
                method: "POST", path: "/api/v1/sessions/\(sessionID)/data?mode=reliable",
                headers: [("Authorization", "Bearer \(alice.token)"), ("Content-Type", "application/octet-stream")],
                body: body, timeout: .seconds(30))
              let code = (try? response.jsonObject()["error"] as? [String: Any])?["code"] as? String
              answers.append((index, response.status, code, response.header("retry-after")))
              index += 4
            }
            return answers
          }
        }
      }
      var answers: [(index: Int, status: Int, code: String?, retryAfter: String?)] = []
      for sender in senders { answers += try await sender.value }
      flag.done.store(true, ordering: .releasing)
      let largest = try await sampler.value

      let accepted = Set(answers.filter { $0.status == 202 }.map(\.index))
      let refused = answers.filter { $0.status != 202 }
      #expect(!accepted.isEmpty)
      #expect(
        largest <= Self.senderBound,
        "meshgate_event_queue_bytes reached \(largest) bytes with one local sender (bound \(Self.senderBound))")
      for answer in refused {
        #expect(answer.status == 503 && answer.code == "event_queue_full" && answer.retryAfter == "1", "\(answer)")
      }
      // Nothing answered 202 is lost: member0 has every accepted message once.
      var seen: [Int] = []
      try await eventuallyAsync(timeout: .seconds(60), message: "member0 has the \(accepted.count) accepted messages") {
        seen = try members[0].allEvents(since: start, pageSize: 50).compactMap { event -> Int? in
          guard event.type == "session.data", let encoded = (event.data["dataBase64"] as? String)?.prefix(12),
            let prefix = Data(base64Encoded: String(encoded)), prefix.count == 9
          else { return nil }
          return Int(String(decoding: prefix.dropFirst().prefix(6), as: UTF8.self))
        }
        return seen.count >= accepted.count
      }
      #expect(seen.count == accepted.count && Set(seen) == accepted, "member0 got \(seen.count) of \(accepted.count)")
    }
  }

  /// The same over browser WebSockets: `{"op":"send"}` as fast as four sockets take them. The node stops reading a
  /// socket while its sender is over its bound (the client's writes block), never closes it, answers every message
  /// (`sent`, or an `event_queue_full` error), and delivers every message answered `sent`. (A debug build parses the
  /// messages more slowly than its store writes them, so there this checks the holding path, not the growth.)
  @Test func aFastWebSocketSenderIsHeldAndNeverClosed() async throws {
    try await withNode { node in
      let alice = try node.meshPeer("alice")
      let members = try (0..<5).map { try node.meshPeer("member\($0)") }
      let sessionID = try #require(try alice.createSession()["id"] as? String)
      for member in members { try await inviteAndAccept(alice, member, sessionID: sessionID) }
      let start = try members[0].lastEventID()
      let flag = SamplerFlag()
      let port = node.port
      let sampler = Task { try await onDedicatedThread { try Self.sampleQueueBytes(port: port, flag: flag) } }
      // Four sockets of alice's, each on its own thread; message ids are `socket * 100_000 + n`.
      let senders = (0..<4).map { socketIndex in
        Task {
          try await onDedicatedThread { () -> (sent: Set<Int>, refused: Int, unexpected: [String], open: Bool) in
            let (socket, _) = try node.openEvents(alice.peer)
            defer { socket.close() }
            var sent: Set<Int> = []
            var refused = 0
            var answered = 0
            var unexpected: [String] = []
            func take(_ message: WebSocketMessage?) throws {
              guard case .text(let text)? = message,
                let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
              else { return }
              let data = object["data"] as? [String: Any]
              switch object["type"] as? String {
              case "sent":
                sent.insert(socketIndex * 100_000 + answered)
                answered += 1
              case "error":
                if data?["code"] as? String != "event_queue_full" { unexpected.append(text) }
                answered += 1
                refused += 1
              default: break
              }
            }
            var count = 0
            let until = ContinuousClock.now + .seconds(6)
            while ContinuousClock.now < until {
              var payload = Array(String(format: "m%06d:", socketIndex * 100_000 + count).utf8)
              payload += [UInt8](repeating: 0xFF, count: (48 << 10) - payload.count)
              let message = try jsonText(
                ["op": "send", "session": sessionID, "dataBase64": Data(payload).base64EncodedString()])
              try socket.send(text: message, timeout: .seconds(30))
              count += 1
              if count % 32 == 0 {
                while let reply = try socket.receive(timeout: .milliseconds(1)) { try take(reply) }
              }
            }
            while answered < count { try take(try socket.receive(timeout: .seconds(30))) }
            return (sent, refused, unexpected, !socket.isClosed)
          }
        }
      }
      var sent: Set<Int> = []
      var refused = 0
      var open = true
      for sender in senders {
        let result = try await sender.value
        sent.formUnion(result.sent)
        refused += result.refused
        open = open && result.open
        #expect(result.unexpected.isEmpty, "\(result.unexpected)")
      }
      flag.done.store(true, ordering: .releasing)
      let largest = try await sampler.value
      #expect(open, "the sender's socket was closed")
      #expect(!sent.isEmpty)
      #expect(
        largest <= Self.senderBound,
        "meshgate_event_queue_bytes reached \(largest) bytes with one WebSocket sender (bound \(Self.senderBound))")
      // Sends are answered in order: the i-th reply answers the i-th message. Every `sent` one reached member0.
      var seen: [Int] = []
      try await eventuallyAsync(timeout: .seconds(60), message: "member0 has the \(sent.count) sent messages") {
        seen = try members[0].allEvents(since: start, pageSize: 50).compactMap { event -> Int? in
          guard event.type == "session.data", let encoded = (event.data["dataBase64"] as? String)?.prefix(12),
            let prefix = Data(base64Encoded: String(encoded)), prefix.count == 9
          else { return nil }
          return Int(String(decoding: prefix.dropFirst().prefix(6), as: UTF8.self))
        }
        return seen.count >= sent.count
      }
      #expect(
        Set(seen) == sent && seen.count == sent.count, "member0 got \(seen.count) of \(sent.count) (\(refused) refused)"
      )
    }
  }
}
