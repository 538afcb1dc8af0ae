/// The event log: event bodies shared by a fan-out's recipients, each peer's log of sequence numbers, retention.
import Foundation
import MeshCore
import Store
import Synchronization

/// An event body just appended, with every recipient it was written for (one fan-out, one sequence number).
struct AppendedEvent: Sendable {
  var sequence: Int64
  var peerIDs: [String]
  var type: String
  var at: String
  var data: JSONValue

  /// The wire envelope `{"id","type","at","data"}`: the same bytes for every recipient.
  var envelope: JSONValue { StoredEvent.envelope(sequence: sequence, type: type, at: at, data: data) }

  func stored(for peerID: String) -> StoredEvent {
    StoredEvent(sequence: sequence, peerID: peerID, type: type, at: at, data: data)
  }
}

/// One entry of a peer's event log.
struct StoredEvent: Sendable, Equatable {
  var sequence: Int64
  var peerID: String
  var type: String
  var at: String
  var data: JSONValue

  /// The wire envelope `{"id","type","at","data"}`.
  var envelope: JSONValue { Self.envelope(sequence: sequence, type: type, at: at, data: data) }

  static func envelope(sequence: Int64, type: String, at: String, data: JSONValue) -> JSONValue {
    ["id": .string(String(sequence)), "type": .string(type), "at": .string(at), "data": data]
  }
}

extension NodeStore {
  /// The event log's schema step that takes the per-peer index off the commit path (see ``appendEvents(_:)``).
  static let pendingEventLogSchema = """
    CREATE TABLE event_pending(
      seq INTEGER PRIMARY KEY,
      peers TEXT NOT NULL
    );
    """

  /// Bodies whose recipients wait in `event_pending` past this many are moved into the per-peer log right after the
  /// append that crossed it (a separate transaction, so the append's events are delivered first).
  static let pendingIndexBodies = 64

  /// Appends the entries in one transaction and returns them with their sequence numbers (their data as the serialized
  /// bytes that were stored), trimming each log to the retention limit now and then.
  ///
  /// A run of entries with the same type and data for different peers (a fan-out) is stored once, as one event
  /// body that every recipient's log points to: they share one sequence number, so their envelope is the same bytes.
  nonisolated(nonsending) func appendEvents(
    _ entries: [(peerID: String, type: String, data: JSONValue)], at: String
  ) async throws -> [StoredEvent] {
    try await appendEvents(entries.map { ($0.peerID, $0.type, $0.data, at) })
  }

  /// Appends entries that each carry their own time (when they were published, not when they are written: a store
  /// that falls behind must not bunch up the times of what waited for it); one stored event per entry.
  nonisolated(nonsending) func appendEvents(
    _ entries: [(peerID: String, type: String, data: JSONValue, at: String)]
  ) async throws -> [StoredEvent] {
    let appended = try await appendEvents(
      fanOuts: entries.map { (EventFanOut(($0.peerID, $0.type, $0.data)), $0.at) })
    return appended.flatMap { event in event.peerIDs.map { event.stored(for: $0) } }
  }

