/// A JSON document as a Swift value, with a strict parser and a deterministic serializer.
///
/// MeshCore's events, invitations and requests carry JSON payloads; keeping the representation here keeps
/// the core free of Foundation and makes its outputs byte-for-byte reproducible (object keys are kept in
/// insertion order, numbers print the same way every time). The parser is defensive: it runs in time linear in
/// the input (objects index their keys once they grow), bounds the members of each object and the nesting
/// depth, rejects trailing garbage, lone surrogates and control characters in strings, and reports the
/// byte offset of the first problem, so REST errors can say exactly what is wrong.
public enum JSONValue: Sendable, Hashable {
  case null
  case bool(Bool)
  case int(Int64)
  case double(Double)
  case string(String)
  case array([JSONValue])
  /// An object; keys keep their order. Duplicate keys are rejected by the parser.
  case object(JSONObject)
  /// An already serialized JSON value, written out as is. The parser never produces it; it lets a value that is
  /// sent to many recipients (an event's data) be serialized once. The bytes must be valid JSON.
  case serialized([UInt8])

  /// The string payload, if this is a string.
  public var stringValue: String? {
    if case .string(let value) = self { return value }
    return nil
  }

  /// The object payload, if this is an object.
  public var objectValue: JSONObject? {
    if case .object(let value) = self { return value }
    return nil
  }

  /// The integer payload, if this is an integral number.
  public var intValue: Int64? {
    switch self {
    case .int(let value): return value
    case .double(let value) where value.rounded() == value && abs(value) < 9.0e15: return Int64(value)
    default: return nil
    }
  }

  /// A short name of the JSON type, for error messages ("a string", "an object" …).
  public var typeDescription: String {
    switch self {
    case .null: "null"
    case .bool: "a boolean"
    case .int, .double: "a number"
    case .string: "a string"
    case .array: "an array"
    case .object: "an object"
    case .serialized: "a JSON value"
    }
  }
}

/// A JSON object that keeps key order.
///
/// Lookups are linear for small objects (the common case: a handful of members, where comparing a few strings beats
/// hashing) and go through a key index beside the ordered members once an object has more than
/// ``indexThreshold`` members, so building or reading an object of n members costs O(n), not O(n²).
public struct JSONObject: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral {
  /// The members in order.
  public private(set) var members: [(key: String, value: JSONValue)]
  /// The position of each key in `members` (its first occurrence); nil while the object is small.
  private var positions: [String: Int]?

  /// Objects with more members than this keep a key index.
  static let indexThreshold = 16

  public init(_ members: [(String, JSONValue)] = []) {
    self.members = members.map { (key: $0.0, value: $0.1) }
    reindex()
  }

  public init(dictionaryLiteral elements: (String, JSONValue)...) {
    self.init(elements)
  }

  /// Members already known to have distinct keys, with their index when the parser built one.
  init(distinctMembers members: [(key: String, value: JSONValue)], positions: [String: Int]?) {
    self.members = members
    self.positions = members.count > Self.indexThreshold ? positions : nil
    if self.positions == nil { reindex() }
  }

  /// Rebuilds the key index (or drops it for a small object).
  private mutating func reindex() {
    guard members.count > Self.indexThreshold else {
      positions = nil
      return
    }
    var positions: [String: Int] = [:]
    positions.reserveCapacity(members.count)
    for (offset, member) in members.enumerated() where positions[member.key] == nil {
      positions[member.key] = offset
    }
    self.positions = positions
  }

  /// The position of `key` in `members`.
  private func position(of key: String) -> Int? {
    if let positions { return positions[key] }
    return members.firstIndex { $0.key == key }
  }

  /// The value for `key`, or nil.
  public subscript(_ key: String) -> JSONValue? {
    get { position(of: key).map { members[$0].value } }
    set {
      if let index = position(of: key) {
        if let newValue {
          members[index].value = newValue
        } else {
          members.remove(at: index)
          reindex()
        }
      } else if let newValue {
        members.append((key: key, value: newValue))
        if positions != nil {
          positions?[key] = members.count - 1
        } else if members.count > Self.indexThreshold {
          reindex()
        }
      }
    }
  }

