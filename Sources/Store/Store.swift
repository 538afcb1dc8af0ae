// Store — meshgate's thin, safe SQLite layer.
//
// What it is. Everything meshgate keeps across restarts (peers and their hashed tokens, jobs, chat history,
// transfer records, the per-peer event log) lives in one SQLite database in the node's data directory, in WAL
// mode. This module is the only place that touches SQLite's C API (`internal import CSQLite`); nothing of C
// leaks through its public API. It has four parts:
//
// - `Connection` owns one `sqlite3*` handle and a small cache of prepared statements keyed by SQL text.
//   `execute` / `query` / `queryOne` / `scalar` run exactly one statement with positional `?` arguments given
//   as `SQLValue`s; `executeScript` runs a multi-statement script; `transaction` wraps a body in
//   `BEGIN IMMEDIATE … COMMIT` (or `ROLLBACK` when it throws), using savepoints when nested.
// - `SQLValue` / `Row` / `SQLValueConvertible` move values in and out. Rows are copied out of SQLite before
//   the statement is reset, so they are plain `Sendable` values.
// - `Migrator` applies versioned `Migration`s, one transaction each, recorded in `schema_version`, and refuses
//   a database written by a newer meshgate.
// - `Database` is the actor the rest of meshgate talks to.
//
// Threading. SQLite calls block (disk I/O, fsync at checkpoints, up to 5 s waiting on a busy lock). They must
// run neither on the libwebsockets service thread, which serves every socket, nor on Swift's cooperative pool,
// which has one thread per core. So `Database` is an actor whose executor is a private serial DispatchQueue
// (GRDB's pattern): every `read` / `write` hops onto that queue, runs there, and hops back. Because exactly one
// serial queue ever touches the connection, SQLite is opened with `SQLITE_OPEN_NOMUTEX`, and `Connection`,
// `Statement` are explicitly not `Sendable`: the compiler keeps them inside the actor. `read` and `write` bodies
// are synchronous closures and return `Sendable` values only.
//
// Ownership. `Database` owns its `Connection`; the connection owns its statements. Statements are finalized
// before the handle is closed (`sqlite3_close_v2`), when the last reference to the connection goes away.
//
// Errors. C-level failures are `SQLiteError` (extended result code, SQLite's message, the SQL text — never bound
// values, which may be tokens or payloads). Stored data of the wrong type is an error, not a crash. Migration
// problems are `MigrationError`. A programmer error (an unknown column name in `row["…"]`) traps.
//
// Reads. A file database's `read` runs on the actor's queue, like every call, but with a read-only connection of its
// own (a WAL reader sees every transaction committed before it starts and never waits for the writer), so a read
// never changes the writer's pragmas: switching `query_only` on the writer for each read expired all of its prepared
// statements, and each was compiled again at its next use.
//
// Durability. `synchronous=NORMAL` with WAL: a committed transaction survives a crash or `kill -9` of the
// process; only a power loss can lose the last few commits, and the file stays consistent either way.

import Dispatch

