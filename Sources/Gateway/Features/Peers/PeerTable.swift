/// The peers this node hosts, by id and by the hash of their token. Owned by the node actor; the store keeps them
/// durable.
import MeshCore

final class PeerTable {
  var byID: [String: StoredPeer] = [:]
  var idsByTokenHash: [String: String] = [:]
  /// When each peer's token was last used (Unix seconds; absent: never since it was created), as far as the store
  /// has been told (at most once an hour per peer); ``usageLoaded`` once read from the store at start.
  var lastUsed: [String: Int64] = [:]
  var usageLoaded = false
  /// When each peer was created (Unix seconds), parsed once from its `createdAt`.
  var createdAt: [String: Int64] = [:]
  /// When peers are next checked for expiry (monotonic ms).
  var nextExpiryCheck: UInt64 = 0
  /// Peers deleted because they expired (`meshgate_peers_expired_total`).
  var expired = 0
}

@available(*, unavailable) extension PeerTable: Sendable {}

extension Node {
  var peers: [String: StoredPeer] {
    get { peerTable.byID }
    _modify { yield &peerTable.byID }
  }

  var peerIDsByTokenHash: [String: String] {
    get { peerTable.idsByTokenHash }
    _modify { yield &peerTable.idsByTokenHash }
  }
}

extension Directory.PeerRef {
  /// `{"id","displayName","nodeId"}`, the peer shape of every event and response.
  var json: JSONValue {
    ["id": .string(peerID), "displayName": .string(displayName), "nodeId": .string(nodeID)]
  }
}
