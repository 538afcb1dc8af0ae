import Foundation
import MeshgateTestSupport
import Testing

/// Token scoping on real nodes: a peer never reads, answers, cancels, leaves or posts into what belongs to another
/// peer (on its own node or on another one), never sees another peer's events, cannot put words in another peer's
/// mouth, and cannot get into a pointToPoint session that already holds two peers.
@Suite(.timeLimit(.minutes(3)))
struct ScopingTests {
  /// `status` must be one of `allowed`; the message names the request for the failure report.
  static func expectDenied(
    _ response: HTTPResponse, _ what: String, allowed: Set<Int> = [403, 404],
    sourceLocation: SourceLocation = #_sourceLocation
  ) {
    #expect(
      allowed.contains(response.status), "\(what) answered \(response.status): \(response.text)",
      sourceLocation: sourceLocation)
    #expect(errorCode(response) != nil, "\(what) has no error code: \(response.text)", sourceLocation: sourceLocation)
  }

  @Test func sessionsInvitationsJobsAndEventsStayWithTheirPeer() async throws {
    try await withNodes(count: 2, seeds: .allEarlier, linked: true) { nodes in
      let alice = try nodes[0].meshPeer("alice")
      let eve = try nodes[0].meshPeer("eve")
      let bob = try nodes[1].meshPeer("bob")
      let mallory = try nodes[1].meshPeer("mallory")
      let outsiders = [eve, mallory]

      // A session only its members can see, leave or send into.
      let session = try alice.createSession(strategy: "cluster")
      let sessionID = try #require(session["id"] as? String)
      let invitation = try await alice.inviteOK(bob, to: sessionID, context: "private context")
      let invitationID = try #require(invitation["id"] as? String)
      // The invitation reaches bob's node (where mallory lives) before we probe it there.
      try await bob.awaitEvent("invitation.received") { $0.invitationID == invitationID }

      for outsider in outsiders {
        Self.expectDenied(try outsider.get("/api/v1/sessions/\(sessionID)"), "\(outsider) GET session")
        Self.expectDenied(try outsider.delete("/api/v1/sessions/\(sessionID)/members/me"), "\(outsider) leave")
        Self.expectDenied(try outsider.sendData(sessionID, "sneaky"), "\(outsider) data")
        Self.expectDenied(
          try outsider.post("/api/v1/sessions/\(sessionID)/events", json: #"{"event":"x","object":1}"#),
          "\(outsider) named event")
        // Inviting someone into a session the outsider is not in.
        let invite = try outsider.post(
          "/api/v1/invitations",
          json: try jsonText(["to": alice.id == outsider.id ? bob.id : alice.id, "session": sessionID]))
        Self.expectDenied(invite, "\(outsider) inviting into a foreign session", allowed: [403, 404, 409])
        for action in ["accept", "decline", "cancel"] {
          Self.expectDenied(try outsider.answer(invitationID, action), "\(outsider) \(action)")
        }
        Self.expectDenied(try outsider.get("/api/v1/invitations/\(invitationID)"), "\(outsider) GET invitation")
        let listed = try outsider.get("/api/v1/invitations").jsonObject()["invitations"] as? [[String: Any]] ?? []
        #expect(listed.isEmpty, "\(outsider) lists invitations: \(listed)")
        let sessions = try outsider.get("/api/v1/sessions").jsonObject()["sessions"] as? [[String: Any]] ?? []
        #expect(sessions.isEmpty, "\(outsider) lists sessions: \(sessions)")
        // The WebSocket send path checks membership the same way.
        let (socket, _) = try outsider.node.openEvents(outsider.peer)
        try socket.send(text: try jsonText(["op": "send", "session": sessionID, "text": "sneaky"]))
        let reply = try socket.receiveJSONObject()
        #expect(reply["type"] as? String == "error", "\(outsider) WebSocket send: \(reply)")
        #expect((reply["data"] as? [String: Any])?["code"] as? String == "not_found")
        socket.close()
      }
      // The inviter cannot answer for the invitee, nor the invitee cancel for the inviter.
      Self.expectDenied(try alice.answer(invitationID, "accept"), "inviter accepting", allowed: [403])
      Self.expectDenied(try bob.answer(invitationID, "cancel"), "invitee canceling", allowed: [403])
      try await bob.answerWhenReceived(invitationID, "accept")
      try await eventuallyAsync(timeout: .seconds(10), message: "bob connected") {
        try alice.memberStates(sessionID)[bob.id] == "connected"
      }

      // Data and named events carry the authenticated sender; extra "from" fields are refused, not trusted.
      #expect(try alice.sendData(sessionID, "hello bob").status == 202)
      let spoof = try alice.post(
        "/api/v1/sessions/\(sessionID)/events", json: try jsonText(["event": "e", "object": 1, "from": bob.id]))
      #expect(spoof.status == 400, "a from field in a named event: \(spoof)")
      #expect(
        try alice.post("/api/v1/sessions/\(sessionID)/events", json: #"{"event":"wave","object":{"x":1}}"#).status
          == 202)
      let data = try await bob.awaitEvent("session.data") { $0.text == "hello bob" }
      #expect(data.fromID == alice.id)
      let named = try await bob.awaitEvent("session.event") { $0.data["event"] as? String == "wave" }
      #expect(named.fromID == alice.id)

      // Jobs: only the owner's list.
      let job = try alice.post("/api/v1/jobs", json: #"{"name":"Fix the sink"}"#)
      let jobID = try #require((try job.jsonObject()["job"] as? [String: Any])?["id"] as? String)
      for outsider in outsiders + [bob] {
        Self.expectDenied(try outsider.get("/api/v1/jobs/\(jobID)"), "\(outsider) GET job", allowed: [404])
        Self.expectDenied(
          try HTTPClient.patch(
            port: outsider.node.port, path: "/api/v1/jobs/\(jobID)", json: #"{"name":"mine"}"#, token: outsider.token),
          "\(outsider) PATCH job", allowed: [404])
        Self.expectDenied(try outsider.delete("/api/v1/jobs/\(jobID)"), "\(outsider) DELETE job", allowed: [404])
        Self.expectDenied(
          try outsider.post("/api/v1/jobs/\(jobID)/send", json: try jsonText(["to": outsider.id])),
          "\(outsider) send job", allowed: [404])
        let jobs = try outsider.get("/api/v1/jobs").jsonObject()["jobs"] as? [[String: Any]] ?? []
        #expect(jobs.isEmpty, "\(outsider) lists jobs: \(jobs)")
      }
      #expect(try alice.get("/api/v1/jobs/\(jobID)").status == 200)

      // Events: an outsider's log holds nothing of the session, the invitation or the data.
      for outsider in outsiders {
        let types = Set(try outsider.allEvents().map(\.type))
        let leaked = types.filter { $0.hasPrefix("session.") || $0.hasPrefix("invitation.") || $0.hasPrefix("job.") }
        #expect(leaked.isEmpty, "\(outsider) saw \(leaked)")
        // Another peer's token in ?token= is that peer; a made-up one is refused.
        let forged = try HTTPClient.get(port: outsider.node.port, path: "/api/v1/events?token=\(outsider.token)x")
        #expect(forged.status == 401)
      }
    }
  }

  @Test func pointToPointSessionsHoldExactlyTwo() async throws {
    try await withNodes(count: 2, seeds: .allEarlier, linked: true) { nodes in
      let alice = try nodes[0].meshPeer("alice")
      let eve = try nodes[0].meshPeer("eve")
      let bob = try nodes[1].meshPeer("bob")
      let mallory = try nodes[1].meshPeer("mallory")
      let session = try alice.createSession(strategy: "pointToPoint")
      let sessionID = try #require(session["id"] as? String)

      let first = try await alice.inviteOK(bob, to: sessionID)
      // A second pending invitation would make three: refused while the first is pending.
      let second = try await alice.invite(mallory, to: sessionID)
      #expect(second.status == 409, "second invitation into pointToPoint: \(second)")
      try await bob.answerWhenReceived(try #require(first["id"] as? String), "accept")
      try await eventuallyAsync(timeout: .seconds(10), message: "bob connected") {
        try alice.memberStates(sessionID)[bob.id] == "connected"
      }
      // Full: neither member can bring in a third peer, local or remote.
      for (inviter, invitee) in [(alice, eve), (alice, mallory), (bob, mallory), (bob, eve)] {
        let response = try await inviter.invite(invitee, to: sessionID)
        #expect(response.status == 409, "\(inviter) inviting \(invitee) into a full pointToPoint: \(response)")
      }
      // And an outsider still cannot answer, join or send.
      for outsider in [eve, mallory] {
        Self.expectDenied(try outsider.sendData(sessionID, "let me in"), "\(outsider) data")
        Self.expectDenied(try outsider.get("/api/v1/sessions/\(sessionID)"), "\(outsider) GET session")
      }
      #expect(Set(try alice.memberStates(sessionID).keys) == [alice.id, bob.id])
      #expect(Set(try bob.memberStates(sessionID).keys) == [alice.id, bob.id])
    }
  }

  @Test func chatRoomsAndMessagesStayWithTheirMembers() async throws {
    try await withNodes(count: 2, seeds: .allEarlier, linked: true) { nodes in
      let alice = try nodes[0].meshPeer("alice")
      let eve = try nodes[0].meshPeer("eve")
      let bob = try nodes[1].meshPeer("bob")
      let mallory = try nodes[1].meshPeer("mallory")
      let created = try alice.post("/api/v1/chats", json: #"{"name":"Kitchen crew"}"#)
      let roomID = try #require((try created.jsonObject()["chat"] as? [String: Any])?["id"] as? String)
      try await eventuallyAsync(timeout: .seconds(15), message: "bob joining") {
        try bob.post("/api/v1/chats/\(roomID)/join", json: "{}").status == 200
      }
      let posted = try bob.post(
        "/api/v1/chats/\(roomID)/messages", json: #"{"body":"bob's secret","id":"bob-message-0001"}"#)
      #expect(posted.status == 201, "\(posted)")
      // The sender is always the authenticated peer: a from field is refused.
      let spoof = try alice.post(
        "/api/v1/chats/\(roomID)/messages", json: try jsonText(["body": "I am bob", "from": bob.id]))
      #expect(spoof.status == 400, "a from field in a chat message: \(spoof)")

      for outsider in [eve, mallory] {
        Self.expectDenied(try outsider.get("/api/v1/chats/\(roomID)/messages"), "\(outsider) reading messages")
        Self.expectDenied(
          try outsider.post("/api/v1/chats/\(roomID)/messages", json: #"{"body":"hi"}"#), "\(outsider) posting")
        Self.expectDenied(try outsider.post("/api/v1/chats/\(roomID)/leave", json: "{}"), "\(outsider) leaving")
        let mine = try outsider.get("/api/v1/chats").jsonObject()["chats"] as? [[String: Any]] ?? []
        #expect(mine.isEmpty, "\(outsider) lists rooms it is not in: \(mine)")
        #expect(try outsider.events("chat.message").isEmpty)
      }
      // Once mallory joins, she still cannot take over bob's message id (a retry must come from its sender).
      try await eventuallyAsync(timeout: .seconds(15), message: "mallory joining") {
        try mallory.post("/api/v1/chats/\(roomID)/join", json: "{}").status == 200
      }
      let hijack = try mallory.post(
        "/api/v1/chats/\(roomID)/messages", json: #"{"body":"bob's secret","id":"bob-message-0001"}"#)
      #expect(hijack.status == 409, "reusing another member's message id: \(hijack)")
      let hijackElsewhere = try alice.post(
        "/api/v1/chats/\(roomID)/messages", json: #"{"body":"changed","id":"bob-message-0001"}"#)
      #expect(hijackElsewhere.status == 409, "\(hijackElsewhere)")
      // Every node shows bob's message once, from bob, with his body.
      for reader in [alice, bob, mallory] {
        try await eventuallyAsync(timeout: .seconds(10), message: "bob's message at \(reader)") {
          let items = try reader.get("/api/v1/chats/\(roomID)/messages").jsonObject()["messages"] as? [[String: Any]]
          let bobs = (items ?? []).filter { ($0["from"] as? [String: Any])?["id"] as? String == bob.id }
          return bobs.count == 1 && bobs.first?["body"] as? String == "bob's secret"
            && bobs.first?["id"] as? String == "bob-message-0001"
        }
      }
      // A message mallory posts carries mallory as from, on every node.
      #expect(try mallory.post("/api/v1/chats/\(roomID)/messages", json: #"{"body":"hello"}"#).status == 201)
      let event = try await alice.awaitEvent("chat.message") { $0.data.description.contains("hello") }
      #expect(event.data.description.contains(mallory.id), "\(event)")
    }
  }
}
