/// What happened to a ``MeshNode``: time passed, the network did something, or the node's own API changed a local
/// peer. The runtime (the gateway's `Node`, or the simulator) reports each as it happens with
/// ``MeshNode/handle(_:)`` and carries out the ``MeshEffect``s it returns.
///
/// Session and invitation commands that answer something (a new invitation, a failure the REST layer shows) are
/// typed methods of ``MeshNode`` instead (``MeshNode/invite(_:from:to:sessionID:context:timeoutMillis:now:)`` …);
/// they return effects of the same type. So do the chat commands (``MeshNode/postChat(_:id:from:body:sentAt:)`` …):
/// their chat effects are carried out like any others, and the runtime waits for them before it answers.
public enum MeshInput: Sendable, Hashable {
  /// The periodic tick (every 100 ms in the runtime): heartbeats, dials, timeouts, invitation expiry.
  case tick(now: UInt64)
  /// The beacon (or DNS-SD, `source: .dnssd`) found node `nodeID` at `host:port`.
  case discovered(nodeID: String, host: String, port: UInt16, source: LinkManager.Source, now: UInt64)
  /// A static seed to dial (`--seed`, `POST /api/v1/mesh/nodes`).
  case seedAdded(host: String, port: UInt16, now: UInt64)
  /// A node dialled this one on connection `id` (allocated by the runtime, below `1 << 32`).
  case inboundOpened(LinkManager.ConnectionID, remoteHost: String?, transport: LinkManager.Transport, now: UInt64)
  /// A connection this node dialled (``MeshEffect/connect(_:host:port:)``) opened.
  case outboundOpened(LinkManager.ConnectionID, transport: LinkManager.Transport, now: UInt64)
  /// A connection this node dialled could not be opened.
  case outboundFailed(LinkManager.ConnectionID, now: UInt64)
  /// A connection closed (either side, or reset).
  case closed(LinkManager.ConnectionID, now: UInt64)
  /// A decoded frame arrived on a connection.
  case frameReceived(MeshMessage, on: LinkManager.ConnectionID, now: UInt64)
  /// Bytes arrived on a connection at `now`, whole frames or not (the runtime reads this from the kernel).
  case bytesReceived(on: LinkManager.ConnectionID, now: UInt64)
  /// A local peer was created (or restored at start).
  case localPeerAdded(peerID: String, displayName: String)
  /// A local peer changed its display name.
  case localPeerRenamed(peerID: String, displayName: String)
  /// A local peer was deleted: it leaves the directory, its sessions and its invitations.
  case localPeerRemoved(peerID: String, now: UInt64)
  /// `PUT /advertising/{serviceType}` (also to change the discovery info).
  case advertisingStarted(peerID: String, serviceType: String, discoveryInfo: [String: String])
  /// `DELETE /advertising/{serviceType}`.
  case advertisingStopped(peerID: String, serviceType: String)
  /// `PUT /browsing/{serviceType}`.
  case browsingStarted(peerID: String, serviceType: String)
  /// `DELETE /browsing/{serviceType}`.
  case browsingStopped(peerID: String, serviceType: String)
  /// `PUT /presence`: the peer is told who is present, and who appears and leaves.
  case presenceWatchStarted(peerID: String)
  /// `DELETE /presence`.
  case presenceWatchStopped(peerID: String)
}

