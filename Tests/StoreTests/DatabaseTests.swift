import Testing

@testable import Store

private struct Boom: Error, Equatable {}

@Suite struct DatabaseTests {
  static let migrations = [
    Migration(version: 1, name: "create_item", sql: "CREATE TABLE item (id INTEGER PRIMARY KEY, task INT, n INT)")
  ]

  @Test func writesAndReadsThroughTheActor() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let database = try Database(path: directory.path(), migrations: Self.migrations)
    let id = try await database.write { connection in
      try connection.execute("INSERT INTO item (task, n) VALUES (?, ?)", [1, 2])
      return connection.lastInsertRowID
    }
    let rows = try await database.read { try $0.query("SELECT id, task, n FROM item") }
    #expect(rows.count == 1)
    #expect(try rows[0].int64("id") == id)
    #expect(try await database.read { try $0.scalar("PRAGMA journal_mode") } == "wal")
  }

  @Test func writeRollsBackWhenTheBodyThrows() async throws {
    let database = try Database.inMemory(migrations: Self.migrations)
    await #expect(throws: Boom()) {
      try await database.write { connection in
        try connection.execute("INSERT INTO item (task, n) VALUES (1, 1)")
        throw Boom()
      }
    }
    #expect(try await database.read { try $0.scalar("SELECT count(*) FROM item", as: Int.self) } == 0)
  }

  @Test func readRefusesWritesAndLeavesWritesWorking() async throws {
    let database = try Database.inMemory(migrations: Self.migrations)
    let error = await #expect(throws: SQLiteError.self) {
      try await database.read { try $0.execute("INSERT INTO item (task, n) VALUES (1, 1)") }
    }
    #expect(error?.code == 8)  // SQLITE_READONLY
    try await database.write { try $0.execute("INSERT INTO item (task, n) VALUES (1, 1)") }
    #expect(try await database.read { try $0.scalar("SELECT count(*) FROM item", as: Int.self) } == 1)
  }

  @Test func readsLeaveTheWritersStatementsCompiled() async throws {
    // Switching `query_only` on the writer for every read expired all of its prepared statements, so each write
    // after a read compiled its SQL again.
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let database = try Database(path: directory.path(), migrations: Self.migrations)
    let insert = "INSERT INTO item (task, n) VALUES (?, ?)"
    let count = "SELECT count(*) FROM item"
    // Once each first (statements cached during the migrations are compiled again once after its schema change).
    try await database.write { try $0.execute(insert, [1, 0]) }
    _ = try await database.read { try $0.scalar(count) }
    let writerBefore = try await database.write { $0.statementRecompilations }
    let readerBefore = try await database.read { $0.statementRecompilations }
    for n in 1...3 {
      try await database.write { try $0.execute(insert, [1, SQLValue(n)]) }
      #expect(try await database.read { try $0.scalar(count, as: Int.self) } == n + 1)
    }
    #expect(try await database.write { $0.statementRecompilations } == writerBefore)
    #expect(try await database.read { $0.statementRecompilations } == readerBefore)
  }

  @Test func aFileDatabaseReadRefusesWrites() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let database = try Database(path: directory.path(), migrations: Self.migrations)
    let error = await #expect(throws: SQLiteError.self) {
      try await database.read { try $0.execute("INSERT INTO item (task, n) VALUES (1, 1)") }
    }
    #expect(error?.code == 8)  // SQLITE_READONLY
    try await database.write { try $0.execute("INSERT INTO item (task, n) VALUES (1, 1)") }
    #expect(try await database.read { try $0.scalar("SELECT count(*) FROM item", as: Int.self) } == 1)
  }

  @Test func inMemoryDatabaseIsNotWAL() async throws {
    let database = try Database.inMemory()
    #expect(database.path == ":memory:")
    #expect(try await database.read { try $0.scalar("PRAGMA journal_mode") } == "memory")
  }

  @Test func bodiesRunOnTheDatabaseQueue() async throws {
    let database = try Database.inMemory()
    let label = try await database.read { _ in QueueExecutor.currentLabel }
    #expect(QueueExecutor.currentLabel == nil)
    #expect(label == "meshgate.store")
  }

  @Test func refusesANewerSchemaWhenOpening() throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let newer = Self.migrations + [Migration(version: 2, name: "later", sql: "CREATE TABLE later (x)")]
    _ = try Database(path: directory.path(), migrations: newer)
    let error = #expect(throws: MigrationError.self) {
      try Database(path: directory.path(), migrations: Self.migrations)
    }
    #expect(error?.code == .schemaNewerThanKnown)
    // Reopening with the full list is fine and applies nothing.
    _ = try Database(path: directory.path(), migrations: newer)
  }

  @Test func concurrentWritesFromManyTasksAllLand() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let database = try Database(path: directory.path(), migrations: Self.migrations)
    let tasks = 50
    let perTask = 20
    try await withThrowingTaskGroup(of: Void.self) { group in
      for task in 0..<tasks {
        group.addTask {
          for n in 0..<perTask {
            try await database.write { connection in
              // Read-then-write inside one write: correct only if writes never interleave.
              let count = try connection.scalar("SELECT count(*) FROM item", as: Int.self) ?? 0
              try connection.execute(
                "INSERT INTO item (id, task, n) VALUES (?, ?, ?)",
                [SQLValue(count + 1), SQLValue(task), SQLValue(n)]
              )
            }
            if n % 5 == 0 {
              _ = try await database.read { try $0.scalar("SELECT max(id) FROM item") }
            }
          }
        }
      }
      try await group.waitForAll()
    }
    let summary = try await database.read { connection in
      try connection.queryOne("SELECT count(*), count(DISTINCT task), min(id), max(id) FROM item")?.values
    }
    #expect(summary == [.integer(1000), .integer(50), .integer(1), .integer(1000)])
    let perTaskCounts = try await database.read { connection in
      try connection.query("SELECT count(*) FROM item GROUP BY task").map { try $0.int(0) }
    }
    #expect(perTaskCounts == Array(repeating: perTask, count: tasks))
  }
}