  /// The keys in order.
  public var keys: [String] { members.map(\.key) }

  public func makeIterator() -> IndexingIterator<[(key: String, value: JSONValue)]> {
    members.makeIterator()
  }

  public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
    lhs.members.count == rhs.members.count
      && zip(lhs.members, rhs.members).allSatisfy { $0.key == $1.key && $0.value == $1.value }
  }

  public func hash(into hasher: inout Hasher) {
    for member in members {
      hasher.combine(member.key)
      hasher.combine(member.value)
    }
  }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
  ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral, ExpressibleByFloatLiteral
{
  public init(stringLiteral value: String) { self = .string(value) }
  public init(integerLiteral value: Int64) { self = .int(value) }
  public init(booleanLiteral value: Bool) { self = .bool(value) }
  public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
  public init(dictionaryLiteral elements: (String, JSONValue)...) { self = .object(JSONObject(elements)) }
  public init(nilLiteral: ()) { self = .null }
  public init(floatLiteral value: Double) { self = .double(value) }
}

// MARK: - Serializing

extension JSONValue {
  /// This value serialized once, for writing many times (see ``serialized(_:)``).
  public var preserialized: JSONValue { .serialized(serialized()) }

  /// The compact UTF-8 encoding of this value.
  public func serialized() -> [UInt8] {
    var out: [UInt8] = []
    out.reserveCapacity(128)
    write(to: &out)
    return out
  }

  /// The compact encoding as a `String`.
  public func serializedString() -> String {
    String(decoding: serialized(), as: UTF8.self)
  }

  /// Appends the compact encoding of this value to `out`.
  public func write(to out: inout [UInt8]) {
    switch self {
    case .serialized(let bytes): out.append(contentsOf: bytes)
    case .null: out.append(contentsOf: "null".utf8)
    case .bool(let value): out.append(contentsOf: (value ? "true" : "false").utf8)
    case .int(let value): out.append(contentsOf: String(value).utf8)
    case .double(let value):
      if value.isFinite {
        if value.rounded() == value && abs(value) < 1e15 {
          out.append(contentsOf: String(Int64(value)).utf8)
        } else {
          out.append(contentsOf: "\(value)".utf8)
        }
      } else {
        out.append(contentsOf: "null".utf8)
      }
    case .string(let value): Self.writeString(value, to: &out)
    case .array(let values):
      out.append(UInt8(ascii: "["))
      for (index, value) in values.enumerated() {
        if index > 0 { out.append(UInt8(ascii: ",")) }
        value.write(to: &out)
      }
      out.append(UInt8(ascii: "]"))
    case .object(let object):
      out.append(UInt8(ascii: "{"))
      for (index, member) in object.members.enumerated() {
        if index > 0 { out.append(UInt8(ascii: ",")) }
        Self.writeString(member.key, to: &out)
        out.append(UInt8(ascii: ":"))
        member.value.write(to: &out)
      }
      out.append(UInt8(ascii: "}"))
    }
  }

  static func writeString(_ string: String, to out: inout [UInt8]) {
    out.append(UInt8(ascii: "\""))
    var string = string
    string.withUTF8 { bytes in
      // Runs of bytes that need no escaping (nearly everything) are appended in one go.
      var start = 0
      for index in 0..<bytes.count {
        let byte = bytes[index]
        guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
        if start < index { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<index])) }
        start = index + 1
        out.append(UInt8(ascii: "\\"))
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): out.append(byte)
        case 0x0A: out.append(UInt8(ascii: "n"))
        case 0x0D: out.append(UInt8(ascii: "r"))
        case 0x09: out.append(UInt8(ascii: "t"))
        default:
          out.append(contentsOf: [UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
          out.append(hexDigit(byte >> 4))
          out.append(hexDigit(byte & 0xF))
        }
      }
      if start < bytes.count { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<bytes.count])) }
    }
    out.append(UInt8(ascii: "\""))
  }

  static func hexDigit(_ value: UInt8) -> UInt8 {
    value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") + value - 10
  }
}

// MARK: - Parsing

