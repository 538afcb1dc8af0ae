/// One mesh node's pure state: its links (``LinkManager``), what it knows of every peer (``Directory``), its
/// sessions and invitations (``SessionBook``) and its chat rooms (``ChatBook``), wired together once for every
/// runtime.
///
/// A sans-I/O composite in the style of SWIM's `SWIM.Instance`: the runtime reports what happened as a
/// ``MeshInput`` (``handle(_:)``) or calls a session command, and carries out the ``MeshEffect``s returned, in
/// order. The gateway's `Node` turns them into WebSocket writes and events; the simulator into simulated network
/// traffic and event logs. Both share everything decided here:
/// - **Fan-out.** A link coming up tells the directory (which sends its snapshot), the session book (fresh
///   sequence numbers, replicas back) and, over TLS, the chat book (rooms re-sync), then reports
///   ``MeshEffect/linkUp(_:security:)``; a replaced link re-sends the snapshot, fails unacknowledged data and re-syncs
///   chat (``MeshEffect/linkReplaced(nodeID:security:)``); a link going down loses the node's peers and members
///   (``MeshEffect/linkDown(nodeID:)``). A deleted local peer leaves the directory, then its sessions, then its chat
///   rooms.
/// - **Routing.** Directory frames go to the directory, chat frames to the chat book (`MeshNode+Chat.swift`, with its
///   own checks), transfer and stream frames to the payload book (`MeshNode+Payloads.swift`, effects
///   ``MeshEffect/payload(_:)``), every other frame to the session book; directory and session frames are addressed to the link connection of their node.
/// - **The frame guard** (docs/security.md, "What a linked node may do"). With ``checksWireIDs``, a frame whose ids
///   are malformed (``WireIDs``) is refused before anything sees it (reason `invalid_id`; a `hello` with one also
///   drops its connection). A frame delivered by a linked node must speak only for the peers that node hosts in this
///   node's directory, and must not name a local peer as hosted elsewhere (`not_own_peer`); an invitation must be for
///   a local peer (`unknown_peer`). Refused frames come back as ``MeshEffect/frameRefused(_:)``.
/// - **Local peers only.** Session events are reported only for peers hosted here (a data frame may name peers
///   that live on other nodes).
/// - **Link security.** The session book learns how each link is carried from the link manager's transport.
public struct MeshNode: Sendable {
  /// The links (read-only: change them through ``handle(_:)``).
  public private(set) var links: LinkManager
  /// The directory (read-only: change it through ``handle(_:)``).
  public private(set) var directory: Directory
  /// Sessions and invitations (read-only: change them through ``handle(_:)`` and the session commands).
  public private(set) var sessions: SessionBook
  /// Chat rooms (read-only: change them through ``handle(_:)`` and the chat commands, `MeshNode+Chat.swift`).
  public internal(set) var chat: ChatBook
  /// Transfers and streams (``PayloadBook``): payload frames are routed into it (`MeshNode+Payloads.swift`); the
  /// runtime drives it with the book's own commands (pump, written, verified …) and carries out its effects.
  public var payloads: PayloadBook
  /// Whether every frame's ids are checked with ``WireIDs/check(_:)`` before anything sees it: yes for the node
  /// runtime; the simulator and unit tests use short ids.
  public var checksWireIDs: Bool

  /// `chat`: the chat book as restored from the store (nil: no rooms yet); `holdsOffers`: transfer offers wait until
  /// the runtime restored its transfers (``payloadRecordsRestored()``).
  public init(
    links: LinkManager, directory: Directory, sessions: SessionBook, chat: ChatBook? = nil, checksWireIDs: Bool = true,
    holdsOffers: Bool = false
  ) {
    self.links = links
    self.directory = directory
    self.sessions = sessions
    self.chat = chat ?? ChatBook(nodeID: directory.nodeID)
    self.payloads = PayloadBook(nodeID: directory.nodeID, holdsOffers: holdsOffers)
    self.checksWireIDs = checksWireIDs
  }

  /// This node's id.
  public var nodeID: String { directory.nodeID }

