import Crypto
import Foundation
import MeshCore
import MeshgateTestSupport
import Testing

/// A new UUID string, as meshgate makes them.
private func uuid() -> String { UUID().uuidString.lowercased() }

/// Whether `message` answers transfer `id` (accept, reject, failed or finished).
private func answersTransfer(_ id: String) -> (MeshMessage) -> Bool {
  { message in
    switch message {
    case .transferAccept(id, _), .transferReject(id, _, _), .transferFailed(id, _), .transferFinished(id, _): true
    default: false
    }
  }
}

/// A test node (MeshgateTestSupport's HostileNode, playing an honest sender) in a session with `victim`, which
/// accepted its invitation. Returns the session id and the sender's peer id.
private func senderSession(_ hostile: HostileNode, node: NodeProcess, victim: MeshPeer) async throws -> (
  sessionID: String, senderID: String
) {
  let sender = PeerAnnouncement(peerID: uuid(), displayName: "Sender")
  hostile.send(.peerSnapshot([sender]))
  let sessionID = uuid()
  let invitationID = uuid()
  var session = SessionDescription(
    sessionID: sessionID, hostNodeID: hostile.nodeID, creatorPeerID: sender.peerID, strategy: .cluster,
    encryption: .none, maxPeers: 8, revision: 1,
    members: [SessionMember(peerID: sender.peerID, displayName: "Sender", nodeID: hostile.nodeID, state: .connected)])
  hostile.send(
    .invite(
      InvitationOffer(
        invitationID: invitationID, session: session, fromPeerID: sender.peerID, fromDisplayName: "Sender",
        toPeerID: victim.id, context: [], timeoutMillis: 30_000, verificationCode: "000000")))
  try await victim.answerWhenReceived(invitationID, "accept")
  try hostile.waitFor(timeout: .seconds(30), "the accepted answer") {
    $0 == .inviteAnswer(invitationID: invitationID, outcome: .accepted)
  }
  session.revision = 2
  session.members.append(
    SessionMember(peerID: victim.id, displayName: "victim", nodeID: node.nodeID, state: .connected))
  hostile.send(.sessionState(session))
  try await eventuallyAsync(timeout: .seconds(30), message: "the receiver in the sender's session") {
    try victim.memberStates(sessionID)[victim.id] == "connected"
  }
  return (sessionID, sender.peerID)
}