/// Why a JSON document was rejected, with the byte offset of the problem.
public struct JSONParseError: Error, Equatable, Sendable, CustomStringConvertible {
  /// What is wrong.
  public let reason: String
  /// The byte offset where the parser stopped.
  public let offset: Int
  /// The document is well-formed so far but over one of the parser's limits (nesting depth, members per object),
  /// rather than malformed.
  public let isLimit: Bool

  init(reason: String, offset: Int, isLimit: Bool = false) {
    self.reason = reason
    self.offset = offset
    self.isLimit = isLimit
  }

  public var description: String { "\(reason) at byte \(offset)" }
}

extension JSONValue {
  /// The deepest nesting of arrays and objects the parser accepts by default.
  public static let defaultMaxDepth = 64
  /// The most members one object may have by default (arrays are bounded only by the document's size).
  public static let defaultMaxMembers = 10_000

  /// Parses a complete JSON document (RFC 8259), nesting at most `maxDepth` levels, with at most `maxMembers`
  /// members in any object. Costs time linear in the document's size.
  public static func parse(
    _ bytes: some Collection<UInt8>, maxDepth: Int = defaultMaxDepth, maxMembers: Int = defaultMaxMembers
  ) throws(JSONParseError) -> JSONValue {
    var parser = JSONParser(bytes: Array(bytes), maxDepth: maxDepth, maxMembers: maxMembers)
    return try parser.parseDocument()
  }

  /// Parses the UTF-8 of `text`.
  public static func parse(
    _ text: String, maxDepth: Int = defaultMaxDepth, maxMembers: Int = defaultMaxMembers
  ) throws(JSONParseError) -> JSONValue {
    try parse(Array(text.utf8), maxDepth: maxDepth, maxMembers: maxMembers)
  }
}

struct JSONParser {
  let bytes: [UInt8]
  let maxDepth: Int
  let maxMembers: Int
  var index = 0
  var depth = 0

  init(bytes: [UInt8], maxDepth: Int, maxMembers: Int) {
    self.bytes = bytes
    self.maxDepth = maxDepth
    self.maxMembers = maxMembers
  }

  mutating func parseDocument() throws(JSONParseError) -> JSONValue {
    skipWhitespace()
    if index == bytes.count { throw fail("empty document") }
    let value = try parseValue()
    skipWhitespace()
    guard index == bytes.count else { throw fail("unexpected content after the JSON value") }
    return value
  }

  func fail(_ reason: String, limit: Bool = false) -> JSONParseError {
    JSONParseError(reason: reason, offset: index, isLimit: limit)
  }

  mutating func skipWhitespace() {
    while index < bytes.count {
      switch bytes[index] {
      case 0x20, 0x09, 0x0A, 0x0D: index += 1
      default: return
      }
    }
  }

  mutating func parseValue() throws(JSONParseError) -> JSONValue {
    guard index < bytes.count else { throw fail("unexpected end of input") }
    switch bytes[index] {
    case UInt8(ascii: "{"): return try parseObject()
    case UInt8(ascii: "["): return try parseArray()
    case UInt8(ascii: "\""): return .string(try parseString())
    case UInt8(ascii: "t"): return try parseLiteral("true", .bool(true))
    case UInt8(ascii: "f"): return try parseLiteral("false", .bool(false))
    case UInt8(ascii: "n"): return try parseLiteral("null", .null)
    case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
    default: throw fail("unexpected character")
    }
  }

  mutating func parseLiteral(_ word: StaticString, _ value: JSONValue) throws(JSONParseError) -> JSONValue {
    let count = word.utf8CodeUnitCount
    guard index + count <= bytes.count else { throw fail("invalid literal") }
    let start = word.utf8Start
    for offset in 0..<count where bytes[index + offset] != start[offset] { throw fail("invalid literal") }
    index += count
    return value
  }

  /// Steps into an object or array at its opening bracket, one level deeper; true when `close` follows at once (the
  /// container is empty, and closed).
  mutating func open(closing close: Unicode.Scalar) throws(JSONParseError) -> Bool {
    depth += 1
    if depth > maxDepth {
      throw fail("nesting deeper than \(maxDepth) levels (the limit); flatten the document", limit: true)
    }
    index += 1
    skipWhitespace()
    guard index < bytes.count, bytes[index] == UInt8(ascii: close) else { return false }
    index += 1
    depth -= 1
    return true
  }

