/// The node's durable state in SQLite: its identity, peers (with hashed tokens) and per-peer event logs.
///
/// Layer 4 (node runtime). All SQL lives here. Calls hop to the ``Database`` actor, whose private serial
/// queue keeps blocking SQLite work off the lws service thread. A write that returned has been committed
/// in WAL mode with `synchronous=NORMAL`: it survives the process being killed.
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

/// One entry of a peer's event log.
struct StoredEvent: Sendable, Equatable {
  var sequence: Int64
  var peerID: String
  var type: String
  var at: String
  var data: JSONValue

  /// The wire envelope `{"id","type","at","data"}`.
  var envelope: JSONValue {
    ["id": .string(String(sequence)), "type": .string(type), "at": .string(at), "data": data]
  }
}

/// A jobs cursor that names no job of the caller.
struct JobCursorError: Error {}

/// Typed queries over the node database.
final class NodeStore: Sendable {
  let database: Database
  /// The retention limit and each peer's log length (learnt on its first append), guarded for the database queue
  /// and the node actor.
  let eventLog: Mutex<EventLogState>

  struct EventLogState {
    var retention: Int
    var counts: [String: Int] = [:]
    var trimmed = 0
  }

  /// Events kept per peer; an admin can change it at run time.
  var retention: Int {
    get { eventLog.withLock { $0.retention } }
    set { eventLog.withLock { $0.retention = newValue } }
  }