@Suite(.serialized, .timeLimit(.minutes(4))) struct ConsentTests {
  /// Network-fault suite defect: the link drops just after the receiver finished a file, so the sender never saw
  /// `transferFinished` and offers the transfer again when the link returns. The receiver must answer that re-offer
  /// with `transferFinished` and its SHA-256 (it used to refuse: "the transfer is finished here", and the sender
  /// showed `failed` while the receiver held the complete, verified file).
  @Test func aReOfferOfAFinishedTransferIsAnsweredFinished() async throws {
    try await withNode(arguments: ["--mesh-tls", "off"]) { node in
      let victim = try node.meshPeer("victim")
      let hostile = try HostileNode(name: "sender", tls: false)
      defer { hostile.close() }
      try hostile.link(port: node.port)
      let (sessionID, senderID) = try await senderSession(hostile, node: node, victim: victim)
      let id = uuid()
      let content = Array("every byte arrived".utf8)
      let digest = Crypto.sha256(content)
      let offer = TransferOffer(
        transferID: id, sessionID: sessionID, fromPeerID: senderID, fromDisplayName: "Sender", toPeerID: victim.id,
        name: "done.txt", contentType: "text/plain", size: UInt64(content.count), resume: false)
      hostile.send(.transferOffer(offer))
      let answer = try hostile.waitFor(timeout: .seconds(30), "the answer to the offer", answersTransfer(id))
      #expect(answer == .transferAccept(transferID: id, offset: 0))
      hostile.send(.transferChunk(transferID: id, offset: 0, bytes: content))
      hostile.send(.transferEnd(transferID: id, size: UInt64(content.count), sha256: digest))
      try hostile.waitFor(timeout: .seconds(30), "transferFinished") {
        $0 == .transferFinished(transferID: id, sha256: digest)
      }
      _ = try await victim.awaitTransfer(id, state: "finished")

      // The sender lost the link before transferFinished reached it: after relinking it offers the transfer again.
      var again = offer
      again.resume = true
      let before = hostile.received.count
      hostile.send(.transferOffer(again))
      try await eventuallyAsync(timeout: .seconds(30), message: "an answer to the re-offer") {
        hostile.received.dropFirst(before).contains(where: answersTransfer(id))
      }
      let replies = hostile.received.dropFirst(before).filter(answersTransfer(id))
      #expect(
        replies.first == .transferFinished(transferID: id, sha256: digest), "the re-offer was answered \(replies)")
      let stored = "\(node.dataDirectory)/files/received/\(id)/done.txt"
      #expect(FileManager.default.contents(atPath: stored) == Data(content))
      #expect(try victim.transfer(id)?["state"] as? String == "finished")
    }
  }

  /// Default and node setting: files flow without asking by default; with `fileConsent: "ask"`
  /// (PATCH /api/v1/node/settings) a file waits for the recipient and not one byte reaches its data directory before
  /// Accept; "always accept" lets the next file from that sender flow; removing it asks again; Decline ends the
  /// transfer `declined` on both sides and removes the sender's spool.
  /// A recipient who declines at once, while the receiving node still records the offer, must not reorder its
  /// answers: the sender is told the file waits for the recipient, then that it was declined. (The node used to send
  /// the wait only once the record was stored: a decline in between went first and the wait never, so the sender's
  /// upload was answered 409 as if refused.)
  @Test func aDeclineAtOnceFollowsTheWaitOnTheWire() async throws {
    try await withNode(arguments: ["--mesh-tls", "off", "--file-consent", "ask"]) { node in
      let victim = try node.meshPeer("victim")
      let hostile = try HostileNode(name: "sender", tls: false)
      defer { hostile.close() }
      try hostile.link(port: node.port)
      let (sessionID, senderID) = try await senderSession(hostile, node: node, victim: victim)
      for round in 0..<3 {
        let id = uuid()
        let lock = try StoreWriteLock(node)
        hostile.send(
          .transferOffer(
            TransferOffer(
              transferID: id, sessionID: sessionID, fromPeerID: senderID, fromDisplayName: "Sender",
              toPeerID: victim.id, name: "quick-\(round).txt", contentType: "text/plain", size: 10, resume: false)))
        // The node has handled the offer: the transfer is the recipient's to answer now, while its record waits for
        // the store (another process holds SQLite's write lock), and the recipient declines.
        try hostile.roundTrip()
        let declined = try victim.post("/api/v1/transfers/\(id)/decline", json: "{}")
        #expect(declined.status == 200, "\(declined)")
        try lock.release()
        let answer = try hostile.waitFor(timeout: .seconds(30), "the reject") {
          if case .transferReject(id, .declined, _) = $0 { true } else { false }
        }
        let frames = hostile.received.filter {
          switch $0 {
          case .transferAwaitingConsent(id, _), .transferReject(id, _, _): true
          default: false
          }
        }
        guard case .transferAwaitingConsent? = frames.first else {
          Issue.record("round \(round): the sender heard \(frames) (the reject \(answer) without the wait before it)")
          return
        }
      }
    }
  }

  @Test func filesWaitForTheRecipientsConsentWhenTheNodeAsks() async throws {
    try await withNodes(count: 2, seeds: .allEarlier) { nodes in
      let (alice, bob, sessionID) = try await transferPair(nodes)
      let admin = try nodes[1].adminToken()
      let bytes = (0..<300_001).map { UInt8(truncatingIfNeeded: $0 &* 7) }

      // The default is unchanged: the file flows at once, nobody is asked.
      let settings = try HTTPClient.get(port: nodes[1].port, path: "/api/v1/node/settings", token: admin)
      let current = try #require(try settings.jsonObject()["settings"] as? [String: Any])
      #expect(current["fileConsent"] as? String == "auto")
      #expect(current["fileConsentTimeout"] as? Int == 300)
      let first = try transferID(try alice.upload(sessionID, to: bob, name: "auto.bin", body: bytes))
      _ = try await bob.awaitTransfer(first, state: "finished")
      #expect(try bob.events("transfer.offered").isEmpty)

      let patched = try HTTPClient.patch(
        port: nodes[1].port, path: "/api/v1/node/settings", json: #"{"fileConsent":"ask"}"#, token: admin)
      #expect(patched.status == 200, "\(patched)")
      let badPatch = try HTTPClient.patch(
        port: nodes[1].port, path: "/api/v1/node/settings", json: #"{"fileConsent":"maybe"}"#, token: admin)
      #expect(badPatch.status == 400)

      // Asked: the upload is stored on alice's node (202) and waits; bob's node holds nothing of it.
      let upload = try alice.upload(sessionID, to: bob, name: "asked.bin", body: bytes)
      #expect(upload.status == 202, "\(upload)")
      let asked = try transferID(upload)
      #expect((try upload.jsonObject()["transfer"] as? [String: Any])?["state"] as? String == "awaitingConsent")
      let offered = try await bob.awaitEvent("transfer.offered") { $0.transferID == asked }
      #expect(offered.data["timeoutSeconds"] as? Int ?? 0 > 0)
      #expect((offered.data["transfer"] as? [String: Any])?["state"] as? String == "awaitingConsent")
      #expect(try bob.transfer(asked)?["state"] as? String == "awaitingConsent")
      #expect(try alice.transfer(asked)?["state"] as? String == "awaitingConsent")
      #expect(try bob.transfer(asked)?["bytes"] as? Int == 0)
      let storedBeforeAccept = try storedFiles(nodes[1], asked)
      #expect(storedBeforeAccept.isEmpty, "stored before accept: \(storedBeforeAccept)")
      let consent = try bob.get("/api/v1/file-consent")
      let consentObject = try #require(try consent.jsonObject()["fileConsent"] as? [String: Any])
      #expect(consentObject["mode"] as? String == "ask")
      #expect((consentObject["alwaysAccept"] as? [Any])?.isEmpty == true)
      // Only the recipient answers, and only with a valid body.
      #expect(try alice.post("/api/v1/transfers/\(asked)/accept", json: "{}").status == 409)
      #expect(try bob.post("/api/v1/transfers/\(asked)/accept", json: #"{"always":"yes"}"#).status == 400)

      let accepted = try bob.post("/api/v1/transfers/\(asked)/accept", json: #"{"always":true}"#)
      #expect(accepted.status == 200, "\(accepted)")
      _ = try await bob.awaitTransfer(asked, state: "finished")
      _ = try await alice.awaitTransfer(asked, state: "finished")
      #expect(try bob.get("/api/v1/transfers/\(asked)/content").body == bytes)
      #expect(try alice.events("transfer.accepted").contains { $0.transferID == asked })
      let again = try bob.post("/api/v1/transfers/\(asked)/accept", json: "{}")
      #expect(again.status == 409)
      #expect(
        (try again.jsonObject()["error"] as? [String: Any])?["code"] as? String == "transfer_not_awaiting_consent")

      // Always accepted: the next file from alice flows without asking.
      let list = try #require(try bob.get("/api/v1/file-consent").jsonObject()["fileConsent"] as? [String: Any])
      let entries = try #require(list["alwaysAccept"] as? [[String: Any]])
      #expect(entries.map { $0["peerId"] as? String } == [alice.id])
      let trusted = try transferID(try alice.upload(sessionID, to: bob, name: "trusted.bin", body: bytes))
      _ = try await bob.awaitTransfer(trusted, state: "finished")
      #expect(!(try bob.events("transfer.offered").contains { $0.transferID == trusted }))

      // Removed from the list: asked again. Declined: both sides end declined, nothing is left anywhere.
      #expect(try bob.delete("/api/v1/file-consent/always-accept/\(alice.id)").status == 200)
      #expect(try bob.delete("/api/v1/file-consent/always-accept/\(alice.id)").status == 404)
      let declinedID = try transferID(try alice.upload(sessionID, to: bob, name: "declined.bin", body: bytes))
      _ = try await bob.awaitEvent("transfer.offered") { $0.transferID == declinedID }
      let declined = try bob.post("/api/v1/transfers/\(declinedID)/decline", json: "{}")
      #expect(declined.status == 200, "\(declined)")
      _ = try await alice.awaitTransfer(declinedID, state: "declined")
      #expect(try bob.transfer(declinedID)?["state"] as? String == "declined")
      for party in [alice, bob] {
        #expect(try party.events("transfer.declined").contains { $0.transferID == declinedID }, "\(party)")
      }
      #expect(try storedFiles(nodes[1], declinedID).isEmpty)
      try await eventuallyAsync(timeout: .seconds(10), message: "alice's spool removed") {
        try storedFiles(nodes[0], declinedID).isEmpty
      }
    }
  }

  /// The wait is bounded: an unanswered file fails on both sides with a reason (`--file-consent-timeout`).
  /// `transfer.offered` carries the timeout the file got (it said what was left of it after the store write, rounded
  /// down: one second less for about half the files), and the failure reason names that same timeout even after
  /// the setting changed (it named the current setting).
  @Test func anUnansweredFileExpires() async throws {
    try await withNodes(
      count: 2, arguments: ["--file-consent", "ask", "--file-consent-timeout", "3"], seeds: .allEarlier
    ) { nodes in
      let (alice, bob, sessionID) = try await transferPair(nodes)
      var ids: [String] = []
      for index in 0..<5 {
        ids.append(
          try transferID(try alice.upload(sessionID, to: bob, name: "late\(index).txt", body: Array("late".utf8))))
      }
      for id in ids {
        let offered = try await bob.awaitEvent("transfer.offered") { $0.transferID == id }
        #expect(offered.data["timeoutSeconds"] as? Int == 3, "\(offered.data)")
      }
      // A new setting applies to files offered after it, not to those already waiting.
      let patched = try HTTPClient.patch(
        port: nodes[1].port, path: "/api/v1/node/settings", json: #"{"fileConsentTimeout":60}"#,
        token: try nodes[1].adminToken())
      #expect(patched.status == 200, "\(patched)")
      for id in ids {
        let failed = try await bob.awaitTransfer(id, state: "failed")
        #expect(
          (failed["reason"] as? String)?.contains("did not accept or decline the file within 3 s") == true,
          "\(failed)")
      }
      let id = ids[0]
      let sent = try await alice.awaitTransfer(id, state: "failed")
      #expect((sent["reason"] as? String)?.contains("did not accept or decline") == true, "\(sent)")
      #expect(try bob.post("/api/v1/transfers/\(id)/accept", json: "{}").status == 409)
      #expect(try storedFiles(nodes[1], id).isEmpty)
    }
  }
}

