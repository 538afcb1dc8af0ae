import Crypto

/// Sessions and invitations across the mesh: MCSession + `invitePeer(_:to:withContext:timeout:)` as a sans-I/O
/// state machine.
///
/// Authority is split so every decision has exactly one owner:
/// - The session's **host node** (where it was created) owns membership. Joins and leaves go to it; it bumps a
///   revision and sends ``SessionDescription``s to every node with a member, which replace their replicas and tell
///   their local members about state changes (`session.peer.state`).
/// - The **inviter's node** owns an invitation's expiry (timeout plus a grace period for answers in flight) and
///   cancellation; the **invitee's node** owns accept/decline within its own timeout window. A late accept is
///   refused locally (``MeshFailure/invitationClosed(_:answering:)``); an answer that reaches the inviter's node after it closed the invitation is ignored
///   and the invitee's node is told the final outcome.
/// - Data and named events go from the sender's node straight to the target peers' nodes, one frame per node
///   (fan-out per node, not per peer). Reliable frames carry a per-link sequence number and are acknowledged
///   cumulatively; when a link goes down with unacknowledged frames the sender is told which peers did not get
///   them (`session.send.failed`). Frames on one link are ordered (a WebSocket over TCP), so delivery is once and
///   in order per sender per receiver, or a failure event.
///
/// Strategies: `pointToPoint` holds exactly two peers; in `star` only the hub (the creator) invites and spokes
/// send only to the hub; `cluster` is everyone to everyone. `maxPeers` caps members plus pending invitations.
///
/// Encryption (DESIGN.md): the runtime tells the book how each link is carried (``LinkSecurity``, with
/// ``nodeLinked(_:security:)``). A `required` session never crosses a plaintext link: inviting a peer behind one is
/// refused (``MeshFailure/encryptionUnavailable(displayName:)``), and reliable data for such a peer fails (`session.send.failed`). Verification codes
/// are computed on each node from its own view of the link (both certificate fingerprints) and the invitation, so a
/// relay in the middle, which must present its own certificates to both sides, makes the two codes differ.
public struct SessionBook: Sendable {
  /// How the link to a node is carried, as this node sees it.
  public struct LinkSecurity: Sendable, Hashable {
    /// The link runs over TLS.
    public var encrypted: Bool
    /// The fingerprint of the certificate this node presented on the link ("" on plaintext).
    public var localFingerprint: String
    /// The fingerprint of the certificate the other node presented ("" on plaintext).
    public var remoteFingerprint: String

    /// A plaintext link (no certificates).
    public static let plaintext = LinkSecurity(encrypted: false, localFingerprint: "", remoteFingerprint: "")
  }

  /// An invitation as one node knows it.
  public struct Invitation: Sendable, Hashable {
    public var offer: InvitationOffer
    public var fromNodeID: String
    public var toNodeID: String
    public var toDisplayName: String
    public var state: InvitationState
    /// On this node's clock.
    public var expiresAt: UInt64
    public var createdAt: UInt64

    public var id: String { offer.invitationID }
  }

  /// An invitation's lifecycle.
  public enum InvitationState: String, Sendable, Hashable, CaseIterable {
    case pending, accepted, declined, expired, canceled
  }

  /// What local peers are told.
  public enum Event: Sendable, Hashable {
    /// `invitation.received` (to the invitee).
    case invitationReceived(Invitation)
    /// `invitation.accepted|declined|expired|canceled` (to the inviter and the invitee).
    case invitationEnded(Invitation)
    /// `session.peer.state`: `member` changed state in `sessionID`.
    case memberState(sessionID: String, member: SessionMember)
    /// `session.data`.
    case data(sessionID: String, from: String, payload: [UInt8], reliable: Bool)
    /// `session.event` (PeerKit named event).
    case namedEvent(sessionID: String, from: String, name: String, object: [UInt8])
    /// `session.send.failed`: reliable data from this peer did not reach `undelivered`.
    case sendFailed(sessionID: String, undelivered: [String], reason: String)
  }

  /// An output.
  public enum Directive: Sendable, Hashable {
    case send(MeshMessage, to: String)
    case notify(peerID: String, Event)
    /// The same event for each of these local peers, in this order (session data or a named event fanned out): one
    /// directive, not one per recipient.
    case notifyEach(peerIDs: [String], Event)
  }

  struct Pending: Sendable {
    var sequence: UInt64
    var sessionID: String
    var fromPeerID: String
    var toPeerIDs: [String]
  }

  /// How long closed invitations are kept after they would have expired.
  public static let closedInvitationRetention: UInt64 = 10 * 60 * 1000

  public let nodeID: String
  /// Sessions this node hosts or has local members in.
  public private(set) var sessions: [String: SessionDescription] = [:]
  public private(set) var invitations: [String: Invitation] = [:]
  /// Grace added to the inviter's expiry so answers in flight are not lost.
  public var answerGrace: UInt64 = 1000
  /// With deferred sequencing, ``send(_:from:to:payload:reliable:namedEvent:linkedNodes:)`` leaves reliable frames
  /// unsequenced (``unsequenced``) and the runtime numbers each with ``sequenceReliable(_:to:)`` at the moment it goes
  /// on the wire. A runtime that schedules frames of different senders fairly (not in send order) needs this: the
  /// receiver acknowledges cumulatively and drops a sequence number at or below one it has seen.
  public var deferredSequencing = false
  /// The sequence number of a reliable frame that is not numbered yet (deferred sequencing); never on the wire.
  public static let unsequenced = UInt64.max
  var outgoingSequence: [String: UInt64] = [:]
  var unacknowledged: [String: [Pending]] = [:]
  var incomingSequence: [String: UInt64] = [:]
  /// The last description each replica got from its host, to undo local notConnected marks when a link between
  /// two member nodes (neither of them the host) comes back.
  var confirmed: [String: SessionDescription] = [:]
  /// The latest `now` seen, for stamping state changes made by commands that take no clock.
  var lastNow: UInt64 = 0
  /// When each invitation left `pending` (this node's clock).
  var closedAt: [String: UInt64] = [:]
  /// Invitee side: answers the inviter's node has confirmed (with `inviteClosed` of the same outcome).
  var confirmedAnswers: Set<String> = []
  /// Outcomes decided in this window before a re-link are repeated to the other side, in case the old link lost them.
  public static let repeatWindow: UInt64 = 30_000
  /// The longest invitation timeout taken from another node (the REST API's own limit, 300 s).
  public static let maxRemoteInvitationMillis: UInt32 = 300_000

