/// Resource transfer records in SQLite (migration 5). One row per side a node holds: `outgoing` on the sender's
/// node, `incoming` on the receiver's (both, for a transfer between two peers of one node).
import MeshCore
import Store

/// Which side of a transfer a record is.
enum TransferDirection: String, Sendable {
  case outgoing, incoming
}

/// Where a transfer is, as the API and the database spell it (the raw values are the contract).
enum TransferState: String, Sendable {
  case pending, awaitingConsent, inProgress, interrupted, finished, failed, canceled, declined
}

/// A transfer as stored and shown (`GET /api/v1/transfers/{id}`).
struct TransferRecord: PayloadRecord, Sendable, Equatable {
  var id: String
  var parties: PayloadParties
  var name: String
  var contentType: String
  var size: UInt64
  /// Bytes durable at the receiver (as far as this side knows).
  var bytes: UInt64
  var state: TransferState
  var reason: String?
  /// Lowercase hex, once the whole content is known.
  var sha256: String?
  /// The spool or partial file while in progress; the final file once finished.
  var path: String
  var resumedFrom: UInt64?
  var createdAt: String
  var updatedAt: String
  /// The group send this transfer is part of (each recipient's transfer, its node's copy, the upload spool).
  var groupID: String? = nil
  /// What the record stands for; only `transfer` records are shown to peers.
  var role: TransferRole = .transfer
  /// A recipient's transfer in a group send that crosses the mesh: the id of its node's copy, which carries the bytes.
  var copyID: String? = nil

  var isTerminal: Bool { state == .finished || state == .failed || state == .canceled || state == .declined }
}

extension NodeStore {
  static let transfersSchema = """
    CREATE TABLE transfers(
      id TEXT NOT NULL,
      direction TEXT NOT NULL CHECK (direction IN ('outgoing', 'incoming')),
      session_id TEXT NOT NULL,
      from_peer_id TEXT NOT NULL,
      from_display_name TEXT NOT NULL,
      from_node_id TEXT NOT NULL,
      to_peer_id TEXT NOT NULL,
      to_display_name TEXT NOT NULL,
      to_node_id TEXT NOT NULL,
      name TEXT NOT NULL,
      content_type TEXT NOT NULL,
      size INTEGER NOT NULL CHECK (size >= 0),
      bytes INTEGER NOT NULL DEFAULT 0,
      state TEXT NOT NULL,
      reason TEXT,
      sha256 TEXT,
      path TEXT NOT NULL,
      resumed_from INTEGER,
      created_at TEXT NOT NULL,
      updated_at TEXT NOT NULL,
      PRIMARY KEY (id, direction)
    );
    """

  /// Migration 10: group sends (one upload to many recipients): the group, the record's role, the copy it rides on.
  static let transferGroupsSchema = """
    ALTER TABLE transfers ADD COLUMN group_id TEXT;
    ALTER TABLE transfers ADD COLUMN role TEXT NOT NULL DEFAULT 'transfer';
    ALTER TABLE transfers ADD COLUMN copy_id TEXT;
    """

  func saveTransfer(_ record: TransferRecord) async throws {
    try await database.write { connection in
      try connection.execute(
        """
        INSERT OR REPLACE INTO transfers(id, direction, session_id, from_peer_id, from_display_name, from_node_id,
          to_peer_id, to_display_name, to_node_id, name, content_type, size, bytes, state, reason, sha256, path,
          resumed_from, created_at, updated_at, group_id, role, copy_id)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        """,
        [
          .text(record.id), .text(record.direction.rawValue), .text(record.sessionID), .text(record.fromPeerID),
          .text(record.fromDisplayName), .text(record.fromNodeID), .text(record.toPeerID),
          .text(record.toDisplayName), .text(record.toNodeID), .text(record.name), .text(record.contentType),
          .integer(Int64(record.size)), .integer(Int64(record.bytes)), .text(record.state.rawValue),
          record.reason.map { .text($0) } ?? .null, record.sha256.map { .text($0) } ?? .null, .text(record.path),
          record.resumedFrom.map { .integer(Int64($0)) } ?? .null, .text(record.createdAt), .text(record.updatedAt),
          record.groupID.map { .text($0) } ?? .null, .text(record.role.rawValue),
          record.copyID.map { .text($0) } ?? .null,
        ])
    }
  }

