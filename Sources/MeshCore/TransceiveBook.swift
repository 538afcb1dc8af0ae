/// PeerKit's transceiver and ARKit's MultipeerSession as a sans-I/O state machine: every peer transceiving a
/// service type ends up in one session (layer 3, over ``Directory`` and ``SessionBook``).
///
/// A transceiver advertises the service type with discovery info `transceive=1` and browses for it. Among the
/// transceivers a node can see (its own and those its linked nodes announce), the one with the smallest peer id
/// leads: it hosts a session and invites every other transceiver it sees (context `transceive:<serviceType>`); the
/// others accept those invitations automatically and leave any transceive session they were in before.
///
/// The runtime calls ``reconcile(directory:sessions:linkedNodes:now:newID:)`` whenever the directory changes and
/// about once a second, and ``invitationReceived(_:directory:sessions:now:)`` for every invitation a local peer
/// receives; it carries out the returned ``SessionBook/Directive``s like any other session directives.
public struct TransceiveBook: Sendable {
  /// The discovery-info key that marks an advertisement as a transceiver's (value `"1"`).
  public static let discoveryKey = "transceive"
  /// How long a transceive invitation waits for its (automatic) answer.
  public static let invitationTimeoutMillis: UInt32 = 30_000

  /// Local transceivers.
  public private(set) var transceivers: Set<Transceiver> = []
  /// The session each local transceiver is in (or leads).
  public private(set) var sessionOf: [Transceiver: String] = [:]
  /// `maxPeers` of the sessions leaders create.
  public let maxPeers: UInt16

  public init(maxPeers: UInt16 = 1024) {
    self.maxPeers = maxPeers
  }

  /// The transceivers of a node that starts again: every local peer whose (persisted, restored) advertisement of a
  /// type carries `transceive=1` transceives that type again, as it did before the node stopped. Sessions are not
  /// restored; the peers regroup through ``reconcile(directory:sessions:linkedNodes:now:newID:)``.
  public init(restoringFrom directory: Directory, maxPeers: UInt16 = 1024) {
    self.maxPeers = maxPeers
    for (peerID, peer) in directory.localPeers {
      for (type, info) in peer.advertising where info[Self.discoveryKey] == "1" {
        transceivers.insert(Transceiver(peerID: peerID, serviceType: type))
      }
    }
  }

  // MARK: - Rules

  /// The invitation context of transceive invitations for `serviceType`.
  public static func context(_ serviceType: String) -> [UInt8] { Array("\(discoveryKey):\(serviceType)".utf8) }

  /// The service type of a transceive invitation's context, nil for any other invitation.
  public static func serviceType(ofContext context: [UInt8]) -> String? {
    let text = String(decoding: context, as: UTF8.self)
    guard text.hasPrefix("\(discoveryKey):") else { return nil }
    return String(text.dropFirst(discoveryKey.count + 1))
  }

  /// The smallest peer id among `serviceType`'s transceivers that this node sees, `peerID` included.
  public static func leader(of serviceType: String, including peerID: String, in directory: Directory) -> String {
    let others = directory.advertisers(of: serviceType, excluding: peerID)
      .filter { $0.discoveryInfo[discoveryKey] == "1" }.map(\.peer.peerID)
    return (others + [peerID]).min()!
  }

  /// The session `transceiver` is in, if any.
  public func session(of transceiver: Transceiver) -> String? { sessionOf[transceiver] }

  // MARK: - Commands

  /// A local peer starts transceiving (it already advertises the type with `transceive=1` and browses it).
  public mutating func start(_ transceiver: Transceiver) {
    transceivers.insert(transceiver)
  }

