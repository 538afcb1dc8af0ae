import Foundation
import MeshgateTestSupport
import Synchronization
import Testing

/// Chat rooms on real nodes: hosting, browsing nearby rooms, joining across nodes, messages in order to every member,
/// history on (re)join, leaving and the room's end, bad input, persistence across restarts and kill -9, and a
/// 30-member room over 3 nodes under 5 concurrent senders with a node killed mid-run.
@Suite(.timeLimit(.minutes(4)))
struct ChatTests {
  // MARK: - Helpers

  struct ChatMessageView: Equatable {
    let id: String
    let from: String
    let body: String
    let seq: Int?
  }

  static func messages(_ peer: MeshPeer, _ chatID: String) throws -> [ChatMessageView] {
    var all: [ChatMessageView] = []
    var after = 0
    while true {
      let response = try peer.get("/api/v1/chats/\(chatID)/messages?after=\(after)&limit=1000")
      guard response.status == 200 else {
        throw TestSupportError.unexpectedMessage("listing messages of \(chatID) for \(peer) answered \(response)")
      }
      let page = try response.jsonObject()
      for item in page["messages"] as? [[String: Any]] ?? [] {
        all.append(
          ChatMessageView(
            id: item["id"] as? String ?? "", from: (item["from"] as? [String: Any])?["id"] as? String ?? "",
            body: item["body"] as? String ?? "", seq: item["seq"] as? Int))
      }
      guard let next = (page["nextCursor"] as? String).flatMap(Int.init) else { return all }
      after = next
    }
  }

  static func host(_ peer: MeshPeer, _ name: String) throws -> String {
    let response = try peer.post("/api/v1/chats", json: try jsonText(["name": name]))
    guard response.status == 201, let chat = try response.jsonObject()["chat"] as? [String: Any],
      let id = chat["id"] as? String
    else { throw TestSupportError.unexpectedMessage("hosting \(name) as \(peer) answered \(response)") }
    return id
  }

  /// Joins, waiting first until the room is advertised to the joiner's node (the host's node announces it).
  static func join(_ peer: MeshPeer, _ chatID: String, isolation: isolated (any Actor)? = #isolation) async throws {
    var response: HTTPResponse?
    try await eventuallyAsync(timeout: .seconds(15), message: "\(peer) joining \(chatID)") {
      response = try peer.post("/api/v1/chats/\(chatID)/join", json: "{}")
      return response!.status == 200
    }
  }

  static func post(_ peer: MeshPeer, _ chatID: String, _ body: String, id: String? = nil) throws -> HTTPResponse {
    var fields: [String: Any] = ["body": body]
    if let id { fields["id"] = id }
    return try peer.post("/api/v1/chats/\(chatID)/messages", json: try jsonText(fields))
  }

  // MARK: - Flows

