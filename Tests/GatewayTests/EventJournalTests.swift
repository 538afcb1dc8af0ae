import Foundation
import LWS
import MeshCore
import Store
import Testing

@testable import Gateway

/// Small events are made durable in the event ring on the service thread and staged for SQLite, which gets them in
/// batches: every read and every peer deletion sees what is staged, what the ring kept past SQLite's last commit is
/// written at the next start (the node was killed), and sequence numbers never go back.
struct EventJournalTests {
  /// A data directory with a store and an event ring, opened as a node opens them.
  final class Journal {
    let directory: String
    var store: NodeStore
    var ring: EventRing
    var recovered = 0
    var unreadable = 0
    var jumpedAbove: Int64?

    init(directory: String? = nil, ringBytes: Int = 64 << 10, retention: Int = 100) async throws {
      let directory =
        directory
        ?? FileManager.default.temporaryDirectory.appendingPathComponent("journal-\(UUID().uuidString)").path
      try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
      self.directory = directory
      store = try NodeStore(path: directory + "/meshgate.sqlite", retention: retention)
      ring = try EventRing(path: directory + "/events.ring", capacity: ringBytes)
      let opened = try await store.eventLog.open(ring: ring, mostRecords: EventRing.mostRecords(capacity: ringBytes))
      recovered = opened.recovered
      unreadable = opened.unreadable
      jumpedAbove = opened.jumpedAbove
    }

    /// What the event log's append does for small events (``EventLog/append(_:)``): numbered, staged, written into the
    /// ring, with no flush scheduled (the tests write the staged events when they choose).
    func stage(_ entries: [(peerIDs: [String], data: JSONValue)]) -> [AppendedEvent] {
      var bodies = EventLog.bodies(
        entries.map { (EventFanOut(peerIDs: $0.peerIDs, type: "session.data", data: $0.data), at: "t") })
      ring.release(through: store.eventLog.ingestedThrough)
      _ = store.eventLog.stageEvents(&bodies, bytes: 0)
      for body in bodies { #expect(ring.append(sequence: body.sequence, payload: body.ringRecord)) }
      return bodies
    }

    func remove() { try? FileManager.default.removeItem(atPath: directory) }
  }

  func addPeers(_ store: NodeStore, _ ids: [String]) async throws { try await store.insertPeersForTests(ids) }

