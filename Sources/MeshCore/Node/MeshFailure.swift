/// Why a ``MeshNode`` command (or one of its books' commands) was refused: what went wrong, in the mesh's own terms.
/// It carries no HTTP status: the REST layer maps each case to its status, snake_case code and a message that says
/// how to fix it (`APIError(_:)` in the gateway's HTTP layer).
public enum MeshFailure: Error, Equatable, Sendable, CustomStringConvertible {
  // MARK: Sessions and invitations

  /// The peer is not a member of session `sessionID` (or there is no such session here).
  case notSessionMember(sessionID: String)
  /// The inviting peer is not a member of session `sessionID` (or there is no such session here).
  case inviterNotSessionMember(sessionID: String)
  /// Only connected members invite; the inviter is in `state`.
  case inviterNotConnected(MemberState)
  /// A peer invited itself.
  case selfInvitation
  /// The invitation's context is over `maxBytes`.
  case contextTooLarge(maxBytes: Int)
  /// The invited peer (`displayName`) is a member already.
  case alreadyMember(displayName: String)
  /// The invited peer (`displayName`) has a pending invitation to the session already.
  case alreadyInvited(displayName: String)
  /// In a star session only the hub (its creator) invites.
  case onlyHubInvites
  /// The session requires encryption and the link to the invited peer's (`displayName`) node is not encrypted.
  case encryptionUnavailable(displayName: String)
  /// A pointToPoint session holds two peers already.
  case pointToPointFull
  /// The session's members and pending invitations reach `maxPeers`.
  case sessionFull(maxPeers: UInt16)
  /// No invitation `invitationID` to this peer (`sentByPeer`: none sent by it).
  case invitationNotFound(invitationID: String, sentByPeer: Bool)
  /// The invitation timed out before this answer.
  case invitationExpired
  /// The invitation is already `state` (`answering`: the peer tried to accept or decline it, else to cancel it).
  case invitationClosed(SessionBook.InvitationState, answering: Bool)
  /// The sending peer is in `state` in the session, not connected.
  case senderNotConnected(MemberState)
  /// Peer `peerID` is not a connected member of the session.
  case targetNotConnected(peerID: String)
  /// In a star session spokes send only to the hub.
  case spokeSendsOnlyToHub
  /// No peer `peerID` anywhere in the mesh.
  case unknownPeer(peerID: String)

  // MARK: Chat

  /// No chat room `roomID` known here or advertised nearby.
  case chatNotFound(roomID: String)
  /// Chat room `roomID` has ended: everyone left.
  case chatEnded(roomID: String)
  /// The peer is not in chat room `roomID`.
  case notChatMember(roomID: String)
  /// The node of the host of chat room `roomID` (`hostName`'s) is not linked over a link chat may use.
  case chatHostUnreachable(roomID: String, hostName: String)

  public var description: String {
    switch self {
    case .notSessionMember(let id), .inviterNotSessionMember(let id): "no session \(id) with this peer as a member"
    case .inviterNotConnected(let state): "only connected members can invite; this peer is \(state.rawValue)"
    case .selfInvitation: "a peer cannot invite itself"
    case .contextTooLarge(let max): "context must be at most \(max) bytes"
    case .alreadyMember(let name): "\(name) is already a member of this session"
    case .alreadyInvited(let name): "\(name) already has a pending invitation to this session"
    case .onlyHubInvites: "in a star session only the hub (its creator) invites"
    case .encryptionUnavailable(let name): "the link to \(name)'s node is not encrypted, and the session requires it"
    case .pointToPointFull: "a pointToPoint session holds exactly two peers and is full"
    case .sessionFull(let max): "the session is full (maxPeers \(max))"
    case .invitationNotFound(let id, _): "no invitation \(id) for this peer"
    case .invitationExpired: "the invitation has expired"
    case .invitationClosed(let state, _): "the invitation is already \(state.rawValue)"
    case .senderNotConnected(let state): "this peer is \(state.rawValue) in the session"
    case .targetNotConnected(let peerID): "\(peerID) is not a connected member of this session"
    case .spokeSendsOnlyToHub: "in a star session spokes send only to the hub"
    case .unknownPeer(let peerID): "no peer \(peerID) in the mesh"
    case .chatNotFound(let id): "no chat room \(id)"
    case .chatEnded(let id): "chat room \(id) has ended: everyone left"
    case .notChatMember(let id): "this peer is not in chat room \(id)"
    case .chatHostUnreachable(let id, let name): "the node hosting chat room \(id) (\(name)'s) is not linked"
    }
  }
}
