/// The node-to-node protocol `meshgate-node.v1`: the messages nodes exchange over a mesh link.
///
/// A mesh link is one WebSocket (subprotocol `meshgate-node.v1`, path `/mesh`) between two nodes; every
/// WebSocket binary message carries exactly one frame (see ``MeshFrameCodec`` and docs/mesh-protocol.md).
/// Each node is the authority for the peers it hosts: it tells every linked node about them (a full snapshot
/// after the handshake, then deltas), and nobody else speaks for them. Nothing here does I/O.

/// The protocol version carried in every frame header and in the handshake.
public let meshProtocolVersion: UInt8 = 1

/// What a node says about itself when a link opens.
public struct NodeHello: Sendable, Hashable {
  /// The node's id (a UUID string, stable across restarts).
  public var nodeID: String
  /// The node's human-readable name.
  public var name: String
  /// The software version, e.g. `0.1.0`.
  public var softwareVersion: String
  /// The TCP port the node serves HTTP, WebSocket and `/mesh` on (so the other side can dial back).
  public var port: UInt16

  public init(nodeID: String, name: String, softwareVersion: String, port: UInt16) {
    self.nodeID = nodeID
    self.name = name
    self.softwareVersion = softwareVersion
    self.port = port
  }
}

/// A peer as its hosting node announces it to the mesh.
public struct PeerAnnouncement: Sendable, Hashable {
  /// The peer id, unique mesh-wide.
  public var peerID: String
  /// The display name.
  public var displayName: String
  /// The service types it advertises, each with its discovery info.
  public var advertising: [String: [String: String]]

  public init(peerID: String, displayName: String, advertising: [String: [String: String]] = [:]) {
    self.peerID = peerID
    self.displayName = displayName
    self.advertising = advertising
  }
}

/// Session policies, as MCSession and Nearby strategies define them.
public enum SessionStrategy: String, Sendable, Hashable, CaseIterable {
  /// Everyone may invite and send to everyone (Nearby P2P_CLUSTER).
  case cluster
  /// One hub (the creator); spokes talk to the hub only, only the hub invites (Nearby P2P_STAR).
  case star
  /// Exactly two peers (Nearby P2P_POINT_TO_POINT).
  case pointToPoint
}

/// Whether a session's traffic must, may or need not be encrypted (MCEncryptionPreference).
public enum SessionEncryption: String, Sendable, Hashable, CaseIterable {
  case none, optional, required
}

/// A member's connection state (MCSessionState).
public enum MemberState: String, Sendable, Hashable {
  case connecting, connected, notConnected
}

/// One session member as the mesh sees it.
public struct SessionMember: Sendable, Hashable {
  public var peerID: String
  public var displayName: String
  public var nodeID: String
  public var state: MemberState

  public init(peerID: String, displayName: String, nodeID: String, state: MemberState) {
    self.peerID = peerID
    self.displayName = displayName
    self.nodeID = nodeID
    self.state = state
  }
}

/// A session's authoritative description, sent by its host node to every node with a member.
public struct SessionDescription: Sendable, Hashable {
  public var sessionID: String
  public var hostNodeID: String
  /// The creator; the hub of a star session.
  public var creatorPeerID: String
  public var strategy: SessionStrategy
  public var encryption: SessionEncryption
  public var maxPeers: UInt16
  /// Increases with every change, so stale descriptions are ignored.
  public var revision: UInt64
  public var members: [SessionMember]

  public init(
    sessionID: String, hostNodeID: String, creatorPeerID: String, strategy: SessionStrategy,
    encryption: SessionEncryption, maxPeers: UInt16, revision: UInt64, members: [SessionMember]
  ) {
    self.sessionID = sessionID
    self.hostNodeID = hostNodeID
    self.creatorPeerID = creatorPeerID
    self.strategy = strategy
    self.encryption = encryption
    self.maxPeers = maxPeers
    self.revision = revision
    self.members = members
  }
}

/// An invitation as it travels from the inviter's node to the invitee's node.
public struct InvitationOffer: Sendable, Hashable {
  public var invitationID: String
  public var session: SessionDescription
  public var fromPeerID: String
  public var fromDisplayName: String
  public var toPeerID: String
  /// Opaque context from the inviter (≤ 4 KiB), e.g. a job's name.
  public var context: [UInt8]
  public var timeoutMillis: UInt32
  public var verificationCode: String

  public init(
    invitationID: String, session: SessionDescription, fromPeerID: String, fromDisplayName: String, toPeerID: String,
    context: [UInt8], timeoutMillis: UInt32, verificationCode: String
  ) {
    self.invitationID = invitationID
    self.session = session
    self.fromPeerID = fromPeerID
    self.fromDisplayName = fromDisplayName
    self.toPeerID = toPeerID
    self.context = context
    self.timeoutMillis = timeoutMillis
    self.verificationCode = verificationCode
  }
}

/// How an invitation ended.
public enum InvitationOutcome: String, Sendable, Hashable {
  case accepted, declined, expired, canceled
}

