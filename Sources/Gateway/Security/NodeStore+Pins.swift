/// Pinned certificate fingerprints of other nodes (trust on first use), by node id.
///
/// Layer 4 (node runtime). The first TLS link to a node pins the SHA-256 fingerprint of the certificate it presented;
/// later links must present the same one (``LinkManager`` enforces it from the pins loaded at start).
import Store

extension NodeStore {
  static let pinsSchema = """
    CREATE TABLE node_pins(
      node_id TEXT PRIMARY KEY,
      fingerprint TEXT NOT NULL,
      pinned_at TEXT NOT NULL
    );
    """

  /// Every pin: node id → fingerprint (lowercase hex).
  func allPins() async throws -> [String: String] {
    try await database.read { connection in
      var pins: [String: String] = [:]
      for row in try connection.query("SELECT node_id, fingerprint FROM node_pins") {
        pins[try row.string(0)] = try row.string(1)
      }
      return pins
    }
  }

  /// Pins `fingerprint` for `nodeID` unless a pin exists (the first one stays).
  func insertPin(nodeID: String, fingerprint: String, at timestamp: String) async throws {
    try await database.write { connection in
      try connection.execute(
        "INSERT OR IGNORE INTO node_pins(node_id, fingerprint, pinned_at) VALUES (?, ?, ?)",
        [.text(nodeID), .text(fingerprint), .text(timestamp)])
    }
  }

  /// Removes the pin of `nodeID`; returns whether there was one.
  func deletePin(nodeID: String) async throws -> Bool {
    try await database.write { connection in
      try connection.execute("DELETE FROM node_pins WHERE node_id = ?", [.text(nodeID)])
      return connection.changes > 0
    }
  }
}