  func allTransfers() async throws -> [TransferRecord] {
    try await database.read { connection in
      try connection.query(
        """
        SELECT id, direction, session_id, from_peer_id, from_display_name, from_node_id, to_peer_id, to_display_name,
          to_node_id, name, content_type, size, bytes, state, reason, sha256, path, resumed_from, created_at, updated_at,
          group_id, role, copy_id
        FROM transfers ORDER BY created_at, id
        """
      ).map { row in
        TransferRecord(
          id: try row.string(0),
          parties: PayloadParties(
            direction: TransferDirection(rawValue: try row.string(1)) ?? .incoming, sessionID: try row.string(2),
            from: PayloadParty(peerID: try row.string(3), displayName: try row.string(4), nodeID: try row.string(5)),
            to: PayloadParty(peerID: try row.string(6), displayName: try row.string(7), nodeID: try row.string(8))),
          name: try row.string(9), contentType: try row.string(10),
          size: UInt64(max(0, try row.int64(11))), bytes: UInt64(max(0, try row.int64(12))),
          state: TransferState(rawValue: try row.string(13)) ?? .failed,
          reason: try row.optionalString(14), sha256: try row.optionalString(15), path: try row.string(16),
          resumedFrom: try row.optionalInt64(17).map { UInt64(max(0, $0)) }, createdAt: try row.string(18),
          updatedAt: try row.string(19), groupID: try row.optionalString(20),
          role: TransferRole(rawValue: try row.string(21)) ?? .transfer, copyID: try row.optionalString(22))
      }
    }
  }
}

extension NodeStore {
  func deleteTransfer(id: String) async throws {
    try await database.write { connection in
      try connection.execute("DELETE FROM transfers WHERE id = ?", [.text(id)])
    }
  }
}

/// A sender whose files a recipient accepts without being asked ("always accept from this person").
///
/// The entry belongs to the sender *on the node that hosted it* when the recipient said "always" (and, when that
/// node's link ran over TLS, on its certificate): a file from the same peer id arriving from another node, or from the
/// same node id presenting another certificate, is asked about again. Entries saved before this binding existed have
/// no node and are asked about once more.
struct AlwaysAccepted: Sendable, Equatable {
  var peerID: String
  var senderPeerID: String
  var senderDisplayName: String
  var createdAt: String
  /// The node that hosted the sender (nil: an entry saved before entries were bound to a node).
  var senderNodeID: String?
  /// The fingerprint of the certificate that node's link presented (nil: the link was plaintext).
  var senderFingerprint: String?
}

extension NodeStore {
  /// Migration 9: each local peer's always-accept list for file consent (`--file-consent ask`).
  static let alwaysAcceptSchema = """
    CREATE TABLE transfer_always_accept(
      peer_id TEXT NOT NULL REFERENCES peers(id) ON DELETE CASCADE,
      sender_peer_id TEXT NOT NULL,
      sender_display_name TEXT NOT NULL,
      created_at TEXT NOT NULL,
      PRIMARY KEY (peer_id, sender_peer_id)
    );
    """

  /// Migration 13: an always-accept entry is bound to the sender's node and its certificate.
  static let alwaysAcceptBindingSchema = """
    ALTER TABLE transfer_always_accept ADD COLUMN sender_node_id TEXT;
    ALTER TABLE transfer_always_accept ADD COLUMN sender_fingerprint TEXT;
    """

  func allAlwaysAccepted() async throws -> [AlwaysAccepted] {
    try await database.read { connection in
      try connection.query(
        """
        SELECT peer_id, sender_peer_id, sender_display_name, created_at, sender_node_id, sender_fingerprint
        FROM transfer_always_accept ORDER BY created_at, sender_peer_id
        """
      ).map { row in
        AlwaysAccepted(
          peerID: try row.string(0), senderPeerID: try row.string(1), senderDisplayName: try row.string(2),
          createdAt: try row.string(3), senderNodeID: try row.optionalString(4),
          senderFingerprint: try row.optionalString(5))
      }
    }
  }

  func saveAlwaysAccepted(_ entry: AlwaysAccepted) async throws {
    try await database.write { connection in
      try connection.execute(
        """
        INSERT OR REPLACE INTO transfer_always_accept(
          peer_id, sender_peer_id, sender_display_name, created_at, sender_node_id, sender_fingerprint)
        VALUES (?, ?, ?, ?, ?, ?)
        """,
        [
          .text(entry.peerID), .text(entry.senderPeerID), .text(entry.senderDisplayName), .text(entry.createdAt),
          entry.senderNodeID.map { .text($0) } ?? .null, entry.senderFingerprint.map { .text($0) } ?? .null,
        ])
    }
  }

  func deleteAlwaysAccepted(peerID: String, senderPeerID: String) async throws {
    try await database.write { connection in
      try connection.execute(
        "DELETE FROM transfer_always_accept WHERE peer_id = ? AND sender_peer_id = ?",
        [.text(peerID), .text(senderPeerID)])
    }
  }
}
