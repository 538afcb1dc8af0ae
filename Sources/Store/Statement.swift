internal import CSQLite

/// One prepared `sqlite3_stmt`, owned by the ``Connection`` that prepared it.
///
/// Ownership: the statement is finalized in `deinit`. Only the connection's statement cache (and, for the length
/// of one call, the connection's own methods) hold a reference, and the connection empties its cache before it
/// closes the database handle, so a statement never outlives its database. Like its connection, it is used from
/// one thread at a time (the ``Database`` actor's queue) and is not `Sendable`.
final class Statement {
  let handle: OpaquePointer
  /// The SQL text, kept for error messages.
  let sql: String

  init(handle: OpaquePointer, sql: String) {
    self.handle = handle
    self.sql = sql
  }

  deinit { sqlite3_finalize(self.handle) }

  /// Binds `arguments` to the positional parameters `?1…?n`; the count must match the statement's.
  func bind(_ arguments: [SQLValue]) throws(SQLiteError) {
    let expected = Int(sqlite3_bind_parameter_count(self.handle))
    guard expected == arguments.count else {
      throw SQLiteError(
        code: SQLITE_RANGE,
        message: "statement has \(expected) parameters but \(arguments.count) arguments were given",
        sql: self.sql
      )
    }
    for (offset, argument) in arguments.enumerated() {
      let index = Int32(offset + 1)
      let code: Int32
      switch argument {
      case .null:
        code = sqlite3_bind_null(self.handle, index)
      case .integer(let value):
        code = sqlite3_bind_int64(self.handle, index, value)
      case .real(let value):
        code = sqlite3_bind_double(self.handle, index, value)
      case .text(var value):
        // SQLITE_TRANSIENT makes SQLite copy the bytes before the call returns, so the buffer may go away.
        // An explicit length keeps embedded NULs; an empty string needs a non-NULL pointer or it binds NULL.
        code = value.withUTF8 { utf8 in
          guard let base = utf8.baseAddress, !utf8.isEmpty else {
            return sqlite3_bind_text(self.handle, index, "", 0, csqlite_transient())
          }
          return base.withMemoryRebound(to: CChar.self, capacity: utf8.count) {
            sqlite3_bind_text64(self.handle, index, $0, UInt64(utf8.count), csqlite_transient(), UInt8(SQLITE_UTF8))
          }
        }
      case .blob(let bytes):
        // A NULL pointer would bind NULL, so an empty blob is bound as a zero-length zeroblob.
        code = bytes.withUnsafeBytes { raw in
          guard let base = raw.baseAddress, !raw.isEmpty else { return sqlite3_bind_zeroblob(self.handle, index, 0) }
          return sqlite3_bind_blob64(self.handle, index, base, UInt64(raw.count), csqlite_transient())
        }
      }
      guard code == SQLITE_OK else { throw self.error(code) }
    }
  }

  /// Advances to the next row: true when a row is available, false when the statement is done.
  func step() throws(SQLiteError) -> Bool {
    let code = sqlite3_step(self.handle)
    switch code {
    case SQLITE_ROW: return true
    case SQLITE_DONE: return false
    default: throw self.error(code)
    }
  }

  /// The columns last read, and SQLite's recompilation count when they were.
  private var cachedColumns: (columns: Row.Columns, recompilations: Int32)?

  /// The current result's column names. Read again whenever SQLite has compiled the statement again since they were
  /// last read (it silently re-prepares a cached statement after a schema change, and `SELECT *` may then have
  /// different columns); otherwise the names (and their index) are shared by every execution.
  func columns() -> Row.Columns {
    let recompilations = sqlite3_stmt_status(self.handle, SQLITE_STMTSTATUS_REPREPARE, 0)
    if let cachedColumns, cachedColumns.recompilations == recompilations { return cachedColumns.columns }
    let columns = self.readColumns()
    cachedColumns = (columns, recompilations)
    return columns
  }

  private func readColumns() -> Row.Columns {
    let count = sqlite3_column_count(self.handle)
    var names: [String] = []
    names.reserveCapacity(Int(count))
    for index in 0..<count {
      names.append(sqlite3_column_name(self.handle, index).map { String(cString: $0) } ?? "")
    }
    return Row.Columns(names: names)
  }

  /// Copies the current row out of SQLite. Only valid after ``step()`` returned true.
  func row(columns: Row.Columns) -> Row {
    var values: [SQLValue] = []
    values.reserveCapacity(columns.names.count)
    for index in 0..<Int32(columns.names.count) {
      values.append(self.value(at: index))
    }
    return Row(columns: columns, values: values)
  }

  private func value(at index: Int32) -> SQLValue {
    switch sqlite3_column_type(self.handle, index) {
    case SQLITE_INTEGER:
      return .integer(sqlite3_column_int64(self.handle, index))
    case SQLITE_FLOAT:
      return .real(sqlite3_column_double(self.handle, index))
    case SQLITE_TEXT:
      // Call `_text` before `_bytes` (SQLite's documented order); the pointer is valid until the next step/reset.
      guard let text = sqlite3_column_text(self.handle, index) else { return .text("") }
      let count = Int(sqlite3_column_bytes(self.handle, index))
      return .text(String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self))
    case SQLITE_BLOB:
      // A zero-length blob comes back as a NULL pointer.
      guard let blob = sqlite3_column_blob(self.handle, index) else { return .blob([]) }
      let count = Int(sqlite3_column_bytes(self.handle, index))
      return .blob(Array(UnsafeRawBufferPointer(start: blob, count: count)))
    default:
      return .null
    }
  }

  /// Makes the statement ready for its next use: ends the current run (releasing any read snapshot it holds)
  /// and clears the bindings, so no bound value lingers in memory longer than needed.
  func reset() {
    sqlite3_reset(self.handle)  // Returns the last step's error again; that was already reported.
    sqlite3_clear_bindings(self.handle)
  }

  private func error(_ code: Int32) -> SQLiteError {
    let database = sqlite3_db_handle(self.handle)
    let message = database.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code))
    return SQLiteError(code: code, message: message, sql: self.sql)
  }
}

@available(*, unavailable)
extension Statement: Sendable {}
