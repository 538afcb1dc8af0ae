/// Writes a JSON object's members straight into bytes.
///
/// For records rendered often (every job of a page, every event that carries one): building a ``JSONObject`` first
/// allocates a member array, a string per value and a tree that is serialized and freed right after. The writer
/// produces the same bytes as ``JSONValue/serialized()`` of that object, members in the order they are added, and
/// hands them over as ``JSONValue/serialized(_:)``, which every serializer writes as it is.
public struct JSONObjectWriter: Sendable {
  private var bytes: [UInt8]
  private var empty = true

  /// A writer whose output is expected to be about `capacity` bytes.
  public init(capacity: Int = 256) {
    bytes = []
    bytes.reserveCapacity(capacity)
    bytes.append(UInt8(ascii: "{"))
  }

  /// Keys are literals in the code that need no escaping (checked in debug builds), so they are copied as they are.
  private mutating func key(_ key: StaticString) {
    if empty { empty = false } else { bytes.append(UInt8(ascii: ",")) }
    bytes.append(UInt8(ascii: "\""))
    key.withUTF8Buffer { key in
      assert(!key.contains { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") })
      bytes.append(contentsOf: key)
    }
    bytes.append(UInt8(ascii: "\""))
    bytes.append(UInt8(ascii: ":"))
  }

  /// Adds `key` with a string, or `null` when `value` is nil.
  public mutating func add(_ key: StaticString, _ value: String?) {
    self.key(key)
    if let value { JSONValue.writeString(value, to: &bytes) } else { bytes.append(contentsOf: "null".utf8) }
  }

  /// Adds `key` with any value.
  public mutating func add(_ key: StaticString, _ value: JSONValue) {
    self.key(key)
    value.write(to: &bytes)
  }

  /// The object, closed.
  public consuming func finish() -> JSONValue {
    bytes.append(UInt8(ascii: "}"))
    return .serialized(bytes)
  }
}