  /// How the link to `nodeID` is carried, as the session book needs it (plaintext when not linked).
  public func linkSecurity(of nodeID: String) -> SessionBook.LinkSecurity {
    guard let transport = links.transport(of: nodeID) else { return .plaintext }
    return SessionBook.LinkSecurity(
      encrypted: transport.encrypted, localFingerprint: transport.localFingerprint ?? "",
      remoteFingerprint: transport.remoteFingerprint ?? "")
  }

  // MARK: - Inputs

  /// Something happened; returns what the runtime must do, in order.
  public mutating func handle(_ input: MeshInput) -> [MeshEffect] {
    var effects: [MeshEffect] = []
    switch input {
    case .tick(let now):
      absorb(links.tick(now: now), now: now, into: &effects)
      absorb(sessions.tick(now: now), into: &effects)
    case .discovered(let nodeID, let host, let port, let source, let now):
      absorb(
        links.discovered(nodeID: nodeID, host: host, port: port, source: source, now: now), now: now, into: &effects)
    case .seedAdded(let host, let port, let now):
      absorb(links.addSeed(host: host, port: port, now: now), now: now, into: &effects)
    case .inboundOpened(let id, let remoteHost, let transport, let now):
      absorb(links.inboundOpened(id, remoteHost: remoteHost, transport: transport, now: now), now: now, into: &effects)
    case .outboundOpened(let id, let transport, let now):
      absorb(links.outboundOpened(id, transport: transport, now: now), now: now, into: &effects)
    case .outboundFailed(let id, let now):
      absorb(links.outboundFailed(id, now: now), now: now, into: &effects)
    case .closed(let id, let now):
      absorb(links.closed(id, now: now), now: now, into: &effects)
    case .bytesReceived(let id, let now):
      links.heard(on: id, now: now)
    case .frameReceived(let message, let id, let now):
      if checksWireIDs, let problem = WireIDs.check(message) {
        // A node that cannot even name itself properly never links.
        let nodeID = links.nodeID(on: id)
        effects.append(
          .frameRefused(
            FrameRefusal(
              reason: "invalid_id", detail: problem.description, nodeID: nodeID, message: message,
              answer: nodeID == nil ? nil : problem.description)))
        if case .hello = message { effects.append(.drop(id, reason: "malformed node id")) }
        return effects
      }
      absorb(links.received(message, on: id, now: now), now: now, into: &effects)
    case .localPeerAdded(let peerID, let displayName):
      absorb(directory.addLocalPeer(peerID, displayName: displayName), into: &effects)
    case .localPeerRenamed(let peerID, let displayName):
      absorb(directory.renameLocalPeer(peerID, displayName: displayName), into: &effects)
    case .localPeerRemoved(let peerID, let now):
      absorb(directory.removeLocalPeer(peerID), into: &effects)
      absorb(sessions.peerRemoved(peerID, now: now), into: &effects)
      chatPeerRemoved(peerID, into: &effects)
    case .advertisingStarted(let peerID, let serviceType, let discoveryInfo):
      absorb(
        directory.startAdvertising(peerID, serviceType: serviceType, discoveryInfo: discoveryInfo), into: &effects)
    case .advertisingStopped(let peerID, let serviceType):
      absorb(directory.stopAdvertising(peerID, serviceType: serviceType), into: &effects)
    case .browsingStarted(let peerID, let serviceType):
      absorb(directory.startBrowsing(peerID, serviceType: serviceType), into: &effects)
    case .browsingStopped(let peerID, let serviceType):
      absorb(directory.stopBrowsing(peerID, serviceType: serviceType), into: &effects)
    case .presenceWatchStarted(let peerID):
      absorb(directory.startWatchingPresence(peerID), into: &effects)
    case .presenceWatchStopped(let peerID):
      absorb(directory.stopWatchingPresence(peerID), into: &effects)
    }
    return effects
  }

  // MARK: - Session commands