  /// Appends events for one or more recipients each in one transaction, and returns one ``AppendedEvent`` per body.
  ///
  /// The commit writes each body and one `event_pending` row naming its recipients: two rows at the end of two
  /// tables, a page or two of WAL. Writing the per-peer log (`event_log`, keyed by peer) in the same commit touched one
  /// B-tree page per recipient (a 50-peer fan-out wrote ~290 KiB of WAL and took ~0.6 ms); those rows are written
  /// later, many bodies at a time (``indexPendingEvents(_:)``): after the append when enough wait, before anything
  /// reads or deletes a peer's log, and at the first use after a restart. A body and its recipients are committed
  /// together, so an event that was delivered is never lost, and a log read always sees every committed event.
  ///
  /// Consecutive entries with the same type, time and data and no recipient in common (one event published peer by
  /// peer) share one body, as a fan-out does.
  ///
  /// Runs on the caller's executor up to the database hop (`nonsending`): the node's publish loop goes to the store
  /// queue and back, not through the global pool as well.
  nonisolated(nonsending) func appendEvents(fanOuts entries: [(EventFanOut, at: String)]) async throws
    -> [AppendedEvent]
  {
    let (appended, indexDue) = try await database.write { connection in
      var appended: [AppendedEvent] = []
      appended.reserveCapacity(entries.count)
      var data: JSONValue = .null
      // The last body's recipients as a set, made only when another entry might join it.
      var members: Set<String>?
      var nextID = try connection.queryOne("SELECT coalesce(max(id), 0) FROM event_bodies")?.int64(0) ?? 0
      func finishBody() throws {
        guard let body = appended.last else { return }
        try connection.execute(
          "INSERT INTO event_pending(seq, peers) VALUES (?, ?)",
          [.integer(body.sequence), .text(JSONValue.array(body.peerIDs.map { .string($0) }).serializedString())])
      }
      for (entry, at) in entries where !entry.peerIDs.isEmpty {
        if let last = appended.last, last.type == entry.type, last.at == at, data == entry.data {
          var joined = members ?? Set(last.peerIDs)
          if entry.peerIDs.allSatisfy({ !joined.contains($0) }) {
            joined.formUnion(entry.peerIDs)
            members = joined
            appended[appended.count - 1].peerIDs += entry.peerIDs
            continue
          }
        }
        try finishBody()
        nextID += 1
        // Serialized here, off the node's event loop, once per body; live subscribers get these same bytes.
        let serialized = entry.data.serialized()
        try connection.execute(
          "INSERT INTO event_bodies(id, type, at, data) VALUES (?, ?, ?, ?)",
          [.integer(nextID), .text(entry.type), .text(at), .text(String(decoding: serialized, as: UTF8.self))])
        appended.append(
          AppendedEvent(
            sequence: nextID, peerIDs: entry.peerIDs, type: entry.type, at: at, data: .serialized(serialized)))
        data = entry.data
        members = nil
      }
      try finishBody()
      let bodies = appended.count
      let due = self.eventLog.withLock { state in
        state.pendingBodies = (state.pendingBodies ?? 0) + bodies
        guard !state.indexing, state.pendingBodies! >= Self.pendingIndexBodies else { return false }
        state.indexing = true
        return true
      }
      return (appended, due)
    }
    if indexDue {
      // Queued behind this append on the store's queue; the caller delivers meanwhile. Should it fail, the rows
      // stay in event_pending and the next read of a log (or the next due append) indexes them.
      Task { try? await self.indexPendingEventsInSteps() }
    }
    return appended
  }

  /// Log entries written per step of a background indexing (one transaction, about a millisecond): the store's
  /// queue is free between steps, so an append never waits behind a whole batch of entries.
  static let indexStepRows = 512

  /// The waiting `event_pending` rows, peer by peer (each peer's entries in sequence order), up to `through`.
  func pendingEntries(_ connection: Connection) throws -> (byPeer: [(String, [Int64])], through: Int64) {
    let rows = try connection.query("SELECT seq, peers FROM event_pending ORDER BY seq")
    var byPeer: [String: [Int64]] = [:]
    var through: Int64 = 0
    for row in rows {
      let sequence = try row.int64(0)
      through = sequence
      // Written by this node: a JSON array of peer ids.
      guard case .array(let peers)? = try? JSONValue.parse(try row.string(1), maxDepth: 4, maxMembers: .max) else {
        continue
      }
      for case .string(let peerID) in peers { byPeer[peerID, default: []].append(sequence) }
    }
    return (byPeer.sorted { $0.key < $1.key }, through)
  }

