/// The peer_services table: what each local peer advertises and browses, restored at start.
import Foundation
import MeshCore
import Store
import Synchronization

extension NodeStore {
  /// A peer's advertised or browsed service, as stored.
  struct StoredService: Sendable, Equatable {
    var peerID: String
    var kind: String
    var serviceType: String
    var discoveryInfo: [String: String]
  }

  func allServices() async throws -> [StoredService] {
    try await database.read { connection in
      try connection.query(
        "SELECT peer_id, kind, service_type, discovery_info FROM peer_services ORDER BY peer_id, kind, service_type"
      ).map { row in
        StoredService(
          peerID: try row.string(0), kind: try row.string(1), serviceType: try row.string(2),
          discoveryInfo: Self.decodeMap(try row.string(3)))
      }
    }
  }

  func setService(_ service: StoredService) async throws {
    try await database.write { connection in
      try connection.execute(
        """
        INSERT INTO peer_services(peer_id, kind, service_type, discovery_info) VALUES (?, ?, ?, ?)
        ON CONFLICT(peer_id, kind, service_type) DO UPDATE SET discovery_info = excluded.discovery_info
        """,
        [
          .text(service.peerID), .text(service.kind), .text(service.serviceType),
          .text(Self.encodeMap(service.discoveryInfo)),
        ])
    }
  }

  func removeService(peerID: String, kind: String, serviceType: String) async throws {
    try await database.write { connection in
      try connection.execute(
        "DELETE FROM peer_services WHERE peer_id = ? AND kind = ? AND service_type = ?",
        [.text(peerID), .text(kind), .text(serviceType)])
    }
  }
}