  @Test func aRingRecordGivesBackTheEvent() throws {
    let event = AppendedEvent(
      sequence: 42, peerIDs: ["a", "b-é", String(repeating: "p", count: 300)], type: "session.data",
      at: "2026-12-05T10:00:00.000Z", data: .serialized(Array(#"{"text":"héllo"}"#.utf8)))
    let decoded = try #require(
      AppendedEvent(ringRecord: EventRing.Record(sequence: 42, payload: event.ringRecord)))
    #expect(decoded.sequence == 42)
    #expect(decoded.peerIDs == event.peerIDs)
    #expect(decoded.type == event.type)
    #expect(decoded.at == event.at)
    #expect(decoded.data.serialized() == event.data.serialized())
    // A record cut anywhere is not an event.
    for length in [0, 1, 3, 10, 20] {
      #expect(AppendedEvent(ringRecord: .init(sequence: 1, payload: Array(event.ringRecord.prefix(length)))) == nil)
    }
  }

  /// Staged events are numbered on from the log's newest, and a read of a log, the newest sequence and a peer's
  /// deletion each see them before SQLite's batch would have come.
  @Test func readsAndDeletionsSeeStagedEvents() async throws {
    let journal = try await Journal()
    defer { journal.remove() }
    try await addPeers(journal.store, ["a", "b"])
    let first = try await journal.store.eventLog.appendEvents([("a", "n", .int(0))], at: "t")
    let staged = journal.stage([(["a", "b"], .int(1)), (["a"], .int(2))])
    #expect(staged.map(\.sequence) == [first[0].sequence + 1, first[0].sequence + 2])
    #expect(journal.store.eventLog.hasStagedEvents)
    #expect(try await journal.store.eventLog.latestSequence(peerID: "b") == staged[0].sequence)
    #expect(!journal.store.eventLog.hasStagedEvents)
    #expect(journal.store.eventLog.ingestedThrough == staged[1].sequence)
    let log = try await journal.store.eventLog.events(peerID: "a", after: 0, limit: 10).events
    #expect(log.map(\.sequence) == [first[0].sequence] + staged.map(\.sequence))
    #expect(log.last?.data.serialized() == Array("2".utf8))

    let more = journal.stage([(["b"], .int(3))])
    #expect(
      try await journal.store.eventLog.events(peerID: "b", after: 0, limit: 10).events.map(\.sequence)
        == [staged[0].sequence, more[0].sequence])
    _ = journal.stage([(["b"], .int(4))])
    try await journal.store.deletePeer(id: "b")
    #expect(!journal.store.eventLog.hasStagedEvents, "the deletion wrote what was staged first")
    let bodies = try await journal.store.database.read {
      try $0.scalar("SELECT count(*) FROM event_bodies", as: Int64.self)
    }
    #expect(bodies == 3, "the bodies only b had are gone with it, a's stay")
  }

  /// The node is killed with events staged: they are in the ring only. The next start writes exactly those SQLite
  /// did not commit, and numbers new events above every one it ever handed out.
  @Test func whatTheRingKeptPastTheLastCommitIsWrittenAtTheNextStart() async throws {
    let journal = try await Journal()
    defer { journal.remove() }
    try await addPeers(journal.store, ["a", "b"])
    let committed = journal.stage([(["a", "b"], .int(1)), (["a"], .int(2))])
    try await journal.store.eventLog.flushStagedEvents()
    let lost = journal.stage([(["a", "b"], .int(3)), (["b"], .int(4)), (["a"], .int(5))])
    // Killed: nothing more reaches SQLite; the ring's pages are in the file.
    let restarted = try await Journal(directory: journal.directory)
    #expect(restarted.recovered == 3)
    let a = try await restarted.store.eventLog.events(peerID: "a", after: 0, limit: 10).events
    #expect(a.map(\.sequence) == [committed[0], committed[1], lost[0], lost[2]].map(\.sequence))
    #expect(a.map { $0.data.serialized() } == ["1", "2", "3", "5"].map { Array($0.utf8) })
    let b = try await restarted.store.eventLog.events(peerID: "b", after: 0, limit: 10).events
    #expect(b.map(\.sequence) == [committed[0], lost[0], lost[1]].map(\.sequence))
    #expect(restarted.stage([(["a"], .int(6))])[0].sequence == lost[2].sequence + 1)

    // Started again without a kill: nothing is written twice.
    try await restarted.store.eventLog.flushStagedEvents()
    let again = try await Journal(directory: journal.directory)
    #expect(again.recovered == 0)
    #expect(try await again.store.eventLog.events(peerID: "a", after: 0, limit: 10).events.count == 5)
  }

  /// A record past the last commit that holds no event (a format this version cannot read) is counted and skipped;
  /// the events around it are written, and numbering goes on above it.
  @Test func aRecordThatHoldsNoEventIsSkippedAndCounted() async throws {
    let journal = try await Journal()
    defer { journal.remove() }
    try await addPeers(journal.store, ["a"])
    let before = journal.stage([(["a"], .int(1))])
    #expect(journal.ring.append(sequence: before[0].sequence + 1, payload: [1, 2, 3]))
    // Numbered past the foreign record, as the node that wrote it would have.
    let after = [
      AppendedEvent(sequence: before[0].sequence + 2, peerIDs: ["a"], type: "n", at: "t", data: .int(3))
    ]
    #expect(journal.ring.append(sequence: after[0].sequence, payload: after[0].ringRecord))
    let restarted = try await Journal(directory: journal.directory)
    #expect(restarted.recovered == 2)
    #expect(restarted.unreadable == 1)
    #expect(
      try await restarted.store.eventLog.events(peerID: "a", after: 0, limit: 10).events.map(\.sequence)
        == [before[0].sequence, after[0].sequence])
    #expect(restarted.stage([(["a"], .int(4))])[0].sequence == after[0].sequence + 1)
  }