  /// Inserts the entries of these peers into the per-peer log (peer by peer, so each peer's B-tree page is written
  /// once for many events) and trims logs past the retention limit. Entries already there are skipped, so a step
  /// that runs after a full indexing (or after a crash between steps) changes nothing.
  func insertLogEntries(_ connection: Connection, _ entries: ArraySlice<(String, [Int64])>) throws {
    var added: [String: Int] = [:]
    for (peerID, sequences) in entries {
      added[peerID, default: 0] += try connection.executeEach(
        "INSERT OR IGNORE INTO event_log(peer_id, seq) VALUES (?, ?)",
        sequences.lazy.map { [.text(peerID), .integer($0)] })
    }
    // Retention: a log longer than the limit plus a slack of 1/64 of it (none below 64) is cut back to the limit,
    // so it never holds more than that, and the cost of trimming stays amortised.
    let (retention, counted) = self.eventLog.withLock { state in
      (state.retention, added.keys.map { (peerID: $0, count: state.counts[$0]) })
    }
    var counts: [String: Int] = [:]
    var trimmed = 0
    for (peerID, count) in counted {
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
  }

  /// Deletes the `event_pending` rows up to `through` (their entries are in the log) and counts what still waits.
  func finishIndexing(_ connection: Connection, through: Int64) throws {
    try connection.execute("DELETE FROM event_pending WHERE seq <= ?", [.integer(through)])
    let left = Int(try connection.queryOne("SELECT count(*) FROM event_pending")?.int64(0) ?? 0)
    self.eventLog.withLock { $0.pendingBodies = left }
  }

  /// Moves every waiting `event_pending` row into the per-peer log, inside the caller's transaction: before a read or
  /// a delete of a log, and at the first one after a restart.
  func indexPendingEvents(_ connection: Connection) throws {
    if self.eventLog.withLock({ $0.pendingBodies }) == 0 { return }
    let (byPeer, through) = try pendingEntries(connection)
    try insertLogEntries(connection, byPeer[...])
    try finishIndexing(connection, through: through)
  }

  /// The same in steps of about ``indexStepRows`` entries, each its own transaction (after an append that left
  /// ``pendingIndexBodies`` waiting).
  func indexPendingEventsInSteps() async throws {
    defer { self.eventLog.withLock { $0.indexing = false } }
    let (byPeer, through) = try await database.write { try self.pendingEntries($0) }
    var start = byPeer.startIndex
    while start < byPeer.endIndex {
      var end = start
      var rows = 0
      while end < byPeer.endIndex && (rows == 0 || rows + byPeer[end].1.count <= Self.indexStepRows) {
        rows += byPeer[end].1.count
        end += 1
      }
      let step = byPeer[start..<end]
      try await database.write { try self.insertLogEntries($0, step) }
      start = end
    }
    try await database.write { try self.finishIndexing($0, through: through) }
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
    // Bodies older than every log's oldest entry, and than every entry still waiting to be indexed, are referenced
    // by no one any more.
    try connection.execute(
      """
      DELETE FROM event_bodies WHERE id < (SELECT coalesce(min(oldest), 0) FROM (
        SELECT min(seq) AS oldest FROM event_log UNION ALL SELECT min(seq) FROM event_pending))
      """)
    return deleted
  }

  /// Events of `peerID` after `since`, oldest first, at most `limit`; and whether older events the caller
  /// has not seen were already trimmed away.
  nonisolated(nonsending) func events(peerID: String, after since: Int64, limit: Int) async throws
    -> (events: [StoredEvent], truncated: Bool)
  {
    try await readLog { connection in
      let rows = try connection.query(
        """
        SELECT l.seq, b.type, b.at, b.data FROM event_log l JOIN event_bodies b ON b.id = l.seq
        WHERE l.peer_id = ? AND l.seq > ? ORDER BY l.seq LIMIT ?
        """,
        [.text(peerID), .integer(since), .integer(Int64(limit))])
      let events = try rows.map { row in
        StoredEvent(
          sequence: try row.int64(0), peerID: peerID, type: try row.string(1), at: try row.string(2),
          // The bytes this node serialized when it appended the event: sent on as they are (a replay or a page of
          // GET /api/v1/events neither parses nor serializes each event's data again).
          data: .serialized(Array(try row.string(3).utf8)))
      }
      let trimmed = try connection.queryOne("SELECT trimmed_through FROM peers WHERE id = ?", [.text(peerID)])
      let truncated = try (trimmed?.int64(0) ?? 0) > since
      return (events, truncated)
    }
  }

  /// The newest sequence number in `peerID`'s log (0 when empty).
  nonisolated(nonsending) func latestSequence(peerID: String) async throws -> Int64 {
    try await readLog { connection in
      let row = try connection.queryOne(
        "SELECT coalesce(max(seq), 0) FROM event_log WHERE peer_id = ?", [.text(peerID)])
      return try row?.int64(0) ?? 0
    }
  }

  /// Runs `body` on a read of the per-peer log that sees every committed event: a plain read when no entries wait
  /// to be indexed (decided on the store's queue, after every append before it), else a write that indexes them
  /// first.
  nonisolated(nonsending) func readLog<T: Sendable>(_ body: @Sendable (Connection) throws -> T) async throws -> T {
    let read: T? = try await database.read { connection in
      guard self.eventLog.withLock({ $0.pendingBodies == 0 }) else { return nil }
      return try body(connection)
    }
    if let read { return read }
    return try await database.write { connection in
      try self.indexPendingEvents(connection)
      return try body(connection)
    }
  }
}
