/// The peers this node hosts, by id and by the hash of their token. Owned by the node actor; the store keeps them
/// durable.
import MeshCore

final class PeerTable {
  var byID: [String: StoredPeer] = [:]
  var idsByTokenHash: [String: String] = [:]
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
