internal import CSQLite

/// One open SQLite database handle (`sqlite3*`) with a cache of prepared statements.
///
/// Threading: a connection is opened with `SQLITE_OPEN_NOMUTEX` and must be used by one thread at a time.
/// In meshgate that is guaranteed by ownership rather than by locks: the ``Database`` actor owns its connection
/// and runs on a private serial queue, and the type is not `Sendable`, so the compiler keeps it from leaving.
///
/// Ownership: the connection owns its prepared statements; `deinit` finalizes them all, then closes the handle.
/// A connection used directly (tests, tools) is closed when the last reference goes away.
public final class Connection {
  private let handle: OpaquePointer
  /// The path the connection was opened with (`":memory:"` for an in-memory database).
  public let path: String
  /// Prepared statements by SQL text. Small and bounded: meshgate's SQL is a fixed set of literals.
  private var statements: [String: Statement] = [:]
  private var savepointDepth = 0
  /// How many prepared statements are kept; past this, an arbitrary one is finalized to make room.
  static let statementCacheCapacity = 128

  /// Opens (creating if needed) the database at `path` and configures it for meshgate:
  /// WAL journal, `synchronous=NORMAL`, foreign keys on, a 5 s busy timeout and extended result codes.
  public init(path: String) throws(SQLiteError) {
    // NOMUTEX ("multi-thread" mode): SQLite skips its per-connection mutex. Safe because exactly one serial
    // executor (the Database actor's queue) ever touches this connection, and Connection is not Sendable.
    // EXRESCODE: report extended result codes (2067, not 19) from the open call itself.
    let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE
    var opened: OpaquePointer?
    let code = sqlite3_open_v2(path, &opened, flags, nil)
    guard code == SQLITE_OK, let opened else {
      let message = opened.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code))
      sqlite3_close_v2(opened)  // Required even when the open failed; harmless on NULL.
      throw SQLiteError(code: code, message: "cannot open database at \(path): \(message)")
    }
    sqlite3_extended_result_codes(opened, 1)
    sqlite3_busy_timeout(opened, 5000)
    // Configured on the raw handle, before `self` exists, so a failure closes it here and not in deinit.
    let pragmas = [
      // WAL: readers never block the writer and a commit is one append. For ":memory:" this stays "memory".
      "PRAGMA journal_mode=WAL",
      // NORMAL in WAL mode syncs at checkpoints, not at every commit. A committed transaction survives a
      // process crash or kill -9 (it is in the WAL file, in the OS cache); only a power loss or kernel panic
      // can lose the last few transactions, and even then the database stays consistent.
      "PRAGMA synchronous=NORMAL",
      // SQLite leaves foreign-key enforcement off by default, per connection.
      "PRAGMA foreign_keys=ON",
    ]
    for pragma in pragmas {
      if let error = Self.exec(opened, pragma) {
        sqlite3_close_v2(opened)
        throw error
      }
    }
    self.handle = opened
    self.path = path
  }

  deinit {
    self.statements.removeAll()  // Finalizes every cached statement before the handle goes.
    sqlite3_close_v2(self.handle)
  }

  // MARK: - Running SQL

  /// Runs one statement with positional `?` arguments, stepping through (and discarding) any rows.
  /// Throws `SQLITE_MISUSE` (21) when `sql` holds more than one statement; use ``executeScript(_:)`` for that.
  public func execute(_ sql: String, _ arguments: [SQLValue] = []) throws(SQLiteError) {
    try self.withStatement(sql, arguments) { statement throws(SQLiteError) in
      while try statement.step() {}
    }
  }

  /// Runs one statement once for each list of arguments, in order, and returns how many rows the runs changed in all.
  /// The statement is looked up and compiled once: each run only binds, steps and resets (many small inserts).
  public func executeEach(_ sql: String, _ argumentLists: some Sequence<[SQLValue]>) throws(SQLiteError) -> Int {
    let statement = try self.cachedStatement(sql)
    defer { statement.reset() }
    var changed = 0
    for arguments in argumentLists {
      try statement.bind(arguments)
      while try statement.step() {}
      changed += self.changes
      statement.reset()
    }
    return changed
  }

  /// Runs any number of `;`-separated statements without arguments (schema scripts, migrations).
  public func executeScript(_ sql: String) throws(SQLiteError) {
    if let error = Self.exec(self.handle, sql) { throw error }
  }

  /// Runs one query and returns every row.
  public func query(_ sql: String, _ arguments: [SQLValue] = []) throws(SQLiteError) -> [Row] {
    try self.withStatement(sql, arguments) { statement throws(SQLiteError) in
      var rows: [Row] = []
      guard try statement.step() else { return rows }
      let columns = statement.columns()
      repeat { rows.append(statement.row(columns: columns)) } while try statement.step()
      return rows
    }
  }

  /// Runs one query and returns its first row, or nil when there is none. The rest are never computed.
  public func queryOne(_ sql: String, _ arguments: [SQLValue] = []) throws(SQLiteError) -> Row? {
    try self.withStatement(sql, arguments) { statement throws(SQLiteError) in
      guard try statement.step() else { return nil }
      return statement.row(columns: statement.columns())
    }
  }

  /// The first column of the first row, or nil when the query returns no row (a NULL value is ``SQLValue/null``).
  public func scalar(_ sql: String, _ arguments: [SQLValue] = []) throws(SQLiteError) -> SQLValue? {
    try self.queryOne(sql, arguments).map { $0[0] }
  }

  /// The first column of the first row as `T`, or nil when there is no row; throws `SQLITE_MISMATCH` when the
  /// value is not a `T`. Example: `try connection.scalar("SELECT count(*) FROM peer", as: Int.self)`.
  public func scalar<T: SQLValueConvertible>(
    _ sql: String,
    _ arguments: [SQLValue] = [],
    as type: T.Type
  ) throws(SQLiteError) -> T? {
    guard let row = try self.queryOne(sql, arguments) else { return nil }
    return try row.get(0, as: T.self)
  }

  // MARK: - WAL

  /// The C type of a WAL hook: called on the committing thread after each commit with the WAL's page count.
  typealias WALHook =
    @convention(c) (
      UnsafeMutableRawPointer?, OpaquePointer?, UnsafePointer<CChar>?, Int32
    ) -> Int32

  /// Replaces SQLite's automatic checkpoint with `hook` (``Checkpointer``).
  func setWALHook(_ context: UnsafeMutableRawPointer, _ hook: WALHook) {
    sqlite3_wal_hook(self.handle, hook, context)
  }

  // MARK: - Transactions

  /// Runs `body` in a transaction: `BEGIN IMMEDIATE` (takes the write lock up front, so it never fails half way
  /// with `SQLITE_BUSY`), then `COMMIT`, or `ROLLBACK` if `body` (or the commit) throws; the error is rethrown.
  ///
  /// Nested calls use a `SAVEPOINT`, so an inner failure undoes only the inner work when the outer body
  /// catches it.
  public func transaction<T>(_ body: () throws -> T) throws -> T {
    if self.isInTransaction { return try self.savepoint(body) }
    try self.execute("BEGIN IMMEDIATE")
    let result: T
    do {
      result = try body()
      try self.execute("COMMIT")
    } catch {
      self.rollbackIfNeeded()
      throw error
    }
    return result
  }

  private func savepoint<T>(_ body: () throws -> T) throws -> T {
    self.savepointDepth += 1
    defer { self.savepointDepth -= 1 }
    let name = "meshgate_savepoint_\(self.savepointDepth)"
    try self.execute("SAVEPOINT \(name)")
    do {
      let result = try body()
      try self.execute("RELEASE \(name)")
      return result
    } catch {
      // SQLite may already have rolled the whole transaction back (e.g. after SQLITE_FULL); then there is
      // no savepoint left to return to.
      if self.isInTransaction {
        try? self.execute("ROLLBACK TO \(name)")
        try? self.execute("RELEASE \(name)")
      }
      throw error
    }
  }

  private func rollbackIfNeeded() {
    // After some errors (SQLITE_FULL, SQLITE_IOERR, SQLITE_NOMEM…) SQLite has already rolled back.
    guard self.isInTransaction else { return }
    try? self.execute("ROLLBACK")
  }

  /// Makes the connection refuse every write (`PRAGMA query_only`), for good: a reader. Set once, when the connection
  /// is opened, because changing it expires every prepared statement of the connection (SQLite compiles flag pragmas
  /// with `OP_Expire`), so each statement used afterwards is compiled again.
  func makeReadOnly() throws(SQLiteError) {
    if let error = Self.exec(self.handle, "PRAGMA query_only = 1") { throw error }
  }

  /// A `PASSIVE` checkpoint of the WAL: copies every frame no reader still needs into the database file, without
  /// waiting for readers or the writer. Returns how many of the WAL's frames are now in the database file; nil when it
  /// could not run (another checkpoint holds the checkpoint lock: `SQLITE_BUSY`).
  func checkpointPassive() -> Int? { Self.checkpointPassive(self.handle) }

  /// ``checkpointPassive()`` on a raw handle (the WAL hook gets one, not a `Connection`).
  static func checkpointPassive(_ handle: OpaquePointer) -> Int? {
    var copied: Int32 = 0
    guard sqlite3_wal_checkpoint_v2(handle, nil, SQLITE_CHECKPOINT_PASSIVE, nil, &copied) == SQLITE_OK else {
      return nil
    }
    return Int(copied)
  }

  /// Writes the database file's dirty pages to the disk (its `fdatasync`, through SQLite's own file handle, so no
  /// second descriptor can release SQLite's POSIX locks when it closes). Returns false when it failed.
  func syncDatabaseFile() -> Bool {
    var file: UnsafeMutablePointer<sqlite3_file>?
    guard sqlite3_file_control(self.handle, "main", SQLITE_FCNTL_FILE_POINTER, &file) == SQLITE_OK, let file,
      let sync = file.pointee.pMethods?.pointee.xSync
    else { return false }
    return sync(file, SQLITE_SYNC_NORMAL) == SQLITE_OK
  }

  /// Times SQLite compiled a cached statement again since it was prepared (a schema change or an expiring pragma
  /// makes it do so at the statement's next use), summed over the cache (tests).
  var statementRecompilations: Int {
    self.statements.values.reduce(0) { $0 + Int(sqlite3_stmt_status($1.handle, SQLITE_STMTSTATUS_REPREPARE, 0)) }
  }

  /// True while a transaction is open (SQLite is not in autocommit mode).
  public var isInTransaction: Bool { sqlite3_get_autocommit(self.handle) == 0 }

  // MARK: - Results of the last statement

  /// The rowid of the most recent successful `INSERT` on this connection.
  public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(self.handle) }

  /// The rows changed by the most recent `INSERT`, `UPDATE` or `DELETE` on this connection.
  public var changes: Int { Int(sqlite3_changes64(self.handle)) }

  // MARK: - Statement cache

  /// Runs `body` with the cached statement for `sql`, bound to `arguments`; always resets it afterwards,
  /// also on error, so a failed use never poisons the next one or holds a read snapshot open.
  private func withStatement<R>(
    _ sql: String,
    _ arguments: [SQLValue],
    _ body: (Statement) throws(SQLiteError) -> R
  ) throws(SQLiteError) -> R {
    let statement = try self.cachedStatement(sql)
    defer { statement.reset() }
    try statement.bind(arguments)
    return try body(statement)
  }

  private func cachedStatement(_ sql: String) throws(SQLiteError) -> Statement {
    if let statement = self.statements[sql] { return statement }
    let statement = try self.prepare(sql)
    if self.statements.count >= Self.statementCacheCapacity, let victim = self.statements.keys.first {
      self.statements[victim] = nil  // Finalized now; it is not in use, since no statement use nests.
    }
    self.statements[sql] = statement
    return statement
  }

  /// Compiles exactly one statement. The statement is marked persistent: it is expected to be reused.
  private func prepare(_ sql: String) throws(SQLiteError) -> Statement {
    enum Outcome { case prepared(OpaquePointer), failed(Int32), empty, several }
    let outcome: Outcome = sql.withCString { text in
      var prepared: OpaquePointer?
      var tail: UnsafePointer<CChar>?
      let flags = UInt32(SQLITE_PREPARE_PERSISTENT)
      let code = sqlite3_prepare_v3(self.handle, text, -1, flags, &prepared, &tail)
      guard code == SQLITE_OK else { return .failed(code) }
      guard let prepared else { return .empty }
      if let tail, tail.pointee != 0 {
        // Anything after the first statement must compile to nothing (whitespace, comments, `;`).
        var extra: OpaquePointer?
        let extraCode = sqlite3_prepare_v2(self.handle, tail, -1, &extra, nil)
        if extra != nil || extraCode != SQLITE_OK {
          sqlite3_finalize(extra)
          sqlite3_finalize(prepared)
          return .several
        }
      }
      return .prepared(prepared)
    }
    switch outcome {
    case .prepared(let handle):
      return Statement(handle: handle, sql: sql)
    case .failed(let code):
      throw SQLiteError(code: code, message: String(cString: sqlite3_errmsg(self.handle)), sql: sql)
    case .empty:
      throw SQLiteError.misuse("the SQL text holds no statement", sql: sql)
    case .several:
      throw SQLiteError.misuse("execute/query take exactly one statement; use executeScript for several", sql: sql)
    }
  }

  /// `sqlite3_exec` on a raw handle; returns the error, if any. The message SQLite allocates is freed here.
  private static func exec(_ handle: OpaquePointer, _ sql: String) -> SQLiteError? {
    var message: UnsafeMutablePointer<CChar>?
    let code = sqlite3_exec(handle, sql, nil, nil, &message)
    defer { sqlite3_free(message) }
    guard code != SQLITE_OK else { return nil }
    let text = message.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
    return SQLiteError(code: code, message: text, sql: sql)
  }
}

@available(*, unavailable)
extension Connection: Sendable {}
