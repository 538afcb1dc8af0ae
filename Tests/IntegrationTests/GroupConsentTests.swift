import Foundation
import MeshgateTestSupport
import Testing

/// Group sends to a node that asks before a file is stored (`--file-consent ask`): each recipient there is asked, as
/// for a single send; those who always accept the sender get the file at once; a decline or an unanswered wait ends
/// only that recipient's transfer, and the sender's view of the group says who accepted, declined or is still asked.
@Suite(.timeLimit(.minutes(3))) struct GroupConsentTests {
  /// A group of one to a node that asks was refused for everyone (`409 transfer_refused`) and nobody was asked.
  @Test func aGroupSendToANodeThatAsksAsksTheRecipient() async throws {
    try await withNodes(count: 2, seeds: .allEarlier) { nodes in
      let (alice, bob, sessionID) = try await transferPair(nodes)
      let admin = try nodes[1].adminToken()
      let patched = try HTTPClient.patch(
        port: nodes[1].port, path: "/api/v1/node/settings", json: #"{"fileConsent":"ask"}"#, token: admin)
      #expect(patched.status == 200, "\(patched)")
      let bytes = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 13) }
      // "to=<id>," is a group of one: the group path, not a single transfer.
      let answer = try HTTPClient.post(
        port: nodes[0].port, path: "/api/v1/sessions/\(sessionID)/resources?to=\(bob.id),&name=group.bin",
        body: bytes, contentType: nil, token: alice.token, timeout: .seconds(60))
      #expect(answer.status == 202, "\(answer)")
      let shares = try #require(try answer.jsonObject()["transfers"] as? [[String: Any]])
      let id = try #require(shares.first?["id"] as? String)
      #expect(shares.first?["state"] as? String == "awaitingConsent", "\(shares)")
      let offered = try await bob.awaitEvent("transfer.offered") { $0.transferID == id }
      #expect((offered.data["transfer"] as? [String: Any])?["groupId"] as? String != nil, "\(offered)")
      #expect(try storedFiles(nodes[1], id).isEmpty, "bob's node stored the file before he accepted")
      let accepted = try bob.post("/api/v1/transfers/\(id)/accept", json: "{}")
      #expect(accepted.status == 200, "\(accepted)")
      _ = try await bob.awaitTransfer(id, state: "finished")
      _ = try await alice.awaitTransfer(id, state: "finished")
      #expect(try bob.get("/api/v1/transfers/\(id)/content").body == bytes)
      #expect(try alice.events("transfer.accepted").contains { $0.transferID == id })
    }
  }

  /// Three recipients on a node that asks: one accepts, one declines, one never answers. Each ends alone; the
  /// sender's group summary and events follow every answer; the file is stored once, for the one who accepted.
  @Test func threeRecipientsAcceptDeclineAndLetTheWaitEnd() async throws {
    try await withNodes(count: 2, seeds: .allEarlier, linked: true) { nodes in
      let group = try await groupSession(nodes, perNode: [0, 3])
      let admin = try nodes[1].adminToken()
      let patched = try HTTPClient.patch(
        port: nodes[1].port, path: "/api/v1/node/settings", json: #"{"fileConsent":"ask","fileConsentTimeout":6}"#,
        token: admin)
      #expect(patched.status == 200, "\(patched)")
      let (kim, lee, max) = (group.recipients[0], group.recipients[1], group.recipients[2])
      let bytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
      // No wait can end before 6 s after the upload began: a recipient who has not answered is still asked until
      // then, which is all the snapshots below rely on (a slow machine only skips them; it never fails them).
      let began = ContinuousClock.now
      func maxStillAsked() -> Bool { ContinuousClock.now - began < .seconds(6) }
      let upload = try group.sender.uploadGroup(group.sessionID, to: group.recipients, name: "plan.pdf", body: bytes)
      #expect(upload.status == 202, "\(upload)")
      let answer = try upload.jsonObject()
      let groupID = try #require((answer["group"] as? [String: Any])?["id"] as? String)
      let shares = try #require(answer["transfers"] as? [[String: Any]])
      let (kimID, leeID, maxID) = (try share(of: shares, kim), try share(of: shares, lee), try share(of: shares, max))
      #expect(shares.allSatisfy { $0["state"] as? String == "awaitingConsent" }, "\(shares)")
      func summary() throws -> [String: Any] {
        try #require(
          try group.sender.get("/api/v1/transfer-groups/\(groupID)").jsonObject()["group"] as? [String: Any])
      }
      if maxStillAsked() {
        let asked = try summary()
        #expect(asked["awaitingConsent"] as? Int == 3 && asked["pending"] as? Int == 3, "\(asked)")
      }
      for (peer, id) in [(kim, kimID), (lee, leeID), (max, maxID)] {
        let offered = try await peer.awaitEvent("transfer.offered") { $0.transferID == id }
        #expect(offered.data["timeoutSeconds"] as? Int == 6, "\(offered)")
      }
      // Nothing is stored on the node while nobody there has accepted.
      let held = (try? FileManager.default.contentsOfDirectory(atPath: "\(nodes[1].dataDirectory)/transfers")) ?? []
      #expect(held.isEmpty, "bob's node holds \(held) before anyone accepted")

      #expect(try lee.post("/api/v1/transfers/\(leeID)/decline", json: "{}").status == 200)
      let declined = try await group.sender.awaitEvent("transfer.declined") { $0.transferID == leeID }
      #expect((declined.data["reason"] as? String)?.contains("r1-1 declined the file") == true, "\(declined)")
      #expect(try kim.post("/api/v1/transfers/\(kimID)/accept", json: "{}").status == 200)
      _ = try await group.sender.awaitEvent("transfer.accepted") { $0.transferID == kimID }
      let received = try await kim.awaitTransfer(kimID, state: "finished")
      #expect(received["sha256"] as? String == (try sha256OfBytes(bytes)))
      #expect(try kim.get("/api/v1/transfers/\(kimID)/content").body == bytes)
      _ = try await group.sender.awaitTransfer(kimID, state: "finished")
      if maxStillAsked() {
        let meanwhile = try summary()
        let maxState = try group.sender.transfer(maxID)?["state"] as? String
        if maxStillAsked() {
          #expect(
            meanwhile["finished"] as? Int == 1 && meanwhile["declined"] as? Int == 1
              && meanwhile["awaitingConsent"] as? Int == 1,
            "\(meanwhile)")
          #expect(maxState == "awaitingConsent")
        }
      }

      // The third recipient never answers: its wait ends (bounded by the consent timeout) and only its transfer fails.
      let expired = try await max.awaitTransfer(maxID, state: "failed", timeout: .seconds(30))
      #expect((expired["reason"] as? String)?.contains("did not accept or decline the file within 6 s") == true)
      let failed = try await group.sender.awaitEvent("transfer.failed", timeout: .seconds(30)) {
        $0.transferID == maxID
      }
      #expect((failed.data["reason"] as? String)?.contains("within 6 s") == true, "\(failed)")
      // The group's view names each recipient's answer.
      let view = try group.sender.get("/api/v1/transfer-groups/\(groupID)").jsonObject()
      let states = Dictionary(
        uniqueKeysWithValues: (view["transfers"] as? [[String: Any]] ?? []).compactMap { transfer in
          (transfer["id"] as? String).map { ($0, transfer["state"] as? String ?? "") }
        })
      #expect(states == [kimID: "finished", leeID: "declined", maxID: "failed"], "\(view)")
      let final = try summary()
      #expect(
        final["finished"] as? Int == 1 && final["declined"] as? Int == 1 && final["failed"] as? Int == 2
          && final["awaitingConsent"] as? Int == 0 && final["pending"] as? Int == 0,
        "\(final)")
      #expect(try lee.transfer(leeID)?["state"] as? String == "declined")
      #expect(try storedFiles(nodes[1], leeID).isEmpty && (try storedFiles(nodes[1], maxID)).isEmpty)
      try await expectNoSpoolsOrPartialFiles(nodes)
    }
  }

  /// A recipient who always accepts the sender gets the file at once, while one asked on the same node waits; the one
  /// asked accepts after the copy is stored and gets its file from that copy (no second copy over the link).
  @Test func whoAlwaysAcceptsGetsTheFileAtOnceAndTheOthersAreAsked() async throws {
    try await withNodes(count: 2, seeds: .allEarlier, linked: true) { nodes in
      let group = try await groupSession(nodes, perNode: [0, 2])
      let admin = try nodes[1].adminToken()
      #expect(
        try HTTPClient.patch(
          port: nodes[1].port, path: "/api/v1/node/settings", json: #"{"fileConsent":"ask"}"#, token: admin
        ).status == 200)
      let (ann, bo) = (group.recipients[0], group.recipients[1])
      // Ann puts the sender on her always-accept list by accepting a first file with always.
      let first = try transferID(try group.sender.upload(group.sessionID, to: ann, name: "a.txt", body: [1, 2, 3]))
      _ = try await ann.awaitEvent("transfer.offered") { $0.transferID == first }
      #expect(try ann.post("/api/v1/transfers/\(first)/accept", json: #"{"always":true}"#).status == 200)
      _ = try await ann.awaitTransfer(first, state: "finished")

      let bytes = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 5) }
      let upload = try group.sender.uploadGroup(group.sessionID, to: [ann, bo], name: "deck.bin", body: bytes)
      #expect(upload.status == 202, "\(upload)")
      let shares = try #require(try upload.jsonObject()["transfers"] as? [[String: Any]])
      let (annID, boID) = (try share(of: shares, ann), try share(of: shares, bo))
      _ = try await ann.awaitTransfer(annID, state: "finished")
      _ = try await group.sender.awaitTransfer(annID, state: "finished")
      #expect(try ann.events("transfer.offered").allSatisfy { $0.transferID != annID })
      _ = try await bo.awaitEvent("transfer.offered") { $0.transferID == boID }
      #expect(try group.sender.transfer(boID)?["state"] as? String == "awaitingConsent")
      #expect(try bo.transfer(boID)?["state"] as? String == "awaitingConsent")
      let linkBytes = try nodes[0].metric(
        "meshgate_mesh_payload_bytes_total{node=\"\(try #require(try nodes[1].meshNodes().local["id"] as? String))\"}")

      #expect(try bo.post("/api/v1/transfers/\(boID)/accept", json: "{}").status == 200)
      _ = try await bo.awaitTransfer(boID, state: "finished")
      _ = try await group.sender.awaitTransfer(boID, state: "finished")
      #expect(try bo.get("/api/v1/transfers/\(boID)/content").body == bytes)
      #expect(try group.sender.events("transfer.accepted").contains { $0.transferID == boID })
      let after = try nodes[0].metric(
        "meshgate_mesh_payload_bytes_total{node=\"\(try #require(try nodes[1].meshNodes().local["id"] as? String))\"}")
      #expect(after == linkBytes, "the file crossed the link again for the recipient who accepted later")
      try await expectNoSpoolsOrPartialFiles(nodes)
    }
  }

  /// Restarts keep every answer and every wait: the receiving node killed while its recipients are asked asks them
  /// on (and the sender hears so again); one accepts and gets the file; then the sender's node is killed while the
  /// other is still asked, and that recipient's decline still reaches the sender after it is back.
  @Test func restartsOfEitherNodeKeepTheQuestionsAndTheAnswers() async throws {
    let bytes = (0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 11 &+ 3) }
    try await withAGroupSendToTwoAsked(name: "r.bin", body: bytes) { nodes, group, kimID, leeID in
      let (kim, lee) = (group.recipients[0], group.recipients[1])
      _ = try await kim.awaitEvent("transfer.offered") { $0.transferID == kimID }
      _ = try await lee.awaitEvent("transfer.offered") { $0.transferID == leeID }

      nodes[1].kill9()
      try await onDedicatedThread { try nodes[1].restart() }
      #expect(try kim.transfer(kimID)?["state"] as? String == "awaitingConsent")
      #expect(try lee.transfer(leeID)?["state"] as? String == "awaitingConsent")
      try await awaitLinks(nodes)
      #expect(
        try [kimID, leeID].allSatisfy { try group.sender.transfer($0)?["state"] as? String == "awaitingConsent" })
      #expect(try kim.post("/api/v1/transfers/\(kimID)/accept", json: "{}").status == 200)
      _ = try await kim.awaitTransfer(kimID, state: "finished")
      _ = try await group.sender.awaitTransfer(kimID, state: "finished")
      #expect(try kim.get("/api/v1/transfers/\(kimID)/content").body == bytes)
      #expect(try group.sender.transfer(leeID)?["state"] as? String == "awaitingConsent")

      nodes[0].kill9()
      try await onDedicatedThread { try nodes[0].restart() }
      #expect(try group.sender.transfer(leeID)?["state"] as? String == "awaitingConsent")
      try await awaitLinks(nodes)
      #expect(try lee.post("/api/v1/transfers/\(leeID)/decline", json: "{}").status == 200)
      let declined = try await group.sender.awaitTransfer(leeID, state: "declined")
      #expect((declined["reason"] as? String)?.contains("declined the file") == true, "\(declined)")
      #expect(try group.sender.transfer(kimID)?["state"] as? String == "finished")
      #expect(try storedFiles(nodes[1], leeID).isEmpty)
      try await expectNoSpoolsOrPartialFiles(nodes)
    }
  }

  /// A decline given while the sender's node is away, whose notice the recipient's node then loses in a restart,
  /// still reaches the sender: when the node's copy is offered again, the recipient's node tells every answer again.
  @Test func aDeclineLostInARestartIsToldAgainWhenTheCopyIsOfferedAgain() async throws {
    try await withAGroupSendToTwoAsked(name: "d.bin", body: Array(repeating: 9, count: 20_000)) {
      nodes, group, kimID, leeID in
      let (kim, lee) = (group.recipients[0], group.recipients[1])
      _ = try await lee.awaitEvent("transfer.offered") { $0.transferID == leeID }

      nodes[0].kill9()
      #expect(try lee.post("/api/v1/transfers/\(leeID)/decline", json: "{}").status == 200)
      nodes[1].kill9()
      try await onDedicatedThread {
        try nodes[1].restart()
        try nodes[0].restart()
      }
      try await awaitLinks(nodes)
      let declined = try await group.sender.awaitTransfer(leeID, state: "declined")
      #expect((declined["reason"] as? String)?.contains("declined the file") == true, "\(declined)")
      #expect(try group.sender.transfer(kimID)?["state"] as? String == "awaitingConsent")
      #expect(try kim.post("/api/v1/transfers/\(kimID)/accept", json: "{}").status == 200)
      _ = try await group.sender.awaitTransfer(kimID, state: "finished")
      try await expectNoSpoolsOrPartialFiles(nodes)
    }
  }

  /// An accept given after the node's copy was stored (the recipient gets the file at once) while the sender's node
  /// is away, whose notice the recipient's node then loses in a restart, still reaches the sender when they link.
  @Test func anAcceptAfterTheCopyIsStoredReachesTheSenderAfterRestarts() async throws {
    let bytes = Array(repeating: UInt8(4), count: 30_000)
    try await withAGroupSendToTwoAsked(name: "a.bin", body: bytes) { nodes, group, kimID, leeID in
      let (kim, lee) = (group.recipients[0], group.recipients[1])
      _ = try await kim.awaitEvent("transfer.offered") { $0.transferID == kimID }
      _ = try await lee.awaitEvent("transfer.offered") { $0.transferID == leeID }
      #expect(try kim.post("/api/v1/transfers/\(kimID)/accept", json: "{}").status == 200)
      _ = try await group.sender.awaitTransfer(kimID, state: "finished")

      nodes[0].kill9()
      #expect(try lee.post("/api/v1/transfers/\(leeID)/accept", json: "{}").status == 200)
      _ = try await lee.awaitTransfer(leeID, state: "finished")
      #expect(try lee.get("/api/v1/transfers/\(leeID)/content").body == bytes)
      nodes[1].kill9()
      try await onDedicatedThread {
        try nodes[1].restart()
        try nodes[0].restart()
      }
      try await awaitLinks(nodes)
      _ = try await group.sender.awaitTransfer(leeID, state: "finished")
    }
  }
}