  /// `POST /sessions`: a session hosted here with `creator` (a local peer) as its first, connected member.
  public mutating func createSession(
    _ sessionID: String, creator: SessionMember, strategy: SessionStrategy, encryption: SessionEncryption,
    maxPeers: UInt16
  ) -> SessionDescription {
    sessions.createSession(sessionID, creator: creator, strategy: strategy, encryption: encryption, maxPeers: maxPeers)
  }

  /// `POST /invitations`: local peer `fromPeerID` invites `to` into `sessionID`.
  public mutating func invite(
    _ invitationID: String, from fromPeerID: String, to: SessionMember, sessionID: String, context: [UInt8],
    timeoutMillis: UInt32, now: UInt64
  ) throws(MeshFailure) -> (SessionBook.Invitation, [MeshEffect]) {
    let (invitation, directives) = try sessions.invite(
      invitationID, from: fromPeerID, to: to, sessionID: sessionID, context: context, timeoutMillis: timeoutMillis,
      now: now)
    var effects: [MeshEffect] = []
    absorb(directives, into: &effects)
    return (invitation, effects)
  }

  /// `POST /invitations/{id}/accept` or `…/decline` by the invitee.
  public mutating func answer(_ invitationID: String, by peerID: String, accept: Bool, now: UInt64)
    throws(MeshFailure) -> [MeshEffect]
  {
    try command { (sessions: inout SessionBook) throws(MeshFailure) in
      try sessions.answer(invitationID, by: peerID, accept: accept, now: now)
    }
  }

  /// `DELETE /invitations/{id}` by the inviter.
  public mutating func cancel(_ invitationID: String, by peerID: String) throws(MeshFailure) -> [MeshEffect] {
    try command { (sessions: inout SessionBook) throws(MeshFailure) in
      try sessions.cancel(invitationID, by: peerID)
    }
  }

  /// `DELETE /sessions/{id}/members/me`.
  public mutating func leave(_ sessionID: String, peerID: String) throws(MeshFailure) -> [MeshEffect] {
    try command { (sessions: inout SessionBook) throws(MeshFailure) in
      try sessions.leave(sessionID, peerID: peerID)
    }
  }

  /// `POST /sessions/{id}/data` (or, with `namedEvent`, `…/events`): `fromPeerID` sends to `toPeerIDs` (nil: every
  /// connected member but itself). Returns the effects and the peers whose node is not linked now.
  public mutating func send(
    _ sessionID: String, from fromPeerID: String, to toPeerIDs: [String]?, payload: [UInt8], reliable: Bool,
    namedEvent: String? = nil
  ) throws(MeshFailure) -> (effects: [MeshEffect], undelivered: [String]) {
    let linked = links.linkedNodeIDSet
    let result = try sessions.send(
      sessionID, from: fromPeerID, to: toPeerIDs, payload: payload, reliable: reliable, namedEvent: namedEvent,
      linkedNodes: linked)
    var effects: [MeshEffect] = []
    absorb(result.directives, into: &effects)
    return (effects, result.undelivered)
  }

  /// The peers a send's effects address (frames' targets and local peers told), as `POST /sessions/{id}/data`
  /// counts them.
  public static func addressed(by effects: [MeshEffect]) -> [String] {
    var addressed: [String] = []
    for effect in effects {
      switch effect {
      case .sendToNode(.sessionData(_, _, let to, _, _), _, _), .sendToNode(.sessionEvent(_, _, let to, _, _, _), _, _):
        addressed.append(contentsOf: to)
      case .sessionEvent(let to, .data), .sessionEvent(let to, .namedEvent):
        addressed.append(to)
      case .sessionEvents(let to, .data), .sessionEvents(let to, .namedEvent):
        addressed.append(contentsOf: to)
      default:
        break
      }
    }
    return addressed
  }

  /// Numbers a deferred reliable frame as it goes on the wire to `nodeID` (``SessionBook/sequenceReliable(_:to:)``).
  public mutating func sequenceReliable(_ message: MeshMessage, to nodeID: String) -> MeshMessage {
    sessions.sequenceReliable(message, to: nodeID)
  }