  /// The newest events were deleted with their peer, so the database's highest body is below numbers already handed
  /// out and released from the ring: new events still get numbers above all of them (a client's cursor never points
  /// past a new event, and the ring never sees a number twice).
  @Test func numbersStayAboveEveryOneHandedOutAcrossAStart() async throws {
    let journal = try await Journal()
    defer { journal.remove() }
    try await addPeers(journal.store, ["a", "b"])
    _ = journal.stage([(["a"], .int(1))])
    let newest = journal.stage([(["b"], .int(2)), (["b"], .int(3))])
    try await journal.store.deletePeer(id: "b")
    _ = journal.stage([])
    #expect(journal.ring.releasedThrough == newest[1].sequence)
    let restarted = try await Journal(directory: journal.directory)
    #expect(restarted.stage([(["a"], .int(4))])[0].sequence == newest[1].sequence + 1)
  }

  /// The ring was lost (its file empty at the next start: deleted, or moved aside after damage) while it held events
  /// SQLite had not committed, and the newest committed events were deleted with their peer: new numbers start above
  /// every one that may have been handed out, so a client reconnecting with `since=` its last id misses nothing new.
  @Test func numbersJumpPastARingThatWasLost() async throws {
    let journal = try await Journal()
    defer { journal.remove() }
    try await addPeers(journal.store, ["a", "b"])
    _ = journal.stage([(["a"], .int(1))])
    let deleted = journal.stage([(["b"], .int(2))])
    try await journal.store.deletePeer(id: "b")
    let lost = journal.stage([(["a"], .int(3)), (["a"], .int(4))])
    // Killed with those two in the ring only; the ring is then lost.
    try #require(truncate(journal.directory + "/events.ring", 0) == 0)
    let restarted = try await Journal(directory: journal.directory)
    #expect(restarted.recovered == 0)
    let jumpedAbove = try #require(restarted.jumpedAbove, "the lost ring is reported")
    #expect(jumpedAbove >= deleted[0].sequence)
    let next = restarted.stage([(["a"], .int(5))])[0].sequence
    #expect(next > max(lost[1].sequence, deleted[0].sequence), "a number handed out before is handed out again")
    #expect(next > jumpedAbove + EventRing.mostRecords(capacity: 64 << 10))
    #expect(String(next).count <= 18)
    // A new node (no ring, no events) starts at 1, with nothing logged.
    let fresh = try await Journal()
    defer { fresh.remove() }
    #expect(fresh.jumpedAbove == nil)
  }

  /// Records the ring holds past a damaged one are not written (what follows damage cannot be trusted), but their
  /// numbers are never handed out again.
  @Test func numbersStayAboveRecordsPastADamagedOne() async throws {
    let journal = try await Journal()
    defer { journal.remove() }
    try await addPeers(journal.store, ["a"])
    let staged = journal.stage([(["a"], .int(1)), (["a"], .int(2)), (["a"], .int(3))])
    // The first record's magic overwritten.
    let file = try #require(FileHandle(forUpdatingAtPath: journal.directory + "/events.ring"))
    try file.seek(toOffset: UInt64(EventRing.headerBytes))
    try file.write(contentsOf: [0, 0, 0, 0])
    try file.close()
    let restarted = try await Journal(directory: journal.directory)
    #expect(restarted.ring.dropped == (2, staged[2].sequence))
    #expect(restarted.stage([(["a"], .int(4))])[0].sequence > staged[2].sequence)
  }

  /// A full disk fails the `COMMIT` of staged events after every statement in it succeeded, again at every retry:
  /// retention counts none of those attempts, so the first commit once there is room again trims nothing the
  /// retention limit keeps, and `meshgate_events_trimmed_total` counts only trims that committed.
  @Test(.enabled(if: SmallDisk.available, "needs root and permission to mount a tmpfs (CAP_SYS_ADMIN)"))
  func aCommitTheFullDiskFailedCountsNothingTowardRetention() async throws {
    let disk = try SmallDisk(bytes: 8 << 20)
    defer { disk.unmount() }
    let journal = try await Journal(directory: disk.path + "/data", ringBytes: 2 << 20, retention: 100)
    try await addPeers(journal.store, ["a"])
    for index in 0..<60 { _ = journal.stage([(["a"], .int(Int64(index)))]) }
    try await journal.store.eventLog.flushStagedEvents()
    #expect(try await journal.store.eventLog.events(peerID: "a", after: 0, limit: 1000).events.count == 60)

    try disk.fill()
    // 20 events of 40 KB: the write-ahead log must grow to take them, and cannot.
    let text = JSONValue.string(String(repeating: "d", count: 40_000))
    let waiting = journal.stage((0..<20).map { _ in (["a"], text) })
    for _ in 0..<5 {
      await #expect(throws: (any Error).self) { try await journal.store.eventLog.flushStagedEvents() }
      #expect(journal.store.eventLog.hasStagedEvents)
    }
    #expect(journal.store.eventLog.trimmed == 0)

    disk.free()
    try await journal.store.eventLog.flushStagedEvents()
    let (events, truncated) = try await journal.store.eventLog.events(peerID: "a", after: 0, limit: 1000)
    #expect(events.count == 80, "events clients saw were trimmed")
    #expect(!truncated)
    #expect(events.last?.sequence == waiting.last?.sequence)
    #expect(journal.store.eventLog.trimmed == 0)
  }

