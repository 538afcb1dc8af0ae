import Foundation
import MeshCore
import Store
import Testing

@testable import Gateway

/// The event log in SQLite: a fan-out is stored as one body shared by its recipients (one sequence number for all),
/// repeats to one peer stay separate events, retention trims per peer, and a version 4 database (one row per
/// delivery) is migrated without losing an event.
struct EventStoreTests {
  func temporaryPath() -> String {
    FileManager.default.temporaryDirectory.appendingPathComponent("events-\(UUID().uuidString).sqlite").path
  }

  func addPeers(_ store: NodeStore, _ ids: [String]) async throws {
    for id in ids {
      try await store.database.write { connection in
        try connection.execute(
          "INSERT INTO peers(id, display_name, discovery_info, token_hash, created_at) VALUES (?, ?, '{}', ?, 't')",
          [.text(id), .text(id), .text("hash-\(id)")])
      }
    }
  }

  @Test func fanOutSharesOneSequenceAndRepeatsStaySeparate() async throws {
    let path = temporaryPath()
    defer { try? FileManager.default.removeItem(atPath: path) }
    let store = try NodeStore(path: path, retention: 100)
    try await addPeers(store, ["a", "b", "c"])
    let shared = JSONValue.object(["text": "hello"]).preserialized
    let stored = try await store.appendEvents(
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
    let forA = try await store.events(peerID: "a", after: 0, limit: 10).events
    #expect(forA.map(\.sequence) == [sequences[0], sequences[3]])
    #expect(forA.first?.data.serializedString() == #"{"text":"hello"}"#)
    let forB = try await store.events(peerID: "b", after: 0, limit: 10).events
    #expect(forB.map(\.sequence) == [sequences[0], sequences[4]])
    #expect(try await store.latestSequence(peerID: "c") == sequences[0])
    // A later append continues after every existing body, also after a reopen.
    let reopened = try NodeStore(path: path, retention: 100)
    let later = try await reopened.appendEvents([("c", "x", .null)], at: "t")
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
    let appended = try await store.appendEvents(fanOuts: [
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
      let events = try await store.events(peerID: peer, after: 0, limit: 10).events
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
    _ = try await store.appendEvents([("a", "session.data", data)], at: "t")
    let read = try #require(try await store.events(peerID: "a", after: 0, limit: 10).events.first)
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
      _ = try await store.appendEvents([("a", "n", .int(Int64(index))), ("b", "n", .int(Int64(index)))], at: "t")
    }
    // Trimming is amortised (the recipients of one body in 64), so a log holds a little more than `retention`.
    for peer in ["a", "b"] {
      let page = try await store.events(peerID: peer, after: 0, limit: 1000)
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
    let page = try await store.events(peerID: "p", after: 0, limit: 10)
    #expect(page.events.map(\.sequence) == [1, 2, 3])
    #expect(page.events.map { $0.data.serializedString() } == [#"{"n":1}"#, #"{"n":2}"#, #"{"n":3}"#])
    let next = try await store.appendEvents([("p", "x", .null)], at: "t")
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
    for _ in 0..<200 { _ = try await store.appendEvents(peers.map { ($0, "session.data", data) }, at: "t") }
    _ = try await store.latestSequence(peerID: peers[0])
    // Frames each commit adds to the WAL: a full checkpoint before it (from a second connection) lets the commit
    // start the WAL again from its beginning, and the next checkpoint reports how many frames the WAL then holds.
    let observer = try Connection(path: path)
    func walFrames() throws -> Int64 {
      try observer.queryOne("PRAGMA wal_checkpoint(PASSIVE)")?.int64(1) ?? -1
    }
    var commits: [Int64] = []
    for _ in 0..<20 {
      _ = try walFrames()
      _ = try await store.appendEvents(peers.map { ($0, "session.data", data) }, at: "t")
      commits.append(try walFrames())
    }
    let median = commits.sorted()[commits.count / 2]
    // The body, its recipients, the two tables' upper pages and the header page: a few pages, not one per recipient
    // (72 before the per-peer log was indexed apart from the commit).
    #expect(median <= 8, "a 50-recipient fan-out's commit wrote \(median) WAL pages (\(commits))")
  }

  /// A peer whose few events still wait to be indexed keeps them when another peer's log, indexed in an earlier step,
  /// is trimmed: bodies that `event_pending` still names are not "referenced by no one".
  @Test func aTrimInOneIndexingStepKeepsBodiesAnotherPeerStillWaitsFor() async throws {
    let path = temporaryPath()
    defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
    let store = try NodeStore(path: path, retention: 10)
    try await addPeers(store, ["a", "z"])
    let early = try await store.appendEvents((0..<3).map { ("z", "n", .int(Int64($0))) }, at: "t")
    // More entries for "a" than one indexing step takes, so "a" (trimmed to 10) and "z" are indexed in two steps.
    let many = NodeStore.indexStepRows + 100
    _ = try await store.appendEvents((0..<many).map { ("a", "n", .int(Int64($0))) }, at: "t")
    try await store.indexPendingEventsInSteps()
    let forZ = try await store.events(peerID: "z", after: 0, limit: 100).events
    #expect(forZ.map(\.sequence) == early.map(\.sequence))
    #expect(forZ.map { $0.data.serializedString() } == ["0", "1", "2"])
    let forA = try await store.events(peerID: "a", after: 0, limit: 1000).events
    #expect(forA.count == 10 && forA.last?.data.serializedString() == "\(many - 1)")
  }

  /// Entries written but not yet indexed per peer (the node was killed before it got to them) are in the peers' logs
  /// after a restart, and a deleted peer's log gets none of them.
  @Test func unindexedEntriesSurviveARestartAndSkipADeletedPeer() async throws {
    let path = temporaryPath()
    defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
    var sequences: [Int64] = []
    do {
      let store = try NodeStore(path: path, retention: 100)
      try await addPeers(store, ["a", "b", "c"])
      for index in 0..<5 {
        let stored = try await store.appendEvents(
          [("a", "n", .int(Int64(index))), ("b", "n", .int(Int64(index))), ("c", "n", .int(Int64(index)))], at: "t")
        sequences.append(stored[0].sequence)
      }
      let waiting = try await store.database.read {
        try $0.scalar("SELECT count(*) FROM event_pending", as: Int64.self)
      }
      #expect(waiting == 5, "five bodies, fewer than the indexing threshold, wait to be indexed")
    }
    let reopened = try NodeStore(path: path, retention: 100)
    #expect(try await reopened.latestSequence(peerID: "a") == sequences.last)
    #expect(try await reopened.events(peerID: "b", after: 0, limit: 10).events.map(\.sequence) == sequences)
    _ = try await reopened.appendEvents([("c", "n", .int(9))], at: "t")
    try await reopened.deletePeer(id: "c")
    _ = try await reopened.latestSequence(peerID: "a")
    let left = try await reopened.database.read {
      try $0.scalar("SELECT count(*) FROM event_log WHERE peer_id = 'c'", as: Int64.self)
    }
    #expect(left == 0)
  }
}
