import Crypto
import Foundation
import MeshCore
import MeshgateTestSupport
import Testing

// A hostile node (MeshgateTestSupport's HostileNode) links to a real node and sends well-formed but malicious frames:
// ids that are paths, forged session states enrolling the victim's peers, huge directories. Each test shows what a
// linked node may not do (docs/security.md, "What a linked node may do").

/// A new UUID string, as meshgate makes them.
private func uuid() -> String { UUID().uuidString.lowercased() }

/// The value of a labelled counter such as `meshgate_mesh_frames_refused_total{reason="invalid_id"}`, 0 when absent.
private func counter(_ node: NodeProcess, _ sample: String) throws -> Double {
  try node.metric(sample) ?? 0
}

/// The resident set size of a node's process, in bytes.
private func residentBytes(_ node: NodeProcess) throws -> Int {
  let pid = try #require(node.pid)
  let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
  let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") })
  let kilobytes = try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]))
  return kilobytes * 1024
}

/// A session hosted by the hostile node with `members`.
private func hostileSession(
  _ id: String, hostile: HostileNode, creator: String, members: [SessionMember], revision: UInt64
) -> SessionDescription {
  SessionDescription(
    sessionID: id, hostNodeID: hostile.nodeID, creatorPeerID: creator, strategy: .cluster, encryption: .none,
    maxPeers: 8, revision: revision, members: members)
}

/// Whether `message` answers transfer `id` (accept, reject, failed or finished).
private func answers(_ id: String) -> (MeshMessage) -> Bool {
  { message in
    switch message {
    case .transferAccept(id, _), .transferReject(id, _, _), .transferFailed(id, _), .transferFinished(id, _): true
    default: false
    }
  }
}

/// Has `hostile` announce `sender`, invite `victim` into a session it hosts, and enrol the victim once it accepted.
/// Returns the session id.
private func hostileSessionWithVictim(
  _ hostile: HostileNode, sender: PeerAnnouncement, victim: MeshPeer, node: NodeProcess,
  isolation: isolated (any Actor)? = #isolation
) async throws -> String {
  let sessionID = uuid()
  let invitationID = uuid()
  let senderMember = SessionMember(
    peerID: sender.peerID, displayName: sender.displayName, nodeID: hostile.nodeID, state: .connected)
  let first = hostileSession(sessionID, hostile: hostile, creator: sender.peerID, members: [senderMember], revision: 1)
  hostile.send(
    .invite(
      InvitationOffer(
        invitationID: invitationID, session: first, fromPeerID: sender.peerID, fromDisplayName: sender.displayName,
        toPeerID: victim.id, context: [], timeoutMillis: 30_000, verificationCode: "000000")))
  try await victim.answerWhenReceived(invitationID, "accept")
  try hostile.waitFor(timeout: .seconds(30), "the accepted answer") {
    $0 == .inviteAnswer(invitationID: invitationID, outcome: .accepted)
  }
  var joined = first
  joined.revision = 2
  joined.members.append(SessionMember(peerID: victim.id, displayName: "victim", nodeID: node.nodeID, state: .connected))
  hostile.send(.sessionState(joined))
  try await eventuallyAsync(timeout: .seconds(30), message: "the victim in the session of \(hostile.name)") {
    try victim.memberStates(sessionID)[victim.id] == "connected"
  }
  return sessionID
}

/// A small file offer from `sender` to `victim` in `sessionID`.
private func fileOffer(_ transferID: String, sessionID: String, sender: PeerAnnouncement, victim: MeshPeer)
  -> MeshMessage
{
  .transferOffer(
    TransferOffer(
      transferID: transferID, sessionID: sessionID, fromPeerID: sender.peerID, fromDisplayName: sender.displayName,
      toPeerID: victim.id, name: "note.txt", contentType: "text/plain", size: 5, resume: false))
}

