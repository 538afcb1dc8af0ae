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

  /// Leaders make sure every transceiver they see is a member or has a pending invitation.
  public mutating func reconcile(
    directory: Directory, sessions: inout SessionBook, linkedNodes: Set<String>, now: UInt64, newID: () -> String
  ) -> [SessionBook.Directive] {
    var directives: [SessionBook.Directive] = []
    for transceiver in transceivers.sorted(by: { ($0.peerID, $0.serviceType) < ($1.peerID, $1.serviceType) }) {
      guard let me = directory.peer(transceiver.peerID), directory.isLocal(me.peerID) else {
        transceivers.remove(transceiver)
        sessionOf[transceiver] = nil
        continue
      }
      let type = transceiver.serviceType
      guard Self.leader(of: type, including: me.peerID, in: directory) == me.peerID else { continue }
      var sessionID = sessionOf[transceiver]
      if sessionID == nil || sessions.sessions[sessionID!] == nil {
        let session = sessions.createSession(
          newID(), creator: SessionMember(
            peerID: me.peerID, displayName: me.displayName, nodeID: me.nodeID, state: .connected),
          strategy: .cluster, encryption: .optional, maxPeers: maxPeers)
        sessionID = session.sessionID
        sessionOf[transceiver] = session.sessionID
      }
      guard let session = sessions.sessions[sessionID!] else { continue }
      let pending = Set(
        sessions.invitations(of: me.peerID).filter {
          $0.state == .pending && $0.offer.session.sessionID == session.sessionID
        }.map(\.offer.toPeerID))
      for advertiser in directory.advertisers(of: type, excluding: me.peerID)
      where advertiser.discoveryInfo[Self.discoveryKey] == "1" {
        let target = advertiser.peer
        if pending.contains(target.peerID) { continue }
        if let member = session.members.first(where: { $0.peerID == target.peerID }), member.state != .notConnected {
          continue
        }
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

  /// A local peer received `invitation`: a transceiver accepts a transceive invitation for its type at once.
  public mutating func invitationReceived(
    _ invitation: SessionBook.Invitation, directory: Directory, sessions: inout SessionBook, now: UInt64
  ) -> [SessionBook.Directive] {
    var directives: [SessionBook.Directive] = []
    guard let type = Self.serviceType(ofContext: invitation.offer.context) else { return directives }
    let transceiver = Transceiver(peerID: invitation.offer.toPeerID, serviceType: type)
    guard transceivers.contains(transceiver) else { return directives }
    // Join the leader's session and leave the one this peer led before, if any.
    if let previous = sessionOf.removeValue(forKey: transceiver), previous != invitation.offer.session.sessionID {
      directives.append(contentsOf: (try? sessions.leave(previous, peerID: transceiver.peerID)) ?? [])
    }
    directives.append(
      contentsOf: (try? sessions.answer(invitation.id, by: transceiver.peerID, accept: true, now: now)) ?? [])
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
