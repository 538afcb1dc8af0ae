import Foundation
import MeshCore
import Store
import Synchronization
import Testing

@testable import Gateway

/// Job writes are group-committed: concurrent writes share transactions, every one is stored when its call returns,
/// and a write that fails fails alone.
struct JobStoreTests {
  func job(_ id: String, owner: String = "p", paymentCents: Int64? = nil) -> Job {
    Job(
      id: id, ownerPeerID: owner, name: "job \(id)", dueDate: nil, paymentCents: paymentCents, notes: nil,
      assignedTo: nil, receivedFrom: nil, createdAt: "2026-12-03T00:00:00.000Z", updatedAt: "2026-12-03T00:00:00.000Z")
  }

  func makeStore() async throws -> (NodeStore, String) {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("jobs-\(UUID().uuidString).sqlite").path
    let store = try NodeStore(path: path, retention: 100)
    try await store.database.write { connection in
      try connection.execute(
        "INSERT INTO peers(id, display_name, discovery_info, token_hash, created_at) VALUES ('p', 'p', '{}', 'h', 't')")
    }
    return (store, path)
  }

  @Test func concurrentWritesShareCommitsAndAreAllStoredOnReturn() async throws {
    let (store, path) = try await makeStore()
    defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
    try await withThrowingTaskGroup(of: Void.self) { group in
      for index in 0..<200 {
        group.addTask {
          try await store.saveJob(self.job("j\(index)"))
          // Stored when the call returns.
          #expect(try await store.job(id: "j\(index)", owner: "p") != nil)
        }
      }
      try await group.waitForAll()
    }
    let stored = try await store.database.read { try $0.scalar("SELECT count(*) FROM jobs", as: Int64.self) }
    #expect(stored == 200)
    let batches = store.jobWrites.withLock { $0.batches }
    #expect(batches < 200, "200 concurrent writes took \(batches) transactions")
  }

  @Test func aFailingWriteFailsAloneInItsBatch() async throws {
    let (store, path) = try await makeStore()
    defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
    let outcomes = try await withThrowingTaskGroup(of: (String, Bool).self) { group in
      for index in 0..<40 {
        // Every tenth job breaks the payment CHECK constraint.
        let bad = index % 10 == 0
        group.addTask {
          do {
            try await store.saveJob(self.job("j\(index)", paymentCents: bad ? -1 : 100))
            return ("j\(index)", true)
          } catch {
            return ("j\(index)", false)
          }
        }
      }
      var outcomes: [String: Bool] = [:]
      for try await (id, saved) in group { outcomes[id] = saved }
      return outcomes
    }
    for index in 0..<40 {
      let saved = try await store.job(id: "j\(index)", owner: "p") != nil
      #expect(outcomes["j\(index)"] == (index % 10 != 0))
      #expect(saved == (index % 10 != 0))
    }
  }

  /// New jobs' ids are time-ordered, so jobs saved one after another rewrite the last pages of the jobs table and its
  /// indexes (14 distinct pages for these 50) instead of a random leaf of both id-ordered indexes each: the pages the
  /// WAL, and then every checkpoint, write again. With random (version 4) ids the same 50 saves touched 84 pages.
  @Test func jobsSavedOneAfterAnotherRewriteAFewPagesNotOneEach() async throws {
    let (store, path) = try await makeStore()
    defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
    let existing = (0..<4_000).map { _ in job(RecordID.make()) }
    try await store.database.write { connection in
      try connection.transaction { for job in existing { try NodeStore.upsertJob(job, connection) } }
    }
    // A full checkpoint with no reader lets the next commit start the WAL from its beginning.
    let observer = try Connection(path: path)
    _ = try observer.queryOne("PRAGMA wal_checkpoint(TRUNCATE)")
    for _ in 0..<50 { try await store.saveJob(job(RecordID.make())) }
    // Every WAL frame starts with the number of the page it holds (32-byte file header, 24-byte frame headers).
    let wal = try Data(contentsOf: URL(fileURLWithPath: path + "-wal"))
    let pageSize = Int(wal[8]) << 24 | Int(wal[9]) << 16 | Int(wal[10]) << 8 | Int(wal[11])
    var pages = Set<Int>()
    var offset = 32
    while offset + 24 + pageSize <= wal.count {
      pages.insert(
        Int(wal[offset]) << 24 | Int(wal[offset + 1]) << 16 | Int(wal[offset + 2]) << 8 | Int(wal[offset + 3]))
      offset += 24 + pageSize
    }
    #expect(offset > 32, "the 50 saves left no frames in the WAL")
    #expect(pages.count <= 20, "50 jobs saved one by one rewrote \(pages.count) distinct pages")
  }
}
