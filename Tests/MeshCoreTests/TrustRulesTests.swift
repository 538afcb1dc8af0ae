import Testing

@testable import MeshCore

// The trust rules (docs/security.md, "What a linked node may do"), one state machine at a time: a linked
// node changes only its own peers' membership, a local peer joins only by its own act, announcements are bounded and
// gossip cannot make a node dial at will. Node "B" is the victim throughout, "M" the hostile node.

private func member(_ peerID: String, _ nodeID: String, _ state: MemberState = .connected) -> SessionMember {
  SessionMember(peerID: peerID, displayName: peerID.uppercased(), nodeID: nodeID, state: state)
}

private func session(
  _ id: String = "s", host: String = "M", creator: String = "m1", revision: UInt64 = 1, members: [SessionMember]
) -> SessionDescription {
  SessionDescription(
    sessionID: id, hostNodeID: host, creatorPeerID: creator, strategy: .cluster, encryption: .none, maxPeers: 8,
    revision: revision, members: members)
}

/// The local peers `directives` tell anything.
private func notified(_ directives: [SessionBook.Directive]) -> Set<String> {
  Set(
    directives.flatMap { directive -> [String] in
      switch directive {
      case .notify(let peerID, _): [peerID]
      case .notifyEach(let peerIDs, _): peerIDs
      case .send: []
      }
    })
}

private func offer(_ id: String, to peerID: String, session description: SessionDescription) -> InvitationOffer {
  InvitationOffer(
    invitationID: id, session: description, fromPeerID: "m1", fromDisplayName: "M1", toPeerID: peerID, context: [],
    timeoutMillis: 30_000, verificationCode: "")
}

@Suite struct SessionTrustTests {
  @Test func aForgedSessionStateDoesNotEnrolALocalPeer() {
    var book = SessionBook(nodeID: "B")
    let forged = session(members: [member("m1", "M"), member("b1", "B")])
    let directives = book.received(.sessionState(forged), from: "M", now: 0)
    #expect(book.sessions(of: "b1").isEmpty)
    #expect(!notified(directives).contains("b1"))
    #expect(book.refusals["not_agreed"] == 1)
    // Nothing addressed to b1 through that session reaches it.
    let data = book.received(
      .sessionData(sessionID: "s", fromPeerID: "m1", toPeerIDs: ["b1"], sequence: 1, payload: [1]), from: "M", now: 0)
    #expect(!notified(data).contains("b1"))
    let event = book.received(
      .sessionEvent(sessionID: "s", fromPeerID: "m1", toPeerIDs: ["b1"], sequence: 2, name: "x", object: []),
      from: "M", now: 0)
    #expect(!notified(event).contains("b1"))
    #expect(book.refusals["not_agreed"] == 3)
    #expect(!book.hasAgreed("b1", to: "s"))
  }

  @Test func anAcceptedInvitationEnrolsAndLeavingWithdrawsIt() throws {
    var book = SessionBook(nodeID: "B")
    let first = session(members: [member("m1", "M")])
    _ = book.received(.invite(offer("i1", to: "b1", session: first)), from: "M", now: 0)
    _ = try book.answer("i1", by: "b1", accept: true, now: 1)
    #expect(book.hasAgreed("b1", to: "s"))
    // Data racing the host's new description already reaches the peer that accepted.
    let early = book.received(
      .sessionData(sessionID: "s", fromPeerID: "m1", toPeerIDs: ["b1"], sequence: 1, payload: [1]), from: "M", now: 2)
    #expect(notified(early) == ["b1"])
    let joined = session(revision: 2, members: [member("m1", "M"), member("b1", "B")])
    _ = book.received(.sessionState(joined), from: "M", now: 3)
    #expect(book.sessions(of: "b1").map(\.sessionID) == ["s"])
    #expect(book.refusals.isEmpty)
    _ = try book.leave("s", peerID: "b1")
    #expect(!book.hasAgreed("b1", to: "s"))
    // A description still listing b1 (sent before the host saw the leave, or forged) does not bring it back.
    _ = book.received(.sessionState(session(revision: 3, members: joined.members)), from: "M", now: 4)
    #expect(book.sessions(of: "b1").isEmpty)
  }

