/// Resource transfer records in SQLite (migration 5). One row per side a node holds: `outgoing` on the sender's
/// node, `incoming` on the receiver's (both, for a transfer between two peers of one node).
import Foundation
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

extension TransferRecord {
  /// The Content-Type a file keeps: the upload's, trimmed, when it is printable ASCII of at most 255 bytes and not
  /// curl's form label; nil otherwise (the file is then `application/octet-stream`).
  static func cleanContentType(_ value: String) -> String? {
    let trimmed = value.trimmingCharacters(in: .whitespaces)
    // curl's --data-binary labels every body as a form; a file upload never is one.
    if trimmed.lowercased().hasPrefix("application/x-www-form-urlencoded") { return nil }
    guard !trimmed.isEmpty, trimmed.utf8.count <= 255,
      trimmed.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value < 0x7F })
    else { return nil }
    return trimmed
  }

  /// `attachment` with an ASCII fallback name and the exact UTF-8 name (RFC 6266 / 8187).
  static func contentDisposition(_ name: String) -> String {
    let fallback = String(
      name.unicodeScalars.map { $0.isASCII && $0 != "\"" && $0 != "\\" && $0.value >= 0x20 ? Character($0) : "_" })
    let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8)
    let encoded = name.utf8.map { unreserved.contains($0) ? String(UnicodeScalar($0)) : String(format: "%%%02X", $0) }
      .joined()
    return "attachment; filename=\"\(fallback)\"; filename*=UTF-8''\(encoded)"
  }

  /// The bytes of a hex digest (the recorded `sha256`); nil when it is not one.
  static func unhex(_ text: String) -> [UInt8]? {
    let digits = Array(text.utf8)
    guard digits.count % 2 == 0 else { return nil }
    var bytes: [UInt8] = []
    var index = 0
    while index < digits.count {
      guard let high = hexValue(digits[index]), let low = hexValue(digits[index + 1]) else { return nil }
      bytes.append(high << 4 | low)
      index += 2
    }
    return bytes
  }

  private static func hexValue(_ digit: UInt8) -> UInt8? {
    switch digit {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
    default: nil
    }
  }
}

extension AlwaysAccepted {
  /// The most senders one recipient may keep on its always-accept list.
  static let limit = 1000
}
