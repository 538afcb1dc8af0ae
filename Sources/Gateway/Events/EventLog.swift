/// The event log of every peer hosted here, as one component: appending (the event ring on the service thread, staging
/// for SQLite, batches to SQLite), reading (pages, replays, the newest sequence) and retention.
///
/// Layer 4 (node runtime), storage. Event bodies are stored once for all their recipients (an audience); a peer's log
/// is read through its audiences. A small event is appended into the node's event ring (``EventRing``), a `MAP_SHARED`
/// file, with no system call and no thread hop, staged, and given to SQLite in one transaction per
/// ``stagedFlushDelay`` (or sooner when many bytes wait); a large one, or any while the ring has no room, waits for its
/// SQLite commit. Every read and every peer deletion writes what is staged first. At start-up what the ring kept past
/// SQLite's last commit is written first (``open(ring:mostRecords:)``). Retention counts only committed events.
///
/// Thread-safety: the staging, the counts and the audiences it remembers are guarded by ``state`` (the database's
/// queue and the node's executor both use them); the ring is used only by ``append(_:)``, which runs on its caller's
/// executor (the node's publish queue: one append at a time), and by ``open(ring:mostRecords:)`` before that.
import Foundation
import Logging
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

extension AppendedEvent {
  /// The event as one record of the node's event ring (``EventRing``), little-endian: type and time (`u16` length,
  /// UTF-8), the recipients (`u32` count, then each a `u16` length and the id), then the data's serialized bytes.
  var ringRecord: [UInt8] {
    let bytes = data.serialized()
    var record: [UInt8] = []
    record.reserveCapacity(
      8 + type.utf8.count + at.utf8.count + peerIDs.reduce(0) { $0 + 2 + $1.utf8.count } + bytes.count)
    func append<T: FixedWidthInteger>(_ value: T) {
      withUnsafeBytes(of: value.littleEndian) { record.append(contentsOf: $0) }
    }
    func append(_ text: String) {
      append(UInt16(truncatingIfNeeded: text.utf8.count))
      record.append(contentsOf: text.utf8)
    }
    append(type)
    append(at)
    append(UInt32(truncatingIfNeeded: peerIDs.count))
    for peerID in peerIDs { append(peerID) }
    record.append(contentsOf: bytes)
    return record
  }