/// Files of transfer `id` in a node's data directory (its spool or partial file, or its finished file).
/// Another process holding the node's SQLite write lock (`BEGIN IMMEDIATE`) until ``release()``: the node's writes
/// wait meanwhile (up to its busy timeout, 5 s), as on a slow disk.
private final class StoreWriteLock {
  let process = Process()
  let input = Pipe()
  let output = Pipe()

  init(_ node: NodeProcess) throws {
    process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
    process.arguments = [
      "-c",
      """
      import sqlite3, sys
      c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
      c.execute("BEGIN IMMEDIATE")
      print("locked", flush=True)
      sys.stdin.readline()
      c.execute("COMMIT")
      """,
      node.dataDirectory + "/meshgate.sqlite",
    ]
    process.standardInput = input
    process.standardOutput = output
    try process.run()
    let line = output.fileHandleForReading.availableData
    guard String(decoding: line, as: UTF8.self).hasPrefix("locked") else {
      throw TestSupportError.timeout("the store lock was not taken: \(String(decoding: line, as: UTF8.self))")
    }
  }

  func release() throws {
    try input.fileHandleForWriting.write(contentsOf: Array("\n".utf8))
    process.waitUntilExit()
  }
}

func storedFiles(_ node: NodeProcess, _ id: String) throws -> [String] {
  let manager = FileManager.default
  var found: [String] = []
  for name in (try? manager.contentsOfDirectory(atPath: "\(node.dataDirectory)/transfers")) ?? []
  where name.hasPrefix(id) {
    found.append("transfers/\(name)")
  }
  for side in ["sent", "received"] where manager.fileExists(atPath: "\(node.dataDirectory)/files/\(side)/\(id)") {
    found.append("files/\(side)/\(id)")
  }
  return found
}