/// A node another node can reach, passed along so that every node links to every other (a full mesh) even when
/// each was given only one seed.
public struct NodeAddress: Sendable, Hashable {
  public var nodeID: String
  public var host: String
  public var port: UInt16

  public init(nodeID: String, host: String, port: UInt16) {
    self.nodeID = nodeID
    self.host = host
    self.port = port
  }
}

/// One frame of the mesh protocol.
public enum MeshMessage: Sendable, Hashable {
  /// First frame on a link, sent by both sides (after ``authChallenge(nonce:)`` by a node that has a mesh secret).
  case hello(NodeHello)
  /// Link handshake, sent right before `hello` by a node that has a mesh secret: a fresh random challenge (16–64
  /// bytes) the other side must answer with ``authProof(mac:)``.
  case authChallenge(nonce: [UInt8])
  /// The answer to ``authChallenge(nonce:)``: HMAC-SHA256 under the mesh secret over the challenge, the prover's
  /// role and both certificate fingerprints (see ``LinkManager``); empty when the sender has no mesh secret.
  case authProof(mac: [UInt8])
  /// Liveness probe; the other side answers with ``heartbeatAck(sequence:sentAtMillis:)`` echoing both fields.
  case heartbeat(sequence: UInt64, sentAtMillis: UInt64)
  /// The answer to a heartbeat, used to measure the round-trip time.
  case heartbeatAck(sequence: UInt64, sentAtMillis: UInt64)
  /// Every peer the sender hosts, replacing whatever the receiver knew of them (sent after the handshake).
  case peerSnapshot([PeerAnnouncement])
  /// A peer of the sender appeared or changed (name or advertised services).
  case peerUpdated(PeerAnnouncement)
  /// A peer of the sender is gone.
  case peerRemoved(peerID: String)
  /// The nodes the sender is linked to, with addresses it reached them at (sent after every handshake).
  case nodeDirectory([NodeAddress])
  /// The sender is closing the link on purpose (shutdown, duplicate link); no reconnect is needed for `duplicate`.
  case goodbye(reason: String)
  /// Inviter's node → invitee's node: a new invitation.
  case invite(InvitationOffer)
  /// Invitee's node → inviter's node: the invitee accepted or declined (`accepted`/`declined` only).
  case inviteAnswer(invitationID: String, outcome: InvitationOutcome)
  /// Inviter's node → invitee's node: the invitation ended on the inviter's side (`expired`/`canceled`/`accepted`).
  case inviteClosed(invitationID: String, outcome: InvitationOutcome)
  /// Any node → the session's host node: add this peer (an accepted invitee) as a member.
  case sessionJoin(sessionID: String, member: SessionMember)
  /// Any node → the session's host node: this member left.
  case sessionLeave(sessionID: String, peerID: String)
  /// Host node → member nodes: the session as it is now.
  case sessionState(SessionDescription)
  /// Data for some members on the receiving node; `sequence` > 0 asks for a ``dataAck(sequence:)`` (reliable).
  case sessionData(sessionID: String, fromPeerID: String, toPeerIDs: [String], sequence: UInt64, payload: [UInt8])
  /// A named event (PeerKit) with a JSON object as UTF-8 text; `sequence` > 0 asks for a ``dataAck(sequence:)``,
  /// sharing the link's sequence numbers with `sessionData`.
  case sessionEvent(
    sessionID: String, fromPeerID: String, toPeerIDs: [String], sequence: UInt64, name: String, object: [UInt8])
  /// Cumulative acknowledgement: every reliable frame up to `sequence` on this link was delivered.
  case dataAck(sequence: UInt64)
  /// Sender's node → receiver's node: a resource transfer is offered (again, after a re-link, to resume it).
  case transferOffer(TransferOffer)
  /// Receiver's node → sender's node: send from `offset` (what the receiver already holds durably).
  case transferAccept(transferID: String, offset: UInt64)
  /// Receiver's node → sender's node: the offer is refused; `code` is a ``TransferRejection``.
  case transferReject(transferID: String, code: TransferRejection, message: String)
  /// Sender's node → receiver's node: the bytes at `offset` (at most ``MeshFrameCodec/maxChunkBytes``).
  case transferChunk(transferID: String, offset: UInt64, bytes: [UInt8])
  /// Receiver's node → sender's node: everything before `offset` is written; the window moves on.
  case transferCredit(transferID: String, offset: UInt64)
  /// Sender's node → receiver's node: every byte was sent; the whole content hashes to `sha256`.
  case transferEnd(transferID: String, size: UInt64, sha256: [UInt8])
  /// Receiver's node → sender's node: the content is complete, verified and in place.
  case transferFinished(transferID: String, sha256: [UInt8])
  /// Either node → the other: the transfer failed for good (`reason` is for people).
  case transferFailed(transferID: String, reason: String)
  /// Either node → the other: a party canceled the transfer; both sides stop and remove partial data.
  case transferCancel(transferID: String, reason: String)
  /// Receiver's node → sender's node: the offer waits for the recipient's Accept or Decline (file consent), for at
  /// most `timeoutMillis`; `transferAccept` or `transferReject` (`declined`) follows. The sender sends nothing yet.
  case transferAwaitingConsent(transferID: String, timeoutMillis: UInt64)
  /// Sender's node → a receiving node: one copy of a group send for the recipients on that node (again, with
  /// `resume`, after a re-link or restart). The copy then runs as a transfer with id `copyID`: the same accept,
  /// chunk, credit, end and finished frames; `transferFailed`/`transferCancel` with a recipient's transfer id end
  /// that recipient's share alone.
  case transferGroupOffer(TransferGroupOffer)
  /// Sender's node → receiver's node: a byte stream opens.
  case streamOpen(StreamOffer)
  /// Sender's node → receiver's node: the stream's bytes at `offset` (at most ``MeshFrameCodec/maxChunkBytes``).
  case streamData(streamID: String, offset: UInt64, bytes: [UInt8])
  /// Receiver's node → sender's node: every byte before `offset` was handed to the reading client.
  case streamCredit(streamID: String, offset: UInt64)
  /// Either node → the other: the stream ends; an empty `reason` means the sender finished normally.
  case streamClose(streamID: String, reason: String)
  /// The chat app's traffic between a room's host node and its member nodes: a ``ChatWire`` as UTF-8 JSON.
  case chat(payload: [UInt8])
}

