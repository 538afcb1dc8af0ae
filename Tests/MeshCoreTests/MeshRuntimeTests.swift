import Testing

@testable import MeshCore

// MARK: - Helpers

/// A runtime that writes down every verb it is asked to carry out, in order.
private final class RecordingRuntime: MeshRuntime {
  var log: [String] = []
  /// Run by ``connect(_:host:port:)`` (a runtime whose dial fails at once reports it and interprets again).
  var onConnect: ((RecordingRuntime) -> Void)?

  func connect(_ id: LinkManager.ConnectionID, host: String, port: UInt16) {
    log.append("connect \(id)")
    onConnect?(self)
  }
  func send(_ message: MeshMessage, on id: LinkManager.ConnectionID) { log.append("send \(id)") }
  func broadcast(_ message: MeshMessage, on ids: [LinkManager.ConnectionID]) { log.append("broadcast \(ids)") }
  func sendToNode(_ message: MeshMessage, nodeID: String, on id: LinkManager.ConnectionID?) {
    log.append("sendToNode \(nodeID) \(id.map(String.init) ?? "unlinked")")
  }
  func close(_ id: LinkManager.ConnectionID, reason: String) { log.append("close \(id)") }
  func drop(_ id: LinkManager.ConnectionID, reason: String) { log.append("drop \(id)") }
  func pin(nodeID: String, fingerprint: String) { log.append("pin \(nodeID)") }
  func refused(_ refusal: LinkManager.Refusal) { log.append("refused \(refusal.code)") }
  func frameRefused(_ refusal: FrameRefusal) { log.append("frameRefused \(refusal.reason)") }
  func linkUp(_ hello: NodeHello, security: SessionBook.LinkSecurity) { log.append("linkUp \(hello.nodeID)") }
  func linkReplaced(nodeID: String, security: SessionBook.LinkSecurity) { log.append("linkReplaced \(nodeID)") }
  func linkDown(nodeID: String) { log.append("linkDown \(nodeID)") }
  func chat(_ effect: MeshEffect) {
    switch effect {
    case .chatStore(let writes): log.append("chatStore \(writes.count)")
    case .chatSend(_, let to): log.append("chatSend \(to)")
    case .chatHistory(_, let to, _): log.append("chatHistory \(to)")
    case .chatEvent(let peerID, _, _): log.append("chatEvent → \(peerID)")
    case .chatJoinSettled(_, let peerID, let joined): log.append("chatJoinSettled \(peerID) \(joined)")
    default: log.append("chat ?")
    }
  }
  func chatFrameMalformed(nodeID: String, detail: String) { log.append("chatFrameMalformed \(nodeID)") }
  func payload(_ effect: PayloadEffect) { log.append("payload") }
  func directoryEvent(peerID: String, _ event: Directory.Event) {
    switch event {
    case .peerFound(let peer, _, _): log.append("found \(peer.peerID) → \(peerID)")
    case .peerLost(let peer, _): log.append("lost \(peer.peerID) → \(peerID)")
    case .peerPresent(let peer): log.append("present \(peer.peerID) → \(peerID)")
    case .peerAbsent(let peer): log.append("absent \(peer.peerID) → \(peerID)")
    }
  }
  func sessionEvent(peerID: String, _ event: SessionBook.Event) {
    switch event {
    case .invitationReceived(let invitation): log.append("invited \(invitation.id) → \(peerID)")
    case .invitationEnded(let invitation): log.append("ended \(invitation.id) → \(peerID)")
    default: log.append("session → \(peerID)")
    }
  }
  func flush() { log.append("flush") }
  func directoryChanged() { log.append("directoryChanged") }
  func invitationReceived(_ invitation: SessionBook.Invitation) { log.append("follow-up invited \(invitation.id)") }
  func invitationEnded(_ invitation: SessionBook.Invitation) { log.append("follow-up ended \(invitation.id)") }
}

private let hello = NodeHello(nodeID: "B", name: "node B", softwareVersion: "test", port: 1)
private let heartbeat = MeshMessage.heartbeat(sequence: 1, sentAtMillis: 0)