/// The database actor: one SQLite connection, used only on a private serial queue.
///
/// Every method runs on that queue (the actor's executor), never on the cooperative pool or the lws thread, so
/// callers simply `await` it: `let peers = try await database.read { try $0.query("SELECT * FROM peer") }`.
public actor Database {
  private let executor: QueueExecutor
  private let connection: Connection
  /// The read-only connection ``read(_:)`` uses (nil for an in-memory database, which cannot be shared).
  private let reader: Connection?
  /// Checkpoints the WAL off the commit path (nil for an in-memory database, which has no WAL).
  private let checkpointer: Checkpointer?

  /// The path the database was opened with (`":memory:"` for ``inMemory(migrations:)``).
  public nonisolated let path: String

  /// The private serial queue that isolates this actor.
  public nonisolated var unownedExecutor: UnownedSerialExecutor { self.executor.asUnownedSerialExecutor() }

  /// Opens (creating if needed) the database at `path` and applies pending `migrations`.
  ///
  /// This runs synchronously on the caller's thread (nothing else can reach the connection yet), so call it
  /// during startup, not from the lws service thread while it serves requests. Throws ``SQLiteError`` or
  /// ``MigrationError`` (including a refusal to open a database written by a newer meshgate).
  public init(path: String, migrations: [Migration]) throws {
    let migrator = try Migrator(migrations)
    let connection = try Connection(path: path)
    try migrator.migrate(connection)
    if path == ":memory:" {
      self.checkpointer = nil
      self.reader = nil
    } else {
      let checkpointer = try Checkpointer(path: path)
      checkpointer.watch(connection)
      self.checkpointer = checkpointer
      let reader = try Connection(path: path)
      try reader.makeReadOnly()
      self.reader = reader
    }
    self.executor = QueueExecutor(label: "meshgate.store")
    self.connection = connection
    self.path = path
  }

  /// Checkpoints run off the commit path so far (tests).
  public nonisolated var checkpointsCompleted: Int { checkpointer?.completedCount ?? 0 }
  /// Times a background checkpoint synced the database file itself, off the commit path (tests).
  nonisolated var checkpointDatabaseSyncs: Int { checkpointer?.databaseSyncCount ?? 0 }
  /// Checkpoints the writer ran itself so that the WAL could start again (tests).
  nonisolated var writerCheckpoints: Int { checkpointer?.writerCheckpointCount ?? 0 }
  /// Keeps the background checkpointer busy until the returned function is called (tests).
  nonisolated func holdCheckpointer() -> @Sendable () -> Void {
    guard let checkpointer else { return {} }
    return checkpointer.hold()
  }

  /// A private in-memory database for tests. WAL does not apply (its journal mode stays `memory`), and it is
  /// gone when the actor is.
  public static func inMemory(migrations: [Migration] = []) throws -> Database {
    try Database(path: ":memory:", migrations: migrations)
  }

  /// Runs `body` with a read-only connection (`PRAGMA query_only`): any write in it fails with `SQLITE_READONLY` (8).
  /// It sees every transaction committed before it started. Use ``write(_:)`` to change data.
  public func read<T: Sendable>(_ body: (Connection) throws -> T) throws -> T {
    if let reader { return try body(reader) }
    // In memory: one connection only, switched to read-only for the call.
    try self.connection.execute("PRAGMA query_only = 1")
    defer { try? self.connection.execute("PRAGMA query_only = 0") }
    return try body(self.connection)
  }

  /// Runs `body` in one transaction (`BEGIN IMMEDIATE`), committed when it returns and rolled back when it
  /// throws; the error is rethrown.
  public func write<T: Sendable>(_ body: (Connection) throws -> T) throws -> T {
    try self.connection.transaction { try body(self.connection) }
  }

  /// Runs `body` with the writing connection and no transaction of its own: `body` opens its transactions
  /// (`Connection.transaction`) and acts on their outcome, commit or rollback, before any other call reaches the
  /// database.
  public func withWriter<T: Sendable>(_ body: (Connection) throws -> T) throws -> T {
    try body(self.connection)
  }
}

/// A serial executor backed by a private DispatchQueue, so an actor's jobs run there and blocking calls never
/// occupy a cooperative-pool thread (GRDB's `DispatchQueueActor` pattern).
final class QueueExecutor: SerialExecutor {
  private let queue: DispatchQueue
  /// Marks every QueueExecutor queue with its label, so code (and tests) can tell which one it runs on.
  private static let labelKey = DispatchSpecificKey<String>()

  init(label: String) {
    self.queue = DispatchQueue(label: label)
    self.queue.setSpecific(key: Self.labelKey, value: label)
  }

  /// The label of the QueueExecutor queue running the caller, or nil on any other thread.
  static var currentLabel: String? { DispatchQueue.getSpecific(key: Self.labelKey) }

  func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    self.queue.async { job.runSynchronously(on: self.asUnownedSerialExecutor()) }
  }

  func asUnownedSerialExecutor() -> UnownedSerialExecutor { UnownedSerialExecutor(ordinary: self) }

  func checkIsolated() { dispatchPrecondition(condition: .onQueue(self.queue)) }
}
