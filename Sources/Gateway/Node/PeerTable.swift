/// The identities of the peers this node hosts: who each is, by id and by the hash of its token.
///
/// Layer 4 (node runtime). A shell service like the clock and the connection table: the node authenticates every
/// request and socket against it (``Node/authenticate(_:allowQueryToken:)``), and features look up the local peers
/// in it. What is done to peers — creating, renaming, deleting, expiring them, the admin's list — is the peers
/// feature's (Features/Peers/), which changes this table; the store keeps it durable.
import MeshCore

struct PeerTable: Sendable {
  /// The local peers by id.
  private(set) var byID: [String: StoredPeer] = [:]
  private var idsByTokenHash: [String: String] = [:]

  init(_ peers: [StoredPeer] = []) {
    for peer in peers { insert(peer) }
  }

  subscript(id: String) -> StoredPeer? { byID[id] }

  var count: Int { byID.count }
  var isEmpty: Bool { byID.isEmpty }
  var keys: Dictionary<String, StoredPeer>.Keys { byID.keys }

  /// The peer whose token hashes to `tokenHash`.
  func peer(forTokenHash tokenHash: String) -> StoredPeer? {
    idsByTokenHash[tokenHash].flatMap { byID[$0] }
  }

  /// Adds a peer, or replaces the one with its id (its token stays the same).
  mutating func insert(_ peer: StoredPeer) {
    byID[peer.id] = peer
    idsByTokenHash[peer.tokenHash] = peer.id
  }

  /// Forgets a peer: its token stops working at once.
  mutating func remove(_ id: String) {
    guard let peer = byID.removeValue(forKey: id) else { return }
    idsByTokenHash[peer.tokenHash] = nil
  }
}

extension Directory.PeerRef {
  /// `{"id","displayName","nodeId"}`, the peer shape of every event and response.
  var json: JSONValue {
    ["id": .string(peerID), "displayName": .string(displayName), "nodeId": .string(nodeID)]
  }
}