@Suite(.serialized, .timeLimit(.minutes(3))) struct HostileNodeTests {
  /// A transfer id is a path on the receiving node. A linked node offering `../../../../tmp/x`, or
  /// `../..` with the name `node-cert.pem`, must not write outside the data directory or over the node's certificate.
  @Test func aTransferOfferWhoseIDIsAPathWritesNothingOutsideTheDataDirectory() async throws {
    try await withNode { node in
      let victim = try node.meshPeer("victim")
      let hostile = try HostileNode(name: "mallory", tls: true)
      defer { hostile.close() }
      let hello = try hostile.link(port: node.port)
      #expect(hello.nodeID == node.nodeID)
      let mallory = PeerAnnouncement(peerID: uuid(), displayName: "Mallory")
      hostile.send(.peerSnapshot([mallory]))

      // A real invitation the victim accepts: the session is legitimate, only the transfer ids are hostile.
      let sessionID = uuid()
      let invitationID = uuid()
      let first = hostileSession(
        sessionID, hostile: hostile, creator: mallory.peerID,
        members: [
          SessionMember(peerID: mallory.peerID, displayName: "Mallory", nodeID: hostile.nodeID, state: .connected)
        ],
        revision: 1)
      hostile.send(
        .invite(
          InvitationOffer(
            invitationID: invitationID, session: first, fromPeerID: mallory.peerID, fromDisplayName: "Mallory",
            toPeerID: victim.id, context: [], timeoutMillis: 30_000, verificationCode: "000000")))
      try await victim.answerWhenReceived(invitationID, "accept")
      try hostile.waitFor(timeout: .seconds(30), "the accepted answer") {
        $0 == .inviteAnswer(invitationID: invitationID, outcome: .accepted)
      }
      var joined = first
      joined.revision = 2
      joined.members.append(
        SessionMember(peerID: victim.id, displayName: "victim", nodeID: node.nodeID, state: .connected))
      hostile.send(.sessionState(joined))
      try await eventuallyAsync(timeout: .seconds(30), message: "the victim in the hostile session") {
        try victim.memberStates(sessionID)[victim.id] == "connected"
      }

      let outside = FileManager.default.temporaryDirectory.path + "/meshgate-hostile-target-" + uuid()
      try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
      defer { try? FileManager.default.removeItem(atPath: outside) }
      let certificatePath = node.dataDirectory + "/node-cert.pem"
      let certificate = try Data(contentsOf: URL(fileURLWithPath: certificatePath))
      let content = Array("owned".utf8)
      let attacks: [(id: String, name: String)] = [
        ("../../../../tmp/x", "x"),
        (String(repeating: "../", count: 24) + String(outside.dropFirst()) + "/x", "y"),
        ("../..", "node-cert.pem"),
        ("../../..", "node-cert.pem"),
      ]
      for attack in attacks {
        hostile.send(
          .transferOffer(
            TransferOffer(
              transferID: attack.id, sessionID: sessionID, fromPeerID: mallory.peerID, fromDisplayName: "Mallory",
              toPeerID: victim.id, name: attack.name, contentType: "text/plain", size: UInt64(content.count),
              resume: false)))
        let answer = try hostile.waitFor(
          timeout: .seconds(30), "an answer to the offer of \(attack.id)", answers(attack.id))
        guard case .transferAccept = answer else { continue }
        // Accepted (the hole): finish the transfer, as the attack would.
        hostile.send(.transferChunk(transferID: attack.id, offset: 0, bytes: content))
        hostile.send(.transferEnd(transferID: attack.id, size: UInt64(content.count), sha256: Crypto.sha256(content)))
        try hostile.waitFor(timeout: .seconds(30), "the end of transfer \(attack.id)") {
          switch $0 {
          case .transferFinished(attack.id, _), .transferFailed(attack.id, _): true
          default: false
          }
        }
      }
      for attack in attacks {
        #expect(
          hostile.received.contains { if case .transferReject(attack.id, _, _) = $0 { true } else { false } },
          "the offer of \(attack.id) was not refused")
      }
      #expect(!FileManager.default.fileExists(atPath: "/tmp/x.in"))
      #expect(try FileManager.default.contentsOfDirectory(atPath: outside).isEmpty, "a file was written outside")
      #expect(try Data(contentsOf: URL(fileURLWithPath: certificatePath)) == certificate, "node-cert.pem changed")
      #expect(try counter(node, #"meshgate_mesh_frames_refused_total{reason="invalid_id"}"#) >= Double(attacks.count))
      // The victim's node still works and still presents the same certificate.
      #expect(try HTTPClient.get(port: node.port, path: "/healthz").status == 200)
      #expect(hostile.closeReason == nil)
    }
  }

  /// A forged `sessionState` naming the victim's peer as a connected member must not enrol it, and
  /// nothing addressed to it through that session (data, events, files, streams) may reach it.
  @Test func aForgedSessionStateDoesNotEnrolALocalPeer() async throws {
    try await withNode(arguments: ["--mesh-tls", "off"]) { node in
      let victim = try node.meshPeer("victim")
      _ = try victim.browse("hostile-mark")
      let hostile = try HostileNode(name: "mallory", tls: false)
      defer { hostile.close() }
      try hostile.link(port: node.port)
      // The victim's peer ids come from the victim node's own snapshot.
      let snapshot = try hostile.waitFor(timeout: .seconds(30), "the victim's peer snapshot") {
        if case .peerSnapshot = $0 { true } else { false }
      }
      guard case .peerSnapshot(let announced) = snapshot else { return }
      #expect(announced.contains { $0.peerID == victim.id })
      let mallory = PeerAnnouncement(peerID: uuid(), displayName: "Mallory")
      hostile.send(.peerSnapshot([mallory]))

      let sessionID = uuid()
      let forged = hostileSession(
        sessionID, hostile: hostile, creator: mallory.peerID,
        members: [
          SessionMember(peerID: mallory.peerID, displayName: "Mallory", nodeID: hostile.nodeID, state: .connected),
          SessionMember(peerID: victim.id, displayName: "victim", nodeID: node.nodeID, state: .connected),
        ], revision: 1)
      hostile.send(.sessionState(forged))
      hostile.send(
        .sessionData(
          sessionID: sessionID, fromPeerID: mallory.peerID, toPeerIDs: [victim.id], sequence: 1,
          payload: Array("forged".utf8)))
      hostile.send(
        .sessionEvent(
          sessionID: sessionID, fromPeerID: mallory.peerID, toPeerIDs: [victim.id], sequence: 2, name: "forged",
          object: Array("{}".utf8)))
      let transferID = uuid()
      hostile.send(
        .transferOffer(
          TransferOffer(
            transferID: transferID, sessionID: sessionID, fromPeerID: mallory.peerID, fromDisplayName: "Mallory",
            toPeerID: victim.id, name: "forged.txt", contentType: "text/plain", size: 3, resume: false)))
      let streamID = uuid()
      hostile.send(
        .streamOpen(
          StreamOffer(
            streamID: streamID, sessionID: sessionID, fromPeerID: mallory.peerID, fromDisplayName: "Mallory",
            toPeerID: victim.id, name: "forged")))
      // A marker: once the victim was told about it, every frame before it was handled and its events are logged.
      hostile.send(
        .peerUpdated(
          PeerAnnouncement(peerID: mallory.peerID, displayName: "Mallory", advertising: ["hostile-mark": [:]])))
      try await victim.awaitEvent("peer.found") { $0.peerID == mallory.peerID }
      let transferAnswer = try hostile.waitFor(
        timeout: .seconds(30), "an answer to the forged offer", answers(transferID))
      try hostile.waitFor(timeout: .seconds(30), "the forged stream's close") {
        if case .streamClose(streamID, _) = $0 { true } else { false }
      }

      let sessions = try victim.get("/api/v1/sessions").jsonObject()["sessions"] as? [[String: Any]] ?? []
      #expect(!sessions.contains { $0["id"] as? String == sessionID }, "the forged session lists the victim")
      #expect(try victim.session(sessionID) == nil)
      let events = try victim.allEvents()
      #expect(
        !events.contains { $0.sessionID == sessionID },
        "the victim got events of the forged session: \(events.filter { $0.sessionID == sessionID })")
      #expect(
        { if case .transferReject(transferID, .notMember, _) = transferAnswer { true } else { false } }(),
        "the forged offer was answered \(transferAnswer)")
      #expect(try counter(node, #"meshgate_mesh_frames_refused_total{reason="not_agreed"}"#) >= 1)
      #expect(hostile.closeReason == nil)
    }
  }

  /// A `nodeDirectory` of 2,000 invented node ids must not make the node dial 2,000 addresses, and
  /// the addresses it refused or failed to reach are shown to admins only.
  @Test func inventedNodeIDsInADirectoryCauseNoDiallingStorm() async throws {
    try await withNode(arguments: ["--mesh-tls", "off"]) { node in
      let hostile = try HostileNode(name: "mallory", tls: false)
      defer { hostile.close() }
      try hostile.link(port: node.port)
      let dialsBefore = try counter(node, "meshgate_mesh_dials_total")
      // Closed ports on other loopback addresses: each dial fails at once, as a scan of closed ports would.
      let invented = (0..<2000).map { index in
        NodeAddress(nodeID: uuid(), host: "127.0.\(1 + index / 250).\(1 + index % 250)", port: 9)
      }
      hostile.send(.nodeDirectory(invented))
      try hostile.roundTrip()
      // Watch the node's reconnect ticks for a while: the bound must hold after retries too.
      let until = ContinuousClock.now + .seconds(3)
      let bound = Double(MeshLimits.gossipAddressesPerNode * MeshLimits.gossipDialAttempts)
      var dials = 0.0
      while ContinuousClock.now < until {
        dials = try counter(node, "meshgate_mesh_dials_total") - dialsBefore
        #expect(dials <= bound, "the node dialled \(dials) invented addresses")
        if dials > bound { break }
        try await Task.sleep(for: .milliseconds(200))
      }
      print("hostile node: 2000 invented node ids made the node dial \(Int(dials)) times in 3 s")
      #expect(
        try counter(node, #"meshgate_mesh_frames_refused_total{reason="too_many_nodes"}"#)
          >= Double(2000 - MeshLimits.gossipAddressesPerNode))
      // Without the admin token only linked nodes are listed; with it, the addresses that failed too.
      let open = try node.meshNodes().nodes
      #expect(
        open.allSatisfy { $0.state == "linked" },
        "unauthenticated mesh/nodes lists \(open.filter { $0.state != "linked" })")
      let admin = try node.adminToken()
      let full = try HTTPClient.get(port: node.port, path: "/api/v1/mesh/nodes", token: admin).jsonObject()
      let entries = full["nodes"] as? [[String: Any]] ?? []
      let forgotten = full["forgotten"] as? [[String: Any]] ?? []
      #expect(forgotten.contains { ($0["address"] as? String)?.hasPrefix("127.0.1.") == true }, "\(full)")
      #expect(forgotten.allSatisfy { $0["gossipedBy"] as? String == hostile.nodeID })
      #expect(try HTTPClient.get(port: node.port, path: "/api/v1/mesh/nodes").jsonObject()["forgotten"] == nil)
      let kept = entries.filter { $0["state"] as? String != "linked" }.count
      #expect(kept <= MeshLimits.gossipAddressesPerNode, "the node keeps \(kept) invented addresses")
      #expect(hostile.closeReason == nil)
    }
  }

  /// A `peerSnapshot` of 65,536 peers must be refused, not fill the directory, memory and the event
  /// log of every browsing peer.
  @Test func aHugePeerSnapshotIsRefusedAndMemoryAndEventLogsStayBounded() async throws {
    try await withNode(arguments: ["--mesh-tls", "off"]) { node in
      let browser = try node.meshPeer("browser")
      _ = try browser.browse("flood")
      let hostile = try HostileNode(name: "mallory", tls: false)
      defer { hostile.close() }
      try hostile.link(port: node.port)
      try hostile.roundTrip()
      let before = try residentBytes(node)
      let eventsBefore = try browser.lastEventID()
      let flood = (0..<65_536).map { index in
        PeerAnnouncement(peerID: uuid(), displayName: "p\(index)", advertising: ["flood": [:]])
      }
      hostile.send(.peerSnapshot(flood))
      try hostile.roundTrip(timeout: .seconds(60))
      // A small snapshot afterwards is accepted: its one peer.found tells that the flood's events (if any) are logged.
      let marker = PeerAnnouncement(peerID: uuid(), displayName: "marker", advertising: ["flood": [:]])
      hostile.send(.peerSnapshot([marker]))
      try await browser.awaitEvent("peer.found", since: eventsBefore, timeout: .seconds(60)) {
        $0.peerID == marker.peerID
      }
      let found = try browser.events("peer.found", since: eventsBefore)
      #expect(found.count <= MeshLimits.peersPerNode, "\(found.count) peer.found events")
      #expect(try node.metric("meshgate_mesh_known_peers") ?? 0 <= Double(MeshLimits.peersPerNode + 1))
      #expect(try counter(node, #"meshgate_mesh_frames_refused_total{reason="too_many_peers"}"#) >= 1)
      let grown = try residentBytes(node) - before
      print(
        "hostile node: a 65,536-peer snapshot grew the node by \(grown >> 10) KiB, \(found.count) peer.found events")
      #expect(grown < 48 << 20, "the node grew by \(grown >> 20) MiB")
      #expect(hostile.closeReason == nil)
    }
  }

  /// File consent is bound to the sender's node: after a victim always accepts files from xavier on node B and B
  /// leaves, another node announcing xavier's peer id is refused (B still owns it), and even where that ownership was
  /// forgotten (the victim's node restarted), the always-accept entry does not cover xavier arriving from another node.
  @Test func anAlwaysAcceptEntryIsNotBorrowedByANodeTakingOverThePeerID() async throws {
    try await withNode(arguments: ["--file-consent", "ask"]) { node in
      let alice = try node.meshPeer("alice")
      let xavier = PeerAnnouncement(peerID: uuid(), displayName: "Xavier")

      // xavier on node B sends alice a file; she accepts it with always.
      let nodeB = try HostileNode(name: "node-b", tls: true)
      try nodeB.link(port: node.port)
      nodeB.send(.peerSnapshot([xavier]))
      let first = try await hostileSessionWithVictim(nodeB, sender: xavier, victim: alice, node: node)
      let firstFile = uuid()
      nodeB.send(fileOffer(firstFile, sessionID: first, sender: xavier, victim: alice))
      try await alice.awaitEvent("transfer.offered") {
        ($0.data["transfer"] as? [String: Any])?["id"] as? String == firstFile
      }
      let accepted = try alice.post("/api/v1/transfers/\(firstFile)/accept", json: #"{"always":true}"#)
      #expect(accepted.status == 200, "\(accepted)")
      try nodeB.waitFor(timeout: .seconds(30), "the accept of the first file") {
        if case .transferAccept(firstFile, _) = $0 { true } else { false }
      }
      nodeB.close()
      try await eventuallyAsync(timeout: .seconds(30), message: "node B unlinked") {
        try !node.linkedNodeIDs().contains(nodeB.nodeID)
      }

      // Node H announces xavier's id while B's ownership is remembered: refused.
      let refusedBefore = try counter(node, #"meshgate_mesh_frames_refused_total{reason="not_own_peer"}"#)
      let nodeH = try HostileNode(name: "node-h", tls: true)
      defer { nodeH.close() }
      try nodeH.link(port: node.port)
      nodeH.send(.peerSnapshot([xavier]))
      try nodeH.roundTrip()
      #expect(
        try counter(node, #"meshgate_mesh_frames_refused_total{reason="not_own_peer"}"#) > refusedBefore,
        "node H's claim on xavier's peer id was not refused")
      nodeH.close()

      // After a restart nothing remembers B's ownership; H's xavier is taken, but alice is asked about its file.
      try node.restart()
      let nodeH2 = try HostileNode(name: "node-h", tls: true)
      defer { nodeH2.close() }
      try nodeH2.link(port: node.port)
      nodeH2.send(.peerSnapshot([xavier]))
      let second = try await hostileSessionWithVictim(nodeH2, sender: xavier, victim: alice, node: node)
      let secondFile = uuid()
      nodeH2.send(fileOffer(secondFile, sessionID: second, sender: xavier, victim: alice))
      let answer = try nodeH2.waitFor(timeout: .seconds(30), "an answer to the second file") {
        switch $0 {
        case .transferAwaitingConsent(secondFile, _), .transferAccept(secondFile, _), .transferReject(secondFile, _, _):
          true
        default: false
        }
      }
      guard case .transferAwaitingConsent = answer else {
        Issue.record("a file from xavier on another node was not asked about: \(answer)")
        return
      }
      let list = try #require(try alice.get("/api/v1/file-consent").jsonObject()["fileConsent"] as? [String: Any])
      let entries = try #require(list["alwaysAccept"] as? [[String: Any]])
      #expect(entries.map { $0["nodeId"] as? String } == [nodeB.nodeID])
    }
  }

  /// A linked node cannot reserve the whole disk with offers it never sends: one sender may hold half (one node three
  /// quarters) of the space for files in offered files not yet stored, and an accepted file that makes no progress
  /// fails after `--transfer-idle-timeout`, releasing its space.
  @Test func offersNeverSentCannotReserveTheWholeDisk() async throws {
    try await withNode(arguments: ["--max-transfer-bytes", "1125899906842624", "--transfer-idle-timeout", "2"]) {
      node in
      let victim = try node.meshPeer("victim")
      let hostile = try HostileNode(name: "mallory", tls: true)
      defer { hostile.close() }
      try hostile.link(port: node.port)
      let mallory = PeerAnnouncement(peerID: uuid(), displayName: "Mallory")
      hostile.send(.peerSnapshot([mallory]))
      let sessionID = try await hostileSessionWithVictim(hostile, sender: mallory, victim: victim, node: node)

      let attributes = try FileManager.default.attributesOfFileSystem(forPath: node.dataDirectory)
      let free = try #require((attributes[.systemFreeSize] as? NSNumber)?.uint64Value)
      let available = free - min(free, 64 << 20)
      try #require(available > 64 << 20, "the test needs some free disk space")
      func offer(_ size: UInt64) throws -> (id: String, answer: MeshMessage) {
        let id = uuid()
        hostile.send(
          .transferOffer(
            TransferOffer(
              transferID: id, sessionID: sessionID, fromPeerID: mallory.peerID, fromDisplayName: "Mallory",
              toPeerID: victim.id, name: "big.bin", contentType: "application/octet-stream", size: size,
              resume: false)))
        return (id, try hostile.waitFor(timeout: .seconds(30), "an answer to offer \(id)", answers(id)))
      }
      func refusedForSpace(_ answer: MeshMessage) -> Bool {
        if case .transferReject(_, .insufficientStorage, _) = answer { true } else { false }
      }

      let whole = try offer(available / 10 * 9)
      #expect(refusedForSpace(whole.answer), "an offer of 90% of the free space: \(whole.answer)")
      let fifth = try offer(available / 10 * 3)
      guard case .transferAccept = fifth.answer else {
        Issue.record("an offer of 30% of the free space was not accepted: \(fifth.answer)")
        return
      }
      let another = try offer(available / 10 * 3)
      #expect(refusedForSpace(another.answer), "a second 30% from the same sender: \(another.answer)")

      // The accepted file never gets a byte: it fails after the idle timeout and its space is free again.
      try hostile.waitFor(timeout: .seconds(30), "the idle file failing") {
        if case .transferFailed(fifth.id, _) = $0 { true } else { false }
      }
      let again = try offer(available / 10 * 3)
      if case .transferAccept = again.answer {
      } else {
        Issue.record("the space of the failed file was not released: \(again.answer)")
      }
      #expect(hostile.closeReason == nil)
    }
  }

  /// Files waiting for consent (`--file-consent ask`) count against the sender's share like accepted ones: a second
  /// offer of 30% of the free space from the same sender is refused while the first waits for its answer.
  @Test func offersWaitingForConsentCountAgainstTheSendersShare() async throws {
    try await withNode(arguments: ["--max-transfer-bytes", "1125899906842624", "--file-consent", "ask"]) { node in
      let victim = try node.meshPeer("victim")
      let hostile = try HostileNode(name: "mallory", tls: true)
      defer { hostile.close() }
      try hostile.link(port: node.port)
      let mallory = PeerAnnouncement(peerID: uuid(), displayName: "Mallory")
      hostile.send(.peerSnapshot([mallory]))
      let sessionID = try await hostileSessionWithVictim(hostile, sender: mallory, victim: victim, node: node)
      let attributes = try FileManager.default.attributesOfFileSystem(forPath: node.dataDirectory)
      let free = try #require((attributes[.systemFreeSize] as? NSNumber)?.uint64Value)
      let size = (free - min(free, 64 << 20)) / 10 * 3
      try #require(size > 16 << 20, "the test needs some free disk space")
      var answers: [MeshMessage] = []
      for _ in 0..<2 {
        let id = uuid()
        var offer = fileOffer(id, sessionID: sessionID, sender: mallory, victim: victim)
        if case .transferOffer(var details) = offer {
          details.size = size
          offer = .transferOffer(details)
        }
        hostile.send(offer)
        answers.append(
          try hostile.waitFor(timeout: .seconds(30), "an answer to offer \(id)") {
            switch $0 {
            case .transferAwaitingConsent(id, _), .transferAccept(id, _), .transferReject(id, _, _): true
            default: false
            }
          })
      }
      if case .transferAwaitingConsent = answers[0] {} else { Issue.record("the first offer: \(answers[0])") }
      if case .transferReject(_, .insufficientStorage, _) = answers[1] {
      } else {
        Issue.record("a second 30% while the first waits for consent: \(answers[1])")
      }
    }
  }
}
