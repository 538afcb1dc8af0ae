import Foundation
import MeshCore
import Store
import Testing

@testable import Gateway

/// The event log in SQLite: a fan-out is stored as one body for its audience (one sequence number for all its
/// recipients, no row per recipient), repeats to one peer stay separate events, retention trims per peer, and the
/// databases of earlier schemas (one row per delivery) are migrated without losing an event.
struct EventStoreTests {
  func temporaryPath() -> String {
    FileManager.default.temporaryDirectory.appendingPathComponent("events-\(UUID().uuidString).sqlite").path
  }

  func addPeers(_ store: NodeStore, _ ids: [String]) async throws { try await store.insertPeersForTests(ids) }

  @Test func fanOutSharesOneSequenceAndRepeatsStaySeparate() async throws {
    let path = temporaryPath()
    defer { try? FileManager.default.removeItem(atPath: path) }
    let store = try NodeStore(path: path, retention: 100)
    try await addPeers(store, ["a", "b", "c"])
    let shared = JSONValue.object(["text": "hello"]).preserialized
    let stored = try await store.eventLog.appendEvents(
      [
        ("a", "session.data", shared), ("b", "session.data", shared), ("c", "session.data", shared),
        // The same data again to a peer that already has it in this run: a new event.
        ("a", "session.data", shared),
        // Different data: a new event.
        ("b", "session.data", ["text": "other"]),
      ], at: "2026-12-02T00:00:00.000Z")
    let sequences = stored.map(\.sequence)
    #expect(sequences[0] == sequences[1] && sequences[1] == sequences[2])
    #expect(sequences[3] > sequences[2] && sequences[4] > sequences[3])
    let forA = try await store.eventLog.events(peerID: "a", after: 0, limit: 10).events
    #expect(forA.map(\.sequence) == [sequences[0], sequences[3]])
    #expect(forA.first?.data.serializedString() == #"{"text":"hello"}"#)
    let forB = try await store.eventLog.events(peerID: "b", after: 0, limit: 10).events
    #expect(forB.map(\.sequence) == [sequences[0], sequences[4]])
    #expect(try await store.eventLog.latestSequence(peerID: "c") == sequences[0])
    // A later append continues after every existing body, also after a reopen.
    let reopened = try NodeStore(path: path, retention: 100)
    let later = try await reopened.eventLog.appendEvents([("c", "x", .null)], at: "t")
    #expect(later[0].sequence == sequences[4] + 1)
  }

  /// Fan-outs arrive as one entry naming every recipient (session data to a whole session): one body each, the same
  /// sequence for all its recipients, and the same rules as for entries one peer at a time: a fan-out that names a
  /// peer the body before already has is a new event, and entries one peer at a time still join a body.
  @Test func fanOutEntriesAreOneBodyEachAndMixWithSinglePeerEntries() async throws {
    let path = temporaryPath()
    defer { try? FileManager.default.removeItem(atPath: path) }
    let store = try NodeStore(path: path, retention: 100)
    try await addPeers(store, ["a", "b", "c", "d"])
    let shared = JSONValue.object(["text": "hello"]).preserialized
    let at = "2026-12-02T00:00:00.000Z"
    let appended = try await store.eventLog.appendEvents(fanOuts: [
      (EventFanOut(peerIDs: ["a", "b", "c"], type: "session.data", data: shared), at),
      // The same event again, naming b: a second event (b gets both).
      (EventFanOut(peerIDs: ["d", "b"], type: "session.data", data: shared), at),
      // One peer at a time, same data: joins the body before (d and b are in it; c is not).
      (EventFanOut(peerIDs: ["c"], type: "session.data", data: shared), at),
      (EventFanOut(peerIDs: [], type: "session.data", data: shared), at),
    ])
    #expect(appended.map(\.peerIDs) == [["a", "b", "c"], ["d", "b", "c"]])
    #expect(appended[1].sequence == appended[0].sequence + 1)
    for peer in ["a", "b", "c", "d"] {
      let events = try await store.eventLog.events(peerID: peer, after: 0, limit: 10).events
      let expected = appended.filter { $0.peerIDs.contains(peer) }.map(\.sequence)
      #expect(events.map(\.sequence) == expected, "peer \(peer)")
      #expect(events.allSatisfy { $0.data.serializedString() == #"{"text":"hello"}"# && $0.at == at })
    }
    #expect(appended[0].envelope.serializedString() == appended[0].stored(for: "a").envelope.serializedString())
  }