  @Test func hostBrowseJoinChatLeaveAndEnd() async throws {
    try await withNodes(count: 2, seeds: .allEarlier, linked: true) { nodes in
      let hana = try nodes[0].meshPeer("hana")
      let bob = try nodes[1].meshPeer("bob")
      let chatID = try Self.host(hana, "Lobby")
      #expect(chatID.count == 16)

      // Bob's node sees the room advertised on jobmanager-chat with its name.
      var nearby: [[String: Any]] = []
      try await eventuallyAsync(timeout: .seconds(10), message: "room nearby for bob") {
        nearby = try bob.get("/api/v1/chats/nearby").jsonObject()["chats"] as? [[String: Any]] ?? []
        return nearby.contains { $0["id"] as? String == chatID }
      }
      let entry = try #require(nearby.first { $0["id"] as? String == chatID })
      #expect(entry["name"] as? String == "Lobby")
      #expect((entry["host"] as? [String: Any])?["id"] as? String == hana.id)
      #expect(entry["joined"] as? Bool == false)
      let advertised = try bob.servicePeers("jobmanager-chat")
      #expect(
        advertised.contains { ($0["discoveryInfo"] as? [String: Any])?["r.\(chatID)"] as? String == "Lobby" },
        "\(advertised)")
      let hostNearby = try hana.get("/api/v1/chats/nearby").jsonObject()["chats"] as? [[String: Any]] ?? []
      #expect(!hostNearby.contains { $0["id"] as? String == chatID }, "the host's own room is not nearby for the host")

      // Messages before bob joins are history he gets on join.
      #expect(try Self.post(hana, chatID, "welcome").status == 201)
      let bobMark = try bob.lastEventID()
      try await Self.join(bob, chatID)
      let detail = try bob.get("/api/v1/chats/\(chatID)").jsonObject()
      let members = (detail["members"] as? [[String: Any]] ?? []).map {
        (($0["peer"] as? [String: Any])?["id"] as? String ?? "", $0["role"] as? String ?? "")
      }
      #expect(members.map(\.0) == [hana.id, bob.id])
      #expect(members.map(\.1) == ["host", "member"])
      #expect((detail["chat"] as? [String: Any])?["joined"] as? Bool == true)
      try await eventuallyAsync(timeout: .seconds(10), message: "history reaches bob") {
        try Self.messages(bob, chatID).map(\.body) == ["welcome"]
      }
      try await hana.awaitEvent("chat.member.joined") { $0.peerID == bob.id }

      // Both ways, in order; each side is told each message once.
      for index in 1...5 {
        #expect(try Self.post(hana, chatID, "h\(index)").status == 201)
        let posted = try Self.post(bob, chatID, "b\(index)")
        #expect(posted.status == 201, "\(posted)")
      }
      let expectedHana = (1...5).map { "h\($0)" }
      let expectedBob = (1...5).map { "b\($0)" }
      for peer in [hana, bob] {
        try await eventuallyAsync(timeout: .seconds(10), message: "all messages at \(peer)") {
          let list = try Self.messages(peer, chatID)
          return list.count == 11 && list.allSatisfy { $0.seq != nil }
        }
        let list = try Self.messages(peer, chatID)
        #expect(list.map(\.seq) == Array(1...11).map { Optional($0) })
        #expect(list.filter { $0.from == hana.id }.map(\.body) == ["welcome"] + expectedHana)
        #expect(list.filter { $0.from == bob.id }.map(\.body) == expectedBob)
      }
      let hanaList = try Self.messages(hana, chatID)
      #expect(try Self.messages(bob, chatID) == hanaList, "both members see the same order")
      try await eventuallyAsync(timeout: .seconds(10), message: "chat.message events for bob") {
        try bob.events("chat.message", since: bobMark).count == 11
      }
      let told = try bob.events("chat.message", since: bobMark).compactMap {
        ($0.data["message"] as? [String: Any])?["body"] as? String
      }
      #expect(told == hanaList.map(\.body))

      // A retry with the same id is answered with the stored message, never stored twice.
      let first = try Self.post(bob, chatID, "once", id: "retry-0001")
      #expect(first.status == 201)
      let again = try Self.post(bob, chatID, "once", id: "retry-0001")
      #expect(again.status == 200, "\(again)")
      #expect(errorCode(try Self.post(hana, chatID, "other", id: "retry-0001")) == "id_in_use")
      try await eventuallyAsync(timeout: .seconds(10), message: "retry ordered once") {
        try Self.messages(hana, chatID).filter { $0.body == "once" }.count == 1
      }

      // Leave and rejoin: the whole conversation is there, nothing twice.
      let left = try bob.post("/api/v1/chats/\(chatID)/leave", json: "{}")
      #expect(left.status == 200, "\(left)")
      try await hana.awaitEvent("chat.member.left") { $0.peerID == bob.id }
      #expect(try bob.get("/api/v1/chats/\(chatID)/messages").status == 403)
      #expect(errorCode(try Self.post(bob, chatID, "ghost")) == "not_a_member")
      #expect(try Self.post(hana, chatID, "while bob was away").status == 201)
      try await Self.join(bob, chatID)
      try await eventuallyAsync(timeout: .seconds(10), message: "bob's history after rejoin") {
        try Self.messages(bob, chatID) == Self.messages(hana, chatID)
      }
      let rejoined = try Self.messages(bob, chatID)
      #expect(rejoined.count == 13 && Set(rejoined.map(\.id)).count == 13)

      // The host leaves: the room goes on (bob is there) and is no longer advertised; bob's leave ends it.
      #expect(try hana.post("/api/v1/chats/\(chatID)/leave", json: "{}").status == 200)
      try await bob.awaitEvent("chat.member.left") { $0.peerID == hana.id }
      #expect(try Self.post(bob, chatID, "alone").status == 201)
      try await eventuallyAsync(timeout: .seconds(10), message: "room no longer nearby") {
        let chats = try bob.get("/api/v1/chats/nearby").jsonObject()["chats"] as? [[String: Any]] ?? []
        return !chats.contains { $0["id"] as? String == chatID }
      }
      let bobEndMark = try bob.lastEventID()
      #expect(try bob.post("/api/v1/chats/\(chatID)/leave", json: "{}").status == 200)
      try await bob.awaitEvent("chat.ended", since: bobEndMark) {
        ($0.data["chat"] as? [String: Any])?["id"] as? String == chatID
      }
      let joinEnded = try hana.post("/api/v1/chats/\(chatID)/join", json: "{}")
      #expect(joinEnded.status == 409 && errorCode(joinEnded) == "chat_ended", "\(joinEnded)")
    }
  }

  @Test func roomsNeverCrossAPlaintextLink() async throws {
    try await withNodes(count: 2, arguments: ["--mesh-tls", "off"], seeds: .allEarlier, linked: true) { nodes in
      let hana = try nodes[0].meshPeer("hana")
      let bob = try nodes[1].meshPeer("bob")
      let chatID = try Self.host(hana, "Plain")
      var response: HTTPResponse?
      try await eventuallyAsync(timeout: .seconds(15), message: "the room is advertised to bob's node") {
        response = try bob.post("/api/v1/chats/\(chatID)/join", json: "{}")
        return response!.status != 404
      }
      #expect(
        response?.status == 409 && errorCode(response!) == "encryption_unavailable", "\(String(describing: response))")
      #expect(errorMessage(response!)?.contains("TLS") == true)
      let members = try hana.get("/api/v1/chats/\(chatID)").jsonObject()["members"] as? [[String: Any]]
      #expect(members?.count == 1, "nobody joined over the plaintext link")
    }
  }

  @Test func badInput() async throws {
    try await withNode { node in
      let hana = try node.createPeer("hana")
      let peer = MeshPeer(node: node, peer: hana)
      let other = try node.meshPeer("other")
      for (json, field) in [
        (#"{"name":""}"#, "name"), (try jsonText(["name": String(repeating: "x", count: 64)]), "name"),
        (#"{"name":"a\u0007b"}"#, "name"), (#"{"name":3}"#, "name"), (#"{"name":"ok","extra":1}"#, "extra"),
        (#"{}"#, "name"),
      ] {
        let response = try peer.post("/api/v1/chats", json: json)
        #expect(response.status == 400, "\(json) → \(response)")
        #expect(errorMessage(response)?.contains(field) == true, "\(json) → \(response)")
      }
      let chatID = try Self.host(peer, "Room")
      for (json, field) in [
        (#"{"body":""}"#, "body"), (try jsonText(["body": String(repeating: "x", count: 16 * 1024 + 1)]), "body"),
        (#"{"body":"hi","id":"short"}"#, "id"), (#"{"body":"hi","id":"bad/characters"}"#, "id"),
        (#"{"text":"hi"}"#, "text"),
      ] {
        let response = try peer.post("/api/v1/chats/\(chatID)/messages", json: json)
        #expect(response.status == 400, "\(json) → \(response)")
        #expect(errorMessage(response)?.contains(field) == true, "\(json) → \(response)")
      }
      #expect(try Self.post(peer, chatID, String(repeating: "é", count: 8 * 1024)).status == 201, "16 KiB is fine")
      #expect(try peer.get("/api/v1/chats/0000000000000000").status == 404)
      #expect(try other.get("/api/v1/chats/\(chatID)/messages").status == 403)
      #expect(try Self.post(other, "0000000000000000", "x").status == 404)
      #expect(try other.post("/api/v1/chats/0000000000000000/join", json: "{}").status == 404)
      #expect(try other.post("/api/v1/chats/\(chatID)/leave", json: "{}").status == 403)
      #expect(try peer.get("/api/v1/chats/\(chatID)/messages?after=-1").status == 400)
      #expect(try HTTPClient.get(port: node.port, path: "/api/v1/chats").status == 401)
      // A local peer joins a room hosted on its own node at once.
      #expect(try other.post("/api/v1/chats/\(chatID)/join", json: "{}").status == 200)
      #expect(try Self.messages(other, chatID).count == 1)
    }
  }

  // MARK: - Persistence

  @Test func roomsAndMessagesSurviveRestartsAndKill9() async throws {
    try await withNodes(count: 2, seeds: .allEarlier, linked: true) { nodes in
      let hana = try nodes[0].meshPeer("hana")
      let bob = try nodes[1].meshPeer("bob")
      let chatID = try Self.host(hana, "Durable")
      try await Self.join(bob, chatID)
      for index in 1...3 { #expect(try Self.post(bob, chatID, "before\(index)").status == 201) }
      try await eventuallyAsync(timeout: .seconds(10), message: "ordered before the kill") {
        try Self.messages(hana, chatID).count == 3
      }

      // kill -9 the host's node; bob keeps posting (accepted, pending), then the host comes back.
      nodes[0].kill9()
      for index in 1...3 {
        let response = try Self.post(bob, chatID, "offline\(index)")
        #expect(response.status == 201, "\(response)")
        #expect((try response.jsonObject()["message"] as? [String: Any])?["seq"] is NSNull)
      }
      #expect(try Self.messages(bob, chatID).suffix(3).allSatisfy { $0.seq == nil }, "pending shown at the end")
      try await onDedicatedThread { try nodes[0].restart() }
      try await awaitLinks(nodes)
      let expected = (1...3).map { "before\($0)" } + (1...3).map { "offline\($0)" }
      for peer in [hana, bob] {
        try await eventuallyAsync(timeout: .seconds(15), message: "all six at \(peer) after the host's restart") {
          let list = try Self.messages(peer, chatID)
          return list.map(\.body) == expected && list.allSatisfy { $0.seq != nil }
        }
      }

      // kill -9 the member's node: what it acknowledged is there after restart, and it catches up.
      #expect(try Self.post(bob, chatID, "acked before kill").status == 201)
      nodes[1].kill9()
      #expect(try Self.post(hana, chatID, "while bob's node was down").status == 201)
      try await onDedicatedThread { try nodes[1].restart() }
      try await awaitLinks(nodes)
      for peer in [hana, bob] {
        try await eventuallyAsync(timeout: .seconds(15), message: "\(peer) after the member's restart") {
          let list = try Self.messages(peer, chatID)
          return list.count == 8 && list.allSatisfy { $0.seq != nil } && Set(list.map(\.id)).count == 8
        }
      }
      #expect(try Self.messages(bob, chatID) == Self.messages(hana, chatID))
      let room = try bob.get("/api/v1/chats").jsonObject()["chats"] as? [[String: Any]] ?? []
      #expect(room.first?["id"] as? String == chatID && room.first?["joined"] as? Bool == true, "\(room)")

      // A clean restart of both keeps everything too.
      for node in nodes { try await onDedicatedThread { try node.restart() } }
      try await awaitLinks(nodes)
      #expect(try Self.messages(bob, chatID).count == 8)
      #expect(try Self.messages(hana, chatID).count == 8)
    }
  }

  // MARK: - Load with a crash

  /// 30 members over 3 nodes (10 each, host on node 0), 5 senders (on nodes 0, 1, 1, 2, 2) each sending 200 messages
  /// with client ids (retried until acknowledged); node 1 is killed with SIGKILL partway and restarted. Every member
  /// ends with all 1 000 messages, in each sender's order, none twice.
  @Test func thirtyMembersFiveSendersAndAKill9() async throws {
    try await withNodes(count: 3, seeds: .allEarlier, linked: true) { nodes in
      var members: [MeshPeer] = []
      for index in 0..<30 { members.append(try nodes[index % 3].meshPeer("m\(index)")) }
      let host = members[0]
      let chatID = try Self.host(host, "Load")
      try await withThrowingTaskGroup(of: Void.self) { group in
        for member in members.dropFirst() {
          group.addTask { try await Self.join(member, chatID) }
        }
        try await group.waitForAll()
      }
      let detail = try host.get("/api/v1/chats/\(chatID)").jsonObject()
      #expect((detail["members"] as? [[String: Any]])?.count == 30)

      let senders = [members[0], members[1], members[4], members[2], members[5]]
      let perSender = 200
      let killed = Flag()
      let progress = Counter()
      try await withThrowingTaskGroup(of: Void.self) { group in
        for (number, sender) in senders.enumerated() {
          group.addTask {
            try await onDedicatedThread {
              for index in 0..<perSender {
                let id = "s\(number)-\(String(format: "%04d", index))-\(chatID)"
                let deadline = Date().addingTimeInterval(60)
                while true {
                  if let response = try? Self.post(sender, chatID, "s\(number) \(index)", id: id),
                    response.status == 200 || response.status == 201
                  {
                    break
                  }
                  guard Date() < deadline else {
                    throw TestSupportError.timeout("\(sender) could not post message \(index) within 60 s")
                  }
                  Thread.sleep(forTimeInterval: 0.05)
                }
                progress.add()
              }
            }
          }
        }
        group.addTask {
          try await eventuallyAsync(timeout: .seconds(60), message: "a third of the messages sent") {
            progress.value >= 5 * perSender / 3
          }
          nodes[1].kill9()
          killed.set()
          try await Task.sleep(for: .milliseconds(300))
          try await onDedicatedThread { try nodes[1].restart() }
        }
        try await group.waitForAll()
      }
      let wasKilled = killed.isSet
      #expect(wasKilled)

      let total = senders.count * perSender
      var problems: [String] = []
      try await eventuallyAsync(timeout: .seconds(60), message: "every member has all \(total) messages") {
        problems = []
        for node in nodes {
          let member = members.first { $0.node === node }!
          let list = try Self.messages(member, chatID)
          if list.count != total || list.contains(where: { $0.seq == nil }) {
            problems.append("\(member): \(list.count) messages")
          }
        }
        return problems.isEmpty
      }
      // Every member (all 30, on their nodes): all messages, each sender's order, none twice, one shared order.
      let reference = try Self.messages(host, chatID)
      for member in members {
        let list = try Self.messages(member, chatID)
        #expect(list == reference, "\(member) differs from the host's list")
      }
      #expect(Set(reference.map(\.id)).count == total, "a message appears twice")
      for (number, sender) in senders.enumerated() {
        let bodies = reference.filter { $0.from == sender.id }.map(\.body)
        #expect(bodies == (0..<perSender).map { "s\(number) \($0)" }, "sender \(number)'s order")
      }
    }
  }
}

/// A counter shared by test tasks.
final class Counter: Sendable {
  private let count = Mutex(0)
  func add() { count.withLock { $0 += 1 } }
  var value: Int { count.withLock { $0 } }
}

/// A one-way flag shared by test tasks.
final class Flag: Sendable {
  private let state = Mutex(false)
  func set() { state.withLock { $0 = true } }
  var isSet: Bool { state.withLock { $0 } }
}