  /// Events dropped by retention since the node started (`/metrics`).
  var eventsTrimmed: Int { eventLog.withLock { $0.trimmed } }

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
    chatMigration,
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
    NodeStore.transfersMigration,
    NodeStore.adminMigration,
    NodeStore.alwaysAcceptMigration,
  ]

  init(path: String, retention: Int) throws {
    self.database = try Database(path: path, migrations: Self.migrations)
    self.eventLog = Mutex(EventLogState(retention: retention))
  }

  /// The node id, created on first start and kept for the life of the data directory.
  func nodeID() async throws -> String {
    try await database.write { connection in
      if let row = try connection.queryOne("SELECT value FROM node_meta WHERE key = 'node_id'") {
        return try row.string(0)
      }
      let id = UUID().uuidString.lowercased()
      try connection.execute("INSERT INTO node_meta(key, value) VALUES ('node_id', ?)", [.text(id)])
      return id
    }
  }

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

  // MARK: - Jobs

  static func encodeParty(_ party: JobParty?) -> SQLValue {
    guard let party else { return .null }
    let value: JSONValue = [
      "id": .string(party.peerID), "displayName": .string(party.displayName), "nodeId": .string(party.nodeID),
    ]
    return .text(value.serializedString())
  }

  static func decodeParty(_ text: String?) -> JobParty? {
    guard let text, case .object(let object)? = try? JSONValue.parse(text) else { return nil }
    return JobParty(
      peerID: object["id"]?.stringValue ?? "", displayName: object["displayName"]?.stringValue ?? "",
      nodeID: object["nodeId"]?.stringValue ?? "")
  }

  static let jobColumns =
    "id, owner_peer_id, name, due_date, payment_cents, notes, assigned_to, received_from, created_at, updated_at"

  static func job(_ row: Row) throws -> Job {
    Job(
      id: try row.string(0), ownerPeerID: try row.string(1), name: try row.string(2),
      dueDate: try row.optionalString(3),
      paymentCents: try row.optionalInt64(4), notes: try row.optionalString(5),
      assignedTo: decodeParty(try row.optionalString(6)), receivedFrom: decodeParty(try row.optionalString(7)),
      createdAt: try row.string(8), updatedAt: try row.string(9))
  }

  func saveJob(_ job: Job) async throws {
    try await database.write { connection in
      try connection.execute(
        """
        INSERT INTO jobs(\(Self.jobColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT(id) DO UPDATE SET name = excluded.name, due_date = excluded.due_date,
          payment_cents = excluded.payment_cents, notes = excluded.notes, assigned_to = excluded.assigned_to,
          updated_at = excluded.updated_at
        """,
        [
          .text(job.id), .text(job.ownerPeerID), .text(job.name), job.dueDate.map { .text($0) } ?? .null,
          job.paymentCents.map { .integer($0) } ?? .null, job.notes.map { .text($0) } ?? .null,
          Self.encodeParty(job.assignedTo), Self.encodeParty(job.receivedFrom), .text(job.createdAt),
          .text(job.updatedAt),
        ])
    }
  }

  func job(id: String, owner: String) async throws -> Job? {
    try await database.read { connection in
      try connection.queryOne(
        "SELECT \(Self.jobColumns) FROM jobs WHERE id = ? AND owner_peer_id = ?", [.text(id), .text(owner)]
      ).map(Self.job)
    }
  }

  /// A page of `owner`'s jobs in creation order, after the job `cursor` (exclusive).
  func jobs(owner: String, after cursor: String?, limit: Int) async throws -> [Job] {
    try await database.read { connection in
      if let cursor,
        let anchor = try connection.queryOne(
          "SELECT created_at FROM jobs WHERE id = ? AND owner_peer_id = ?", [.text(cursor), .text(owner)])
      {
        return try connection.query(
          """
          SELECT \(Self.jobColumns) FROM jobs WHERE owner_peer_id = ? AND (created_at, id) > (?, ?)
          ORDER BY created_at, id LIMIT ?
          """, [.text(owner), .text(try anchor.string(0)), .text(cursor), .integer(Int64(limit))]
        ).map(Self.job)
      }
      if cursor != nil { throw JobCursorError() }
      return try connection.query(
        "SELECT \(Self.jobColumns) FROM jobs WHERE owner_peer_id = ? ORDER BY created_at, id LIMIT ?",
        [.text(owner), .integer(Int64(limit))]
      ).map(Self.job)
    }
  }

  func deleteJob(id: String, owner: String) async throws -> Bool {
    try await database.write { connection in
      try connection.execute("DELETE FROM jobs WHERE id = ? AND owner_peer_id = ?", [.text(id), .text(owner)])
      return connection.changes > 0
    }
  }

  func deletePeer(id: String) async throws {
    try await database.write { connection in
      try connection.execute("DELETE FROM jobs WHERE owner_peer_id = ?", [.text(id)])
      try connection.execute("DELETE FROM peer_services WHERE peer_id = ?", [.text(id)])
      try connection.execute("DELETE FROM event_log WHERE peer_id = ?", [.text(id)])
      try connection.execute("DELETE FROM peers WHERE id = ?", [.text(id)])
    }
    eventLog.withLock { $0.counts[id] = nil }
  }

  /// Appends the entries in one transaction and returns them with their sequence numbers (their data as the serialized
  /// bytes that were stored), trimming each log to the retention limit now and then.
  ///
  /// A run of entries with the same type and data for different peers (a fan-out) is stored once, as one event
  /// body that every recipient's log points to: they share one sequence number, so their envelope is the same bytes.
  func appendEvents(_ entries: [(peerID: String, type: String, data: JSONValue)], at: String) async throws
    -> [StoredEvent]
  {
    try await database.write { connection in
      var stored: [StoredEvent] = []
      stored.reserveCapacity(entries.count)
      var body: (sequence: Int64, type: String, data: JSONValue, peers: Set<String>, serialized: JSONValue)?
      var nextID = try connection.queryOne("SELECT coalesce(max(id), 0) FROM event_bodies")?.int64(0) ?? 0
      var added: [String: Int] = [:]
      for entry in entries {
        if body == nil || body!.type != entry.type || body!.peers.contains(entry.peerID) || body!.data != entry.data {
          nextID += 1
          // Serialized here, off the node's event loop, once per body; live subscribers get these same bytes.
          let serialized = entry.data.serialized()
          try connection.execute(
            "INSERT INTO event_bodies(id, type, at, data) VALUES (?, ?, ?, ?)",
            [.integer(nextID), .text(entry.type), .text(at), .text(String(decoding: serialized, as: UTF8.self))])
          body = (nextID, entry.type, entry.data, [], .serialized(serialized))
        }
        body!.peers.insert(entry.peerID)
        try connection.execute(
          "INSERT INTO event_log(peer_id, seq) VALUES (?, ?)", [.text(entry.peerID), .integer(body!.sequence)])
        stored.append(
          StoredEvent(sequence: body!.sequence, peerID: entry.peerID, type: entry.type, at: at, data: body!.serialized))
        added[entry.peerID, default: 0] += 1
      }
      // Retention: a log longer than the limit plus a slack of 1/64 of it (none below 64) is cut back to the limit,
      // so it never holds more than that, and the cost of trimming stays amortised.
      let (retention, known) = self.eventLog.withLock { state in
        (state.retention, added.keys.map { (peerID: $0, count: state.counts[$0]) })
      }
      var counts: [String: Int] = [:]
      var trimmed = 0
      for (peerID, count) in known {
        var length = (count ?? 0) + added[peerID]!
        if count == nil {
          length = Int(
            try connection.queryOne("SELECT count(*) FROM event_log WHERE peer_id = ?", [.text(peerID)])?.int64(0) ?? 0)
        }
        if length > retention + retention / 64 {
          trimmed += try Self.trim(connection, peerID: peerID, excess: length - retention)
          length = retention
        }
        counts[peerID] = length
      }
      self.eventLog.withLock { state in
        state.counts.merge(counts) { _, new in new }
        state.trimmed += trimmed
      }
      return stored
    }
  }

  /// Deletes the `excess` oldest events of `peerID`, records how far its log was trimmed and drops bodies nobody
  /// points to any more; returns how many log entries went.
  static func trim(_ connection: Connection, peerID: String, excess: Int) throws -> Int {
    guard
      let row = try connection.queryOne(
        "SELECT seq FROM event_log WHERE peer_id = ? ORDER BY seq LIMIT 1 OFFSET ?",
        [.text(peerID), .integer(Int64(excess - 1))])
    else { return 0 }
    let cutoff = try row.int64(0)
    try connection.execute("DELETE FROM event_log WHERE peer_id = ? AND seq <= ?", [.text(peerID), .integer(cutoff)])
    let deleted = connection.changes
    try connection.execute(
      "UPDATE peers SET trimmed_through = max(trimmed_through, ?) WHERE id = ?", [.integer(cutoff), .text(peerID)])
    // Bodies older than every log's oldest entry are referenced by no one any more.
    try connection.execute(
      "DELETE FROM event_bodies WHERE id < (SELECT coalesce(min(seq), 0) FROM event_log)")
    return deleted
  }

  /// Events of `peerID` after `since`, oldest first, at most `limit`; and whether older events the caller
  /// has not seen were already trimmed away.
  func events(peerID: String, after since: Int64, limit: Int) async throws -> (events: [StoredEvent], truncated: Bool) {
    try await database.read { connection in
      let rows = try connection.query(
        """
        SELECT l.seq, b.type, b.at, b.data FROM event_log l JOIN event_bodies b ON b.id = l.seq
        WHERE l.peer_id = ? AND l.seq > ? ORDER BY l.seq LIMIT ?
        """,
        [.text(peerID), .integer(since), .integer(Int64(limit))])
      let events = try rows.map { row in
        StoredEvent(
          sequence: try row.int64(0), peerID: peerID, type: try row.string(1), at: try row.string(2),
          // Written by this node from bounded input, which an event wraps in a level or two more: read it back
          // without the limits for untrusted input.
          data: (try? JSONValue.parse(try row.string(3), maxDepth: 256, maxMembers: .max)) ?? .null)
      }
      let trimmed = try connection.queryOne("SELECT trimmed_through FROM peers WHERE id = ?", [.text(peerID)])
      let truncated = try (trimmed?.int64(0) ?? 0) > since
      return (events, truncated)
    }
  }

  /// The newest sequence number in `peerID`'s log (0 when empty).
  func latestSequence(peerID: String) async throws -> Int64 {
    try await database.read { connection in
      let row = try connection.queryOne(
        "SELECT coalesce(max(seq), 0) FROM event_log WHERE peer_id = ?", [.text(peerID)])
      return try row?.int64(0) ?? 0
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