  @Test func theHostDroppingALocalMemberWithdrawsItsAgreement() throws {
    var book = SessionBook(nodeID: "B")
    _ = book.received(.invite(offer("i1", to: "b1", session: session(members: [member("m1", "M")]))), from: "M", now: 0)
    _ = try book.answer("i1", by: "b1", accept: true, now: 1)
    _ = book.received(
      .sessionState(session(revision: 2, members: [member("m1", "M"), member("b1", "B")])), from: "M", now: 2)
    _ = book.received(.sessionState(session(revision: 3, members: [member("m1", "M")])), from: "M", now: 3)
    _ = book.received(
      .sessionState(session(revision: 4, members: [member("m1", "M"), member("b1", "B")])), from: "M", now: 4)
    #expect(book.sessions(of: "b1").isEmpty)
  }

  @Test func onlyTheHostDescribesASessionAndItNeverMoves() {
    var book = SessionBook(nodeID: "B")
    _ = book.createSession("s", creator: member("b1", "B"), strategy: .cluster, encryption: .none, maxPeers: 8)
    // M claims B's session as its own.
    let hijack = session(host: "M", revision: 9, members: [member("m1", "M")])
    _ = book.received(.sessionState(hijack), from: "M", now: 0)
    #expect(book.sessions["s"]?.hostNodeID == "B")
    #expect(book.sessions["s"]?.members == [member("b1", "B")])
    // M describes a session of A's.
    _ = book.received(.sessionState(session("t", host: "A", members: [member("m1", "M")])), from: "M", now: 0)
    #expect(book.sessions["t"] == nil)
    #expect(book.refusals["not_host"] == 2)
  }

  @Test func aJoinComesOnlyFromANodeWithAConnectedMemberAndAddsLocalPeersOnlyWithTheirAgreement() {
    var book = SessionBook(nodeID: "B")
    _ = book.createSession("s", creator: member("b1", "B"), strategy: .cluster, encryption: .none, maxPeers: 8)
    _ = book.received(.sessionJoin(sessionID: "s", member: member("m1", "M")), from: "M", now: 0)
    #expect(book.sessions["s"]?.members.count == 1)
    #expect(book.refusals["not_member"] == 1)
    // With a connected member on M (an invitation b1 sent and m1 accepted), M may add others, but not b2.
    var directives: [SessionBook.Directive] = []
    book.addMember(member("m1", "M"), to: "s", into: &directives)
    _ = book.received(.sessionJoin(sessionID: "s", member: member("b2", "B")), from: "M", now: 0)
    #expect(!(book.sessions["s"]?.members.contains { $0.peerID == "b2" } ?? true))
    #expect(book.refusals["not_agreed"] == 1)
    _ = book.received(.sessionJoin(sessionID: "s", member: member("c1", "C")), from: "M", now: 0)
    #expect(book.sessions["s"]?.members.contains { $0.peerID == "c1" } == true)
    // A join for a session B does not host.
    _ = book.received(.sessionJoin(sessionID: "x", member: member("m1", "M")), from: "M", now: 0)
    #expect(book.refusals["not_host"] == 1)
  }

  @Test func dataFromAPeerThatIsNotAMemberOnTheSendingNodeIsRefused() {
    var book = SessionBook(nodeID: "B")
    _ = book.createSession("s", creator: member("b1", "B"), strategy: .cluster, encryption: .none, maxPeers: 8)
    var directives: [SessionBook.Directive] = []
    book.addMember(member("a1", "A"), to: "s", into: &directives)
    // M is not in the session; it sends as a1 (a member, but on A).
    let data = book.received(
      .sessionData(sessionID: "s", fromPeerID: "a1", toPeerIDs: ["b1"], sequence: 0, payload: [1]), from: "M", now: 0)
    #expect(notified(data).isEmpty)
    #expect(book.refusals["not_member"] == 1)
    let real = book.received(
      .sessionData(sessionID: "s", fromPeerID: "a1", toPeerIDs: ["b1"], sequence: 0, payload: [1]), from: "A", now: 0)
    #expect(notified(real) == ["b1"])
  }