  /// Local peers that agreed to be members, by session id: the creator, an invitee that accepted (also a transceiver
  /// accepting automatically), and whatever an app records with ``agree(_:to:)``. A local peer becomes a member only
  /// if it is here; it leaves the set when it leaves the session or the host drops it. Nothing another node sends
  /// adds to it (docs/security.md).
  var agreed: [String: Set<String>] = [:]
  /// Frames, or the parts of frames naming local peers, refused for breaking the trust rules, by reason
  /// (`not_agreed`: a local peer that never agreed; `not_host`: a session state or join from a node that does not own
  /// the session's membership; `not_member`: traffic from a peer that is not a member on the sending node).
  public private(set) var refusals: [String: Int] = [:]

  /// How each linked node's link is carried.
  public private(set) var linkSecurity: [String: LinkSecurity] = [:]
  /// This node's own certificate fingerprint ("" without one), for invitations between two peers of this node.
  public var localFingerprint: String

  public init(nodeID: String, localFingerprint: String = "") {
    self.nodeID = nodeID
    self.localFingerprint = localFingerprint
  }

  // MARK: - Queries

  /// Sessions `peerID` belongs to (any state), sorted by id.
  public func sessions(of peerID: String) -> [SessionDescription] {
    sessions.values.filter { $0.members.contains { $0.peerID == peerID } }.sorted { $0.sessionID < $1.sessionID }
  }

  /// Invitations `peerID` sent or received, newest first.
  public func invitations(of peerID: String) -> [Invitation] {
    invitations.values.filter { $0.offer.fromPeerID == peerID || $0.offer.toPeerID == peerID }
      .sorted { ($0.createdAt, $0.id) > ($1.createdAt, $1.id) }
  }

  /// Whether `session`'s traffic may go to `node` over its current link: always for this node itself and for
  /// `none`/`optional` sessions; for `required` sessions only over an encrypted (TLS) link. Apps that send their own
  /// frames for a session (files, streams, chat history) check this before sending.
  public func mayCarry(_ session: SessionDescription, to node: String) -> Bool {
    session.encryption != .required || node == nodeID || linkSecurity[node]?.encrypted == true
  }

  func member(_ peerID: String, of session: SessionDescription) -> SessionMember? {
    session.members.first { $0.peerID == peerID }
  }

  // MARK: - Creating and leaving

  /// Creates a session hosted here with `creator` (a local peer) as its first, connected member.
  public mutating func createSession(
    _ sessionID: String, creator: SessionMember, strategy: SessionStrategy, encryption: SessionEncryption,
    maxPeers: UInt16
  ) -> SessionDescription {
    var member = creator
    member.state = .connected
    let session = SessionDescription(
      sessionID: sessionID, hostNodeID: nodeID, creatorPeerID: creator.peerID, strategy: strategy,
      encryption: encryption, maxPeers: maxPeers, revision: 1, members: [member])
    sessions[sessionID] = session
    agreed[sessionID, default: []].insert(member.peerID)
    return session
  }

  /// Records that `peerID` (local) agreed, by its own act, to be a member of `sessionID` (for apps that make members
  /// outside invitations).
  public mutating func agree(_ peerID: String, to sessionID: String) {
    agreed[sessionID, default: []].insert(peerID)
  }

  /// Whether `peerID` (local) agreed to be a member of `sessionID`.
  public func hasAgreed(_ peerID: String, to sessionID: String) -> Bool {
    agreed[sessionID]?.contains(peerID) == true
  }

  mutating func refuse(_ reason: String) {
    refusals[reason, default: 0] += 1
  }

  mutating func withdraw(_ peerID: String, from sessionID: String) {
    agreed[sessionID]?.remove(peerID)
    if agreed[sessionID]?.isEmpty == true { agreed[sessionID] = nil }
  }

  /// `peerID` (local) leaves `sessionID`.
  public mutating func leave(_ sessionID: String, peerID: String) throws(MeshFailure) -> [Directive] {
    guard let session = sessions[sessionID], member(peerID, of: session) != nil else {
      throw .notSessionMember(sessionID: sessionID)
    }
    var directives: [Directive] = []
    withdraw(peerID, from: sessionID)
    if session.hostNodeID == nodeID {
      removeMember(peerID, from: sessionID, into: &directives)
    } else {
      directives.append(.send(.sessionLeave(sessionID: sessionID, peerID: peerID), to: session.hostNodeID))
      // Locally the peer is out at once; the host's next description confirms it.
      var updated = session
      updated.members.removeAll { $0.peerID == peerID }
      sessions[sessionID] = updated
      for other in updated.members where other.nodeID == nodeID {
        directives.append(
          .notify(
            peerID: other.peerID,
            .memberState(
              sessionID: sessionID,
              member: SessionMember(
                peerID: peerID, displayName: member(peerID, of: session)!.displayName, nodeID: nodeID,
                state: .notConnected))))
      }
      if !updated.members.contains(where: { $0.nodeID == nodeID }) {
        sessions[sessionID] = nil
        confirmed[sessionID] = nil
      }
    }
    return directives
  }

  /// A local peer was deleted: it leaves every session and its pending invitations end.
  public mutating func peerRemoved(_ peerID: String, now: UInt64) -> [Directive] {
    var directives: [Directive] = []
    for session in sessions(of: peerID) {
      directives.append(contentsOf: (try? leave(session.sessionID, peerID: peerID)) ?? [])
    }
    for invitation in invitations.values.sorted(by: { $0.id < $1.id }) where invitation.state == .pending {
      if invitation.offer.fromPeerID == peerID {
        directives.append(contentsOf: (try? cancel(invitation.id, by: peerID)) ?? [])
      } else if invitation.offer.toPeerID == peerID {
        directives.append(contentsOf: (try? answer(invitation.id, by: peerID, accept: false, now: now)) ?? [])
      }
    }
    return directives
  }

  // MARK: - Invitations

