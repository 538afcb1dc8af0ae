/// One SQLite value: the five storage classes of SQLite's type system.
public enum SQLValue: Sendable, Hashable {
  /// SQL `NULL`.
  case null
  /// A 64-bit signed integer.
  case integer(Int64)
  /// An IEEE 754 double.
  case real(Double)
  /// UTF-8 text.
  case text(String)
  /// Raw bytes.
  case blob([UInt8])

  /// Wraps any convertible Swift value, e.g. `SQLValue(peer.displayName)` or `SQLValue(optionalDate)`.
  public init(_ value: some SQLValueConvertible) {
    self = value.sqlValue
  }

  /// True for ``null``.
  public var isNull: Bool {
    if case .null = self { return true }
    return false
  }
}

extension SQLValue: ExpressibleByNilLiteral {
  /// `nil` binds SQL `NULL`.
  public init(nilLiteral: ()) { self = .null }
}

extension SQLValue: ExpressibleByIntegerLiteral {
  /// An integer literal binds an ``integer(_:)``.
  public init(integerLiteral value: Int64) { self = .integer(value) }
}

extension SQLValue: ExpressibleByFloatLiteral {
  /// A floating-point literal binds a ``real(_:)``.
  public init(floatLiteral value: Double) { self = .real(value) }
}

extension SQLValue: ExpressibleByStringLiteral {
  /// A string literal binds ``text(_:)``.
  public init(stringLiteral value: String) { self = .text(value) }
}

extension SQLValue: ExpressibleByBooleanLiteral {
  /// `true` binds `1` and `false` binds `0`, SQLite's own boolean convention.
  public init(booleanLiteral value: Bool) { self = .integer(value ? 1 : 0) }
}

extension SQLValue: CustomStringConvertible {
  /// A short, type-tagged rendering for debugging; blobs show only their size.
  public var description: String {
    switch self {
    case .null: "NULL"
    case .integer(let value): String(value)
    case .real(let value): String(value)
    case .text(let value): String(reflecting: value)
    case .blob(let bytes): "<\(bytes.count) bytes>"
    }
  }
}

/// A Swift type that can be bound to a statement parameter and read back from a column.
public protocol SQLValueConvertible {
  /// The value to bind.
  var sqlValue: SQLValue { get }
  /// Reads a stored value, or returns nil when it cannot represent `Self` (wrong type, out of range, NULL).
  static func fromSQLValue(_ value: SQLValue) -> Self?
}

extension SQLValue: SQLValueConvertible {
  /// Itself.
  public var sqlValue: SQLValue { self }
  /// Itself; never nil.
  public static func fromSQLValue(_ value: SQLValue) -> SQLValue? { value }
}

extension Int64: SQLValueConvertible {
  /// ``SQLValue/integer(_:)``.
  public var sqlValue: SQLValue { .integer(self) }
  /// Reads an ``SQLValue/integer(_:)``; nil for any other storage class.
  public static func fromSQLValue(_ value: SQLValue) -> Int64? {
    if case .integer(let integer) = value { return integer }
    return nil
  }
}

extension Int: SQLValueConvertible {
  /// ``SQLValue/integer(_:)``.
  public var sqlValue: SQLValue { .integer(Int64(self)) }
  /// Reads an ``SQLValue/integer(_:)`` that fits in `Int`; nil otherwise.
  public static func fromSQLValue(_ value: SQLValue) -> Int? {
    if case .integer(let integer) = value { return Int(exactly: integer) }
    return nil
  }
}

extension Bool: SQLValueConvertible {
  /// `1` or `0`.
  public var sqlValue: SQLValue { .integer(self ? 1 : 0) }
  /// Reads an ``SQLValue/integer(_:)``: zero is false, anything else true; nil for other storage classes.
  public static func fromSQLValue(_ value: SQLValue) -> Bool? {
    if case .integer(let integer) = value { return integer != 0 }
    return nil
  }
}

extension Double: SQLValueConvertible {
  /// ``SQLValue/real(_:)``.
  public var sqlValue: SQLValue { .real(self) }
  /// Reads a ``SQLValue/real(_:)`` or an ``SQLValue/integer(_:)`` (SQLite stores whole REALs as integers
  /// in some cases); nil for other storage classes.
  public static func fromSQLValue(_ value: SQLValue) -> Double? {
    switch value {
    case .real(let real): real
    case .integer(let integer): Double(integer)
    default: nil
    }
  }
}

extension String: SQLValueConvertible {
  /// ``SQLValue/text(_:)``.
  public var sqlValue: SQLValue { .text(self) }
  /// Reads a ``SQLValue/text(_:)``; nil for any other storage class.
  public static func fromSQLValue(_ value: SQLValue) -> String? {
    if case .text(let text) = value { return text }
    return nil
  }
}

extension [UInt8]: SQLValueConvertible {
  /// ``SQLValue/blob(_:)``.
  public var sqlValue: SQLValue { .blob(self) }
  /// Reads a ``SQLValue/blob(_:)``; nil for any other storage class.
  public static func fromSQLValue(_ value: SQLValue) -> [UInt8]? {
    if case .blob(let bytes) = value { return bytes }
    return nil
  }
}

extension Optional: SQLValueConvertible where Wrapped: SQLValueConvertible {
  /// The wrapped value's, or ``SQLValue/null`` for nil.
  public var sqlValue: SQLValue { self.map(\.sqlValue) ?? .null }
  /// `.some(nil)` for NULL, `.some(wrapped)` when the value converts, nil when it does not.
  public static func fromSQLValue(_ value: SQLValue) -> Wrapped?? {
    if case .null = value { return .some(nil) }
    return Wrapped.fromSQLValue(value).map { .some($0) }
  }
}
