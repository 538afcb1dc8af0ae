/// The node's durable state in SQLite: the database, its migrations and the node's identity; each feature's tables
/// and queries live with the feature (`extension NodeStore` in `Features/<X>/…Store.swift`); the event log is its own component (`Events/EventLog`).
///
/// Layer 4 (node runtime). All SQL lives in the store files. Calls hop to the ``Database`` actor, whose private serial
/// queue keeps blocking SQLite work off the lws service thread. A write that returned has been committed
/// in WAL mode with `synchronous=NORMAL`: it survives the process being killed.
import Foundation
import MeshCore
import Store
import Synchronization

/// Typed queries over the node database.
final class NodeStore: Sendable {
  let database: Database
  /// The event log: its ring, staging, batches to SQLite, reads and retention (Events/EventLog.swift).
  let eventLog: EventLog

  static let migrations: [Migration] = [
    Migration(
      version: 1, name: "identity, peers and event log",
      sql: """
        CREATE TABLE node_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE peers(
          id TEXT PRIMARY KEY,
          display_name TEXT NOT NULL,
          discovery_info TEXT NOT NULL,
          token_hash TEXT NOT NULL UNIQUE,
          created_at TEXT NOT NULL,
          trimmed_through INTEGER NOT NULL DEFAULT 0
        );
        CREATE TABLE events(
          seq INTEGER PRIMARY KEY AUTOINCREMENT,
          peer_id TEXT NOT NULL REFERENCES peers(id) ON DELETE CASCADE,
          type TEXT NOT NULL,
          at TEXT NOT NULL,
          data TEXT NOT NULL
        );
        CREATE INDEX events_by_peer ON events(peer_id, seq);
        """),
    Migration(
      version: 2, name: "advertised and browsed services",
      sql: """
        CREATE TABLE peer_services(
          peer_id TEXT NOT NULL REFERENCES peers(id) ON DELETE CASCADE,
          kind TEXT NOT NULL CHECK (kind IN ('advertise', 'browse')),
          service_type TEXT NOT NULL,
          discovery_info TEXT NOT NULL DEFAULT '{}',
          PRIMARY KEY (peer_id, kind, service_type)
        );
        """),
    Migration(
      version: 3, name: "jobs",
      sql: """
        CREATE TABLE jobs(
          id TEXT PRIMARY KEY,
          owner_peer_id TEXT NOT NULL REFERENCES peers(id) ON DELETE CASCADE,
          name TEXT NOT NULL,
          due_date TEXT,
          payment_cents INTEGER CHECK (payment_cents IS NULL OR payment_cents >= 0),
          notes TEXT,
          assigned_to TEXT,
          received_from TEXT,
          created_at TEXT NOT NULL,
          updated_at TEXT NOT NULL
        );
        CREATE INDEX jobs_by_owner ON jobs(owner_peer_id, created_at, id);
        """),
    Migration(version: 4, name: "chat rooms and messages", sql: NodeStore.chatSchema),
    Migration(
      version: 5, name: "event bodies shared by the recipients of one fan-out",
      sql: """
        CREATE TABLE event_bodies(
          id INTEGER PRIMARY KEY,
          type TEXT NOT NULL,
          at TEXT NOT NULL,
          data TEXT NOT NULL
        );
        CREATE TABLE event_log(
          peer_id TEXT NOT NULL,
          seq INTEGER NOT NULL,
          PRIMARY KEY (peer_id, seq)
        ) WITHOUT ROWID;
        INSERT INTO event_bodies(id, type, at, data) SELECT seq, type, at, data FROM events;
        INSERT INTO event_log(peer_id, seq) SELECT peer_id, seq FROM events;
        DROP TABLE events;
        """),
    Migration(version: 6, name: "pinned node certificates", sql: NodeStore.pinsSchema),
    Migration(version: 7, name: "resource transfers", sql: NodeStore.transfersSchema),
    Migration(version: 8, name: "admin token", sql: NodeStore.adminSchema),
    Migration(version: 9, name: "file consent always-accept lists", sql: NodeStore.alwaysAcceptSchema),
    Migration(version: 10, name: "group sends", sql: NodeStore.transferGroupsSchema),
    Migration(
      version: 11, name: "event log entries waiting to be indexed per peer",
      sql: """
        CREATE TABLE event_pending(
          seq INTEGER PRIMARY KEY,
          peers TEXT NOT NULL
        );
        """),
    Migration(version: 12, name: "event bodies stored once for their audience", sql: EventLog.audiencesSchema),
    Migration(
      version: 13, name: "always-accept entries bound to the sender's node", sql: NodeStore.alwaysAcceptBindingSchema),
    Migration(version: 14, name: "when each peer was last used", sql: NodeStore.peerUsageSchema),
  ]

  /// Job writes waiting for the next group commit (``saveJob(_:)``).
  let jobWrites = Mutex(JobWriteQueue())

  struct JobWriteQueue {
    var waiting: [(job: Job, waiter: CheckedContinuation<Void, any Error>)] = []
    /// A task is writing a batch; writes that arrive meanwhile wait for the next one.
    var writing = false
    /// Batches (transactions) written so far (tests).
    var batches = 0
  }

  init(path: String, retention: Int) throws {
    self.database = try Database(path: path, migrations: Self.migrations)
    self.eventLog = EventLog(database: database, retention: retention)
  }

  /// Answers when the database does: a read on its queue, writing nothing (`/healthz`).
  func probe() async throws {
    _ = try await database.read { try $0.queryOne("SELECT 1") }
  }

  /// The node id, created on first start and kept for the life of the data directory.
  func nodeID() async throws -> String {
    try await database.write { connection in
      if let row = try connection.queryOne("SELECT value FROM node_meta WHERE key = 'node_id'") {
        return try row.string(0)
      }
      let id = RecordID.make()
      try connection.execute("INSERT INTO node_meta(key, value) VALUES ('node_id', ?)", [.text(id)])
      return id
    }
  }

  static func encodeMap(_ map: [String: String]) -> String {
    JSONValue.object(JSONObject(map.sorted { $0.key < $1.key }.map { ($0.key, JSONValue.string($0.value)) }))
      .serializedString()
  }

  static func decodeMap(_ text: String) -> [String: String] {
    guard case .object(let object)? = try? JSONValue.parse(text) else { return [:] }
    var map: [String: String] = [:]
    for member in object {
      if case .string(let value) = member.value { map[member.key] = value }
    }
    return map
  }
}