private func found(_ peerID: String, to listener: String) -> MeshEffect {
  .directoryEvent(
    peerID: listener,
    .peerFound(
      Directory.PeerRef(peerID: peerID, displayName: peerID, nodeID: "B"), serviceType: "chat", discoveryInfo: [:]))
}

private func lost(_ peerID: String, to listener: String) -> MeshEffect {
  .directoryEvent(
    peerID: listener,
    .peerLost(Directory.PeerRef(peerID: peerID, displayName: peerID, nodeID: "B"), serviceType: "chat"))
}

private func data(to peerID: String) -> MeshEffect {
  .sessionEvent(peerID: peerID, .data(sessionID: "s", from: "x", payload: [1], reliable: true))
}

/// An invitation from `from` (on node A) to `to` (on node B).
private func invitation(_ id: String, from: String = "alice", to: String = "bob") -> SessionBook.Invitation {
  let session = SessionDescription(
    sessionID: "s", hostNodeID: "A", creatorPeerID: from, strategy: .cluster, encryption: .none, maxPeers: 8,
    revision: 1, members: [])
  return SessionBook.Invitation(
    offer: InvitationOffer(
      invitationID: id, session: session, fromPeerID: from, fromDisplayName: from, toPeerID: to, context: [],
      timeoutMillis: 30_000, verificationCode: "0000"),
    fromNodeID: "A", toNodeID: "B", toDisplayName: to, state: .pending, expiresAt: 30_000, createdAt: 0)
}

// MARK: - Tests