  /// After a member or element: true when `close` ends the container (read, one level up), false after a `,`.
  mutating func closes(_ close: Unicode.Scalar, container: String) throws(JSONParseError) -> Bool {
    skipWhitespace()
    guard index < bytes.count else { throw fail("unterminated \(container)") }
    if bytes[index] == UInt8(ascii: ",") {
      index += 1
      return false
    }
    guard bytes[index] == UInt8(ascii: close) else { throw fail("expected ',' or '\(close)'") }
    index += 1
    depth -= 1
    return true
  }

  mutating func parseObject() throws(JSONParseError) -> JSONValue {
    if try open(closing: "}") { return .object(JSONObject()) }
    var members: [(key: String, value: JSONValue)] = []
    // Duplicate keys are found by comparing with the few members of a small object, then through an index.
    var positions: [String: Int]?
    while true {
      skipWhitespace()
      guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected a member name") }
      let keyOffset = index
      let key = try parseString()
      let duplicate: Bool
      if positions != nil {
        duplicate = positions?.updateValue(members.count, forKey: key) != nil
      } else {
        duplicate = members.contains { $0.key == key }
        if !duplicate, members.count >= JSONObject.indexThreshold {
          var index: [String: Int] = [:]
          index.reserveCapacity(members.count * 2)
          for (offset, member) in members.enumerated() { index[member.key] = offset }
          index[key] = members.count
          positions = index
        }
      }
      if duplicate {
        index = keyOffset
        throw fail("duplicate member \"\(key)\"")
      }
      guard members.count < maxMembers else {
        index = keyOffset
        throw fail(
          "an object with more than \(maxMembers) members (the limit per object); send fewer keys", limit: true)
      }
      skipWhitespace()
      guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected ':'") }
      index += 1
      skipWhitespace()
      let value = try parseValue()
      members.append((key: key, value: value))
      if try closes("}", container: "object") {
        return .object(JSONObject(distinctMembers: members, positions: positions))
      }
    }
  }

  mutating func parseArray() throws(JSONParseError) -> JSONValue {
    var values: [JSONValue] = []
    if try open(closing: "]") { return .array(values) }
    while true {
      skipWhitespace()
      values.append(try parseValue())
      if try closes("]", container: "array") { return .array(values) }
    }
  }

  mutating func parseHex4() throws(JSONParseError) -> UInt32 {
    guard index + 4 <= bytes.count else { throw fail("truncated \\u escape") }
    var value: UInt32 = 0
    for _ in 0..<4 {
      let byte = bytes[index]
      let digit: UInt32
      switch byte {
      case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
      case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
      case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
      default: throw fail("invalid \\u escape")
      }
      value = value << 4 | digit
      index += 1
    }
    return value
  }

