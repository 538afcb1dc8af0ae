/// One schema change: a version number, a short name for the log and `schema_version`, and an SQL script.
///
/// The script runs inside the migration's transaction, so it must not contain `BEGIN`/`COMMIT`, and
/// `PRAGMA foreign_keys` has no effect in it (SQLite ignores that pragma inside a transaction).
public struct Migration: Sendable, Equatable {
  /// Positive, strictly increasing across a migration list; never reuse or renumber a shipped version.
  public let version: Int
  /// A short identifier such as `"create_peers"`.
  public let name: String
  /// One or more `;`-separated statements.
  public let sql: String

  /// Creates a migration.
  public init(version: Int, name: String, sql: String) {
    self.version = version
    self.name = name
    self.sql = sql
  }
}

/// Why a migration list was rejected or a database could not be brought up to date.
public struct MigrationError: Error, Equatable, CustomStringConvertible {
  /// What went wrong, for tests and callers to switch on; new codes may be added.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    private let name: String
    private init(_ name: String) { self.name = name }

    /// Versions in the list are not positive and strictly increasing.
    public static let versionsNotIncreasing = Code("versionsNotIncreasing")
    /// The database was migrated by a newer build that knows migrations this one does not.
    public static let schemaNewerThanKnown = Code("schemaNewerThanKnown")
    /// A migration's script failed; ``MigrationError/underlying`` holds SQLite's error.
    public static let migrationFailed = Code("migrationFailed")

    /// The code's name.
    public var description: String { self.name }
  }

  /// The kind of failure.
  public let code: Code
  /// A sentence for the operator's log or terminal.
  public let message: String
  /// The SQLite error behind ``Code/migrationFailed``.
  public let underlying: SQLiteError?

  init(_ code: Code, _ message: String, underlying: SQLiteError? = nil) {
    self.code = code
    self.message = message
    self.underlying = underlying
  }

  /// The message, followed by the SQLite error if there is one.
  public var description: String {
    self.underlying.map { "\(self.message): \($0)" } ?? self.message
  }
}

/// Brings a database's schema up to date by applying pending ``Migration``s in version order.
///
/// Applied versions are recorded in `schema_version(version INTEGER PRIMARY KEY, name TEXT, applied_at TEXT)`.
/// Each migration runs in its own `BEGIN IMMEDIATE` transaction together with its `schema_version` row, so a
/// crash leaves the database at the last fully applied version. A database whose version is newer than the
/// newest known migration is refused rather than guessed at: it belongs to a newer meshgate.
public struct Migrator: Sendable {
  /// The migrations, in version order.
  public let migrations: [Migration]

  /// Checks that versions are positive and strictly increasing.
  public init(_ migrations: [Migration]) throws(MigrationError) {
    var previous: Migration?
    for migration in migrations {
      guard migration.version > (previous?.version ?? 0) else {
        let after = previous.map { "after version \($0.version) (\($0.name))" } ?? "as the first migration"
        throw MigrationError(
          .versionsNotIncreasing,
          "migration versions must be positive and strictly increasing, but version \(migration.version) "
            + "(\(migration.name)) comes \(after)"
        )
      }
      previous = migration
    }
    self.migrations = migrations
  }

  /// The newest version this list knows, or 0 for an empty list.
  public var latestVersion: Int { self.migrations.last?.version ?? 0 }

  /// The schema version recorded in the database; 0 when it has never been migrated.
  public static func currentVersion(of connection: Connection) throws(SQLiteError) -> Int {
    let hasTable = try connection.queryOne(
      "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    )
    guard hasTable != nil else { return 0 }
    return try connection.scalar("SELECT coalesce(max(version), 0) FROM schema_version", as: Int.self) ?? 0
  }

  /// Applies every migration newer than the database's version and returns the ones applied (empty when the
  /// database was already current). Throws ``MigrationError`` or ``SQLiteError``.
  @discardableResult
  public func migrate(_ connection: Connection) throws -> [Migration] {
    let current = try Self.currentVersion(of: connection)
    guard current <= self.latestVersion else {
      throw MigrationError(
        .schemaNewerThanKnown,
        "the database at \(connection.path) is at schema version \(current), but this meshgate knows versions "
          + "up to \(self.latestVersion) only: the data dir was written by a newer meshgate; run that version "
          + "or use another data dir"
      )
    }
    try connection.execute(
      """
      CREATE TABLE IF NOT EXISTS schema_version (
        version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)
      """
    )
    var applied: [Migration] = []
    for migration in self.migrations where migration.version > current {
      let didApply = try connection.transaction {
        // Checked again under the write lock, in case another process migrated the file meanwhile.
        guard try Self.currentVersion(of: connection) < migration.version else { return false }
        do throws(SQLiteError) {
          try connection.executeScript(migration.sql)
        } catch {
          throw MigrationError(
            .migrationFailed,
            "migration \(migration.version) (\(migration.name)) failed",
            underlying: error
          )
        }
        try connection.execute(
          """
          INSERT INTO schema_version (version, name, applied_at)
          VALUES (?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
          """,
          [SQLValue(migration.version), SQLValue(migration.name)]
        )
        return true
      }
      if didApply { applied.append(migration) }
    }
    return applied
  }
}