  /// Reliable frames accepted but never written (their connection went away): their senders are told.
  public func unsent(_ messages: [MeshMessage], reason: String) -> [MeshEffect] {
    var effects: [MeshEffect] = []
    absorb(sessions.unsent(messages, reason: reason), into: &effects)
    return effects
  }

  /// `DELETE /api/v1/mesh/pins/{nodeId}`: whether a pin was removed.
  public mutating func unpin(_ nodeID: String) -> Bool { links.unpin(nodeID) }

  // MARK: - Transceive

  /// Leaders make sure every transceiver they see is a member or has a pending invitation (``TransceiveBook``).
  public mutating func reconcile(_ book: inout TransceiveBook, now: UInt64, newID: () -> String) -> [MeshEffect] {
    let linked = links.linkedNodeIDSet
    var effects: [MeshEffect] = []
    absorb(
      book.reconcile(directory: directory, sessions: &sessions, linkedNodes: linked, now: now, newID: newID),
      into: &effects)
    return effects
  }

  /// A local transceiver accepts a transceive invitation at once.
  public mutating func transceiverInvited(_ invitation: SessionBook.Invitation, book: inout TransceiveBook, now: UInt64)
    -> [MeshEffect]
  {
    var effects: [MeshEffect] = []
    absorb(book.invitationReceived(invitation, directory: directory, sessions: &sessions, now: now), into: &effects)
    return effects
  }

  // MARK: - Wiring

  mutating func command(_ body: (inout SessionBook) throws(MeshFailure) -> [SessionBook.Directive])
    throws(MeshFailure) -> [MeshEffect]
  {
    var effects: [MeshEffect] = []
    absorb(try body(&sessions), into: &effects)
    return effects
  }

  mutating func absorb(_ actions: [LinkManager.Action], now: UInt64, into effects: inout [MeshEffect]) {
    for action in actions {
      switch action {
      case .connect(let id, let host, let port):
        effects.append(.connect(id, host: host, port: port))
      case .send(let id, let message):
        effects.append(.send(message, on: id))
      case .close(let id, let reason):
        effects.append(.close(id, reason: reason))
      case .pin(let nodeID, let fingerprint):
        effects.append(.pin(nodeID: nodeID, fingerprint: fingerprint))
      case .refused(let refusal):
        effects.append(.refused(refusal))
      case .linkUp(let hello):
        let security = linkSecurity(of: hello.nodeID)
        absorb(directory.nodeLinked(hello.nodeID), into: &effects)
        absorb(sessions.nodeLinked(hello.nodeID, security: security), into: &effects)
        chatNodeLinked(hello.nodeID, into: &effects)
        effects.append(.linkUp(hello, security: security))
      case .linkReplaced(let nodeID):
        // Frames sent on the replaced connection may be lost: the directory re-sends its snapshot, unacknowledged
        // reliable data fails, hosted sessions are re-sent and chat re-syncs.
        let security = linkSecurity(of: nodeID)
        absorb(directory.nodeLinked(nodeID), into: &effects)
        absorb(sessions.linkReplaced(nodeID, security: security), into: &effects)
        chatNodeUnlinked(nodeID)
        chatNodeLinked(nodeID, into: &effects)
        effects.append(.linkReplaced(nodeID: nodeID, security: security))
      case .linkDown(let nodeID):
        absorb(directory.nodeUnlinked(nodeID), into: &effects)
        absorb(sessions.nodeUnlinked(nodeID), into: &effects)
        chatNodeUnlinked(nodeID)
        effects.append(.linkDown(nodeID: nodeID))
      case .deliver(let message, let nodeID):
        if let refusal = refusal(of: message, from: nodeID) {
          effects.append(.frameRefused(refusal))
          continue
        }
        switch message {
        case .peerSnapshot, .peerUpdated, .peerRemoved:
          absorb(directory.received(message, from: nodeID), into: &effects)
        case .chat(let payload):
          chatReceived(payload, from: nodeID, into: &effects)
        case .transferOffer, .transferAccept, .transferReject, .transferChunk, .transferCredit, .transferEnd,
          .transferFinished, .transferFailed, .transferCancel, .transferAwaitingConsent, .streamOpen, .streamData,
          .streamCredit, .streamClose, .transferGroupOffer:
          payloadReceived(message, from: nodeID, into: &effects)
        default:
          absorb(sessions.received(message, from: nodeID, now: now), into: &effects)
        }
      }
    }
  }