  /// The event a ring record holds (nil when the record is not one).
  init?(ringRecord record: EventRing.Record) {
    let bytes = record.payload
    var at = 0
    func integer<T: FixedWidthInteger>(_: T.Type) -> T? {
      guard at + MemoryLayout<T>.size <= bytes.count else { return nil }
      var value = T.zero
      for index in 0..<MemoryLayout<T>.size { value |= T(bytes[at + index]) << (8 * index) }
      at += MemoryLayout<T>.size
      return value
    }
    func text() -> String? {
      guard let count = integer(UInt16.self).map(Int.init), at + count <= bytes.count else { return nil }
      defer { at += count }
      return String(decoding: bytes[at..<at + count], as: UTF8.self)
    }
    guard let type = text(), let time = text(), let count = integer(UInt32.self), Int(count) <= bytes.count
    else { return nil }
    var peerIDs: [String] = []
    peerIDs.reserveCapacity(Int(count))
    for _ in 0..<count {
      guard let peerID = text() else { return nil }
      peerIDs.append(peerID)
    }
    self.init(
      sequence: record.sequence, peerIDs: peerIDs, type: type, at: time, data: .serialized(Array(bytes[at...])))
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

/// The node's event log (see the file's comment).
final class EventLog: Sendable {
  let database: Database
  /// The retention limit, each peer's log length (learnt on its first append), staging and the audiences remembered.
  let state: Mutex<State>
  /// Where small events are made durable before SQLite has them; nil until the log is opened with one (a log without a
  /// ring commits every append to SQLite before it returns).
  private let ring = Mutex<EventRing?>(nil)

  static let logger = Logger(component: "node")

  struct State {
    var retention: Int
    var counts: [String: Int] = [:]
    var trimmed = 0
    /// Audiences known to be committed, by their members (sorted, joined by commas); see ``AudienceLookup``.
    var audiences: [String: Int64] = [:]
    /// The recipients of the last fan-out and their audience, as the fan-out named them (no sorting to find it).
    var lastAudience: (peerIDs: [String], id: Int64)?
    /// Counts the transactions that deleted audiences: what an append learnt is remembered only if none ran since
    /// it started.
    var audienceDeletions = 0
    /// The highest event sequence number handed out, once known (read from the database at the first append, or
    /// when the node opens the log). A body a trim deleted keeps its number taken, so numbers only grow.
    var lastBodyID: Int64?
    /// Events with their sequence numbers, durable in the node's event ring, waiting for SQLite
    /// (``stageEvents(_:bytes:)``), and about how many bytes they hold.
    var staged: [AppendedEvent] = []
    var stagedBytes = 0
    /// A flush of the staged events is scheduled (after ``stagedFlushDelay``), or asked for at once.
    var flushScheduled = false
    var flushRequested = false
    /// The last flush of staged events failed (logged once until one succeeds).
    var flushFailing = false
    /// The newest sequence number of the staged events SQLite has committed.
    var ingestedThrough: Int64 = 0
    /// Small event batches that waited for their SQLite commit because the ring had no room (`/metrics`).
    var ringFull = 0
  }

  init(database: Database, retention: Int) {
    self.database = database
    self.state = Mutex(State(retention: retention))
  }

  /// Events kept per peer; an admin can change it at run time.
  var retention: Int {
    get { state.withLock { $0.retention } }
    set { state.withLock { $0.retention = newValue } }
  }

  /// Events dropped by retention since the node started (`/metrics`).
  var trimmed: Int { state.withLock { $0.trimmed } }

  /// Small event batches that waited for their SQLite commit because the event ring was full (`/metrics`).
  var ringFullCount: Int { state.withLock { $0.ringFull } }

  /// The newest sequence number the event ring keeps, if any.
  var newestInRing: Int64? { ring.withLock { $0?.newestSequence } }

  /// Events up to this many bytes of data are small: appended through the ring.
  static let smallBytes = 64 << 10

  // MARK: - Opening

  /// At start-up, before anything is appended: writes what `ring` kept past SQLite's last commit, releases what
  /// SQLite now holds, and appends through it from now on (see ``openEventLog(recovering:ringReleasedThrough:ringLost:dropped:mostRecords:)``).
  nonisolated(nonsending) func open(ring: EventRing, mostRecords: Int64) async throws
    -> (recovered: Int, records: Int, unreadable: Int, jumpedAbove: Int64?)
  {
    let records = ring.records()
    let opened = try await openEventLog(
      recovering: records, ringReleasedThrough: ring.releasedThrough, ringLost: ring.wasEmpty, dropped: ring.dropped,
      mostRecords: mostRecords)
    ring.release(through: opened.through)
    self.ring.withLock { $0 = ring }
    return (opened.recovered, records.count, opened.unreadable, opened.jumpedAbove)
  }

  // MARK: - Appending

  /// Makes `entries` durable and returns them numbered, as they are to be delivered. Called by one publisher at a
  /// time, in order (the node's publish queue); runs on its executor up to the database hop.
  ///
  /// Small events (each at most ``smallBytes``) are written into the event ring with no system call and no hop, and
  /// staged for SQLite, which gets them in one transaction per ``stagedFlushDelay`` (or sooner when many bytes wait);
  /// a record in the ring survives `kill -9` and is written to SQLite at the next start. Large events, and small ones
  /// while the ring has no room (SQLite a ring's length behind), wait for their SQLite commit on the store's queue,
  /// with everything staged before them: that wait is the back-pressure, the publish queue growing behind it.
  nonisolated(nonsending) func append(_ entries: [(EventFanOut, at: String)]) async throws -> [AppendedEvent] {
    guard let ring = ring.withLock({ $0 }), entries.allSatisfy({ $0.0.data.approximateSize <= Self.smallBytes })
    else { return try await appendEvents(fanOuts: entries) }
    var bodies = Self.bodies(entries)
    // A record holds no sequence number (the ring's record header does), so it is built before they are handed out.
    let records = bodies.map(\.ringRecord)
    let sizes = records.map { EventRing.size(payload: $0.count) }
    let bytes = sizes.reduce(0, +)
    ring.release(through: ingestedThrough)
    // A record that wraps leaves a gap smaller than itself at the end: with room for the largest one more, every
    // record fits.
    guard bytes + (sizes.max() ?? 0) <= ring.freeBytes else {
      state.withLock { $0.ringFull += 1 }
      return try await appendEvents(fanOuts: entries)
    }
    let flush = stageEvents(&bodies, bytes: bytes)
    var inRing = true
    for (body, record) in zip(bodies, records) where inRing {
      inRing = ring.append(sequence: body.sequence, payload: record)
    }
    guard inRing else {
      // Cannot happen with the room checked above; should it, SQLite has the events before anyone sees them.
      assertionFailure("the event ring had no room for a batch it was checked to have room for")
      try await flushStagedEvents()
      return bodies
    }
    switch flush {
    case .none: break
    case .later: scheduleFlush(after: Self.stagedFlushDelay)
    case .now: scheduleFlush(after: nil)
    }
    return bodies
  }

  /// Writes the staged events to SQLite after `delay`, on a task off the service thread. A failure is logged and
  /// tried again a second later (the events stay staged, and in the ring), unless another flush was scheduled or
  /// wrote them meanwhile.
  func scheduleFlush(after delay: Duration?) {
    Task.detached {
      if let delay { try? await Task.sleep(for: delay) }
      while true {
        do {
          try await self.flushStagedEvents()
          if self.stagedFlushFailing(false) {
            Self.logger.notice("Staged events are written to the store again.")
          }
          return
        } catch {
          // Once per episode, not once a second for as long as the disk stays full.
          if !self.stagedFlushFailing(true) {
            Self.logger.error(
              "Could not write staged events to the store; they are kept in the event ring and tried again every "
                + "second until it works.", ["error": String(describing: error)])
          }
          try? await Task.sleep(for: .seconds(1))
          guard self.claimStagedFlush() else { return }
        }
      }
    }
  }
}

extension EventLog {

  /// The event log's schema step that stores each body once for all its recipients: a body names its audience (the
  /// set of its recipients, stored once however many bodies it gets), and a peer's log is every body of its audiences
  /// above its trim point. An append writes one row whatever the number of recipients; the per-peer rows of the
  /// schema before (`event_log`, and `event_pending` for those not yet indexed) become audiences here.
  static let audiencesSchema = """
    CREATE TABLE event_audiences(
      id INTEGER PRIMARY KEY,
      members TEXT NOT NULL UNIQUE
    );
    CREATE TABLE event_audience_members(
      peer_id TEXT NOT NULL,
      audience INTEGER NOT NULL,
      PRIMARY KEY (peer_id, audience)
    ) WITHOUT ROWID;
    CREATE INDEX event_audience_members_by_audience ON event_audience_members(audience);
    ALTER TABLE event_bodies ADD COLUMN audience INTEGER NOT NULL DEFAULT 0;
    INSERT OR IGNORE INTO event_log(peer_id, seq)
      SELECT recipient.value, pending.seq FROM event_pending pending, json_each(pending.peers) recipient;
    CREATE TEMP TABLE body_members(seq INTEGER PRIMARY KEY, members TEXT NOT NULL);
    INSERT INTO body_members(seq, members)
      SELECT seq, group_concat(peer_id, ',') FROM (SELECT seq, peer_id FROM event_log ORDER BY seq, peer_id) GROUP BY seq;
    INSERT INTO event_audiences(members) SELECT DISTINCT members FROM body_members;
    UPDATE event_bodies SET audience = coalesce(
      (SELECT a.id FROM body_members m JOIN event_audiences a ON a.members = m.members WHERE m.seq = event_bodies.id), 0);
    DELETE FROM event_bodies WHERE audience = 0;
    INSERT INTO event_audience_members(peer_id, audience)
      SELECT DISTINCT l.peer_id, b.audience FROM event_log l JOIN event_bodies b ON b.id = l.seq;
    DROP TABLE body_members;
    DROP TABLE event_log;
    DROP TABLE event_pending;
    CREATE INDEX event_bodies_by_audience ON event_bodies(audience, id);
    """

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
  /// Each body is one row naming its audience (its set of recipients): a 50-recipient fan-out writes the body and
  /// nothing per recipient, and the audience's rows are written once, the first time that set of peers gets an event
  /// (a session's members share one until the membership changes). The body and its audience are committed together,
  /// so an event that was delivered is never lost, and a log read sees every committed event. Events staged before
  /// (``stageEvents(_:bytes:)``) go into the same transaction, first: the log keeps the order of the sequence numbers.
  ///
  /// Runs on the caller's executor up to the database hop (`nonsending`): the node's publish loop goes to the store
  /// queue and back, not through the global pool as well. The bodies are serialized on the store's queue, off the
  /// node's event loop (this is the path of large events).
  nonisolated(nonsending) func appendEvents(fanOuts entries: [(EventFanOut, at: String)]) async throws
    -> [AppendedEvent]
  {
    try await database.withWriter { connection in
      var bodies = Self.bodies(entries)
      let firstID = try self.reserveSequences(bodies.count, connection)
      for index in bodies.indices { bodies[index].sequence = firstID + Int64(index) }
      do {
        try self.ingestStaged(connection, then: bodies)
      } catch {
        // Nobody saw these numbers: handed back unless others were handed out since, so that a write retried every
        // second on a full disk does not use up numbers (the span a lost event ring may hide stays small).
        let last = firstID + Int64(bodies.count) - 1
        self.state.withLock { state in
          if state.lastBodyID == last { state.lastBodyID = firstID - 1 }
        }
        throw error
      }
      return bodies
    }
  }

  /// The bodies of `entries`, their data serialized, numbered from 1 (the caller gives them their sequence numbers).
  ///
  /// Consecutive entries with the same type, time and data and no recipient in common (one event published peer by
  /// peer) share one body, as a fan-out does.
  static func bodies(_ entries: [(EventFanOut, at: String)]) -> [AppendedEvent] {
    var bodies: [AppendedEvent] = []
    bodies.reserveCapacity(entries.count)
    var data: JSONValue = .null
    // The last body's recipients as a set, made only when another entry might join it.
    var members: Set<String>?
    for (entry, at) in entries where !entry.peerIDs.isEmpty {
      if let last = bodies.last, last.type == entry.type, last.at == at, data == entry.data {
        var joined = members ?? Set(last.peerIDs)
        if entry.peerIDs.allSatisfy({ !joined.contains($0) }) {
          joined.formUnion(entry.peerIDs)
          members = joined
          bodies[bodies.count - 1].peerIDs += entry.peerIDs
          continue
        }
      }
      // Serialized once per body; live subscribers get these same bytes.
      bodies.append(
        AppendedEvent(
          sequence: Int64(bodies.count + 1), peerIDs: entry.peerIDs, type: entry.type, at: at,
          data: .serialized(entry.data.serialized())))
      data = entry.data
      members = nil
    }
    return bodies
  }

  /// Hands out `count` sequence numbers and returns the first, on the store's queue (the database knows the highest
  /// one taken when no event was staged since the start).
  private func reserveSequences(_ count: Int, _ connection: Connection) throws -> Int64 {
    let known = state.withLock { $0.lastBodyID }
    let highest = try known ?? connection.queryOne("SELECT coalesce(max(id), 0) FROM event_bodies")?.int64(0) ?? 0
    return state.withLock { state in
      let first = max(state.lastBodyID ?? highest, highest) + 1
      state.lastBodyID = first + Int64(count) - 1
      return first
    }
  }

  /// Gives `bodies` their sequence numbers and keeps them for SQLite, which gets them in the next batch
  /// (``flushStagedEvents()``); every read of a log and every peer deletion writes what is staged first. On the
  /// node's service thread: the caller has made them durable another way (the event ring) before anyone sees them.
  ///
  /// Returns when the caller should start a flush: `.later` for the first event staged since the last flush
  /// (``stagedFlushDelay`` gathers a batch), `.now` once the staged bytes pass ``stagedFlushBytes``.
  func stageEvents(_ bodies: inout [AppendedEvent], bytes: Int) -> StagedFlush {
    state.withLock { state in
      guard var next = state.lastBodyID else {
        preconditionFailure("events staged before the log was opened (openEventLog)")
      }
      for index in bodies.indices {
        next += 1
        bodies[index].sequence = next
      }
      state.lastBodyID = next
      state.staged.append(contentsOf: bodies)
      state.stagedBytes += bytes
      if state.stagedBytes >= Self.stagedFlushBytes && !state.flushRequested {
        state.flushRequested = true
        return .now
      }
      guard !state.flushScheduled else { return .none }
      state.flushScheduled = true
      return .later
    }
  }

  enum StagedFlush { case none, later, now }

  /// How long staged events wait for others to share their transaction, and how many bytes make one at once.
  static let stagedFlushDelay = Duration.milliseconds(100)
  static let stagedFlushBytes = 1 << 20

  /// Takes on the flush of events that stay staged after a failed one; false when another flush is scheduled or
  /// nothing is staged.
  func claimStagedFlush() -> Bool {
    state.withLock { state in
      guard !state.flushScheduled, !state.staged.isEmpty else { return false }
      state.flushScheduled = true
      return true
    }
  }

  /// Records whether the last flush of staged events failed, and returns whether it had failed before (for one log
  /// line when failures start and one when they end).
  func stagedFlushFailing(_ failing: Bool) -> Bool {
    state.withLock { state in
      defer { state.flushFailing = failing }
      return state.flushFailing
    }
  }

  /// The newest sequence number SQLite has committed of the staged events (the event ring releases through it).
  var ingestedThrough: Int64 { state.withLock { $0.ingestedThrough } }

  /// Whether events wait for SQLite.
  var hasStagedEvents: Bool { state.withLock { !$0.staged.isEmpty } }

  /// Writes the staged events to SQLite in one transaction. If it fails they stay staged (and in the event ring), and
  /// the error is thrown.
  nonisolated(nonsending) func flushStagedEvents() async throws {
    try await database.withWriter { connection in try self.ingestStaged(connection, then: []) }
  }

  /// Writes what reads must see first: staged events are written before any log is read.
  nonisolated(nonsending) func settleEvents() async throws {
    if hasStagedEvents { try await flushStagedEvents() }
  }

  /// On the store's queue: writes the staged events, then `bodies`, in one transaction, with the newest sequence
  /// number as the log's `events_ingested_through` (what the event ring need not give back at the next start). On a
  /// failure the staged events are staged again, first, and nothing of `bodies` is kept.
  private func ingestStaged(_ connection: Connection, then bodies: [AppendedEvent]) throws {
    let (staged, stagedBytes) = state.withLock { state in
      let taken = (state.staged, state.stagedBytes)
      state.staged = []
      state.stagedBytes = 0
      state.flushScheduled = false
      state.flushRequested = false
      return taken
    }
    let all = staged.isEmpty ? bodies : staged + bodies
    guard let newest = all.last?.sequence else { return }
    do {
      let ingested = try connection.transaction { try self.ingest(all, connection) }
      ingested.committed()
      state.withLock { $0.ingestedThrough = max($0.ingestedThrough, newest) }
    } catch {
      state.withLock { state in
        state.staged.insert(contentsOf: staged, at: 0)
        state.stagedBytes += stagedBytes
      }
      rolledBack(all)
      throw error
    }
  }

  /// What an ingest learnt inside its transaction, to keep once it committed (``committed()``): nothing of it is
  /// true if the transaction rolls back (``rolledBack(_:)``).
  struct Ingested {
    let audiences: AudienceLookup
    let counts: LogCounts

    func committed() {
      audiences.remember()
      counts.committed()
    }
  }

  /// After a transaction that ingested `bodies` failed (a full disk fails the `COMMIT` after every statement
  /// succeeded): the log lengths it counted up in memory are forgotten, so each of those peers is counted from the
  /// database at its next append. Retention only ever counts what committed: a failed commit retried every second
  /// with the same events would otherwise count them again and again, and the first commit after the disk has room
  /// again would trim every log by the events that were never there.
  func rolledBack(_ bodies: [AppendedEvent]) {
    state.withLock { state in
      for body in bodies { for peerID in body.peerIDs { state.counts[peerID] = nil } }
    }
  }

  /// Inserts numbered bodies, inside the caller's transaction; returns the audiences found and the log lengths
  /// counted, to keep once it committed. Also records the highest sequence number handed out so far, in the same
  /// transaction (`events_last_id`): at the next start numbers continue above it even if the event ring and the
  /// newest bodies are gone.
  private func ingest(_ bodies: [AppendedEvent], _ connection: Connection) throws -> Ingested {
    var audiences = AudienceLookup(self)
    for body in bodies {
      try connection.execute(
        "INSERT INTO event_bodies(id, type, at, data, audience) VALUES (?, ?, ?, ?, ?)",
        [
          .integer(body.sequence), .text(body.type), .text(body.at),
          .text(String(decoding: body.data.serialized(), as: UTF8.self)),
          .integer(try audiences.id(for: body.peerIDs, connection)),
        ])
    }
    let counts = try self.countAndTrim(connection, bodies)
    if let newest = bodies.last?.sequence {
      let handedOut = max(newest, state.withLock { $0.lastBodyID ?? 0 })
      try connection.execute(
        """
        INSERT INTO node_meta(key, value) VALUES ('events_ingested_through', ?1), ('events_last_id', ?2)
        ON CONFLICT(key) DO UPDATE SET value = CASE
          WHEN key = 'events_last_id' THEN max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))
          ELSE excluded.value END
        """, [.text(String(newest)), .text(String(handedOut))])
    }
    return Ingested(audiences: audiences, counts: counts)
  }

  /// At start-up, before anything is published: writes the records the event ring kept that SQLite had not committed
  /// (the node was killed with events staged), and learns the highest sequence number taken. Returns the newest
  /// sequence SQLite now holds of the ring's records, which the ring may release, how many records past the last
  /// commit held no event this node can read (none but after a downgrade to an older record format), and, when the
  /// ring could not give back everything it held, the number new events continue above.
  ///
  /// Numbers only grow: the next one is above every body in the database, the newest number recorded as handed out
  /// at the last commit (`events_last_id`, kept even when trims delete the newest bodies), the ring's released
  /// sequence and every record it holds. When the ring was lost (`ringLost`: its file was empty while the database
  /// holds events) or held records it could not give back (`dropped`), numbers up to `mostRecords` above all those
  /// may have been handed out with no trace left, so new ones start above that: a client's `since` never points past
  /// a new event.
  nonisolated(nonsending) func openEventLog(
    recovering records: [EventRing.Record], ringReleasedThrough: Int64, ringLost: Bool = false,
    dropped: (count: Int, newest: Int64) = (0, 0), mostRecords: Int64 = 0
  ) async throws -> (recovered: Int, through: Int64, unreadable: Int, jumpedAbove: Int64?) {
    try await database.withWriter { connection in
      func meta(_ key: String) throws -> Int64 {
        try connection.queryOne("SELECT value FROM node_meta WHERE key = ?", [.text(key)])
          .flatMap { Int64(try $0.string(0)) } ?? 0
      }
      let through = try meta("events_ingested_through")
      let lastID = try meta("events_last_id")
      let highest = try connection.queryOne("SELECT coalesce(max(id), 0) FROM event_bodies")?.int64(0) ?? 0
      let pending = records.filter { $0.sequence > through }
      let bodies = pending.compactMap(AppendedEvent.init(ringRecord:))
      if !bodies.isEmpty {
        do {
          let ingested = try connection.transaction { try self.ingest(bodies, connection) }
          ingested.committed()
        } catch {
          self.rolledBack(bodies)
          throw error
        }
      }
      let newest = max(through, bodies.last?.sequence ?? 0)
      let known = max(highest, newest, lastID, ringReleasedThrough, records.last?.sequence ?? 0, dropped.newest)
      let unknownTaken = dropped.count > 0 || (ringLost && max(highest, through, lastID) > 0)
      let next = known + (unknownTaken ? mostRecords : 0)
      if unknownTaken {
        // Recorded at once: should this start's ring be lost too, the next start jumps from here.
        try connection.execute(
          """
          INSERT INTO node_meta(key, value) VALUES ('events_last_id', ?)
          ON CONFLICT(key) DO UPDATE SET value = excluded.value
          """, [.text(String(next))])
      }
      self.state.withLock { state in
        state.lastBodyID = next
        state.ingestedThrough = newest
      }
      return (bodies.count, newest, pending.count - bodies.count, unknownTaken ? known : nil)
    }
  }

  /// Finds or makes the audience of a set of recipients, inside an append's transaction.
  ///
  /// Audiences the node knows are committed are remembered across transactions (the same session's members, message
  /// after message, are found without sorting their ids or asking SQLite). An audience enters that memory only after
  /// the transaction that found or made it committed (``remember()``), and only if no transaction deleted audiences
  /// since it started; a transaction that deletes one forgets them all at once (``forgetAudiences()``). So the memory
  /// never names an audience that a failed transaction never wrote, nor one a trim deleted.
  struct AudienceLookup: Sendable {
    private var found: [(peerIDs: [String], key: String?, id: Int64)] = []
    private let store: EventLog
    private let deletionsAtStart: Int

    init(_ store: EventLog) {
      self.store = store
      deletionsAtStart = store.state.withLock { $0.audienceDeletions }
    }

    mutating func id(for peerIDs: [String], _ connection: Connection) throws -> Int64 {
      if let last = found.last, last.peerIDs == peerIDs { return last.id }
      let remembered = store.state.withLock { state in
        state.lastAudience.flatMap { $0.peerIDs == peerIDs ? $0.id : nil }
      }
      if let remembered {
        found.append((peerIDs, nil, remembered))
        return remembered
      }
      // Sorted, so one set of peers is one audience whatever order its fan-out named them in.
      let sorted = Set(peerIDs).sorted()
      let key = sorted.joined(separator: ",")
      let id: Int64
      if let remembered = store.state.withLock({ $0.audiences[key] }) {
        id = remembered
      } else if let row = try connection.queryOne("SELECT id FROM event_audiences WHERE members = ?", [.text(key)]) {
        id = try row.int64(0)
      } else {
        try connection.execute("INSERT INTO event_audiences(members) VALUES (?)", [.text(key)])
        id = connection.lastInsertRowID
        _ = try connection.executeEach(
          "INSERT INTO event_audience_members(peer_id, audience) VALUES (?, ?)",
          sorted.lazy.map { [.text($0), .integer(id)] })
      }
      found.append((peerIDs, key, id))
      return id
    }

    /// After the commit: remembers what this transaction found, unless a deletion of audiences ran since it started.
    func remember() {
      guard let last = found.last else { return }
      store.state.withLock { state in
        guard state.audienceDeletions == deletionsAtStart else { return }
        // A node's audiences are few (its sessions' memberships and its peers); a bound keeps a node that churns
        // through many from holding them all.
        if state.audiences.count >= 4096 { state.audiences = [:] }
        for entry in found { if let key = entry.key { state.audiences[key] = entry.id } }
        state.lastAudience = (last.peerIDs, last.id)
      }
    }
  }

  /// Forgets every remembered audience, inside a transaction that deletes audiences (see ``AudienceLookup``).
  func forgetAudiences() {
    state.withLock { state in
      state.audiences = [:]
      state.lastAudience = nil
      state.audienceDeletions += 1
    }
  }

  /// Log lengths learnt and events trimmed by a transaction, kept once it committed.
  struct LogCounts: Sendable {
    let store: EventLog
    var lengths: [String: Int] = [:]
    var trimmed = 0

    func committed() {
      guard !lengths.isEmpty || trimmed > 0 else { return }
      store.state.withLock { state in
        state.counts.merge(lengths) { _, new in new }
        state.trimmed += trimmed
      }
    }
  }

  /// Counts the appended events into their recipients' log lengths and trims the logs that grew past the retention
  /// limit plus a slack of 1/64 of it (none below 64) back to the limit: a log never holds more than that, and the
  /// cost of trimming stays amortised. A peer's length is counted from the database on its first append after a start
  /// (or after a transaction that counted it rolled back). Inside the caller's transaction: the lengths known are
  /// counted up in place (the caller forgets them if it rolls back, ``rolledBack(_:)``); those learnt from the database
  /// and the trimmed total are returned, to keep once it committed.
  func countAndTrim(_ connection: Connection, _ appended: [AppendedEvent]) throws -> LogCounts {
    // One lookup per recipient, in place; peers whose length is unknown or past the limit are dealt with after.
    var unknown: [String] = []
    // The longest each log got in this append (a peer in several of its bodies is trimmed once).
    var over: [String: Int] = [:]
    let (retention, limit) = self.state.withLock { state in
      let limit = state.retention + state.retention / 64
      for event in appended {
        for peerID in event.peerIDs {
          guard let index = state.counts.index(forKey: peerID) else {
            unknown.append(peerID)
            continue
          }
          state.counts.values[index] += 1
          let length = state.counts.values[index]
          if length > limit { over[peerID] = length }
        }
      }
      return (state.retention, limit)
    }
    guard !unknown.isEmpty || !over.isEmpty else { return LogCounts(store: self) }
    var counts: [String: Int] = [:]
    for peerID in Set(unknown) {
      // Counted after this append's bodies went in, so they are included.
      let length = try Self.logLength(connection, peerID: peerID)
      counts[peerID] = length
      if length > limit { over[peerID] = length }
    }
    var trimmed = 0
    var touched: Set<Int64> = []
    for (peerID, length) in over {
      let (dropped, audiences) = try trim(connection, peerID: peerID, excess: length - retention)
      trimmed += dropped
      touched.formUnion(audiences)
      counts[peerID] = retention
    }
    for audience in touched { try collect(connection, audience: audience) }
    return LogCounts(store: self, lengths: counts, trimmed: trimmed)
  }

  /// How many events `peerID`'s log holds: the bodies of its audiences above its trim point.
  static func logLength(_ connection: Connection, peerID: String) throws -> Int {
    Int(
      try connection.queryOne(
        """
        SELECT count(*) FROM event_bodies
        WHERE audience IN (SELECT audience FROM event_audience_members WHERE peer_id = ?1)
          AND id > (SELECT trimmed_through FROM peers WHERE id = ?1)
        """, [.text(peerID)])?.int64(0) ?? 0)
  }

  /// Drops the `excess` oldest events of `peerID`'s log: its trim point moves to the `excess`-th of them. Returns how
  /// many events left the log and the audiences they came from, whose bodies the caller then collects
  /// (``collect(_:audience:)``, once per audience however many of its members trimmed).
  ///
  /// The events are found by walking the node's bodies up from the trim point in sequence order and keeping those of
  /// the peer's audiences, which stops at the `excess`-th: a peer that gets most of the node's events (a session's
  /// members) reads about `excess` rows, however many audiences it has been in (each session membership is one).
  func trim(_ connection: Connection, peerID: String, excess: Int) throws -> (dropped: Int, audiences: Set<Int64>) {
    guard excess > 0 else { return (0, []) }
    let oldest = try connection.query(
      """
      SELECT id, audience FROM event_bodies NOT INDEXED
      WHERE id > (SELECT trimmed_through FROM peers WHERE id = ?1)
        AND audience IN (SELECT audience FROM event_audience_members WHERE peer_id = ?1)
      ORDER BY id LIMIT ?2
      """, [.text(peerID), .integer(Int64(excess))])
    guard let last = oldest.last else { return (0, []) }
    try connection.execute(
      "UPDATE peers SET trimmed_through = max(trimmed_through, ?) WHERE id = ?",
      [.integer(try last.int64(0)), .text(peerID)])
    return (oldest.count, Set(try oldest.map { try $0.int64(1) }))
  }

  /// Deletes the bodies of `audience` that no member's log shows any more (at or below every member's trim point;
  /// all of them once no member is left), and the audience itself once it has no body.
  func collect(_ connection: Connection, audience: Int64) throws {
    try connection.execute(
      """
      DELETE FROM event_bodies WHERE audience = ?1 AND id <= (
        SELECT coalesce(min(p.trimmed_through), 9223372036854775807)
        FROM event_audience_members m JOIN peers p ON p.id = m.peer_id WHERE m.audience = ?1)
      """, [.integer(audience)])
    guard try connection.queryOne("SELECT 1 FROM event_bodies WHERE audience = ?", [.integer(audience)]) == nil
    else { return }
    forgetAudiences()
    try connection.execute("DELETE FROM event_audience_members WHERE audience = ?", [.integer(audience)])
    try connection.execute("DELETE FROM event_audiences WHERE id = ?", [.integer(audience)])
  }

  /// Removes `peerID` from every audience and deletes what only its log showed (part of deleting the peer, inside
  /// the caller's transaction; the peer's row goes first, so it no longer holds any body back).
  func deleteLog(_ connection: Connection, peerID: String) throws {
    let audiences = try connection.query(
      "SELECT audience FROM event_audience_members WHERE peer_id = ?", [.text(peerID)]
    ).map { try $0.int64(0) }
    try connection.execute("DELETE FROM event_audience_members WHERE peer_id = ?", [.text(peerID)])
    for audience in audiences { try collect(connection, audience: audience) }
    self.state.withLock { $0.counts[peerID] = nil }
  }

  /// Events of `peerID` after `since`, oldest first, at most `limit`; and whether older events the caller
  /// has not seen were already trimmed away.
  nonisolated(nonsending) func events(peerID: String, after since: Int64, limit: Int) async throws
    -> (events: [StoredEvent], truncated: Bool)
  {
    try await settleEvents()
    return try await database.read { connection in
      guard let trimmed = try connection.queryOne("SELECT trimmed_through FROM peers WHERE id = ?", [.text(peerID)])
      else { return ([], false) }
      let trimmedThrough = try trimmed.int64(0)
      // The page's ids first, from the audiences' index alone (a peer's bodies come from several audiences, so they
      // are sorted; sorting whole rows would read every body of the log, however large, for each page).
      let rows = try connection.query(
        """
        SELECT b.id, b.type, b.at, b.data FROM (
          SELECT id FROM event_bodies
          WHERE audience IN (SELECT audience FROM event_audience_members WHERE peer_id = ?) AND id > ?
          ORDER BY id LIMIT ?
        ) page JOIN event_bodies b ON b.id = page.id ORDER BY b.id
        """,
        [.text(peerID), .integer(max(since, trimmedThrough)), .integer(Int64(limit))])
      let events = try rows.map { row in
        StoredEvent(
          sequence: try row.int64(0), peerID: peerID, type: try row.string(1), at: try row.string(2),
          // The bytes this node serialized when it appended the event: sent on as they are (a replay or a page of
          // GET /api/v1/events neither parses nor serializes each event's data again).
          data: .serialized(Array(try row.string(3).utf8)))
      }
      return (events, trimmedThrough > since)
    }
  }

  /// The newest sequence number in `peerID`'s log (0 when empty).
  nonisolated(nonsending) func latestSequence(peerID: String) async throws -> Int64 {
    try await settleEvents()
    return try await database.read { connection in
      // The newest body of each audience is one step down its index.
      let row = try connection.queryOne(
        """
        SELECT coalesce(max((SELECT max(id) FROM event_bodies WHERE audience = m.audience)), 0)
        FROM event_audience_members m WHERE m.peer_id = ?
        """, [.text(peerID)])
      return try row?.int64(0) ?? 0
    }
  }
}