  /// A write that fails (the database is read-only here; a full disk alike) and is tried again uses up no numbers:
  /// nobody saw them, and the span of numbers a lost event ring may hide stays what the ring can hold.
  @Test func aFailedWriteUsesUpNoNumbers() async throws {
    let journal = try await Journal()
    defer { journal.remove() }
    try await addPeers(journal.store, ["a"])
    let first = try await journal.store.eventLog.appendEvents([("a", "n", .int(1))], at: "t")
    try await journal.store.database.withWriter { try $0.execute("PRAGMA query_only = 1") }
    for _ in 0..<3 {
      await #expect(throws: (any Error).self) {
        try await journal.store.eventLog.appendEvents([("a", "n", .int(2)), ("a", "n", .int(3))], at: "t")
      }
    }
    try await journal.store.database.withWriter { try $0.execute("PRAGMA query_only = 0") }
    let second = try await journal.store.eventLog.appendEvents([("a", "n", .int(2))], at: "t")
    #expect(second[0].sequence == first[0].sequence + 1)
  }

  /// A flush that fails (the database is read-only here) keeps the events staged, in order, and the next one writes
  /// them.
  @Test func aFailedFlushKeepsTheEventsStaged() async throws {
    let journal = try await Journal()
    defer { journal.remove() }
    try await addPeers(journal.store, ["a"])
    let staged = journal.stage([(["a"], .int(1)), (["a"], .int(2))])
    try await journal.store.database.withWriter { try $0.execute("PRAGMA query_only = 1") }
    await #expect(throws: (any Error).self) { try await journal.store.eventLog.flushStagedEvents() }
    #expect(journal.store.eventLog.hasStagedEvents)
    #expect(journal.store.eventLog.ingestedThrough < staged[0].sequence)
    #expect(journal.store.eventLog.claimStagedFlush(), "the retry takes the flush on")
    let later = journal.stage([(["a"], .int(3))])
    try await journal.store.database.withWriter { try $0.execute("PRAGMA query_only = 0") }
    try await journal.store.eventLog.flushStagedEvents()
    #expect(
      try await journal.store.eventLog.events(peerID: "a", after: 0, limit: 10).events.map(\.sequence)
        == (staged + later).map(\.sequence))
  }
}

/// The node's publish path with its event ring, in process.
@Suite(.timeLimit(.minutes(1)))
struct EventJournalNodeTests {
  /// A small event is in the ring, and staged, when its recipient gets it: it reached SQLite's batch or it is in the
  /// ring, never neither. A read of the log writes the staged events first.
  @Test func aSmallEventIsInTheRingWhenItIsDelivered() async throws {
    try await InProcessNode.with { node in
      let alice = try await node.createPeerWithToken("alice")
      let socket = try await node.openEventSocket(token: alice.token)
      _ = try await node.event("hello", on: socket)
      await node.node.publishForTests([(alice.id, "session.data", ["text": "one"])])
      let delivered = try await node.port.wait { recorded in
        (recorded.frames[socket] ?? []).compactMap { frame -> Int64? in
          guard let object = (try? JSONValue.parse(frame.bytes))?.objectValue,
            object["type"]?.stringValue == "session.data"
          else { return nil }
          return object["id"]?.stringValue.flatMap { Int64($0) }
        }.first
      }
      #expect(await node.node.newestInEventRing == delivered, "the ring holds what was delivered until SQLite has it")
      let page = try await node.request(.get, "/api/v1/events", query: [("since", "0")], token: alice.token)
      let ids = elements(page.object?["events"]).compactMap { $0.objectValue?["id"]?.stringValue }
      #expect(ids.last == String(delivered))
      #expect(await node.node.store.eventLog.ingestedThrough >= delivered)
    }
  }