  /// `from` (a local, connected member of `sessionID`) invites `to` (any peer in the mesh).
  public mutating func invite(
    _ invitationID: String, from fromPeerID: String, to: SessionMember, sessionID: String, context: [UInt8],
    timeoutMillis: UInt32, now: UInt64
  ) throws(MeshFailure) -> (Invitation, [Directive]) {
    guard let session = sessions[sessionID], let inviter = member(fromPeerID, of: session) else {
      throw .inviterNotSessionMember(sessionID: sessionID)
    }
    guard inviter.state == .connected else {
      throw .inviterNotConnected(inviter.state)
    }
    guard to.peerID != fromPeerID else { throw .selfInvitation }
    guard context.count <= MeshFrameCodec.maxContextBytes else {
      throw .contextTooLarge(maxBytes: MeshFrameCodec.maxContextBytes)
    }
    if let existing = member(to.peerID, of: session), existing.state != .notConnected {
      throw .alreadyMember(displayName: to.displayName)
    }
    if invitations.values.contains(where: {
      $0.state == .pending && $0.offer.session.sessionID == sessionID && $0.offer.toPeerID == to.peerID
    }) {
      throw .alreadyInvited(displayName: to.displayName)
    }
    if session.strategy == .star && fromPeerID != session.creatorPeerID {
      throw .onlyHubInvites
    }
    if !mayCarry(session, to: to.nodeID) {
      throw .encryptionUnavailable(displayName: to.displayName)
    }
    let pendingCount = invitations.values.filter { $0.state == .pending && $0.offer.session.sessionID == sessionID }
      .count
    let active = session.members.filter { $0.state != .notConnected }.count + pendingCount
    if session.strategy == .pointToPoint && active >= 2 {
      throw .pointToPointFull
    }
    if active >= Int(session.maxPeers) {
      throw .sessionFull(maxPeers: session.maxPeers)
    }
    let offer = InvitationOffer(
      invitationID: invitationID, session: session, fromPeerID: fromPeerID, fromDisplayName: inviter.displayName,
      toPeerID: to.peerID, context: context, timeoutMillis: timeoutMillis,
      verificationCode: verificationCode(invitationID: invitationID, fromNode: nodeID, toNode: to.nodeID))
    let invitation = Invitation(
      offer: offer, fromNodeID: nodeID, toNodeID: to.nodeID, toDisplayName: to.displayName, state: .pending,
      expiresAt: now + UInt64(timeoutMillis) + (to.nodeID == nodeID ? 0 : answerGrace), createdAt: now)
    invitations[invitationID] = invitation
    var directives: [Directive] = []
    if to.nodeID == nodeID {
      directives.append(.notify(peerID: to.peerID, .invitationReceived(invitation)))
    } else {
      directives.append(.send(.invite(offer), to: to.nodeID))
    }
    return (invitation, directives)
  }

  /// The invitee (local) accepts or declines. A closed invitation is a 409.
  public mutating func answer(_ invitationID: String, by peerID: String, accept: Bool, now: UInt64) throws(MeshFailure)
    -> [Directive]
  {
    guard var invitation = invitations[invitationID], invitation.offer.toPeerID == peerID else {
      throw .invitationNotFound(invitationID: invitationID, sentByPeer: false)
    }
    if invitation.state == .pending && now >= invitation.expiresAt {
      // Too late; the next tick marks it expired and tells both sides.
      throw .invitationExpired
    }
    guard invitation.state == .pending else {
      throw .invitationClosed(invitation.state, answering: true)
    }
    invitation.state = accept ? .accepted : .declined
    invitations[invitationID] = invitation
    if accept { agreed[invitation.offer.session.sessionID, default: []].insert(peerID) }
    lastNow = max(lastNow, now)
    closedAt[invitationID] = lastNow
    var directives: [Directive] = []
    directives.append(.notify(peerID: peerID, .invitationEnded(invitation)))
    if invitation.fromNodeID == nodeID {
      inviterLearned(invitationID, outcome: accept ? .accepted : .declined, into: &directives)
    } else {
      directives.append(
        .send(
          .inviteAnswer(invitationID: invitationID, outcome: accept ? .accepted : .declined), to: invitation.fromNodeID)
      )
    }
    return directives
  }

  /// The inviter (local) cancels a pending invitation.
  public mutating func cancel(_ invitationID: String, by peerID: String) throws(MeshFailure) -> [Directive] {
    guard var invitation = invitations[invitationID], invitation.offer.fromPeerID == peerID else {
      throw .invitationNotFound(invitationID: invitationID, sentByPeer: true)
    }
    guard invitation.state == .pending else {
      throw .invitationClosed(invitation.state, answering: false)
    }
    invitation.state = .canceled
    invitations[invitationID] = invitation
    closedAt[invitationID] = lastNow
    var directives: [Directive] = []
    directives.append(.notify(peerID: peerID, .invitationEnded(invitation)))
    if invitation.toNodeID == nodeID {
      directives.append(.notify(peerID: invitation.offer.toPeerID, .invitationEnded(invitation)))
    } else {
      directives.append(.send(.inviteClosed(invitationID: invitationID, outcome: .canceled), to: invitation.toNodeID))
    }
    return directives
  }

  /// On the inviter's node: the invitee answered. Accepting adds the member through the host.
  mutating func inviterLearned(_ invitationID: String, outcome: InvitationOutcome, into directives: inout [Directive]) {
    guard var invitation = invitations[invitationID], invitation.fromNodeID == nodeID else { return }
    if invitation.toNodeID != nodeID {
      // A remote answer to a pending invitation (the caller checked); a local answer already set the state.
      invitation.state = outcome == .accepted ? .accepted : .declined
      invitations[invitationID] = invitation
      closedAt[invitationID] = lastNow
    }
    directives.append(.notify(peerID: invitation.offer.fromPeerID, .invitationEnded(invitation)))
    guard outcome == .accepted, let session = sessions[invitation.offer.session.sessionID] else { return }
    let member = SessionMember(
      peerID: invitation.offer.toPeerID, displayName: invitation.toDisplayName, nodeID: invitation.toNodeID,
      state: .connected)
    if session.hostNodeID == nodeID {
      addMember(member, to: session.sessionID, into: &directives)
    } else {
      directives.append(.send(.sessionJoin(sessionID: session.sessionID, member: member), to: session.hostNodeID))
    }
  }