  mutating func parseString() throws(JSONParseError) -> String {
    index += 1
    // Fast path: a string without escapes (nearly all of them) is validated straight from the input.
    // ASCII (nearly every key) needs no UTF-8 validation, whose generic code costs more than the scan.
    let start = index
    var ascii = true
    while index < bytes.count {
      let byte = bytes[index]
      if byte == UInt8(ascii: "\"") {
        let string: String
        if ascii {
          string = String(decoding: bytes[start..<index], as: UTF8.self)
        } else {
          guard let valid = String(validating: bytes[start..<index], as: UTF8.self) else {
            throw fail("string is not valid UTF-8")
          }
          string = valid
        }
        index += 1
        return string
      }
      if byte == UInt8(ascii: "\\") || byte < 0x20 { break }
      if byte >= 0x80 { ascii = false }
      index += 1
    }
    var out = Array(bytes[start..<index])
    while true {
      guard index < bytes.count else { throw fail("unterminated string") }
      let byte = bytes[index]
      switch byte {
      case UInt8(ascii: "\""):
        index += 1
        guard let string = String(validating: out, as: UTF8.self) else { throw fail("string is not valid UTF-8") }
        return string
      case UInt8(ascii: "\\"):
        index += 1
        guard index < bytes.count else { throw fail("unterminated escape") }
        let escape = bytes[index]
        index += 1
        switch escape {
        case UInt8(ascii: "\""): out.append(0x22)
        case UInt8(ascii: "\\"): out.append(0x5C)
        case UInt8(ascii: "/"): out.append(0x2F)
        case UInt8(ascii: "b"): out.append(0x08)
        case UInt8(ascii: "f"): out.append(0x0C)
        case UInt8(ascii: "n"): out.append(0x0A)
        case UInt8(ascii: "r"): out.append(0x0D)
        case UInt8(ascii: "t"): out.append(0x09)
        case UInt8(ascii: "u"):
          var scalar = try parseHex4()
          if (0xD800...0xDBFF).contains(scalar) {
            guard index + 2 <= bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
            else { throw fail("lone surrogate in \\u escape") }
            index += 2
            let low = try parseHex4()
            guard (0xDC00...0xDFFF).contains(low) else { throw fail("invalid surrogate pair") }
            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
          } else if (0xDC00...0xDFFF).contains(scalar) {
            throw fail("lone surrogate in \\u escape")
          }
          Self.appendUTF8(scalar, to: &out)
        default: throw fail("invalid escape")
        }
      case 0..<0x20:
        throw fail("control character in string")
      default:
        out.append(byte)
        index += 1
      }
    }
  }

  /// Appends the UTF-8 encoding of a Unicode scalar value (never a surrogate; at most 0x10FFFF).
  static func appendUTF8(_ scalar: UInt32, to out: inout [UInt8]) {
    switch scalar {
    case 0..<0x80:
      out.append(UInt8(scalar))
    case 0x80..<0x800:
      out.append(UInt8(0xC0 | scalar >> 6))
      out.append(UInt8(0x80 | scalar & 0x3F))
    case 0x800..<0x10000:
      out.append(UInt8(0xE0 | scalar >> 12))
      out.append(UInt8(0x80 | scalar >> 6 & 0x3F))
      out.append(UInt8(0x80 | scalar & 0x3F))
    default:
      out.append(UInt8(0xF0 | scalar >> 18))
      out.append(UInt8(0x80 | scalar >> 12 & 0x3F))
      out.append(UInt8(0x80 | scalar >> 6 & 0x3F))
      out.append(UInt8(0x80 | scalar & 0x3F))
    }
  }

  mutating func parseNumber() throws(JSONParseError) -> JSONValue {
    let start = index
    if bytes[index] == UInt8(ascii: "-") { index += 1 }
    guard index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) else {
      throw fail("invalid number")
    }
    if bytes[index] == UInt8(ascii: "0") {
      index += 1
    } else {
      while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
    }
    var integral = true
    if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
      integral = false
      index += 1
      let digits = index
      while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
      guard index > digits else { throw fail("invalid number") }
    }
    if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
      integral = false
      index += 1
      if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
      let digits = index
      while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
      guard index > digits else { throw fail("invalid number") }
    }
    let text = String(decoding: bytes[start..<index], as: UTF8.self)
    if integral, let value = Int64(text) { return .int(value) }
    guard let value = Double(text), value.isFinite else { throw fail("number out of range") }
    return .double(value)
  }
}

extension JSONValue: CustomStringConvertible, CustomDebugStringConvertible {
  /// The compact JSON text (also what test failures and logs show, instead of a reflected enum dump).
  public var description: String { serializedString() }

  public var debugDescription: String { serializedString() }
}

// MARK: - Size

extension JSONValue {
  /// About how many bytes ``serialized()`` would produce (strings counted without escapes), in time linear in the
  /// number of values, not in their length: enough to tell a 2 MB event from a 200-byte one without encoding it.
  public var approximateSize: Int {
    switch self {
    case .null, .bool: 5
    case .int, .double: 12
    case .string(let value): value.utf8.count + 2
    case .serialized(let bytes): bytes.count
    case .array(let values): values.reduce(2) { $0 + $1.approximateSize + 1 }
    case .object(let object): object.members.reduce(2) { $0 + $1.key.utf8.count + 4 + $1.value.approximateSize }
    }
  }
}