  /// A read gives each event's data as the bytes the append serialized (replays and GET /api/v1/events send them on
  /// without parsing and serializing again): the same JSON, escapes and non-ASCII text intact.
  @Test func readEventsCarryTheBytesTheAppendSerialized() async throws {
    let path = temporaryPath()
    defer { try? FileManager.default.removeItem(atPath: path) }
    let store = try NodeStore(path: path, retention: 100)
    try await addPeers(store, ["a"])
    let data: JSONValue = [
      "text": "héllo \"wörld\"\n\u{1F600}\u{2028}", "n": 12.5, "list": [1, nil, true, ["deep": []]], "empty": [:],
    ]
    _ = try await store.eventLog.appendEvents([("a", "session.data", data)], at: "t")
    let read = try #require(try await store.eventLog.events(peerID: "a", after: 0, limit: 10).events.first)
    guard case .serialized(let bytes) = read.data else {
      Issue.record("data read back as \(read.data), not as its stored bytes")
      return
    }
    #expect(bytes == data.serialized())
    #expect(try JSONValue.parse(String(decoding: bytes, as: UTF8.self)) == data)
    #expect(read.envelope.serializedString().contains(#""data":\#(data.serializedString())"#))
  }

  @Test func retentionTrimsEachLogAndDropsUnreferencedBodies() async throws {
    let path = temporaryPath()
    defer { try? FileManager.default.removeItem(atPath: path) }
    let store = try NodeStore(path: path, retention: 10)
    try await addPeers(store, ["a", "b"])
    for index in 0..<300 {
      _ = try await store.eventLog.appendEvents(
        [("a", "n", .int(Int64(index))), ("b", "n", .int(Int64(index)))], at: "t")
    }
    // Trimming is amortised (the recipients of one body in 64), so a log holds a little more than `retention`.
    for peer in ["a", "b"] {
      let page = try await store.eventLog.events(peerID: peer, after: 0, limit: 1000)
      #expect(page.events.count >= 10 && page.events.count < 300, "\(peer): \(page.events.count)")
      #expect(page.truncated)
      #expect(page.events.last?.data.serializedString() == "299")
    }
    let bodies = try await store.database.read { connection in
      try connection.queryOne("SELECT count(*) FROM event_bodies")?.int64(0) ?? 0
    }
    #expect(bodies < 300, "bodies no log points to any more are deleted (\(bodies) left)")
  }