/// A byte stream as the sender's node opens it at the receiver's node.
public struct StreamOffer: Sendable, Hashable {
  public var streamID: String
  public var sessionID: String
  public var fromPeerID: String
  public var fromDisplayName: String
  public var toPeerID: String
  public var name: String

  public init(
    streamID: String, sessionID: String, fromPeerID: String, fromDisplayName: String, toPeerID: String, name: String
  ) {
    self.streamID = streamID
    self.sessionID = sessionID
    self.fromPeerID = fromPeerID
    self.fromDisplayName = fromDisplayName
    self.toPeerID = toPeerID
    self.name = name
  }
}

/// A resource transfer as the sender's node offers it to the receiver's node.
public struct TransferOffer: Sendable, Hashable {
  public var transferID: String
  public var sessionID: String
  public var fromPeerID: String
  public var fromDisplayName: String
  public var toPeerID: String
  /// The sanitized file name.
  public var name: String
  public var contentType: String
  public var size: UInt64
  /// True when the sender offers it again after a link loss or restart (the receiver answers with its offset).
  public var resume: Bool

  public init(
    transferID: String, sessionID: String, fromPeerID: String, fromDisplayName: String, toPeerID: String, name: String,
    contentType: String, size: UInt64, resume: Bool
  ) {
    self.transferID = transferID
    self.sessionID = sessionID
    self.fromPeerID = fromPeerID
    self.fromDisplayName = fromDisplayName
    self.toPeerID = toPeerID
    self.name = name
    self.contentType = contentType
    self.size = size
    self.resume = resume
  }
}

/// One recipient of a group send on the receiving node: its own transfer id and its peer id.
public struct TransferGroupRecipient: Sendable, Hashable {
  public var transferID: String
  public var peerID: String

  public init(transferID: String, peerID: String) {
    self.transferID = transferID
    self.peerID = peerID
  }
}

/// One node's copy of a group send (one upload to many recipients) as the sender's node offers it: the file crosses
/// the link once, and the receiving node gives each listed recipient its own transfer record and download.
public struct TransferGroupOffer: Sendable, Hashable {
  /// The id of this node's copy (the transfer id the chunk, credit and end frames carry).
  public var copyID: String
  /// The group every recipient's transfer belongs to.
  public var groupID: String
  public var sessionID: String
  public var fromPeerID: String
  public var fromDisplayName: String
  /// The sanitized file name.
  public var name: String
  public var contentType: String
  public var size: UInt64
  /// True when the sender offers the copy again after a link loss or restart.
  public var resume: Bool
  /// The recipients on the receiving node (at most ``MeshFrameCodec/maxTargetPeers``, distinct peers and ids).
  public var recipients: [TransferGroupRecipient]

  public init(
    copyID: String, groupID: String, sessionID: String, fromPeerID: String, fromDisplayName: String, name: String,
    contentType: String, size: UInt64, resume: Bool, recipients: [TransferGroupRecipient]
  ) {
    self.copyID = copyID
    self.groupID = groupID
    self.sessionID = sessionID
    self.fromPeerID = fromPeerID
    self.fromDisplayName = fromDisplayName
    self.name = name
    self.contentType = contentType
    self.size = size
    self.resume = resume
    self.recipients = recipients
  }
}

/// Why a receiver's node refused a transfer offer.
public enum TransferRejection: String, Sendable, Hashable, CaseIterable {
  /// The file is over the receiver's size limit.
  case tooLarge
  /// The receiver's disk would drop below its free-space reserve.
  case insufficientStorage
  /// The receiving peer is not on that node, or either party is not in the session.
  case notMember
  /// A resume offer for a transfer the receiver does not have (any more).
  case unknownTransfer
  /// Anything else (the message says what).
  case refused
  /// The recipient declined the file (file consent).
  case declined
}