/// What the runtime must do for a ``MeshNode``: network I/O, reports and what to tell local peers. Frames are
/// already routed to connections; the runtime only writes, closes and publishes.
public enum MeshEffect: Sendable, Hashable {
  /// Open a connection to `host:port/mesh`; report ``MeshInput/outboundOpened(_:transport:now:)`` or
  /// ``MeshInput/outboundFailed(_:now:)``.
  case connect(LinkManager.ConnectionID, host: String, port: UInt16)
  /// Send a link or directory frame on a connection.
  case send(MeshMessage, on: LinkManager.ConnectionID)
  /// Send one directory frame on each of several connections (encode it once).
  case broadcast(MeshMessage, on: [LinkManager.ConnectionID])
  /// Send a session or invitation frame to node `nodeID`, on its link connection (nil: not linked now, the frame is
  /// dropped). The runtime may drop unreliable data when the link is busy, and numbers deferred reliable frames
  /// (``SessionBook/unsequenced``) with ``MeshNode/sequenceReliable(_:to:)`` when they go on the wire.
  case sendToNode(MeshMessage, nodeID: String, on: LinkManager.ConnectionID?)
  /// Close a connection after sending anything already queued.
  case close(LinkManager.ConnectionID, reason: String)
  /// Close a connection at once for a protocol error (a `hello` whose node id is malformed).
  case drop(LinkManager.ConnectionID, reason: String)
  /// Remember `fingerprint` as the certificate of `nodeID` (trust on first use).
  case pin(nodeID: String, fingerprint: String)
  /// A link was refused for a security reason (report it; the connection is being closed).
  case refused(LinkManager.Refusal)
  /// A frame from another node was refused (count it, log it, answer it when ``FrameRefusal/answer`` says so).
  case frameRefused(FrameRefusal)
  /// A node is linked. The directory and sessions were told already (their effects come before this one).
  case linkUp(NodeHello, security: SessionBook.LinkSecurity)
  /// The link to a node moved to a new connection; the directory and sessions were told already.
  case linkReplaced(nodeID: String, security: SessionBook.LinkSecurity)
  /// A node is no longer linked; the directory and sessions were told already.
  case linkDown(nodeID: String)
  /// Tell local peer `peerID` something the directory found (`peer.found`, `peer.lost`, `presence.found`,
  /// `presence.lost`).
  case directoryEvent(peerID: String, Directory.Event)
  /// Tell local peer `peerID` a session or invitation event (only ever for peers hosted here).
  case sessionEvent(peerID: String, SessionBook.Event)
  /// Tell each of these local peers, in order, the same session data or named event (a fan-out, as one effect).
  case sessionEvents(peerIDs: [String], SessionBook.Event)
  /// Opens a chat batch: persist `writes` (rooms, then messages, in order) in one transaction, after every chat batch
  /// before it. The chat effects that follow it, up to the next `chatStore`, belong to the batch: they are carried out
  /// in order once the writes are durable, and not at all when the writes fail, so nothing is sent or told that a
  /// crash could make this node forget. Every chat batch opens with one (with no writes when it persists nothing).
  case chatStore([ChatWrite])
  /// Send a chat frame to node `toNode`, over a link chat may use (``MeshNode/chatLinkUsable(_:)``; none: dropped).
  case chatSend(ChatWire, toNode: String)
  /// Read the stored messages of `roomID` after seq `after` and send them to node `toNode` as
  /// ``ChatWire/messages(roomID:_:)`` frames, in order, before the next chat effect.
  case chatHistory(roomID: String, toNode: String, after: UInt64)
  /// Tell local peer `peerID` about room `roomID` (a `chat.*` event).
  case chatEvent(peerID: String, roomID: String, ChatBook.Event)
  /// A local peer's join completed (`joined`) or cannot (the room ended or is unknown): answer its waiting request.
  case chatJoinSettled(roomID: String, peerID: String, joined: Bool)
  /// A chat frame from node `nodeID` did not decode; it is ignored (log it).
  case chatFrameMalformed(nodeID: String, detail: String)
  /// Carry out what the payload book (``MeshNode/payloads``) decided about a transfer or stream frame.
  case payload(PayloadEffect)
}

/// A frame refused before any state machine saw it (docs/security.md, "What a linked node may do").
public struct FrameRefusal: Sendable, Hashable {
  /// The `meshgate_mesh_frames_refused_total` reason: `invalid_id`, `not_own_peer` or `unknown_peer`.
  public var reason: String
  /// What was wrong, for the log line.
  public var detail: String
  /// The sending node, when known (not before its `hello`).
  public var nodeID: String?
  /// The refused frame (its ids are echoed back only through the codec, never used).
  public var message: MeshMessage
  /// The reason to tell the sending node when the frame is an offer waiting for an answer (a transfer offer or a
  /// stream open); nil when the sender is not known.
  public var answer: String?
  /// The frame claimed a sending peer that the sending node does not host.
  public var spoofedSender = false
}

/// One change to a node's durable chat state, carried by ``MeshEffect/chatStore(_:)``.
public enum ChatWrite: Sendable, Hashable {
  /// Persist the room (name, host, roster, this node's members, last seq, ended).
  case room(ChatRoom)
  /// Persist messages (insert, or set the `seq` of a pending one with the same id).
  case messages(roomID: String, [ChatMessage])
}
