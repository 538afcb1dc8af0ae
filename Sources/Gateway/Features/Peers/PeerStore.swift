/// The peers table: the peers this node hosts, with hashed tokens; deleting a peer deletes everything it owns.
import Foundation
import MeshCore
import Store
import Synchronization

/// A peer hosted on this node, as stored.
struct StoredPeer: Sendable, Equatable {
  var id: String
  var displayName: String
  var discoveryInfo: [String: String]
  var tokenHash: String
  var createdAt: String
}

extension NodeStore {
  func allPeers() async throws -> [StoredPeer] {
    try await database.read { connection in
      try connection.query(
        "SELECT id, display_name, discovery_info, token_hash, created_at FROM peers ORDER BY created_at"
      )
      .map { row in
        StoredPeer(
          id: try row.string(0), displayName: try row.string(1),
          discoveryInfo: Self.decodeMap(try row.string(2)), tokenHash: try row.string(3), createdAt: try row.string(4))
      }
    }
  }

  func insertPeer(_ peer: StoredPeer) async throws {
    try await database.write { connection in
      try connection.execute(
        "INSERT INTO peers(id, display_name, discovery_info, token_hash, created_at) VALUES (?, ?, ?, ?, ?)",
        [
          .text(peer.id), .text(peer.displayName), .text(Self.encodeMap(peer.discoveryInfo)), .text(peer.tokenHash),
          .text(peer.createdAt),
        ])
    }
  }

  func updatePeer(id: String, displayName: String, discoveryInfo: [String: String]) async throws {
    try await database.write { connection in
      try connection.execute(
        "UPDATE peers SET display_name = ?, discovery_info = ? WHERE id = ?",
        [.text(displayName), .text(Self.encodeMap(discoveryInfo)), .text(id)])
    }
  }

  func deletePeer(id: String) async throws {
    // What is staged for the peer is written first, so its deletion takes it too.
    try await eventLog.settleEvents()
    try await database.write { connection in
      try connection.execute("DELETE FROM jobs WHERE owner_peer_id = ?", [.text(id)])
      try connection.execute("DELETE FROM peer_services WHERE peer_id = ?", [.text(id)])
      try connection.execute("DELETE FROM peers WHERE id = ?", [.text(id)])
      try self.eventLog.deleteLog(connection, peerID: id)
    }
  }
}