  /// On the inviter's node: the invitee of an invitation accepted here is back in its session unless the session
  /// still counts it connected (added by the host; through `sessionJoin` when the host is another node).
  mutating func rejoin(_ invitation: Invitation, into directives: inout [Directive]) {
    let sessionID = invitation.offer.session.sessionID
    guard let session = sessions[sessionID],
      member(invitation.offer.toPeerID, of: session)?.state != .connected
    else { return }
    let member = SessionMember(
      peerID: invitation.offer.toPeerID, displayName: invitation.toDisplayName, nodeID: invitation.toNodeID,
      state: .connected)
    if session.hostNodeID == nodeID {
      addMember(member, to: sessionID, into: &directives)
    } else {
      directives.append(.send(.sessionJoin(sessionID: sessionID, member: member), to: session.hostNodeID))
    }
  }

  // MARK: - Membership (host side)

  mutating func addMember(_ member: SessionMember, to sessionID: String, into directives: inout [Directive]) {
    guard var session = sessions[sessionID], session.hostNodeID == nodeID else { return }
    session.members.removeAll { $0.peerID == member.peerID }
    session.members.append(member)
    session.revision += 1
    sessions[sessionID] = session
    publish(session, changed: member, into: &directives)
  }

  mutating func removeMember(_ peerID: String, from sessionID: String, into directives: inout [Directive]) {
    guard var session = sessions[sessionID], session.hostNodeID == nodeID,
      let gone = member(peerID, of: session)
    else { return }
    session.members.removeAll { $0.peerID == peerID }
    session.revision += 1
    var left = gone
    left.state = .notConnected
    publish(session, changed: left, into: &directives, alsoTo: gone.nodeID)
    sessions[sessionID] = session
    if session.members.isEmpty { sessions[sessionID] = nil }
  }

  /// Sends the description to every member node and tells local members about `changed`.
  mutating func publish(
    _ session: SessionDescription, changed: SessionMember, into directives: inout [Directive],
    alsoTo extra: String? = nil
  ) {
    var nodes = Set(session.members.map(\.nodeID))
    if let extra { nodes.insert(extra) }
    nodes.remove(nodeID)
    for node in nodes.sorted() { directives.append(.send(.sessionState(session), to: node)) }
    for local in session.members where local.nodeID == nodeID {
      if local.peerID == changed.peerID && changed.state != .notConnected {
        // The joiner learns the whole membership, itself included.
        for member in session.members {
          directives.append(.notify(peerID: local.peerID, .memberState(sessionID: session.sessionID, member: member)))
        }
      } else {
        directives.append(.notify(peerID: local.peerID, .memberState(sessionID: session.sessionID, member: changed)))
      }
    }
    if changed.nodeID == nodeID && !session.members.contains(where: { $0.peerID == changed.peerID }) {
      directives.append(.notify(peerID: changed.peerID, .memberState(sessionID: session.sessionID, member: changed)))
    }
  }

  /// A replica received a new description: diff members and tell local members.
  mutating func replace(with description: SessionDescription, into directives: inout [Directive]) {
    let old = sessions[description.sessionID]
    // Equal revisions are accepted: a host re-sends its description after a link is replaced, and it must undo
    // the notConnected marks this replica made locally while the link was down.
    if let old, old.revision > description.revision { return }
    let oldLocal = Set((old?.members ?? []).filter { $0.nodeID == nodeID }.map(\.peerID))
    var localPeers = oldLocal
    for member in description.members where member.nodeID == nodeID { localPeers.insert(member.peerID) }
    var changes: [SessionMember] = []
    for member in description.members where old.flatMap({ self.member(member.peerID, of: $0) }) != member {
      changes.append(member)
    }
    for member in old?.members ?? [] where !description.members.contains(where: { $0.peerID == member.peerID }) {
      var gone = member
      gone.state = .notConnected
      changes.append(gone)
      // The host dropped a local member: coming back takes a new invitation.
      if member.nodeID == nodeID { withdraw(member.peerID, from: description.sessionID) }
    }
    let keep = description.members.contains { $0.nodeID == nodeID }
    sessions[description.sessionID] = keep ? description : nil
    confirmed[description.sessionID] = keep ? description : nil
    for peer in localPeers.sorted() {
      // A local peer that just joined learns the whole membership; the others learn what changed.
      let told = oldLocal.contains(peer) ? changes : description.members
      for change in told {
        directives.append(.notify(peerID: peer, .memberState(sessionID: description.sessionID, member: change)))
      }
    }
  }

  // MARK: - Data