  @Test func pendingInvitationsFromOneNodeAreBounded() {
    var book = SessionBook(nodeID: "B")
    let description = session(members: [member("m1", "M")])
    for index in 0...MeshLimits.pendingInvitationsPerNode {
      _ = book.received(.invite(offer("i\(index)", to: "b1", session: description)), from: "M", now: 0)
    }
    #expect(book.invitations.count == MeshLimits.pendingInvitationsPerNode)
    #expect(book.refusals["too_many_invitations"] == 1)
    _ = book.received(.invite(offer("a1", to: "b1", session: description)), from: "A", now: 0)
    #expect(book.invitations.count == MeshLimits.pendingInvitationsPerNode + 1)
  }

  @Test func aRemoteInvitationCannotOutliveTheLongestTimeout() {
    var book = SessionBook(nodeID: "B")
    var long = offer("i1", to: "b1", session: session(members: [member("m1", "M")]))
    long.timeoutMillis = .max
    _ = book.received(.invite(long), from: "M", now: 0)
    #expect(book.invitations["i1"]?.expiresAt == UInt64(SessionBook.maxRemoteInvitationMillis))
  }
}

@Suite struct DirectoryTrustTests {
  private func linked() -> Directory {
    var directory = Directory(nodeID: "B")
    _ = directory.addLocalPeer("b1", displayName: "B1")
    _ = directory.startBrowsing("b1", serviceType: "flood")
    _ = directory.nodeLinked("M")
    _ = directory.nodeLinked("A")
    return directory
  }

  @Test func aSnapshotBeyondThePeerLimitIsRefusedWhole() {
    var directory = linked()
    let flood = (0...MeshLimits.peersPerNode).map {
      PeerAnnouncement(peerID: "p\($0)", displayName: "P", advertising: ["flood": [:]])
    }
    let directives = directory.received(.peerSnapshot(flood), from: "M")
    #expect(directives.isEmpty)
    #expect(directory.knownPeerCount == 1)
    #expect(directory.refusals["too_many_peers"] == 1)
    // At the limit it is taken.
    _ = directory.received(.peerSnapshot(Array(flood.prefix(MeshLimits.peersPerNode))), from: "M")
    #expect(directory.knownPeerCount == 1 + MeshLimits.peersPerNode)
    // One more by update is refused too.
    _ = directory.received(.peerUpdated(flood.last!), from: "M")
    #expect(directory.knownPeerCount == 1 + MeshLimits.peersPerNode)
    #expect(directory.refusals["too_many_peers"] == 2)
  }

  @Test func advertisementsAreBoundedPerNode() {
    var directory = linked()
    let services = Dictionary(uniqueKeysWithValues: (0..<64).map { ("s\($0)", [String: String]()) })
    let peers = (0..<(MeshLimits.advertisementsPerNode / 64 + 1)).map {
      PeerAnnouncement(peerID: "p\($0)", displayName: "P", advertising: services)
    }
    _ = directory.received(.peerSnapshot(peers), from: "M")
    #expect(directory.knownPeerCount == 1)
    #expect(directory.refusals["too_many_peers"] == 1)
  }

  @Test func announcementsBreakingThePeerRulesAreRefused() {
    var directory = linked()
    let badName = PeerAnnouncement(peerID: "p1", displayName: String(repeating: "x", count: 64))
    let badType = PeerAnnouncement(peerID: "p2", displayName: "P", advertising: ["Not A Type": [:]])
    let badInfo = PeerAnnouncement(
      peerID: "p3", displayName: "P", advertising: ["flood": ["k": String(repeating: "v", count: 500)]])
    for announcement in [badName, badType, badInfo] {
      _ = directory.received(.peerUpdated(announcement), from: "M")
      _ = directory.received(.peerSnapshot([announcement]), from: "M")
    }
    #expect(directory.knownPeerCount == 1)
    #expect(directory.refusals["invalid_peer"] == 6)
  }

