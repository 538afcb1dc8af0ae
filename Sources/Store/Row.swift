/// One result row: values in column order plus the statement's column names.
///
/// Rows are plain values, copied out of SQLite before the statement is reset, so they are `Sendable` and may
/// leave the ``Database`` actor. Subscripts return raw ``SQLValue``s; the typed getters throw an
/// ``SQLiteError`` with code `SQLITE_MISMATCH` (20) when a value has the wrong storage class or is NULL
/// where a value is required, because stored data is input and must never crash the process.
public struct Row: Sendable {
  /// The column names and a name → index map, shared by every row of one result.
  final class Columns: Sendable {
    let names: [String]
    let indexByName: [String: Int]

    init(names: [String]) {
      self.names = names
      var indexByName: [String: Int] = [:]
      for (index, name) in names.enumerated() where indexByName[name] == nil {
        indexByName[name] = index  // The first of duplicate names wins, as in SQLite's own lookups.
      }
      self.indexByName = indexByName
    }

    func index(of name: String) -> Int? {
      if let index = self.indexByName[name] { return index }
      // SQL identifiers are case-insensitive; accept `row["ID"]` for a column named `id`.
      let lowered = name.lowercased()
      return self.names.firstIndex { $0.lowercased() == lowered }
    }
  }

  let columns: Columns
  /// The values, in column order.
  public let values: [SQLValue]

  init(columns: Columns, values: [SQLValue]) {
    self.columns = columns
    self.values = values
  }

  /// The column names, in order.
  public var columnNames: [String] { self.columns.names }

  /// The number of columns.
  public var count: Int { self.values.count }

  /// The value at a zero-based column index. Traps when the index is out of range (a programmer error).
  public subscript(_ index: Int) -> SQLValue {
    precondition(self.values.indices.contains(index), "Row has \(self.values.count) columns, no index \(index)")
    return self.values[index]
  }

  /// The value of the named column. Traps when the result has no such column (a programmer error).
  public subscript(_ name: String) -> SQLValue {
    guard let index = self.columns.index(of: name) else {
      preconditionFailure("Row has no column \"\(name)\"; columns are \(self.columns.names)")
    }
    return self.values[index]
  }

  /// Whether the result has a column with this name.
  public func hasColumn(_ name: String) -> Bool { self.columns.index(of: name) != nil }

  /// Decodes the value at a column index as any ``SQLValueConvertible`` type (use an Optional type to allow NULL).
  public func get<T: SQLValueConvertible>(_ index: Int, as type: T.Type = T.self) throws(SQLiteError) -> T {
    try Self.decode(self[index], column: "#\(index)")
  }

  /// Decodes the named column as any ``SQLValueConvertible`` type (use an Optional type to allow NULL).
  public func get<T: SQLValueConvertible>(_ name: String, as type: T.Type = T.self) throws(SQLiteError) -> T {
    try Self.decode(self[name], column: name)
  }

  /// `column` names the column in the error; built only when there is one (every typed read of a row comes here).
  private static func decode<T: SQLValueConvertible>(
    _ value: SQLValue, column: @autoclosure () -> String
  ) throws(SQLiteError) -> T {
    guard let decoded = T.fromSQLValue(value) else {
      // The value itself is deliberately left out: it may be a token or a payload.
      throw .mismatch("column \(column()) holds \(value.storageClass), which cannot be read as \(T.self)")
    }
    return decoded
  }
}

extension SQLValue {
  /// The storage class name, for error messages that must not show the value itself.
  var storageClass: String {
    switch self {
    case .null: "NULL"
    case .integer: "INTEGER"
    case .real: "REAL"
    case .text: "TEXT"
    case .blob: "BLOB"
    }
  }
}