  /// `fromPeerID` (local, connected) sends to `toPeerIDs` (nil: every connected member but itself).
  /// Returns the directives and the peers that cannot be reached now (their node is not linked).
  public mutating func send(
    _ sessionID: String, from fromPeerID: String, to toPeerIDs: [String]?, payload: [UInt8], reliable: Bool,
    namedEvent: String? = nil, linkedNodes: Set<String>
  ) throws(MeshFailure) -> (directives: [Directive], undelivered: [String]) {
    guard let session = sessions[sessionID], let sender = member(fromPeerID, of: session) else {
      throw .notSessionMember(sessionID: sessionID)
    }
    guard sender.state == .connected else {
      throw .senderNotConnected(sender.state)
    }
    func isTarget(_ member: SessionMember) -> Bool { member.state == .connected && member.peerID != fromPeerID }
    let spoke = session.strategy == .star && fromPeerID != session.creatorPeerID
    let byNode: [(node: String, peerIDs: [String])]
    if let toPeerIDs {
      var targets: [SessionMember] = []
      for peerID in toPeerIDs {
        guard let target = session.members.first(where: { $0.peerID == peerID && isTarget($0) }) else {
          throw .targetNotConnected(peerID: peerID)
        }
        if !targets.contains(target) { targets.append(target) }
      }
      if spoke && targets.contains(where: { $0.peerID != session.creatorPeerID }) {
        throw .spokeSendsOnlyToHub
      }
      byNode = Self.byNode(targets)
    } else if spoke {
      byNode = Self.byNode(session.members.lazy.filter { isTarget($0) && $0.peerID == session.creatorPeerID })
    } else {
      // The common send, to everyone: grouped straight from the member list, nothing copied on the way.
      byNode = Self.byNode(session.members.lazy.filter(isTarget))
    }
    var directives: [Directive] = []
    var undelivered: [String] = []
    var unencrypted: [String] = []
    for (node, peerIDs) in byNode {
      if node == nodeID {
        directives.append(.notifyEach(peerIDs: peerIDs, event(sessionID, fromPeerID, payload, reliable, namedEvent)))
        continue
      }
      guard linkedNodes.contains(node) else {
        undelivered.append(contentsOf: peerIDs)
        continue
      }
      if !mayCarry(session, to: node) {
        unencrypted.append(contentsOf: peerIDs)
        continue
      }
      var sequence: UInt64 = 0
      if reliable && deferredSequencing {
        sequence = Self.unsequenced
      } else if reliable {
        sequence = (outgoingSequence[node] ?? 0) + 1
        outgoingSequence[node] = sequence
        unacknowledged[node, default: []].append(
          Pending(sequence: sequence, sessionID: sessionID, fromPeerID: fromPeerID, toPeerIDs: peerIDs))
      }
      if let namedEvent {
        directives.append(
          .send(
            .sessionEvent(
              sessionID: sessionID, fromPeerID: fromPeerID, toPeerIDs: peerIDs, sequence: sequence, name: namedEvent,
              object: payload),
            to: node))
      } else {
        directives.append(
          .send(
            .sessionData(
              sessionID: sessionID, fromPeerID: fromPeerID, toPeerIDs: peerIDs, sequence: sequence, payload: payload),
            to: node))
      }
    }
    if reliable && !undelivered.isEmpty {
      directives.append(
        .notify(
          peerID: fromPeerID,
          .sendFailed(sessionID: sessionID, undelivered: undelivered.sorted(), reason: "node not linked")))
    }
    if reliable && !unencrypted.isEmpty {
      directives.append(
        .notify(
          peerID: fromPeerID,
          .sendFailed(
            sessionID: sessionID, undelivered: unencrypted.sorted(),
            reason: "link not encrypted (the session requires encryption)")))
    }
    return (directives, (undelivered + unencrypted).sorted())
  }

  /// Peers grouped by the node that hosts them, in node-id order, each group in member order. A session's members sit
  /// on few nodes: a short list searched from its newest group costs less than hashing every member's node id.
  static func byNode(_ members: some Sequence<SessionMember>) -> [(node: String, peerIDs: [String])] {
    var groups: [(node: String, peerIDs: [String])] = []
    var current = 0
    for member in members {
      if groups.isEmpty || groups[current].node != member.nodeID {
        if let index = groups.firstIndex(where: { $0.node == member.nodeID }) {
          current = index
        } else {
          groups.append((member.nodeID, []))
          current = groups.count - 1
        }
      }
      groups[current].peerIDs.append(member.peerID)
    }
    return groups.count > 1 ? groups.sorted { $0.node < $1.node } : groups
  }

  func event(_ sessionID: String, _ from: String, _ payload: [UInt8], _ reliable: Bool, _ name: String?) -> Event {
    if let name { return .namedEvent(sessionID: sessionID, from: from, name: name, object: payload) }
    return .data(sessionID: sessionID, from: from, payload: payload, reliable: reliable)
  }

  // MARK: - Frames and links

  /// Whether a local peer may receive session traffic from another node: it agreed to be a member (it created the
  /// session, accepted an invitation into it or joined by an app's act) and has not left. Its membership in this
  /// replica is not enough on its own, and not needed while the host's new description is still on its way.
  func mayReceive(_ peerID: String, in sessionID: String) -> Bool {
    hasAgreed(peerID, to: sessionID)
  }

  /// Whether `fromPeerID` may send session traffic from `remoteNode`: a member hosted there, when this node knows the
  /// session (before the host's description arrives, only the targets' agreement is checked).
  func maySend(_ fromPeerID: String, from remoteNode: String, in sessionID: String) -> Bool {
    guard let session = sessions[sessionID] else { return true }
    return session.members.contains { $0.peerID == fromPeerID && $0.nodeID == remoteNode }
  }

  /// Whether a data or event frame numbered `sequence` from `remoteNode` is new (unreliable frames, numbered 0,
  /// always are); a new reliable one is acknowledged and recorded, so a repeat after a link loss is not delivered
  /// twice.
  mutating func acceptReliable(_ sequence: UInt64, from remoteNode: String, into directives: inout [Directive]) -> Bool
  {
    guard sequence > 0 else { return true }
    guard sequence > incomingSequence[remoteNode] ?? 0 else { return false }
    incomingSequence[remoteNode] = sequence
    directives.append(.send(.dataAck(sequence: sequence), to: remoteNode))
    return true
  }

  /// Delivers session data or a named event from `remoteNode` to the listed local peers that agreed to be members;
  /// the other ids are refused (and counted).
  mutating func deliver(
    _ sessionID: String, from fromPeerID: String, to toPeerIDs: [String], remoteNode: String, event: Event,
    into directives: inout [Directive]
  ) {
    guard maySend(fromPeerID, from: remoteNode, in: sessionID) else {
      refuse("not_member")
      return
    }
    let receivers = toPeerIDs.filter { mayReceive($0, in: sessionID) }
    if !receivers.isEmpty { directives.append(.notifyEach(peerIDs: receivers, event)) }
    if receivers.count < toPeerIDs.count { refuse("not_agreed") }
  }

  /// The host's description as this node keeps it: local members that never agreed are taken out (and counted).
  mutating func withoutUnagreedLocalMembers(_ description: SessionDescription) -> SessionDescription {
    var kept = description
    kept.members.removeAll { $0.nodeID == nodeID && !hasAgreed($0.peerID, to: description.sessionID) }
    if kept.members.count != description.members.count { refuse("not_agreed") }
    return kept
  }