  @Test func aPeerIDAnotherNodeAnnouncedFirstCannotBeTakenOver() {
    var directory = linked()
    _ = directory.received(.peerUpdated(PeerAnnouncement(peerID: "a1", displayName: "A1")), from: "A")
    let takeover = directory.received(
      .peerUpdated(PeerAnnouncement(peerID: "a1", displayName: "Evil", advertising: ["flood": [:]])), from: "M")
    #expect(takeover.isEmpty)
    #expect(directory.peer("a1")?.nodeID == "A")
    #expect(directory.peer("a1")?.displayName == "A1")
    _ = directory.received(.peerRemoved(peerID: "a1"), from: "M")
    #expect(directory.peer("a1")?.nodeID == "A")
    #expect(directory.refusals["not_own_peer"] == 1)
    // Once A is gone it still owns the id (another node taking it over would borrow the trust A's peer earned, such
    // as a place on an always-accept list) ...
    _ = directory.nodeUnlinked("A")
    _ = directory.received(.peerUpdated(PeerAnnouncement(peerID: "a1", displayName: "Other")), from: "M")
    #expect(directory.peer("a1") == nil)
    #expect(directory.refusals["not_own_peer"] == 2)
    // ... and may announce it again when it comes back; once A removes the peer, the id is free.
    _ = directory.nodeLinked("A")
    _ = directory.received(.peerUpdated(PeerAnnouncement(peerID: "a1", displayName: "A1")), from: "A")
    #expect(directory.peer("a1")?.nodeID == "A")
    _ = directory.received(.peerRemoved(peerID: "a1"), from: "A")
    _ = directory.received(.peerUpdated(PeerAnnouncement(peerID: "a1", displayName: "Other")), from: "M")
    #expect(directory.peer("a1")?.nodeID == "M")
  }
}

@Suite struct GossipTrustTests {
  private let local = NodeHello(nodeID: "b", name: "B", softwareVersion: "0.1.0", port: 8080)

  /// A manager linked (inbound) to node "m" on connection 1.
  private func linkedToM() -> LinkManager {
    var manager = LinkManager(local: local)
    _ = manager.inboundOpened(1, remoteHost: "10.0.0.9", now: 0)
    _ = manager.received(.hello(NodeHello(nodeID: "m", name: "M", softwareVersion: "0.1.0", port: 1)), on: 1, now: 0)
    return manager
  }

  private func connects(_ actions: [LinkManager.Action]) -> [(LinkManager.ConnectionID, String, UInt16)] {
    actions.compactMap {
      if case .connect(let id, let host, let port) = $0 { (id, host, port) } else { nil }
    }
  }

  @Test func inventedNodesInADirectoryCauseBoundedDials() {
    var manager = linkedToM()
    let invented = (0..<2000).map { NodeAddress(nodeID: "z\($0)", host: "10.1.\($0 / 250).\($0 % 250)", port: 9) }
    let actions = manager.received(.nodeDirectory(invented), on: 1, now: 10)
    #expect(connects(actions).count == MeshLimits.gossipDialsInFlight)
    #expect(manager.refusals["too_many_nodes"] == 2000 - MeshLimits.gossipAddressesPerNode)
    // Every dial fails at once (closed ports); over the next minute the node never has more than a few in flight
    // and gives each address a bounded number of tries.
    var dials = connects(actions).map(\.0)
    var total = dials.count
    var now: UInt64 = 10
    while now < 60_000 {
      for id in dials { _ = manager.outboundFailed(id, now: now) }
      now += 100
      let next = connects(manager.tick(now: now))
      #expect(next.count <= MeshLimits.gossipDialsInFlight)
      dials = next.map(\.0)
      total += dials.count
    }
    #expect(total <= MeshLimits.gossipAddressesPerNode * MeshLimits.gossipDialAttempts)
    #expect(manager.status(now: now).filter { $0.state != .linked }.isEmpty)
    // The same directory again, on the same link, is refused whole.
    let again = manager.received(.nodeDirectory(invented), on: 1, now: now)
    #expect(connects(again).isEmpty)
  }

