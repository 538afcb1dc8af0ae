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
}