  /// A session or invitation frame from a linked node.
  public mutating func received(_ message: MeshMessage, from remoteNode: String, now: UInt64) -> [Directive] {
    lastNow = max(lastNow, now)
    var directives: [Directive] = []
    switch message {
    case .invite(var offer):
      guard invitations[offer.invitationID] == nil else { break }
      let pendingFromNode = invitations.values.count(where: { $0.fromNodeID == remoteNode && $0.state == .pending })
      guard pendingFromNode < MeshLimits.pendingInvitationsPerNode else {
        refuse("too_many_invitations")
        break
      }
      // The code shown here is computed from this node's view of the link, never taken from the frame.
      offer.verificationCode = verificationCode(
        invitationID: offer.invitationID, fromNode: remoteNode, toNode: nodeID)
      // A node may not make an invitation (and its memory) outlive the longest timeout a client can ask for.
      offer.timeoutMillis = min(offer.timeoutMillis, Self.maxRemoteInvitationMillis)
      let invitation = Invitation(
        offer: offer, fromNodeID: remoteNode, toNodeID: nodeID, toDisplayName: "", state: .pending,
        expiresAt: now + UInt64(offer.timeoutMillis), createdAt: now)
      invitations[offer.invitationID] = invitation
      directives.append(.notify(peerID: offer.toPeerID, .invitationReceived(invitation)))
    case .inviteAnswer(let invitationID, let outcome):
      guard let invitation = invitations[invitationID], invitation.fromNodeID == nodeID,
        invitation.toNodeID == remoteNode
      else { break }
      if invitation.state == .pending && now >= invitation.expiresAt {
        // The answer came after timeout plus grace: it is late whatever the tick cadence.
        expire(invitationID, into: &directives)
        break
      }
      guard invitation.state == .pending else {
        if invitation.state == .accepted, outcome == .accepted, let closed = closedAt[invitationID],
          closed + Self.repeatWindow >= now
        {
          // The invitee's node repeats an accept this node took already: the host may have dropped the invitee
          // since, when the link went down on this side only (the invitee's node saw it move to a new connection).
          rejoin(invitation, into: &directives)
        }
        // Too late, or a repeat: tell the invitee's node how it really ended.
        directives.append(
          .send(
            .inviteClosed(invitationID: invitationID, outcome: InvitationOutcome(rawValue: invitation.state.rawValue)!),
            to: remoteNode))
        break
      }
      inviterLearned(invitationID, outcome: outcome, into: &directives)
      // Confirm the answer, so the invitee's node stops repeating it after re-links.
      directives.append(.send(.inviteClosed(invitationID: invitationID, outcome: outcome), to: remoteNode))
    case .inviteClosed(let invitationID, let outcome):
      guard var invitation = invitations[invitationID], invitation.toNodeID == nodeID,
        invitation.fromNodeID == remoteNode
      else { break }
      let state = InvitationState(rawValue: outcome.rawValue)!
      guard invitation.state != state else {
        // The inviter's node confirms the answer this node sent: no need to repeat it after a re-link.
        confirmedAnswers.insert(invitationID)
        break
      }
      invitation.state = state
      invitations[invitationID] = invitation
      closedAt[invitationID] = now
      directives.append(.notify(peerID: invitation.offer.toPeerID, .invitationEnded(invitation)))
    case .sessionJoin(let sessionID, let member):
      // Only this node (the host) adds members, on behalf of the inviter's node: that node must host a connected
      // member, and a local joiner must have accepted an invitation here.
      guard let session = sessions[sessionID], session.hostNodeID == nodeID else {
        refuse("not_host")
        break
      }
      guard session.members.contains(where: { $0.nodeID == remoteNode && $0.state == .connected }) else {
        refuse("not_member")
        break
      }
      if member.nodeID == nodeID && !hasAgreed(member.peerID, to: sessionID) {
        refuse("not_agreed")
        break
      }
      addMember(member, to: sessionID, into: &directives)
    case .sessionLeave(let sessionID, let peerID):
      guard let session = sessions[sessionID], member(peerID, of: session)?.nodeID == remoteNode else { break }
      removeMember(peerID, from: sessionID, into: &directives)
    case .sessionState(let description):
      // Only the node that owns the session's membership describes it, and it never changes its host.
      guard description.hostNodeID == remoteNode,
        sessions[description.sessionID].map({ $0.hostNodeID == remoteNode }) ?? true
      else {
        refuse("not_host")
        break
      }
      replace(with: withoutUnagreedLocalMembers(description), into: &directives)
    case .sessionData(let sessionID, let fromPeerID, let toPeerIDs, let sequence, let payload):
      guard acceptReliable(sequence, from: remoteNode, into: &directives) else { break }
      // The sender checked membership in its replica; this node may not have the host's newest description yet
      // (a join racing the data), so a local peer that accepted an invitation into the session also receives.
      // Nobody else does: a frame naming peers that never agreed reaches no one, and is counted.
      deliver(
        sessionID, from: fromPeerID, to: toPeerIDs, remoteNode: remoteNode,
        event: .data(sessionID: sessionID, from: fromPeerID, payload: payload, reliable: sequence > 0),
        into: &directives)
    case .sessionEvent(let sessionID, let fromPeerID, let toPeerIDs, let sequence, let name, let object):
      guard acceptReliable(sequence, from: remoteNode, into: &directives) else { break }
      deliver(
        sessionID, from: fromPeerID, to: toPeerIDs, remoteNode: remoteNode,
        event: .namedEvent(sessionID: sessionID, from: fromPeerID, name: name, object: object), into: &directives)
    case .dataAck(let sequence):
      unacknowledged[remoteNode]?.removeAll { $0.sequence <= sequence }
    default:
      break
    }
    return directives
  }

  /// A node was linked: a fresh link starts new sequence numbers on both sides.
  public mutating func nodeLinked(_ remoteNode: String, security: LinkSecurity = .plaintext) -> [Directive] {
    nodeLinked(remoteNode, security: security, replaced: false)
  }