  @Test func aGossipedAddressThatAnswersAsAnotherNodeIsClosedAndForgotten() {
    var manager = linkedToM()
    let actions = manager.received(
      .nodeDirectory([NodeAddress(nodeID: "c", host: "10.0.0.3", port: 8080)]), on: 1, now: 10)
    let id = try! #require(connects(actions).first).0
    _ = manager.outboundOpened(id, now: 20)
    let answer = manager.received(
      .hello(NodeHello(nodeID: "x", name: "X", softwareVersion: "0.1.0", port: 8080)), on: id, now: 30)
    #expect(answer.contains(.close(id, reason: "node id mismatch")))
    #expect(!answer.contains { if case .linkUp = $0 { true } else { false } })
    _ = manager.closed(id, now: 40)
    #expect(connects(manager.tick(now: 5000)).isEmpty)
    #expect(manager.refusals["gossip_mismatch"] == 1)
  }

  @Test func aGossipedAddressThatAnsweredAsItselfIsKeptAndRedialled() {
    var manager = linkedToM()
    let actions = manager.received(
      .nodeDirectory([NodeAddress(nodeID: "c", host: "10.0.0.3", port: 8080)]), on: 1, now: 10)
    let id = try! #require(connects(actions).first).0
    _ = manager.outboundOpened(id, now: 20)
    let up = manager.received(
      .hello(NodeHello(nodeID: "c", name: "C", softwareVersion: "0.1.0", port: 8080)), on: id, now: 30)
    #expect(up.contains { if case .linkUp = $0 { true } else { false } })
    _ = manager.closed(id, now: 40)
    // Not forgotten after failures: it answered as itself once.
    var now: UInt64 = 40
    var redials = 0
    // Within the 30 s a quiet found address is kept: more tries than an unconfirmed address gets.
    for _ in 0..<4 {
      now += 6000
      for (dial, _, _) in connects(manager.tick(now: now)) {
        redials += 1
        _ = manager.outboundFailed(dial, now: now)
      }
    }
    #expect(redials > MeshLimits.gossipDialAttempts)
  }
}

@Suite struct WireIDTests {
  @Test func uuidsAndTokens() {
    #expect(WireIDs.isUUID("0f8fad5b-d9cb-469f-a165-70867728950e"))
    #expect(!WireIDs.isUUID("0F8FAD5B-D9CB-469F-A165-70867728950E"))
    #expect(!WireIDs.isUUID("../../../../tmp/x"))
    #expect(!WireIDs.isUUID("0f8fad5b-d9cb-469f-a165-70867728950"))
    #expect(!WireIDs.isUUID("0f8fad5b/d9cb-469f-a165-70867728950e"))
    #expect(WireIDs.isToken("9f3a0c1d2e4b5a6f"))
    #expect(WireIDs.isToken("client_id-1"))
    for bad in ["", ".", "..", "a/b", "a.b", "a\u{0}b", String(repeating: "a", count: 65), "é"] {
      #expect(!WireIDs.isToken(bad), "\(bad.debugDescription)")
    }
  }