  @Test func migratesAVersion4LogWithoutLosingEvents() async throws {
    let path = temporaryPath()
    defer { try? FileManager.default.removeItem(atPath: path) }
    do {
      let old = try Database(path: path, migrations: Array(NodeStore.migrations.prefix(4)))
      try await old.write { connection in
        try connection.execute(
          "INSERT INTO peers(id, display_name, discovery_info, token_hash, created_at) VALUES ('p', 'p', '{}', 'h', 't')"
        )
        for index in 1...3 {
          try connection.execute(
            "INSERT INTO events(peer_id, type, at, data) VALUES ('p', 'node.linked', 't', ?)",
            [.text(#"{"n":\#(index)}"#)])
        }
      }
    }
    let store = try NodeStore(path: path, retention: 100)
    let page = try await store.eventLog.events(peerID: "p", after: 0, limit: 10)
    #expect(page.events.map(\.sequence) == [1, 2, 3])
    #expect(page.events.map { $0.data.serializedString() } == [#"{"n":1}"#, #"{"n":2}"#, #"{"n":3}"#])
    let next = try await store.eventLog.appendEvents([("p", "x", .null)], at: "t")
    #expect(next[0].sequence == 4)
  }

  /// The WAL bytes one fan-out's commit adds: the body and its recipients, not one log page per recipient.
  @Test func aFanOutCommitWritesAFewPagesNotOnePerRecipient() async throws {
    let path = temporaryPath()
    defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
    let store = try NodeStore(path: path, retention: 100_000)
    let peers = (0..<50).map { _ in "peer-\(UUID().uuidString.lowercased())" }
    try await addPeers(store, peers)
    let data: JSONValue = ["session": "s", "from": "p", "text": .string(String(repeating: "a", count: 64))]
    // Give every peer a log longer than a page, so their newest entries sit on different pages.
    for _ in 0..<200 { _ = try await store.eventLog.appendEvents(peers.map { ($0, "session.data", data) }, at: "t") }
    _ = try await store.eventLog.latestSequence(peerID: peers[0])
    // Frames each commit adds to the WAL: a full checkpoint before it (from a second connection) lets the commit
    // start the WAL again from its beginning, and the next checkpoint reports how many frames the WAL then holds.
    let observer = try Connection(path: path)
    func walFrames() throws -> Int64 {
      try observer.queryOne("PRAGMA wal_checkpoint(PASSIVE)")?.int64(1) ?? -1
    }
    var commits: [Int64] = []
    for _ in 0..<20 {
      _ = try walFrames()
      _ = try await store.eventLog.appendEvents(peers.map { ($0, "session.data", data) }, at: "t")
      commits.append(try walFrames())
    }
    let median = commits.sorted()[commits.count / 2]
    // The body, its recipients, the two tables' upper pages and the header page: a few pages, not one per recipient
    // (72 before the per-peer log was indexed apart from the commit).
    #expect(median <= 8, "a 50-recipient fan-out's commit wrote \(median) WAL pages (\(commits))")
  }

  /// A fan-out writes one body and nothing per recipient: its recipients' audience is written once, the first time
  /// that set of peers gets an event, and a new set (a member left) is a new audience.
  @Test func fanOutsWriteNoRowPerRecipient() async throws {
    let path = temporaryPath()
    defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
    let store = try NodeStore(path: path, retention: 100_000)
    let peers = (0..<50).map { "peer-\($0)" }
    try await addPeers(store, peers)
    func rows(_ table: String) async throws -> Int64 {
      try await store.database.read { try $0.scalar("SELECT count(*) FROM \(table)", as: Int64.self) } ?? -1
    }
    for index in 0..<100 {
      // The fan-out names its recipients in a different order each time: still one audience.
      let order = index % 2 == 0 ? peers : peers.reversed()
      _ = try await store.eventLog.appendEvents(
        fanOuts: [(EventFanOut(peerIDs: order, type: "session.data", data: .int(Int64(index))), "t")])
    }
    #expect(try await rows("event_bodies") == 100)
    #expect(try await rows("event_audiences") == 1)
    #expect(try await rows("event_audience_members") == 50)
    _ = try await store.eventLog.appendEvents(
      fanOuts: [(EventFanOut(peerIDs: Array(peers.dropFirst()), type: "session.data", data: .int(100)), "t")])
    #expect(try await rows("event_audiences") == 2)
    #expect(try await rows("event_audience_members") == 99)
    #expect(try await store.eventLog.events(peerID: "peer-0", after: 0, limit: 1000).events.count == 100)
    #expect(try await store.eventLog.events(peerID: "peer-1", after: 0, limit: 1000).events.count == 101)
    #expect(try await store.eventLog.latestSequence(peerID: "peer-0") == 100)
    #expect(try await store.eventLog.latestSequence(peerID: "peer-1") == 101)
  }

  /// A peer's log trimmed past bodies it shares with another peer leaves them to that peer; bodies below every
  /// member's trim point are deleted.
  @Test func aTrimKeepsTheBodiesAnotherMemberStillShows() async throws {
    let path = temporaryPath()
    defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
    let store = try NodeStore(path: path, retention: 10)
    try await addPeers(store, ["a", "z"])
    let shared = try await store.eventLog.appendEvents(
      fanOuts: (0..<3).map { (EventFanOut(peerIDs: ["a", "z"], type: "n", data: .int(Int64($0))), "t") })
    for index in 0..<500 { _ = try await store.eventLog.appendEvents([("a", "n", .int(Int64(index)))], at: "t") }
    let forZ = try await store.eventLog.events(peerID: "z", after: 0, limit: 100)
    #expect(forZ.events.map(\.sequence) == shared.map(\.sequence) && !forZ.truncated)
    let forA = try await store.eventLog.events(peerID: "a", after: 0, limit: 1000)
    #expect(forA.events.count == 10 && forA.truncated && forA.events.last?.data.serializedString() == "499")
    let bodies = try await store.database.read { try $0.scalar("SELECT count(*) FROM event_bodies", as: Int64.self) }
    #expect(bodies == 13, "z's 3 and a's 10 are left, nothing else")
    // z trims too (with events of its own): the shared bodies go once both logs are past them.
    for index in 0..<20 { _ = try await store.eventLog.appendEvents([("z", "m", .int(Int64(index)))], at: "t") }
    let left = try await store.database.read {
      try $0.scalar(
        "SELECT count(*) FROM event_bodies WHERE id <= ?", [.integer(shared.last!.sequence)], as: Int64.self)
    }
    #expect(left == 0)
    #expect(try await store.eventLog.events(peerID: "z", after: 0, limit: 100).events.count == 10)
  }

  /// An audience that trims deleted (its last body went) is made again for the next event to those peers: the node's
  /// memory of audiences never hands out one that is gone.
  @Test func anAudienceDeletedByATrimIsMadeAgainForTheNextEvent() async throws {
    let path = temporaryPath()
    defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
    let store = try NodeStore(path: path, retention: 10)
    try await addPeers(store, ["a", "b"])
    let both = EventFanOut(peerIDs: ["a", "b"], type: "n", data: .string("shared"))
    _ = try await store.eventLog.appendEvents(fanOuts: [(both, "t")])
    for index in 0..<20 {
      _ = try await store.eventLog.appendEvents([("a", "n", .int(Int64(index)))], at: "t")
      _ = try await store.eventLog.appendEvents([("b", "n", .int(Int64(index)))], at: "t")
    }
    let shared = try await store.database.read {
      try $0.scalar("SELECT count(*) FROM event_audiences WHERE members = 'a,b'", as: Int64.self)
    }
    #expect(shared == 0, "both logs are past the shared event: its audience is gone")
    let again = try await store.eventLog.appendEvents(fanOuts: [(both, "t")])
    for peer in ["a", "b"] {
      let events = try await store.eventLog.events(peerID: peer, after: 0, limit: 100).events
      #expect(events.last?.sequence == again[0].sequence, "peer \(peer)")
    }
  }

  /// A deleted peer's events go with it, the ones it shared with others stay theirs, and a log length learnt from the
  /// database after a restart trims as well as one counted since the start.
  @Test func aDeletedPeersEventsGoAndSharedOnesStay() async throws {
    let path = temporaryPath()
    defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
    var sequences: [Int64] = []
    do {
      let store = try NodeStore(path: path, retention: 100)
      try await addPeers(store, ["a", "b", "c"])
      for index in 0..<5 {
        let stored = try await store.eventLog.appendEvents(
          [("a", "n", .int(Int64(index))), ("b", "n", .int(Int64(index))), ("c", "n", .int(Int64(index)))], at: "t")
        sequences.append(stored[0].sequence)
      }
      _ = try await store.eventLog.appendEvents([("c", "own", .int(1)), ("c", "own", .int(2))], at: "t")
    }
    let reopened = try NodeStore(path: path, retention: 100)
    #expect(try await reopened.eventLog.latestSequence(peerID: "a") == sequences.last)
    try await reopened.deletePeer(id: "c")
    #expect(try await reopened.eventLog.events(peerID: "b", after: 0, limit: 10).events.map(\.sequence) == sequences)
    #expect(try await reopened.eventLog.events(peerID: "c", after: 0, limit: 10).events.isEmpty)
    func count(_ sql: String) async throws -> Int64 {
      try await reopened.database.read { try $0.scalar(sql, as: Int64.self) } ?? -1
    }
    #expect(try await count("SELECT count(*) FROM event_bodies") == 5)
    #expect(try await count("SELECT count(*) FROM event_audience_members WHERE peer_id = 'c'") == 0)
    try await reopened.deletePeer(id: "a")
    try await reopened.deletePeer(id: "b")
    #expect(try await count("SELECT count(*) FROM event_bodies") == 0)
    #expect(try await count("SELECT count(*) FROM event_audiences") == 0)
    #expect(try await count("SELECT count(*) FROM event_audience_members") == 0)
  }

  /// Random fan-outs to random sets of peers, peer deletions, reopened stores and a small retention, checked after
  /// every step against a model of per-peer logs: each log is what the model kept (the newest `retention` once it
  /// outgrew the limit and its slack), `truncated` says whether it dropped any, and the database holds exactly the
  /// bodies some log still shows.
  @Test(arguments: [1, 2, 3, 4])
  func logsMatchAModelOfPerPeerRetention(seed: UInt64) async throws {
    let path = temporaryPath()
    defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
    let retention = 10
    var random = SplitMix64(seed: seed)
    var store = try NodeStore(path: path, retention: retention)
    var peers = (0..<8).map { "p\($0)" }
    try await addPeers(store, peers)
    var model: [String: (log: [Int64], dropped: Bool)] = Dictionary(
      uniqueKeysWithValues: peers.map { ($0, ([], false)) })
    for step in 0..<300 {
      switch random.next() % 20 {
      case 0 where peers.count > 2:
        let peer = peers.remove(at: Int(random.next() % UInt64(peers.count)))
        try await store.deletePeer(id: peer)
        model[peer] = nil
      case 1:
        store = try NodeStore(path: path, retention: retention)
      default:
        // One to three fan-outs in one append, each to a random non-empty subset of the peers (most to all of them).
        var fanOuts: [(EventFanOut, at: String)] = []
        for index in 0..<Int(1 + random.next() % 3) {
          let recipients = random.next() % 3 == 0 ? peers.filter { _ in random.next() % 2 == 0 } : peers
          guard !recipients.isEmpty else { continue }
          fanOuts.append((EventFanOut(peerIDs: recipients, type: "n", data: .int(Int64(step * 10 + index))), "t"))
        }
        for event in try await store.eventLog.appendEvents(fanOuts: fanOuts) {
          for peer in event.peerIDs {
            model[peer]!.log.append(event.sequence)
            if model[peer]!.log.count > retention + retention / 64 {
              model[peer]!.log.removeFirst(model[peer]!.log.count - retention)
              model[peer]!.dropped = true
            }
          }
        }
      }
      for peer in peers {
        let page = try await store.eventLog.events(peerID: peer, after: 0, limit: 1000)
        #expect(page.events.map(\.sequence) == model[peer]!.log, "seed \(seed), step \(step), peer \(peer)")
        #expect(page.truncated == model[peer]!.dropped, "seed \(seed), step \(step), peer \(peer)")
        #expect(try await store.eventLog.latestSequence(peerID: peer) == model[peer]!.log.last ?? 0)
      }
      let bodies = try await store.database.read { connection in
        try connection.query("SELECT id FROM event_bodies ORDER BY id").map { try $0.int64(0) }
      }
      let shown = Set(model.values.flatMap(\.log)).sorted()
      #expect(bodies == shown, "seed \(seed), step \(step): bodies kept that no log shows, or lost")
      if bodies != shown { return }
    }
  }

  /// A version 11 database (one log row per recipient, and recipients still waiting to be indexed) keeps every
  /// peer's events, its trim points and the bytes of each body; bodies no log named are dropped.
  @Test func migratesAVersion11LogWithEntriesWaitingToBeIndexed() async throws {
    let path = temporaryPath()
    defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
    do {
      let old = try Database(path: path, migrations: Array(NodeStore.migrations.prefix(11)))
      try await old.write { connection in
        for (peer, trimmed) in [("a", 0), ("b", 2), ("c", 0)] {
          try connection.execute(
            """
            INSERT INTO peers(id, display_name, discovery_info, token_hash, created_at, trimmed_through)
            VALUES (?, ?, '{}', ?, 't', ?)
            """, [.text(peer), .text(peer), .text("h-\(peer)"), .integer(Int64(trimmed))])
        }
        for id in 1...6 {
          try connection.execute(
            "INSERT INTO event_bodies(id, type, at, data) VALUES (?, 'n', 't', ?)",
            [.integer(Int64(id)), .text(#"{"n":\#(id)}"#)])
        }
        // Body 2 was trimmed from b's log and is in no other: nobody's.
        for (peer, seq) in [("a", 1), ("b", 1), ("c", 1), ("a", 3), ("b", 3), ("c", 4)] {
          try connection.execute(
            "INSERT INTO event_log(peer_id, seq) VALUES (?, ?)", [.text(peer), .integer(Int64(seq))])
        }
        try connection.execute(#"INSERT INTO event_pending(seq, peers) VALUES (5, '["a","c"]'), (6, '["b"]')"#)
      }
    }
    let store = try NodeStore(path: path, retention: 100)
    let expected: [String: [Int64]] = ["a": [1, 3, 5], "b": [3, 6], "c": [1, 4, 5]]
    for (peer, sequences) in expected {
      let page = try await store.eventLog.events(peerID: peer, after: 0, limit: 10)
      #expect(page.events.map(\.sequence) == sequences, "peer \(peer)")
      #expect(page.events.map { $0.data.serializedString() } == sequences.map { #"{"n":\#($0)}"# })
      #expect(page.truncated == (peer == "b"))
    }
    let bodies = try await store.database.read {
      try $0.query("SELECT id FROM event_bodies ORDER BY id").map { try $0.int64(0) }
    }
    #expect(bodies == [1, 3, 4, 5, 6])
    // The audiences the migration made are the ones appends find: a/b/c share body 1's.
    let next = try await store.eventLog.appendEvents(
      [("a", "x", .null), ("b", "x", .null), ("c", "x", .null)], at: "t")
    #expect(next[0].sequence == 7)
    let audiences = try await store.database.read {
      try $0.scalar("SELECT count(*) FROM event_audiences", as: Int64.self)
    }
    #expect(audiences == 5, "{a,b,c}, {a,b}, {c}, {a,c}, {b}")
  }
}

extension NodeStore {
  /// Inserts bare peer rows with these ids (tests of the event log, which needs its recipients to exist).
  func insertPeersForTests(_ ids: [String]) async throws {
    for id in ids {
      try await database.write { connection in
        try connection.execute(
          "INSERT INTO peers(id, display_name, discovery_info, token_hash, created_at) VALUES (?, ?, '{}', ?, 't')",
          [.text(id), .text(id), .text("hash-\(id)")])
      }
    }
  }
}
