import Store
import Testing

@Suite struct ConnectionTests {
  @Test func bindsAndReadsEveryValueType() throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let connection = try Connection(path: directory.path())
    try connection.execute("CREATE TABLE value (id INTEGER PRIMARY KEY, v)")  // No type affinity: stored as given.

    let values: [SQLValue] = [
      .null,
      .integer(0), .integer(-1), .integer(.max), .integer(.min),
      .real(0.5), .real(-1e300), .real(.infinity),
      .text(""), .text("plain"), .text("héllo wörld — ✓ 日本語 👩‍👩‍👧 🇸🇪"), .text("nul\u{0}inside"),
      .blob([]), .blob([0]), .blob([0, 1, 2, 127, 128, 254, 255]), .blob(Array(repeating: 0xAB, count: 100_000)),
    ]
    for value in values {
      try connection.execute("INSERT INTO value (v) VALUES (?)", [value])
    }
    let rows = try connection.query("SELECT v FROM value ORDER BY id")
    #expect(rows.map { $0[0] } == values)
    #expect(rows.map { $0["v"] } == values)
  }

  @Test func aCachedQuerySeesColumnsAddedLater() throws {
    // Column names are kept between runs of a cached statement; a schema change recompiles it, and the names must
    // follow.
    let connection = try Connection(path: ":memory:")
    try connection.execute("CREATE TABLE t (a)")
    try connection.execute("INSERT INTO t (a) VALUES (1)")
    #expect(try connection.queryOne("SELECT * FROM t")?.columnNames == ["a"])
    #expect(try connection.queryOne("SELECT * FROM t")?.columnNames == ["a"])
    try connection.execute("ALTER TABLE t ADD COLUMN b DEFAULT 2")
    let row = try connection.queryOne("SELECT * FROM t")
    #expect(row?.columnNames == ["a", "b"])
    #expect(row?["b"] == .integer(2))
  }

  @Test func emptyTextAndEmptyBlobAreNotNull() throws {
    let connection = try Connection(path: ":memory:")
    let types = try connection.queryOne("SELECT typeof(?), typeof(?), length(?)", ["", .blob([]), "a\u{0}b"])
    #expect(types?.values == [.text("text"), .text("blob"), .integer(1)])  // length() of text stops at NUL.
    #expect(try connection.scalar("SELECT length(CAST(? AS BLOB))", ["a\u{0}b"]) == .integer(3))
  }

  @Test func literalsAndConvertiblesBind() throws {
    let connection = try Connection(path: ":memory:")
    let row = try #require(try connection.queryOne("SELECT ?, ?, ?, ?, ?, ?", ["text", 42, 2.5, nil, true, false]))
    #expect(row.values == [.text("text"), .integer(42), .real(2.5), .null, .integer(1), .integer(0)])

    let name: String? = nil
    let count = 7
    let bytes: [UInt8] = [1, 2]
    let converted = try #require(
      try connection.queryOne("SELECT ?, ?, ?, ?", [SQLValue(name), SQLValue(count), SQLValue(bytes), SQLValue(true)])
    )
    #expect(converted.values == [.null, .integer(7), .blob([1, 2]), .integer(1)])
  }

  @Test func typedGettersReadEachTypeAndNil() throws {
    let connection = try Connection(path: ":memory:")
    let row = try #require(
      try connection.queryOne(
        "SELECT 42 AS i, 2.5 AS r, 'ünïcode' AS s, x'00ff' AS b, 1 AS yes, 0 AS no, NULL AS n, 9 AS whole"
      )
    )
    #expect(try row.int("i") == 42)
    #expect(try row.int(0) == 42)
    #expect(try row.int64("i") == 42)
    #expect(try row.double("r") == 2.5)
    #expect(try row.double("whole") == 9.0)  // INTEGER reads as Double.
    #expect(try row.string("s") == "ünïcode")
    #expect(try row.blob("b") == [0x00, 0xFF])
    #expect(try row.bool("yes") == true)
    #expect(try row.bool("no") == false)
    #expect(try row.optionalInt("n") == nil)
    #expect(try row.optionalInt64("n") == nil)
    #expect(try row.optionalString("n") == nil)
    #expect(try row.optionalDouble("n") == nil)
    #expect(try row.optionalBlob("n") == nil)
    #expect(try row.optionalBool("n") == nil)
    #expect(try row.optionalString(2) == "ünïcode")
    #expect(try row.get("i", as: Int?.self) == 42)
    #expect(row["n"] == .null)
    #expect(row["I"] == .integer(42))  // Column names match case-insensitively, like SQL.
    #expect(row.hasColumn("s") && !row.hasColumn("missing"))
    #expect(row.columnNames == ["i", "r", "s", "b", "yes", "no", "n", "whole"])
  }

  @Test func typedGettersThrowMismatchInsteadOfCrashing() throws {
    let connection = try Connection(path: ":memory:")
    let row = try #require(try connection.queryOne("SELECT NULL AS n, 'secret-value' AS s, 2.5 AS r"))
    let nullError = #expect(throws: SQLiteError.self) { try row.int("n") }
    #expect(nullError?.code == 20)  // SQLITE_MISMATCH
    let textError = #expect(throws: SQLiteError.self) { try row.int("s") }
    #expect(textError?.code == 20)
    #expect(textError.map { !$0.description.contains("secret-value") } == true)
    #expect(throws: SQLiteError.self) { try row.int("r") }  // REAL is not silently truncated.
    #expect(throws: SQLiteError.self) { try row.optionalString("r") }
    #expect(throws: SQLiteError.self) { try row.blob("s") }
  }

  @Test func primaryKeyAndUniqueViolationsHaveExtendedCodes() throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let connection = try Connection(path: directory.path())
    try connection.executeScript(
      """
      CREATE TABLE peer (id TEXT PRIMARY KEY, name TEXT UNIQUE, token TEXT NOT NULL);
      CREATE TABLE job (id INTEGER PRIMARY KEY, peer TEXT NOT NULL REFERENCES peer (id));
      """
    )
    try connection.execute("INSERT INTO peer VALUES (?, ?, ?)", ["p1", "alice", "secret-token-1"])

    let primaryKey = #expect(throws: SQLiteError.self) {
      try connection.execute("INSERT INTO peer VALUES (?, ?, ?)", ["p1", "bob", "secret-token-2"])
    }
    #expect(primaryKey?.code == 1555)  // SQLITE_CONSTRAINT_PRIMARYKEY
    #expect(primaryKey?.isConstraintViolation == true)
    #expect(primaryKey?.isBusy == false)
    #expect(primaryKey?.sql == "INSERT INTO peer VALUES (?, ?, ?)")
    #expect(primaryKey.map { !$0.description.contains("secret-token") } == true)  // Bound values never leak.

    let unique = #expect(throws: SQLiteError.self) {
      try connection.execute("INSERT INTO peer VALUES (?, ?, ?)", ["p2", "alice", "secret-token-3"])
    }
    #expect(unique?.code == 2067)  // SQLITE_CONSTRAINT_UNIQUE
    #expect(unique?.isConstraintViolation == true)
    #expect(unique?.message.contains("peer.name") == true)

    let notNull = #expect(throws: SQLiteError.self) {
      try connection.execute("INSERT INTO peer VALUES (?, ?, ?)", ["p3", "carol", nil])
    }
    #expect(notNull?.code == 1299)  // SQLITE_CONSTRAINT_NOTNULL

    let foreignKey = #expect(throws: SQLiteError.self) {
      try connection.execute("INSERT INTO job (peer) VALUES (?)", ["nobody"])
    }
    #expect(foreignKey?.code == 787)  // SQLITE_CONSTRAINT_FOREIGNKEY: foreign_keys=ON took effect.

    let integerKey = #expect(throws: SQLiteError.self) {
      try connection.execute("INSERT INTO job (id, peer) VALUES (1, 'p1'), (1, 'p1')")
    }
    #expect(integerKey?.code == 1555)
  }

  @Test func statementCacheStaysUsableAfterErrors() throws {
    let connection = try Connection(path: ":memory:")
    try connection.execute("CREATE TABLE t (v INTEGER UNIQUE)")
    let insert = "INSERT INTO t (v) VALUES (?)"
    try connection.execute(insert, [1])
    #expect(throws: SQLiteError.self) { try connection.execute(insert, [1]) }
    #expect(throws: SQLiteError.self) { try connection.execute(insert, [1, 2]) }  // Wrong argument count.
    try connection.execute(insert, [2])
    #expect(throws: SQLiteError.self) { try connection.execute(insert, [2]) }
    try connection.execute(insert, [3])

    let select = "SELECT v FROM t WHERE v >= ? ORDER BY v"
    #expect(try connection.query(select, [2]).count == 2)
    #expect(throws: SQLiteError.self) { try connection.query(select) }
    #expect(try connection.query(select, [1]).map { $0[0] } == [1, 2, 3])
    // A read that stopped after one row must not leave its statement (and a read snapshot) open.
    #expect(try connection.queryOne(select, [1])?[0] == 1)
    #expect(try connection.queryOne(select, [3])?[0] == 3)
    #expect(connection.isInTransaction == false)
  }

  @Test func statementCacheEvictsAndStillWorks() throws {
    let connection = try Connection(path: ":memory:")
    for index in 0..<500 {
      #expect(try connection.scalar("SELECT \(index) + ?", [1]) == .integer(Int64(index + 1)))
    }
    #expect(try connection.scalar("SELECT 0 + ?", [1]) == 1)
  }

  @Test func argumentCountMustMatch() throws {
    let connection = try Connection(path: ":memory:")
    let tooFew = #expect(throws: SQLiteError.self) { try connection.query("SELECT ?, ?", [1]) }
    #expect(tooFew?.code == 25)  // SQLITE_RANGE
    let tooMany = #expect(throws: SQLiteError.self) { try connection.query("SELECT 1", [1]) }
    #expect(tooMany?.code == 25)
  }

  /// `executeEach` runs one statement per argument list, counts the rows changed (an ignored duplicate changes none)
  /// and stops at the first failing run.
  @Test func executeEachRunsOneStatementPerArgumentList() throws {
    let connection = try Connection(path: ":memory:")
    try connection.execute("CREATE TABLE t (k TEXT, v INTEGER, PRIMARY KEY (k, v)) WITHOUT ROWID")
    let rows: [[SQLValue]] = [[.text("a"), .integer(1)], [.text("a"), .integer(2)], [.text("a"), .integer(1)]]
    #expect(try connection.executeEach("INSERT OR IGNORE INTO t (k, v) VALUES (?, ?)", rows) == 2)
    #expect(try connection.executeEach("INSERT OR IGNORE INTO t (k, v) VALUES (?, ?)", [[SQLValue]]()) == 0)
    #expect(try connection.scalar("SELECT count(*) FROM t", as: Int.self) == 2)
    let failing = #expect(throws: SQLiteError.self) {
      try connection.executeEach(
        "INSERT INTO t (k, v) VALUES (?, ?)", [[.text("b"), .integer(1)], [.text("a"), .integer(2)]])
    }
    #expect(failing?.code == 1555)  // SQLITE_CONSTRAINT_PRIMARYKEY
    #expect(try connection.scalar("SELECT count(*) FROM t WHERE k = 'b'", as: Int.self) == 1)
    // The statement is reusable afterwards.
    #expect(try connection.executeEach("INSERT INTO t (k, v) VALUES (?, ?)", [[.text("c"), .integer(3)]]) == 1)
  }

  @Test func executeTakesOneStatementAndScriptsTakeMany() throws {
    let connection = try Connection(path: ":memory:")
    let several = #expect(throws: SQLiteError.self) {
      try connection.execute("CREATE TABLE a (x); CREATE TABLE b (x)")
    }
    #expect(several?.code == 21)  // SQLITE_MISUSE
    #expect(try connection.scalar("SELECT count(*) FROM sqlite_master", as: Int.self) == 0)  // Nothing ran.

    let empty = #expect(throws: SQLiteError.self) { try connection.execute("  -- nothing\n") }
    #expect(empty?.code == 21)

    try connection.execute("CREATE TABLE a (x); -- a trailing comment is fine\n")
    try connection.executeScript("CREATE TABLE b (x); INSERT INTO b VALUES (1); INSERT INTO b VALUES (2);")
    #expect(try connection.scalar("SELECT sum(x) FROM b", as: Int.self) == 3)

    let script = #expect(throws: SQLiteError.self) { try connection.executeScript("INSERT INTO b VALUES (3); OOPS") }
    #expect(script?.code == 1)  // SQLITE_ERROR
    #expect(script?.message.contains("OOPS") == true)
    #expect(script?.sql == "INSERT INTO b VALUES (3); OOPS")
  }

  @Test func syntaxErrorReportsSQL() throws {
    let connection = try Connection(path: ":memory:")
    let error = #expect(throws: SQLiteError.self) { try connection.query("SELEKT 1") }
    #expect(error?.code == 1)
    #expect(error?.sql == "SELEKT 1")
    #expect(error?.description.hasPrefix("SQLite error 1 (SQL logic error): near \"SELEKT\": syntax error") == true)
  }

  @Test func openingPragmasAreApplied() throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let connection = try Connection(path: directory.path())
    #expect(try connection.scalar("PRAGMA journal_mode") == "wal")
    #expect(try connection.scalar("PRAGMA synchronous") == 1)  // NORMAL
    #expect(try connection.scalar("PRAGMA foreign_keys") == 1)
    #expect(try connection.scalar("PRAGMA busy_timeout") == 5000)
  }

  @Test func openFailureThrows() throws {
    let error = #expect(throws: SQLiteError.self) { try Connection(path: "/nonexistent-dir/sub/x.db") }
    #expect(error?.code == 14)  // SQLITE_CANTOPEN
    #expect(error?.message.contains("/nonexistent-dir/sub/x.db") == true)
  }

  @Test func lastInsertRowIDAndChanges() throws {
    let connection = try Connection(path: ":memory:")
    try connection.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v)")
    try connection.execute("INSERT INTO t (v) VALUES (?)", ["a"])
    #expect(connection.lastInsertRowID == 1)
    try connection.execute("INSERT INTO t (v) VALUES (?), (?)", ["b", "c"])
    #expect(connection.lastInsertRowID == 3)
    #expect(connection.changes == 2)
    try connection.execute("UPDATE t SET v = 'z' WHERE id > ?", [0])
    #expect(connection.changes == 3)
  }

  @Test func selectStarSeesSchemaChangesThroughTheCache() throws {
    let connection = try Connection(path: ":memory:")
    try connection.executeScript("CREATE TABLE t (a); INSERT INTO t VALUES (1);")
    #expect(try connection.queryOne("SELECT * FROM t")?.columnNames == ["a"])
    try connection.execute("ALTER TABLE t ADD COLUMN b DEFAULT 2")
    let row = try #require(try connection.queryOne("SELECT * FROM t"))
    #expect(row.columnNames == ["a", "b"])
    #expect(try row.int("b") == 2)
  }

  @Test func scalarReturnsNilForNoRow() throws {
    let connection = try Connection(path: ":memory:")
    #expect(try connection.scalar("SELECT 1 WHERE 0") == nil)
    #expect(try connection.scalar("SELECT NULL") == .null)
    #expect(try connection.scalar("SELECT 1 WHERE 0", as: Int.self) == nil)
    #expect(throws: SQLiteError.self) { try connection.scalar("SELECT 'x'", as: Int.self) }
  }

  @Test func busyIsReportedWhenAnotherConnectionHoldsTheWriteLock() throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let first = try Connection(path: directory.path())
    let second = try Connection(path: directory.path())
    try first.execute("CREATE TABLE t (v)")
    try second.execute("PRAGMA busy_timeout = 20")  // Don't wait the default 5 s in a test.
    try first.transaction { () throws in
      let error = #expect(throws: SQLiteError.self) { try second.execute("INSERT INTO t VALUES (1)") }
      #expect(error?.isBusy == true)
      #expect(error?.isConstraintViolation == false)
      // WAL: the reader is not blocked by the writer.
      #expect(try second.scalar("SELECT count(*) FROM t", as: Int.self) == 0)
    }
  }

  @Test func diskFullIsReportedAndRolledBack() throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let connection = try Connection(path: directory.path())
    try connection.execute("CREATE TABLE t (v BLOB)")
    try connection.execute("INSERT INTO t VALUES (x'01')")
    let pages = try #require(try connection.scalar("PRAGMA page_count", as: Int.self))
    try connection.execute("PRAGMA max_page_count = \(pages + 2)")  // Simulates a full disk.
    let error = #expect(throws: SQLiteError.self) {
      try connection.transaction {
        try connection.execute("INSERT INTO t VALUES (?)", [.blob(Array(repeating: 7, count: 100_000))])
      }
    }
    #expect(error?.isFull == true)
    #expect(error?.primaryCode == 13)
    #expect(connection.isInTransaction == false)
    #expect(try connection.scalar("SELECT count(*) FROM t", as: Int.self) == 1)
    try connection.execute("INSERT INTO t VALUES (x'02')")  // Small writes still fit.
  }
}
