import Foundation
import Testing

@testable import Store

/// The WAL is checkpointed off the commit path (``Checkpointer``), and it still is checkpointed: the WAL does not grow
/// without bound under sustained writes, and every committed row is there.
@Suite struct CheckpointerTests {
  /// A row of 1 KiB: three fill a page.
  let payload = SQLValue.blob([UInt8](repeating: 7, count: 1024))

  func blobDatabase(at path: String) throws -> Database {
    try Database(
      path: path,
      migrations: [Migration(version: 1, name: "blob", sql: "CREATE TABLE blob (id INTEGER PRIMARY KEY, data BLOB)")])
  }

  @Test func sustainedWritesAreCheckpointedOffTheCommitPathAndTheWALStaysBounded() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let path = directory.path()
    let database = try blobDatabase(at: path)
    // 40 MiB committed one row at a time: without checkpoints the WAL would hold all of it.
    let rows = 40 * 1024
    for _ in 0..<rows {
      try await database.write { try $0.execute("INSERT INTO blob (data) VALUES (?)", [payload]) }
    }
    #expect(database.checkpointsCompleted >= 1, "no checkpoint ran")
    // Background checkpoints that copy pages sync the database file themselves, so the writer's own checkpoint,
    // which lets the WAL start again, has little left to sync under the commits queued behind it. (Whether the writer
    // checkpoints at all here depends on how fast the commits come: slow ones leave room for a background checkpoint
    // to finish and restart the WAL. theWritersCheckpointDoesNotWaitForABusyCheckpointer makes it happen.)
    #expect(database.checkpointDatabaseSyncs >= 1, "no background checkpoint synced the database file")
    let walBytes = try #require(try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int)
    // The WAL starts again after about Checkpointer.writerPagesThreshold pages (~130 MiB); it never holds everything.
    #expect(walBytes < 160 << 20, "the WAL grew to \(walBytes >> 20) MiB over 40 MiB of rows (~300 MiB of pages)")
    #expect(try await database.read { try $0.scalar("SELECT count(*) FROM blob", as: Int.self) } == rows)
  }

  /// The writer's own checkpoint, past ``Checkpointer/writerPagesThreshold``, does not wait for the background
  /// checkpointer: while it is busy, commits go on and the writer checkpoints by itself (until 2026-12-05 it waited for
  /// the running background checkpoint, its WAL and database syncs included, with every commit queued behind it).
  @Test func theWritersCheckpointDoesNotWaitForABusyCheckpointer() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let database = try blobDatabase(at: directory.path())
    let release = database.holdCheckpointer()
    defer { release() }
    // Commits until the writer has checkpointed past its mark, in a task: waiting for the held checkpointer, a commit
    // would never return. Rows of 32 KiB reach the mark's ~128 MiB of WAL in ~4 000 commits (about a second alone,
    // a minute in a loaded parallel run with 1 KiB rows). The bound only stops a hung test.
    let row = SQLValue.blob([UInt8](repeating: 7, count: 32 << 10))
    let writes = Task {
      while database.writerCheckpoints == 0 {
        try await database.write { try $0.execute("INSERT INTO blob (data) VALUES (?)", [row]) }
      }
    }
    let deadline = ContinuousClock.now + .seconds(300)
    while database.writerCheckpoints == 0 && ContinuousClock.now < deadline {
      try await Task.sleep(for: .milliseconds(50))
    }
    #expect(database.writerCheckpoints >= 1, "a commit past the writer's mark waited for the busy checkpointer")
    release()
    try await writes.value
  }

  /// Under writes that never pause, every commit past ``Checkpointer/pagesThreshold`` asks for a checkpoint; they start
  /// at most one per ``Checkpointer/minimumInterval``, not back to back (each one syncs the WAL under the writer).
  @Test func sustainedWritesStartCheckpointsAtMostOncePerInterval() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let database = try blobDatabase(at: directory.path())
    func insert() async throws {
      try await database.write { try $0.execute("INSERT INTO blob (data) VALUES (?)", [payload]) }
    }
    // Past the threshold first (three rows of 1 KiB fill a page), then one second of commits, each of which asks.
    for _ in 0..<4 * Int(Checkpointer.pagesThreshold) { try await insert() }
    let before = database.checkpointsCompleted
    let clock = ContinuousClock()
    let start = clock.now
    while clock.now - start < .seconds(1) { try await insert() }
    let ran = database.checkpointsCompleted - before
    // One per 100 ms, plus one that may start at each end of the second.
    #expect(Checkpointer.minimumInterval == 100_000_000)
    let allowed = 12
    #expect(ran >= 1, "no checkpoint ran in a second of writes past the threshold")
    #expect(ran <= allowed, "\(ran) checkpoints started in one second of writes (at most \(allowed))")
  }
}