  func absorb(_ directives: [Directory.Directive], into effects: inout [MeshEffect]) {
    for directive in directives {
      switch directive {
      case .broadcast(let message):
        let connections = links.linkedNodeIDs.compactMap { links.connection(of: $0) }
        if !connections.isEmpty { effects.append(.broadcast(message, on: connections)) }
      case .send(let message, let nodeID):
        if let id = links.connection(of: nodeID) { effects.append(.send(message, on: id)) }
      case .notify(let peerID, let event):
        effects.append(.directoryEvent(peerID: peerID, event))
      }
    }
  }

  func absorb(_ directives: [SessionBook.Directive], into effects: inout [MeshEffect]) {
    for directive in directives {
      switch directive {
      case .send(let message, let nodeID):
        effects.append(.sendToNode(message, nodeID: nodeID, on: links.connection(of: nodeID)))
      case .notify(let peerID, let event):
        // Only the peers hosted here are told (a data frame may name peers that live elsewhere).
        guard directory.isLocal(peerID) else { continue }
        effects.append(.sessionEvent(peerID: peerID, event))
      case .notifyEach(let peerIDs, let event):
        let local = peerIDs.allSatisfy(directory.isLocal) ? peerIDs : peerIDs.filter(directory.isLocal)
        if !local.isEmpty { effects.append(.sessionEvents(peerIDs: local, event)) }
      }
    }
  }

  // MARK: - Frame guard

  /// Why a frame delivered by linked node `nodeID` must not be acted on, or nil when it may.
  func refusal(of message: MeshMessage, from nodeID: String) -> FrameRefusal? {
    let answer = "the sending node does not host the sending peer"
    func spoof(_ detail: String, sender: Bool = false) -> FrameRefusal {
      FrameRefusal(
        reason: "not_own_peer", detail: detail, nodeID: nodeID, message: message, answer: answer, spoofedSender: sender)
    }
    var senders: [String] = []
    var members: [SessionMember] = []
    switch message {
    case .sessionData(_, let fromPeerID, _, _, _), .sessionEvent(_, let fromPeerID, _, _, _, _):
      senders = [fromPeerID]
    case .invite(let offer):
      senders = [offer.fromPeerID]
      members = offer.session.members
    case .transferOffer(let offer):
      senders = [offer.fromPeerID]
    case .transferGroupOffer(let offer):
      senders = [offer.fromPeerID]
    case .streamOpen(let offer):
      senders = [offer.fromPeerID]
    case .sessionState(let description):
      members = description.members
    case .sessionJoin(_, let member):
      members = [member]
    case .peerSnapshot(let announcements):
      if let local = announcements.first(where: { directory.isLocal($0.peerID) }) {
        return spoof("a peer snapshot claims local peer \(local.peerID)")
      }
    case .peerUpdated(let announcement):
      if directory.isLocal(announcement.peerID) {
        return spoof("a peer update claims local peer \(announcement.peerID)")
      }
    default:
      return nil
    }
    for sender in senders where directory.peer(sender)?.nodeID != nodeID {
      return spoof("the sending peer \(sender) is not a peer of the sending node", sender: true)
    }
    for member in members where directory.isLocal(member.peerID) && member.nodeID != self.nodeID {
      return spoof("local peer \(member.peerID) named as a peer of node \(member.nodeID)")
    }
    if case .invite(let offer) = message, !directory.isLocal(offer.toPeerID) {
      return FrameRefusal(
        reason: "unknown_peer", detail: "an invitation for \(offer.toPeerID), which is not a peer of this node",
        nodeID: nodeID, message: message, answer: answer)
    }
    return nil
  }
}