  /// `replaced`: the link moved to a new connection without going down on this side.
  mutating func nodeLinked(_ remoteNode: String, security: LinkSecurity, replaced: Bool) -> [Directive] {
    linkSecurity[remoteNode] = security
    outgoingSequence[remoteNode] = 0
    incomingSequence[remoteNode] = 0
    var directives: [Directive] = []
    // Members on that node that the host still counts in, but this replica marked notConnected when the link
    // dropped, are back (the host itself re-sends its description when it is the one re-linked).
    for sessionID in sessions.keys.sorted() {
      guard var session = sessions[sessionID], session.hostNodeID != nodeID, session.hostNodeID != remoteNode,
        let truth = confirmed[sessionID]
      else { continue }
      var restored: [SessionMember] = []
      for index in session.members.indices where session.members[index].nodeID == remoteNode {
        if let member = truth.members.first(where: { $0.peerID == session.members[index].peerID }),
          member.state != session.members[index].state
        {
          session.members[index].state = member.state
          restored.append(member)
        }
      }
      guard !restored.isEmpty else { continue }
      sessions[sessionID] = session
      for local in session.members where local.nodeID == nodeID {
        for member in restored {
          directives.append(.notify(peerID: local.peerID, .memberState(sessionID: sessionID, member: member)))
        }
      }
    }
    // Outcomes that may have been lost with the old link are repeated; both handlers ignore repeats. The inviter
    // repeats what it decided (expired, canceled), the invitee its answers not yet confirmed, and only recent ones.
    // When the link only moved here, the other side may still have seen it go down and dropped this node's members,
    // so the invitee's node also repeats the accepts of invitees still in the session (the inviter's node adds them
    // again, ``rejoin(_:into:)``). An accept is repeated only while its invitee has not left by its own act.
    for id in invitations.keys.sorted() {
      let invitation = invitations[id]!
      guard let closed = closedAt[id], closed + Self.repeatWindow >= lastNow else { continue }
      if invitation.fromNodeID == nodeID, invitation.toNodeID == remoteNode,
        invitation.state == .expired || invitation.state == .canceled
      {
        directives.append(
          .send(
            .inviteClosed(invitationID: id, outcome: invitation.state == .expired ? .expired : .canceled),
            to: remoteNode))
      } else if invitation.toNodeID == nodeID, invitation.fromNodeID == remoteNode,
        invitation.state == .declined && !confirmedAnswers.contains(id)
          || invitation.state == .accepted && stillJoining(invitation, replaced: replaced)
      {
        directives.append(
          .send(
            .inviteAnswer(invitationID: id, outcome: invitation.state == .accepted ? .accepted : .declined),
            to: remoteNode))
      }
    }
    // Invitations to that node still pending here are sent again: the `invite` frame may have gone out on a link that
    // was then closed as a duplicate (or the invitee's node restarted and forgot it). The invitee's node ignores an
    // invitation it already knows; without this, the inviter waits out the whole timeout for an answer that cannot
    // come (a transceiver kept out of its group for 30 s after a restart).
    for id in invitations.keys.sorted() {
      let invitation = invitations[id]!
      guard invitation.state == .pending, invitation.fromNodeID == nodeID, invitation.toNodeID == remoteNode,
        lastNow + answerGrace < invitation.expiresAt
      else { continue }
      // The invitee's node times it from arrival: offer only what is left of it here.
      var offer = invitation.offer
      offer.timeoutMillis = UInt32(min(UInt64(offer.timeoutMillis), invitation.expiresAt - answerGrace - lastNow))
      directives.append(.send(.invite(offer), to: remoteNode))
    }
    // Members we host that live on that node were marked notConnected when it went away; they stay out.
    for session in sessions.values.sorted(by: { $0.sessionID < $1.sessionID }) where session.hostNodeID == nodeID {
      if session.members.contains(where: { $0.nodeID == remoteNode }) {
        directives.append(.send(.sessionState(session), to: remoteNode))
      }
    }
    return directives
  }

  /// Invitee side: whether the accept of `invitation` is repeated on a re-link. Its invitee must still agree to be a
  /// member (it has not left); the answer must be unconfirmed, or, when the link only moved to a new connection on
  /// this side, the invitee still listed in the session (the inviter's side may have dropped it meanwhile).
  func stillJoining(_ invitation: Invitation, replaced: Bool) -> Bool {
    let sessionID = invitation.offer.session.sessionID
    guard hasAgreed(invitation.offer.toPeerID, to: sessionID) else { return false }
    if !confirmedAnswers.contains(invitation.id) { return true }
    return replaced
      && sessions[sessionID].map { self.member(invitation.offer.toPeerID, of: $0)?.state == .connected } == true
  }

  /// Numbers a reliable frame made with deferred sequencing (``unsequenced``) for the link to `node` and records it as
  /// awaiting acknowledgement. Call in wire order, just before the frame is handed to the link. Other frames are
  /// returned unchanged.
  public mutating func sequenceReliable(_ message: MeshMessage, to node: String) -> MeshMessage {
    switch message {
    case .sessionData(let sessionID, let fromPeerID, let toPeerIDs, Self.unsequenced, let payload):
      let sequence = nextSequence(sessionID, fromPeerID, toPeerIDs, to: node)
      return .sessionData(
        sessionID: sessionID, fromPeerID: fromPeerID, toPeerIDs: toPeerIDs, sequence: sequence, payload: payload)
    case .sessionEvent(let sessionID, let fromPeerID, let toPeerIDs, Self.unsequenced, let name, let object):
      let sequence = nextSequence(sessionID, fromPeerID, toPeerIDs, to: node)
      return .sessionEvent(
        sessionID: sessionID, fromPeerID: fromPeerID, toPeerIDs: toPeerIDs, sequence: sequence, name: name,
        object: object)
    default:
      return message
    }
  }

  mutating func nextSequence(_ sessionID: String, _ fromPeerID: String, _ toPeerIDs: [String], to node: String)
    -> UInt64
  {
    let sequence = (outgoingSequence[node] ?? 0) + 1
    outgoingSequence[node] = sequence
    unacknowledged[node, default: []].append(
      Pending(sequence: sequence, sessionID: sessionID, fromPeerID: fromPeerID, toPeerIDs: toPeerIDs))
    return sequence
  }

  /// Reliable frames that were accepted but will never go on the wire (their link closed first): tells each sender,
  /// in order, with `session.send.failed`.
  public func unsent(_ messages: [MeshMessage], reason: String) -> [Directive] {
    var directives: [Directive] = []
    for message in messages {
      switch message {
      case .sessionData(let sessionID, let fromPeerID, let toPeerIDs, _, _),
        .sessionEvent(let sessionID, let fromPeerID, let toPeerIDs, _, _, _):
        directives.append(
          .notify(
            peerID: fromPeerID, .sendFailed(sessionID: sessionID, undelivered: toPeerIDs.sorted(), reason: reason)))
      default:
        break
      }
    }
    return directives
  }