  /// Brings every local transceiver in line with the rules, from this node's current view:
  /// - A peer that is gone or no longer advertises the type with `transceive=1` stops transceiving.
  /// - A non-leader accepts the leader's pending invitation if it has one (an invitation can arrive before the peer
  ///   transceives again after a restart, or while its view still showed another leader) and cancels invitations it
  ///   sent while it led. A peer already in the leader's transceive session (its node got the description) records
  ///   it; the leader's other sessions it is in do not count.
  /// - The leader hosts a session (a new one if it has none, or is no longer in it), cancels its pending invitations
  ///   to peers that are no longer transceivers it can reach (an invitation in flight when their node went down died
  ///   with it; waiting for its timeout would keep a restarted peer out for 30 s), and invites every transceiver it
  ///   sees that is neither a member nor invited.
  public mutating func reconcile(
    directory: Directory, sessions: inout SessionBook, linkedNodes: Set<String>, now: UInt64, newID: () -> String
  ) -> [SessionBook.Directive] {
    var directives: [SessionBook.Directive] = []
    for transceiver in transceivers.sorted(by: { ($0.peerID, $0.serviceType) < ($1.peerID, $1.serviceType) }) {
      let type = transceiver.serviceType
      guard let me = directory.peer(transceiver.peerID), directory.isLocal(me.peerID),
        directory.advertising(of: me.peerID)[type]?[Self.discoveryKey] == "1"
      else {
        transceivers.remove(transceiver)
        sessionOf[transceiver] = nil
        continue
      }
      let leader = Self.leader(of: type, including: me.peerID, in: directory)
      let sent = sessions.invitations.values.filter {
        $0.state == .pending && $0.offer.fromPeerID == me.peerID
          && Self.serviceType(ofContext: $0.offer.context) == type
      }.sorted { $0.id < $1.id }
      guard leader == me.peerID else {
        for invitation in sent {
          directives.append(contentsOf: (try? sessions.cancel(invitation.id, by: me.peerID)) ?? [])
        }
        if let current = sessionOf[transceiver], let session = sessions.sessions[current],
          session.creatorPeerID == leader, sessions.member(me.peerID, of: session) != nil
        {
          continue
        }
        if let joined = sessions.sessions(of: me.peerID).first(where: {
          $0.creatorPeerID == leader && Self.joinedThroughTransceive($0.sessionID, me.peerID, type, sessions)
        }) {
          sessionOf[transceiver] = joined.sessionID
          continue
        }
        let offered = sessions.invitations.values.filter {
          $0.state == .pending && $0.offer.toPeerID == me.peerID && $0.offer.fromPeerID == leader
            && Self.serviceType(ofContext: $0.offer.context) == type && now < $0.expiresAt
        }.max { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
        if let offered { directives.append(contentsOf: join(transceiver, offered, sessions: &sessions, now: now)) }
        continue
      }
      var session = sessionOf[transceiver].flatMap { sessions.sessions[$0] }
      if session.map({ sessions.member(me.peerID, of: $0)?.state != .connected }) ?? true {
        session = sessions.createSession(
          newID(),
          creator: SessionMember(
            peerID: me.peerID, displayName: me.displayName, nodeID: me.nodeID, state: .connected),
          strategy: .cluster, encryption: .optional, maxPeers: maxPeers)
        sessionOf[transceiver] = session!.sessionID
      }
      guard let session else { continue }
      let targets = directory.advertisers(of: type, excluding: me.peerID)
        .filter { $0.discoveryInfo[Self.discoveryKey] == "1" }.map(\.peer)
      var pending: Set<String> = []
      for invitation in sent {
        let target = targets.first { $0.peerID == invitation.offer.toPeerID }
        let reachable = target.map { $0.nodeID == sessions.nodeID || linkedNodes.contains($0.nodeID) } ?? false
        if reachable && invitation.offer.session.sessionID == session.sessionID {
          pending.insert(invitation.offer.toPeerID)
        } else {
          directives.append(contentsOf: (try? sessions.cancel(invitation.id, by: me.peerID)) ?? [])
        }
      }
      for target in targets {
        if pending.contains(target.peerID) { continue }
        if let member = sessions.member(target.peerID, of: session), member.state != .notConnected { continue }
        let invited = try? sessions.invite(
          newID(), from: me.peerID,
          to: SessionMember(
            peerID: target.peerID, displayName: target.displayName, nodeID: target.nodeID, state: .connecting),
          sessionID: session.sessionID, context: Self.context(type), timeoutMillis: Self.invitationTimeoutMillis,
          now: now)
        if let invited { directives.append(contentsOf: invited.1) }
      }
    }
    return directives
  }

  /// Whether `peerID` is in `sessionID` by accepting a transceive invitation for `serviceType`: the leader's other
  /// sessions (made with `POST /sessions` and joined through an ordinary invitation) are not its transceive session.
  static func joinedThroughTransceive(
    _ sessionID: String, _ peerID: String, _ serviceType: String, _ sessions: SessionBook
  ) -> Bool {
    sessions.invitations.values.contains {
      $0.state == .accepted && $0.offer.toPeerID == peerID && $0.offer.session.sessionID == sessionID
        && Self.serviceType(ofContext: $0.offer.context) == serviceType
    }
  }

  /// A local peer received `invitation`: a transceiver accepts a transceive invitation for its type at once when
  /// it comes from the leader it sees. One from another peer (whose view of the mesh differs for a moment) stays
  /// pending: ``reconcile(directory:sessions:linkedNodes:now:newID:)`` accepts it if its sender turns out to lead.
  public mutating func invitationReceived(
    _ invitation: SessionBook.Invitation, directory: Directory, sessions: inout SessionBook, now: UInt64
  ) -> [SessionBook.Directive] {
    var directives: [SessionBook.Directive] = []
    guard let type = Self.serviceType(ofContext: invitation.offer.context) else { return directives }
    let transceiver = Transceiver(peerID: invitation.offer.toPeerID, serviceType: type)
    guard transceivers.contains(transceiver),
      Self.leader(of: type, including: transceiver.peerID, in: directory) == invitation.offer.fromPeerID
    else { return directives }
    directives.append(contentsOf: join(transceiver, invitation, sessions: &sessions, now: now))
    return directives
  }

  /// Accepts `invitation` and leaves the transceive session `transceiver` was in before, if any.
  mutating func join(
    _ transceiver: Transceiver, _ invitation: SessionBook.Invitation, sessions: inout SessionBook, now: UInt64
  ) -> [SessionBook.Directive] {
    var directives: [SessionBook.Directive] = []
    guard
      let accepted = try? sessions.answer(invitation.id, by: transceiver.peerID, accept: true, now: now)
    else { return directives }
    if let previous = sessionOf[transceiver], previous != invitation.offer.session.sessionID {
      directives.append(contentsOf: (try? sessions.leave(previous, peerID: transceiver.peerID)) ?? [])
    }
    directives.append(contentsOf: accepted)
    sessionOf[transceiver] = invitation.offer.session.sessionID
    return directives
  }
}

/// A local peer's transceiver for one service type.
public struct Transceiver: Hashable, Sendable {
  public let peerID: String
  public let serviceType: String

  public init(peerID: String, serviceType: String) {
    self.peerID = peerID
    self.serviceType = serviceType
  }
}
