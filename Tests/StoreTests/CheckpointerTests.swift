import Foundation
import Testing

@testable import Store

/// The WAL is checkpointed off the commit path (``Checkpointer``), and it still is checkpointed: the WAL does not grow
/// without bound under sustained writes, and every committed row is there.
@Suite struct CheckpointerTests {
  @Test func sustainedWritesAreCheckpointedOffTheCommitPathAndTheWALStaysBounded() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let path = directory.path()
    let database = try Database(
      path: path,
      migrations: [Migration(version: 1, name: "blob", sql: "CREATE TABLE blob (id INTEGER PRIMARY KEY, data BLOB)")])
    let payload = SQLValue.blob([UInt8](repeating: 7, count: 1024))
    // 40 MiB committed one row at a time: without checkpoints the WAL would hold all of it.
    let rows = 40 * 1024
    for _ in 0..<rows {
      try await database.write { try $0.execute("INSERT INTO blob (data) VALUES (?)", [payload]) }
    }
    #expect(database.checkpointsCompleted >= 1, "no checkpoint ran")
    // Background checkpoints that leave frames behind sync the database file themselves, so the writer's own
    // checkpoint, which lets the WAL start again, has little left to sync under the commits queued behind it.
    #expect(database.checkpointDatabaseSyncs >= 1, "no background checkpoint synced the database file")
    #expect(database.writerCheckpoints >= 1, "the writer never checkpointed past its mark")
    let walBytes = try #require(try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int)
    // The WAL starts again after about Checkpointer.writerPagesThreshold pages (~130 MiB); it never holds everything.
    #expect(walBytes < 160 << 20, "the WAL grew to \(walBytes >> 20) MiB over 40 MiB of rows (~300 MiB of pages)")
    #expect(try await database.read { try $0.scalar("SELECT count(*) FROM blob", as: Int.self) } == rows)
  }

  /// Under writes that never pause, every commit past ``Checkpointer/pagesThreshold`` asks for a checkpoint; they start
  /// at most one per ``Checkpointer/minimumInterval``, not back to back (each one syncs the WAL under the writer).
  @Test func sustainedWritesStartCheckpointsAtMostOncePerInterval() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let database = try Database(
      path: directory.path(),
      migrations: [Migration(version: 1, name: "blob", sql: "CREATE TABLE blob (id INTEGER PRIMARY KEY, data BLOB)")])
    let payload = SQLValue.blob([UInt8](repeating: 7, count: 1024))
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