  /// While SQLite cannot write, a delivered small event waits in the ring: `/healthz` still answers 200 (it only reads),
  /// and once SQLite writes again the log has the event.
  @Test func healthzOnlyReadsWhileEventsWaitForSQLite() async throws {
    try await InProcessNode.with { node in
      let alice = try await node.createPeerWithToken("alice")
      let socket = try await node.openEventSocket(token: alice.token)
      // Live first: the socket's replay reads the log after `hello`, and a read writes the staged events first, so a
      // replay still reading when SQLite stops writing fails and closes the socket (1011, "reconnect with since").
      // An event delivered after `hello` is the replay's last read done.
      await node.node.publishForTests([(alice.id, "session.data", ["text": "live"])])
      _ = try await node.event("session.data", on: socket) { $0["text"] == "live" }
      let store = await node.node.store
      try await store.database.withWriter { try $0.execute("PRAGMA query_only = 1") }
      await node.node.publishForTests([(alice.id, "session.data", ["text": "waiting"])])
      _ = try await node.event("session.data", on: socket) { $0["text"] == "waiting" }
      #expect(store.eventLog.hasStagedEvents)
      #expect(try await node.request(.get, "/healthz").status == 200)
      #expect(try await node.request(.get, "/api/v1/events", query: [("since", "0")], token: alice.token).status != 200)
      try await store.database.withWriter { try $0.execute("PRAGMA query_only = 0") }
      let page = try await node.request(.get, "/api/v1/events", query: [("since", "0")], token: alice.token)
      #expect(page.status == 200)
      #expect(String(decoding: page.body, as: UTF8.self).contains("waiting"))
    }
  }

  /// A batch of small events larger than the ring waits for its SQLite commit instead (counted on `/metrics`), and
  /// every event is delivered and logged in order.
  @Test func eventsTheRingHasNoRoomForWaitForTheirCommit() async throws {
    try await InProcessNode.with { node in
      let alice = try await node.createPeerWithToken("alice")
      let socket = try await node.openEventSocket(token: alice.token)
      _ = try await node.event("hello", on: socket)
      let text = String(repeating: "x", count: 60_000)
      let count = NodeParts.eventRingBytes / 60_000 + 10
      await node.node.publishForTests(
        (0..<count).map { (alice.id, "session.data", ["text": .string(text), "n": .int(Int64($0))]) })
      // `hello`, then the events (parsed once they are all there).
      let frames = try await node.port.wait { recorded in
        (recorded.frames[socket]?.count ?? 0) > count ? recorded.frames[socket] : nil
      }
      let numbers = frames.compactMap { frame in
        (try? JSONValue.parse(frame.bytes))?.objectValue?["data"]?.objectValue?["n"]?.intValue
      }
      #expect(numbers == (0..<Int64(count)).map { $0 })
      let metrics = String(decoding: try await node.request(.get, "/metrics").body, as: UTF8.self)
      #expect(!metrics.contains("meshgate_event_ring_full_total 0"))
      #expect(metrics.contains("meshgate_event_ring_full_total"))
      var logged: [Int64] = []
      var cursor = "0"
      while true {
        let page = try await node.request(
          .get, "/api/v1/events", query: [("since", cursor), ("limit", "100")], token: alice.token)
        let events = elements(page.object?["events"])
        logged += events.compactMap { $0.objectValue?["data"]?.objectValue?["n"]?.intValue }
        guard let next = page.object?["nextCursor"]?.stringValue, !events.isEmpty else { break }
        cursor = next
      }
      #expect(logged == numbers)
    }
  }
}

private func elements(_ value: JSONValue?) -> [JSONValue] {
  if case .array(let values)? = value { values } else { [] }
}

extension Node {
  /// The newest sequence number the event ring keeps (tests).
  var newestInEventRing: Int64? { store.eventLog.newestInRing }

  /// Publishes events as the node's own code does, from the node's executor (tests).
  func publishForTests(_ entries: [(peerID: String, type: String, data: JSONValue)]) {
    events.publishInBackground(entries, node: self)
  }
}