  /// Tells the senders of reliable frames to `remoteNode` not yet acknowledged that they may not have arrived.
  mutating func failUnacknowledged(to remoteNode: String, reason: String, into directives: inout [Directive]) {
    for pending in unacknowledged.removeValue(forKey: remoteNode) ?? [] {
      directives.append(
        .notify(
          peerID: pending.fromPeerID,
          .sendFailed(sessionID: pending.sessionID, undelivered: pending.toPeerIDs, reason: reason)))
    }
  }

  /// The link to `remoteNode` moved to a new connection: data sent on the old one may be lost, so unacknowledged
  /// reliable data fails, sequences restart, and hosted sessions are re-sent.
  public mutating func linkReplaced(_ remoteNode: String, security: LinkSecurity = .plaintext) -> [Directive] {
    var directives: [Directive] = []
    failUnacknowledged(to: remoteNode, reason: "link to node replaced", into: &directives)
    directives.append(contentsOf: nodeLinked(remoteNode, security: security, replaced: true))
    return directives
  }

  /// The link to `remoteNode` is gone: its members become notConnected, unacknowledged reliable data fails.
  public mutating func nodeUnlinked(_ remoteNode: String) -> [Directive] {
    var directives: [Directive] = []
    failUnacknowledged(to: remoteNode, reason: "link to node lost", into: &directives)
    linkSecurity[remoteNode] = nil
    outgoingSequence[remoteNode] = nil
    incomingSequence[remoteNode] = nil
    for sessionID in sessions.keys.sorted() {
      guard var session = sessions[sessionID] else { continue }
      if session.hostNodeID == remoteNode {
        // Without its host the session has no membership authority: this replica ends, and local members are told
        // that everyone else is gone (the host dropped them too, so a re-link does not bring a zombie back).
        sessions[sessionID] = nil
        confirmed[sessionID] = nil
        // Agreement stays: a host that kept the member (it did not see the link drop) re-sends its description.
        for local in session.members where local.nodeID == nodeID {
          for other in session.members where other.peerID != local.peerID {
            var gone = other
            gone.state = .notConnected
            directives.append(.notify(peerID: local.peerID, .memberState(sessionID: sessionID, member: gone)))
          }
        }
        continue
      }
      var changed: [SessionMember] = []
      for index in session.members.indices
      where session.members[index].nodeID == remoteNode && session.members[index].state != .notConnected {
        session.members[index].state = .notConnected
        changed.append(session.members[index])
      }
      guard !changed.isEmpty else { continue }
      if session.hostNodeID == nodeID {
        session.members.removeAll { $0.nodeID == remoteNode }
        session.revision += 1
        for node in Set(session.members.map(\.nodeID)).subtracting([nodeID]).sorted() {
          directives.append(.send(.sessionState(session), to: node))
        }
      }
      sessions[sessionID] = session.members.isEmpty ? nil : session
      for local in session.members where local.nodeID == nodeID {
        for member in changed {
          directives.append(.notify(peerID: local.peerID, .memberState(sessionID: sessionID, member: member)))
        }
      }
    }
    return directives
  }

  /// Expires pending invitations whose time is up.
  public mutating func tick(now: UInt64) -> [Directive] {
    lastNow = max(lastNow, now)
    var directives: [Directive] = []
    // One pass over what the node remembers (a tick runs ten times a second): closed invitations are kept for a
    // while (listings, repeats after a re-link), then forgotten; pending ones whose time is up expire, in id order.
    var forgotten: [String] = []
    var due: [String] = []
    for (id, invitation) in invitations {
      if invitation.state == .pending {
        if now >= invitation.expiresAt { due.append(id) }
      } else if now > invitation.expiresAt + Self.closedInvitationRetention {
        forgotten.append(id)
      }
    }
    for id in forgotten {
      invitations[id] = nil
      closedAt[id] = nil
      confirmedAnswers.remove(id)
    }
    for id in due.sorted() { expire(id, into: &directives) }
    return directives
  }

  /// Marks a pending invitation expired and tells whoever this node speaks for (and the invitee's node).
  mutating func expire(_ id: String, into directives: inout [Directive]) {
    guard var invitation = invitations[id], invitation.state == .pending else { return }
    invitation.state = .expired
    invitations[id] = invitation
    closedAt[id] = lastNow
    if invitation.fromNodeID == nodeID {
      directives.append(.notify(peerID: invitation.offer.fromPeerID, .invitationEnded(invitation)))
      if invitation.toNodeID != nodeID {
        directives.append(.send(.inviteClosed(invitationID: id, outcome: .expired), to: invitation.toNodeID))
      }
    }
    if invitation.toNodeID == nodeID {
      directives.append(.notify(peerID: invitation.offer.toPeerID, .invitationEnded(invitation)))
    }
  }

  /// The code this node shows for an invitation from `fromNode` to `toNode`, from its own view of the link.
  func verificationCode(invitationID: String, fromNode: String, toNode: String) -> String {
    let link = fromNode == nodeID ? toNode : fromNode
    let security =
      link == nodeID
      ? LinkSecurity(encrypted: true, localFingerprint: localFingerprint, remoteFingerprint: localFingerprint)
      : linkSecurity[link] ?? .plaintext
    let (fromFingerprint, toFingerprint) =
      fromNode == nodeID
      ? (security.localFingerprint, security.remoteFingerprint)
      : (security.remoteFingerprint, security.localFingerprint)
    return Self.verificationCode(
      invitationID: invitationID, fromNode: fromNode, toNode: toNode, fromFingerprint: fromFingerprint,
      toFingerprint: toFingerprint)
  }

  /// A six-digit code both sides show: SHA-256 over the invitation id, both node ids and both nodes' certificate
  /// fingerprints (as each side saw them on the link; "" on plaintext), reduced modulo 10⁶.
  public static func verificationCode(
    invitationID: String, fromNode: String, toNode: String, fromFingerprint: String, toFingerprint: String
  ) -> String {
    var input = Array("meshgate-verification-v1".utf8)
    for part in [invitationID, fromNode, toNode, fromFingerprint, toFingerprint] {
      input.append(0)
      input += Array(part.utf8)
    }
    let digest = Crypto.sha256(input)
    let value = digest.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
    let code = String(value % 1_000_000)
    return String(repeating: "0", count: 6 - code.count) + code
  }
}