@Suite struct MeshRuntimeTests {
  @Test func carriesOutEveryEffectInOrder() {
    let runtime = RecordingRuntime()
    let refusal = FrameRefusal(reason: "invalid_id", detail: "bad", nodeID: "B", message: heartbeat, answer: nil)
    runtime.interpret([
      .send(heartbeat, on: 1), .broadcast(heartbeat, on: [1, 2]), .sendToNode(heartbeat, nodeID: "B", on: 2),
      .sendToNode(heartbeat, nodeID: "C", on: nil), .pin(nodeID: "B", fingerprint: "ab"), .frameRefused(refusal),
      .close(1, reason: "bye"), .drop(2, reason: "bad"),
    ])
    #expect(
      runtime.log == [
        "send 1", "broadcast [1, 2]", "sendToNode B 2", "sendToNode C unlinked", "pin B", "frameRefused invalid_id",
        "close 1", "drop 2", "flush",
      ])
  }

  @Test func publishesWhatPeersWereToldBeforeALinkChanges() {
    let runtime = RecordingRuntime()
    runtime.interpret([
      found("p1", to: "me"), .send(heartbeat, on: 1), .linkUp(hello, security: .plaintext), data(to: "me"),
      .linkReplaced(nodeID: "B", security: .plaintext), lost("p1", to: "me"), .linkDown(nodeID: "B"),
      data(to: "you"),
    ])
    #expect(
      runtime.log == [
        "found p1 → me", "send 1", "flush", "linkUp B", "session → me", "flush", "linkReplaced B", "lost p1 → me",
        "flush", "linkDown B", "session → you", "flush", "directoryChanged",
      ])
  }

  @Test func flushesBeforeADialARefusedLinkAndAPayloadDecision() {
    let runtime = RecordingRuntime()
    let refusal = LinkManager.Refusal(
      code: "mesh_secret_mismatch", message: "m", nodeID: "B", name: nil, pinnedFingerprint: nil,
      presentedFingerprint: nil)
    runtime.interpret([
      data(to: "me"), .connect(3, host: "h", port: 1), data(to: "me"), .refused(refusal), data(to: "me"),
      .payload(.send(.chat(payload: [1]), to: "B")),
    ])
    #expect(
      runtime.log == [
        "session → me", "flush", "connect 3", "session → me", "flush", "refused mesh_secret_mismatch",
        "session → me", "flush", "payload", "flush",
      ])
  }

  @Test func chatBatchesAreOrdinaryEffectsCarriedOutInOrderWritesFirst() throws {
    // A room hosted on A, joined by a second local peer: the join's batch opens with its writes, then tells every
    // local member and settles the join, each effect handed to the runtime's chat verb in order (no flush between).
    var node = MeshNode(
      links: LinkManager(local: NodeHello(nodeID: "A", name: "node A", softwareVersion: "test", port: 1)),
      directory: Directory(nodeID: "A"), sessions: SessionBook(nodeID: "A"), checksWireIDs: false)
    let host = Directory.PeerRef(peerID: "a1", displayName: "A1", nodeID: "A")
    let joiner = Directory.PeerRef(peerID: "a2", displayName: "A2", nodeID: "A")
    let hosted = node.hostChat("room1", name: "Room", by: host, now: "t0")
    guard case .chatStore(let writes)? = hosted.first else {
      Issue.record("a chat batch opens with its writes: \(hosted)")
      return
    }
    #expect(writes == [.room(try #require(node.chat.rooms["room1"]))])
    let runtime = RecordingRuntime()
    runtime.interpret(try node.joinChat("room1", peer: joiner, name: nil, host: nil, now: "t1"))
    #expect(
      runtime.log == [
        "chatStore 1", "chatEvent → a1", "chatEvent → a2", "chatJoinSettled a2 true", "flush",
      ])
  }

  @Test func followUpsComeLastOnceEverythingIsPublished() {
    let runtime = RecordingRuntime()
    runtime.interpret([
      .sessionEvent(peerID: "bob", .invitationReceived(invitation("i1"))), found("p1", to: "me"),
      // The end of an invitation told to its invitee is no follow-up; told to its inviter it is.
      .sessionEvent(peerID: "bob", .invitationEnded(invitation("i2"))),
      .sessionEvent(peerID: "alice", .invitationEnded(invitation("i2"))), found("p2", to: "me"),
      .sessionEvent(peerID: "bob", .invitationReceived(invitation("i3"))),
    ])
    #expect(
      runtime.log == [
        "invited i1 → bob", "found p1 → me", "ended i2 → bob", "ended i2 → alice", "found p2 → me", "invited i3 → bob",
        "flush", "directoryChanged", "follow-up invited i1", "follow-up invited i3", "follow-up ended i2",
      ])
  }

  @Test func anEffectInterpretedFromAVerbRunsAfterWhatWasToldBefore() {
    // A dial that fails at once is reported to the mesh node, whose effects are interpreted inside `connect`.
    let runtime = RecordingRuntime()
    runtime.onConnect = { runtime in
      runtime.onConnect = nil
      runtime.interpret([lost("p1", to: "me")])
    }
    runtime.interpret([found("p1", to: "me"), .connect(3, host: "h", port: 1), .send(heartbeat, on: 1)])
    #expect(
      runtime.log == [
        "found p1 → me", "flush", "connect 3", "lost p1 → me", "flush", "directoryChanged", "send 1", "flush",
        "directoryChanged",
      ])
  }

  @Test func aMeshNodeLinkingIsCarriedOutDirectoryFirstThenTheLink() {
    // The real wiring: node A hosts a browser; node B's hello links them. A's directory snapshot goes out and the
    // link-up follows, after a flush.
    var node = MeshNode(
      links: LinkManager(local: NodeHello(nodeID: "A", name: "node A", softwareVersion: "test", port: 1)),
      directory: Directory(nodeID: "A"), sessions: SessionBook(nodeID: "A"), checksWireIDs: false)
    let runtime = RecordingRuntime()
    runtime.interpret(node.handle(.localPeerAdded(peerID: "a1", displayName: "a1")))
    runtime.interpret(node.handle(.inboundOpened(1, remoteHost: "B", transport: .plaintext, now: 1000)))
    runtime.log = []
    runtime.interpret(node.handle(.frameReceived(.hello(hello), on: 1, now: 1000)))
    let linkUp = runtime.log.firstIndex(of: "linkUp B")
    #expect(linkUp != nil)
    #expect(runtime.log.prefix(while: { $0 != "linkUp B" }).contains("send 1"))
    #expect(linkUp.map { runtime.log[$0 - 1] } == "flush")
  }
}
