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

/// One frame of the mesh protocol.
public enum MeshMessage: Sendable, Hashable {
  /// First frame on a link, sent by both sides.
  case hello(NodeHello)
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
  /// The sender is closing the link on purpose (shutdown, duplicate link); no reconnect is needed for `duplicate`.
  case goodbye(reason: String)
}
