internal import CSQLite

/// An SQLite result code with the library's message and the SQL text that failed (never the bound values).
public struct SQLiteError: Error, Equatable, CustomStringConvertible {
  /// The extended result code, e.g. 2067 (`SQLITE_CONSTRAINT_UNIQUE`); `code & 0xFF` is the primary code.
  public var code: Int32
  /// The library's message (`sqlite3_errmsg`) or one of this module's own.
  public var message: String
  /// The SQL text being run when the error happened, if any. Bound values are never recorded.
  public var sql: String?

  /// The primary result code (the low 8 bits of ``code``), e.g. 19 (`SQLITE_CONSTRAINT`) for 2067.
  public var primaryCode: Int32 { self.code & 0xFF }

  /// True for any `SQLITE_CONSTRAINT*` code: a UNIQUE, PRIMARY KEY, NOT NULL, CHECK or FOREIGN KEY violation.
  public var isConstraintViolation: Bool { self.primaryCode == SQLITE_CONSTRAINT }

  /// True when the database stayed locked by another connection for longer than the busy timeout.
  public var isBusy: Bool { self.primaryCode == SQLITE_BUSY }

  /// True when the disk (or the file-size limit) is full: `SQLITE_FULL`.
  public var isFull: Bool { self.primaryCode == SQLITE_FULL }

  /// `SQLite error 2067 (constraint failed): UNIQUE constraint failed: t.x - while executing `INSERT …``.
  public var description: String {
    let name = String(cString: sqlite3_errstr(self.code))
    var text = "SQLite error \(self.code) (\(name)): \(self.message)"
    if let sql = self.sql {
      // Migration scripts can be long; the first 200 characters identify the statement well enough.
      let shown = sql.count > 200 ? String(sql.prefix(200)) + "…" : sql
      text += " - while executing `\(shown)`"
    }
    return text
  }
}

extension SQLiteError {
  /// A programmer error detected by this module rather than by SQLite (`SQLITE_MISUSE`).
  static func misuse(_ message: String, sql: String?) -> SQLiteError {
    SQLiteError(code: SQLITE_MISUSE, message: message, sql: sql)
  }

  /// A stored value that cannot be read as the requested Swift type (`SQLITE_MISMATCH`).
  static func mismatch(_ message: String) -> SQLiteError {
    SQLiteError(code: SQLITE_MISMATCH, message: message, sql: nil)
  }
}