// Typed getters. Each throws SQLITE_MISMATCH for a wrong storage class; the non-optional ones also for NULL.
extension Row {
  /// The column as `Int`; throws for NULL, a non-integer or an out-of-range value.
  public func int(_ index: Int) throws(SQLiteError) -> Int { try self.get(index) }
  /// The column as `Int`; throws for NULL, a non-integer or an out-of-range value.
  public func int(_ name: String) throws(SQLiteError) -> Int { try self.get(name) }
  /// The column as `Int`, or nil for NULL; throws for a non-integer.
  public func optionalInt(_ index: Int) throws(SQLiteError) -> Int? { try self.get(index) }
  /// The column as `Int`, or nil for NULL; throws for a non-integer.
  public func optionalInt(_ name: String) throws(SQLiteError) -> Int? { try self.get(name) }

  /// The column as `Int64`; throws for NULL or a non-integer.
  public func int64(_ index: Int) throws(SQLiteError) -> Int64 { try self.get(index) }
  /// The column as `Int64`; throws for NULL or a non-integer.
  public func int64(_ name: String) throws(SQLiteError) -> Int64 { try self.get(name) }
  /// The column as `Int64`, or nil for NULL; throws for a non-integer.
  public func optionalInt64(_ index: Int) throws(SQLiteError) -> Int64? { try self.get(index) }
  /// The column as `Int64`, or nil for NULL; throws for a non-integer.
  public func optionalInt64(_ name: String) throws(SQLiteError) -> Int64? { try self.get(name) }

  /// The column as `String`; throws for NULL or non-text.
  public func string(_ index: Int) throws(SQLiteError) -> String { try self.get(index) }
  /// The column as `String`; throws for NULL or non-text.
  public func string(_ name: String) throws(SQLiteError) -> String { try self.get(name) }
  /// The column as `String`, or nil for NULL; throws for non-text.
  public func optionalString(_ index: Int) throws(SQLiteError) -> String? { try self.get(index) }
  /// The column as `String`, or nil for NULL; throws for non-text.
  public func optionalString(_ name: String) throws(SQLiteError) -> String? { try self.get(name) }

  /// The column as `Double` (REAL or INTEGER); throws for NULL, text or a blob.
  public func double(_ index: Int) throws(SQLiteError) -> Double { try self.get(index) }
  /// The column as `Double` (REAL or INTEGER); throws for NULL, text or a blob.
  public func double(_ name: String) throws(SQLiteError) -> Double { try self.get(name) }
  /// The column as `Double`, or nil for NULL; throws for text or a blob.
  public func optionalDouble(_ index: Int) throws(SQLiteError) -> Double? { try self.get(index) }
  /// The column as `Double`, or nil for NULL; throws for text or a blob.
  public func optionalDouble(_ name: String) throws(SQLiteError) -> Double? { try self.get(name) }

  /// The column as bytes; throws for NULL or a non-blob.
  public func blob(_ index: Int) throws(SQLiteError) -> [UInt8] { try self.get(index) }
  /// The column as bytes; throws for NULL or a non-blob.
  public func blob(_ name: String) throws(SQLiteError) -> [UInt8] { try self.get(name) }
  /// The column as bytes, or nil for NULL; throws for a non-blob.
  public func optionalBlob(_ index: Int) throws(SQLiteError) -> [UInt8]? { try self.get(index) }
  /// The column as bytes, or nil for NULL; throws for a non-blob.
  public func optionalBlob(_ name: String) throws(SQLiteError) -> [UInt8]? { try self.get(name) }

  /// The column as `Bool` (INTEGER, zero is false); throws for NULL or a non-integer.
  public func bool(_ index: Int) throws(SQLiteError) -> Bool { try self.get(index) }
  /// The column as `Bool` (INTEGER, zero is false); throws for NULL or a non-integer.
  public func bool(_ name: String) throws(SQLiteError) -> Bool { try self.get(name) }
  /// The column as `Bool`, or nil for NULL; throws for a non-integer.
  public func optionalBool(_ index: Int) throws(SQLiteError) -> Bool? { try self.get(index) }
  /// The column as `Bool`, or nil for NULL; throws for a non-integer.
  public func optionalBool(_ name: String) throws(SQLiteError) -> Bool? { try self.get(name) }
}