/// The id of the transfer a group send made for `peer`, from the send's `transfers` list.
private func share(of shares: [[String: Any]], _ peer: MeshPeer) throws -> String {
  try #require(shares.first { ($0["to"] as? [String: Any])?["id"] as? String == peer.id }?["id"] as? String)
}

/// Two linked nodes, the second asking before it stores a file (`--file-consent ask`, a 120 s wait), and a group send
/// of `bytes` named `name` from a sender on the first to two recipients on the second (kim and lee, accepted `202`);
/// `body` gets the nodes, the group and the recipients' transfer ids.
private func withAGroupSendToTwoAsked(
  name: String, body bytes: [UInt8], isolation: isolated (any Actor)? = #isolation,
  _ body: ([NodeProcess], GroupSession, _ kimID: String, _ leeID: String) async throws -> Void
) async throws {
  try await withNodes(
    count: 2, arguments: ["--file-consent", "ask", "--file-consent-timeout", "120"], seeds: .allEarlier, linked: true
  ) { nodes in
    let group = try await groupSession(nodes, perNode: [0, 2])
    let upload = try group.sender.uploadGroup(group.sessionID, to: group.recipients, name: name, body: bytes)
    #expect(upload.status == 202, "\(upload)")
    let shares = try #require(try upload.jsonObject()["transfers"] as? [[String: Any]])
    try await body(
      nodes, group, try share(of: shares, group.recipients[0]), try share(of: shares, group.recipients[1]))
  }
}
