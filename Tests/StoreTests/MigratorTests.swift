import Store
import Testing

@Suite struct MigratorTests {
  static let v1 = Migration(version: 1, name: "create_peer", sql: "CREATE TABLE peer (id TEXT PRIMARY KEY);")
  static let v2 = Migration(
    version: 2,
    name: "create_job",
    sql: """
      CREATE TABLE job (id INTEGER PRIMARY KEY, peer TEXT REFERENCES peer (id));
      CREATE INDEX job_peer ON job (peer);
      """
  )
  static let v3 = Migration(version: 3, name: "add_name", sql: "ALTER TABLE peer ADD COLUMN name TEXT;")

  @Test func appliesPendingMigrationsInOrderOnce() throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let path = directory.path()

    do {
      let connection = try Connection(path: path)
      #expect(try Migrator.currentVersion(of: connection) == 0)
      let applied = try Migrator([Self.v1, Self.v2]).migrate(connection)
      #expect(applied.map(\.version) == [1, 2])
      #expect(try Migrator.currentVersion(of: connection) == 2)
      try connection.execute("INSERT INTO peer VALUES ('p')")
      try connection.execute("INSERT INTO job (peer) VALUES ('p')")
    }
    do {
      // Reopening with the same list changes nothing.
      let connection = try Connection(path: path)
      #expect(try Migrator([Self.v1, Self.v2]).migrate(connection).isEmpty)
      #expect(try connection.scalar("SELECT count(*) FROM job", as: Int.self) == 1)
      // A newer build adds a migration: only that one runs.
      #expect(try Migrator([Self.v1, Self.v2, Self.v3]).migrate(connection) == [Self.v3])
      let rows = try connection.query("SELECT version, name, applied_at FROM schema_version ORDER BY version")
      #expect(try rows.map { try $0.int("version") } == [1, 2, 3])
      #expect(try rows.map { try $0.string("name") } == ["create_peer", "create_job", "add_name"])
      let appliedAt = try rows[0].string("applied_at")
      #expect(appliedAt.count == 24 && appliedAt.hasSuffix("Z") && appliedAt.contains("T"))  // ISO 8601, UTC.
    }
  }

  @Test func rejectsVersionsThatDoNotIncrease() throws {
    let duplicate = #expect(throws: MigrationError.self) { try Migrator([Self.v1, Self.v2, Self.v2]) }
    #expect(duplicate?.code == .versionsNotIncreasing)
    #expect(duplicate?.message.contains("version 2 (create_job) comes after version 2 (create_job)") == true)

    let decreasing = #expect(throws: MigrationError.self) { try Migrator([Self.v2, Self.v1]) }
    #expect(decreasing?.code == .versionsNotIncreasing)

    let zero = Migration(version: 0, name: "zero", sql: "")
    let notPositive = #expect(throws: MigrationError.self) { try Migrator([zero]) }
    #expect(notPositive?.code == .versionsNotIncreasing)
    #expect(notPositive?.message.contains("as the first migration") == true)

    #expect(try Migrator([]).latestVersion == 0)
    #expect(try Migrator([Self.v1, Self.v3]).latestVersion == 3)  // Gaps are allowed.
  }

  @Test func refusesADatabaseFromANewerMeshgate() throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let connection = try Connection(path: directory.path())
    try Migrator([Self.v1, Self.v2, Self.v3]).migrate(connection)

    let error = #expect(throws: MigrationError.self) { try Migrator([Self.v1, Self.v2]).migrate(connection) }
    #expect(error?.code == .schemaNewerThanKnown)
    #expect(error?.message.contains("schema version 3") == true)
    #expect(error?.message.contains("written by a newer meshgate") == true)
    #expect(try Migrator.currentVersion(of: connection) == 3)
  }

  @Test func aFailedMigrationLeavesTheLastGoodVersion() throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let connection = try Connection(path: directory.path())
    let broken = Migration(version: 2, name: "broken", sql: "CREATE TABLE half (x); CREATE TABLEE oops (y);")
    let error = #expect(throws: MigrationError.self) { try Migrator([Self.v1, broken, Self.v3]).migrate(connection) }
    #expect(error?.code == .migrationFailed)
    #expect(error?.underlying?.code == 1)
    #expect(error?.description.contains("migration 2 (broken) failed") == true)
    #expect(try Migrator.currentVersion(of: connection) == 1)
    #expect(try connection.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'half'", as: Int.self) == 0)

    // Fixing the migration lets the next start finish the job.
    let fixed = Migration(version: 2, name: "fixed", sql: "CREATE TABLE half (x);")
    #expect(try Migrator([Self.v1, fixed, Self.v3]).migrate(connection).map(\.version) == [2, 3])
  }
}