  @Test func everyIDOfAFrameIsChecked() {
    let good = "0f8fad5b-d9cb-469f-a165-70867728950e"
    let bad = "../../../../tmp/x"
    let offer = TransferOffer(
      transferID: bad, sessionID: good, fromPeerID: good, fromDisplayName: "M", toPeerID: good, name: "x",
      contentType: "text/plain", size: 1, resume: false)
    #expect(WireIDs.check(.transferOffer(offer))?.field == "transferOffer.transferID")
    #expect(WireIDs.check(.transferChunk(transferID: bad, offset: 0, bytes: [])) != nil)
    #expect(WireIDs.check(.streamData(streamID: bad, offset: 0, bytes: [])) != nil)
    #expect(WireIDs.check(.sessionLeave(sessionID: good, peerID: bad)) != nil)
    #expect(WireIDs.check(.peerRemoved(peerID: bad)) != nil)
    #expect(WireIDs.check(.nodeDirectory([NodeAddress(nodeID: bad, host: "h", port: 1)])) != nil)
    #expect(WireIDs.check(.hello(NodeHello(nodeID: bad, name: "M", softwareVersion: "1", port: 1))) != nil)
    let description = SessionDescription(
      sessionID: good, hostNodeID: good, creatorPeerID: good, strategy: .cluster, encryption: .none, maxPeers: 2,
      revision: 1, members: [SessionMember(peerID: good, displayName: "M", nodeID: bad, state: .connected)])
    #expect(WireIDs.check(.sessionState(description))?.field == "sessionState.member.nodeID")
    #expect(
      WireIDs.check(.sessionData(sessionID: good, fromPeerID: good, toPeerIDs: [good], sequence: 0, payload: [])) == nil
    )
    #expect(WireIDs.check(.chat(payload: [])) == nil)
    #expect(WireIDs.check(.unknownRoom(roomID: "../x")) != nil)
    #expect(WireIDs.check(ChatWire.unknownRoom(roomID: "9f3a0c1d2e4b5a6f")) == nil)
  }

  /// A group offer's copy id and its recipients' transfer ids name different transfers: one id used twice would make
  /// the copy and a recipient's transfer the same record, which never finishes.
  @Test func aGroupOfferReusingATransferIDIsInvalid() {
    func id(_ n: Int) -> String {
      let digits = String(n)
      return "0f8fad5b-d9cb-469f-a165-" + String(repeating: "0", count: 12 - digits.count) + digits
    }
    func offer(copy: String, recipients: [String]) -> MeshMessage {
      .transferGroupOffer(
        TransferGroupOffer(
          copyID: copy, groupID: id(90), sessionID: id(91), fromPeerID: id(92), fromDisplayName: "M", name: "x",
          contentType: "text/plain", size: 1, resume: false,
          recipients: recipients.enumerated().map { TransferGroupRecipient(transferID: $1, peerID: id(100 + $0)) }))
    }
    #expect(WireIDs.check(offer(copy: id(1), recipients: [id(2), id(3)])) == nil)
    #expect(WireIDs.check(offer(copy: id(1), recipients: [id(1)]))?.field == "transferGroupOffer.recipients.transferID")
    #expect(
      WireIDs.check(offer(copy: id(1), recipients: [id(2), id(2)]))?.field == "transferGroupOffer.recipients.transferID"
    )
  }
}

@Suite struct ChatTrustTests {
  @Test func aRosterNamingALocalPeerThatDidNotJoinIsStrippedAndTheHostCannotMove() throws {
    var book = ChatBook(nodeID: "B")
    let host = Directory.PeerRef(peerID: "m1", displayName: "M1", nodeID: "M")
    let b1 = Directory.PeerRef(peerID: "b1", displayName: "B1", nodeID: "B")
    let b2 = Directory.PeerRef(peerID: "b2", displayName: "B2", nodeID: "B")
    _ = book.nodeLinked("M")
    _ = try book.join("r", peer: b1, name: "room", host: host, now: "t")
    _ = book.received(.roster(roomID: "r", name: "room", host: host, members: [host, b1, b2], ended: false), from: "M")
    #expect(book.rooms["r"]?.members.map(\.peerID) == ["m1", "b1"])
    #expect(book.refusals["not_agreed"] == 1)
    let moved = Directory.PeerRef(peerID: "b1", displayName: "B1", nodeID: "B")
    _ = book.received(.roster(roomID: "r", name: "room", host: moved, members: [b1], ended: false), from: "M")
    #expect(book.rooms["r"]?.host.nodeID == "M")
    #expect(book.refusals["not_host"] == 1)
  }
}
