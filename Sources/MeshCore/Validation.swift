// MeshCore — meshgate's sans-I/O mesh core.
//
// What it is. MeshCore holds the rules and state machines of the mesh (peers, advertising and browsing,
// invitations, sessions and their strategies, transfers, the event log) as plain Swift values. It performs no
// I/O, starts no threads, reads no clock and imports no C or Foundation: callers feed it inputs (a request, a
// frame from a link, the current time) and act on what it returns. That keeps it deterministic, so a simulator
// can run hundreds of nodes in one process and tests can drive it step by step.
//
// Threading. Everything here is a `Sendable` value or a pure function; it is safe from any thread, and owning
// state (one `var` per node) is the caller's business.
//
// This file: the identity and limit rules from DESIGN.md ("Identity, names and limits"). Each `Validate`
// function returns its input unchanged when it is valid and otherwise throws a `ValidationError` naming the
// field and the rule, phrased so the gateway can send `"\(error)"` as the message of a 400 response as is.
// Nothing is trimmed or normalized: what the user sent is what is stored and shown to other peers.

/// A rejected input: which field, and the rule it broke. `description` is a user-facing sentence.
public struct ValidationError: Error, Equatable, Sendable, CustomStringConvertible {
  /// The API field name, e.g. `"displayName"`.
  public let field: String
  /// The rule, phrased to follow the field name, e.g. `"must be at most 63 characters (got 70)"`.
  public let rule: String

  /// Creates an error for `field` breaking `rule`.
  public init(field: String, rule: String) {
    self.field = field
    self.rule = rule
  }

  /// `"<field> <rule>"`, e.g. `displayName must be at most 63 characters (got 70)`.
  public var description: String { "\(self.field) \(self.rule)" }
}

/// The validation rules for user-supplied identity fields and limits (DESIGN.md, "Identity, names and limits").
public enum Validate {
  /// Maximum display name (and chat room name) length in characters, counted as Unicode scalars (code points): what
  /// people count, what JSON Schema's `maxLength` counts and what a browser counts with `[...name].length`. Unlike
  /// extended grapheme clusters the count does not change with a Unicode version, so the server and every browser
  /// agree on it, and it bounds the bytes (4 UTF-8 bytes a scalar: at most 252). An emoji made of several scalars
  /// (a family, a flag) counts as that many.
  public static let displayNameMaxCharacters = 63
  /// Maximum service type length in characters (RFC 6335).
  public static let serviceTypeMaxLength = 15
  /// Maximum number of discovery info pairs.
  public static let discoveryInfoMaxPairs = 16
  /// Maximum total UTF-8 bytes of discovery info keys and values (Bonjour TXT-record sized).
  public static let discoveryInfoMaxBytes = 400
  /// Maximum invitation context size in bytes (4 KiB).
  public static let contextMaxBytes = 4096
  /// Allowed invitation timeouts, in seconds.
  public static let timeoutSecondsRange = 1...300
  /// The invitation timeout used when a request gives none, in seconds.
  public static let defaultTimeoutSeconds = 30

  /// A peer's display name: 1–63 characters (Unicode scalars, ``displayNameMaxCharacters``), no control characters
  /// (Unicode category Cc) and no line or paragraph separators (U+2028, U+2029), not only spaces. Returned unchanged
  /// (nothing is trimmed).
  @discardableResult
  public static func displayName(_ name: String) throws(ValidationError) -> String {
    let field = "displayName"
    let limit = self.displayNameMaxCharacters
    guard !name.isEmpty else {
      throw ValidationError(field: field, rule: "must not be empty: give a name of 1–\(limit) characters")
    }
    let characters = name.unicodeScalars.count
    guard characters <= limit else {
      throw ValidationError(
        field: field,
        rule: "must be at most \(limit) characters (got \(characters); every Unicode code point counts, so an emoji "
          + "made of several, like a flag, counts as several)")
    }
    if let bad = name.unicodeScalars.first(where: self.isControlOrSeparator) {
      throw ValidationError(
        field: field,
        rule: "must not contain control characters or line/paragraph separators (found \(self.codePoint(bad)))"
      )
    }
    guard !name.unicodeScalars.allSatisfy(\.properties.isWhitespace) else {
      throw ValidationError(field: field, rule: "must not be only spaces: give at least one letter, digit or symbol")
    }
    return name
  }

  /// A Bonjour service type without `_` and protocol (RFC 6335): 1–15 characters of `a-z`, `0-9` and `-`,
  /// at least one letter, no hyphen at either end and no two hyphens in a row. Example: `jobmanager-chat`.
  @discardableResult
  public static func serviceType(_ type: String) throws(ValidationError) -> String {
    let field = "serviceType"
    let scalars = type.unicodeScalars
    guard (1...self.serviceTypeMaxLength).contains(scalars.count) else {
      throw ValidationError(
        field: field,
        rule: "must be 1–\(self.serviceTypeMaxLength) characters (got \(scalars.count))"
      )
    }
    if let bad = scalars.first(where: { !self.isLowercaseLetter($0) && !self.isDigit($0) && $0 != "-" }) {
      throw ValidationError(
        field: field,
        rule: "must contain only lowercase letters a-z, digits 0-9 and hyphens (found \(self.quoted(bad)))"
      )
    }
    guard scalars.contains(where: self.isLowercaseLetter) else {
      throw ValidationError(field: field, rule: "must contain at least one letter a-z")
    }
    guard scalars.first != "-", scalars.last != "-" else {
      throw ValidationError(field: field, rule: "must not start or end with a hyphen")
    }
    var previousWasHyphen = false
    for scalar in scalars {
      let isHyphen = scalar == "-"
      if isHyphen && previousWasHyphen {
        throw ValidationError(field: field, rule: "must not contain two hyphens in a row")
      }
      previousWasHyphen = isHyphen
    }
    return type
  }

  /// Advertised discovery info, sized like a Bonjour TXT record: at most 16 pairs; keys non-empty, printable
  /// ASCII (U+0020–U+007E) without `=`, and unique ignoring case (TXT keys are case-insensitive); at most 400
  /// UTF-8 bytes of keys and values together. Values may hold any text.
  @discardableResult
  public static func discoveryInfo(_ info: [String: String]) throws(ValidationError) -> [String: String] {
    let field = "discoveryInfo"
    guard info.count <= self.discoveryInfoMaxPairs else {
      throw ValidationError(
        field: field, rule: "must have at most \(self.discoveryInfoMaxPairs) pairs (got \(info.count))")
    }
    // Sorted, so that with several bad keys the same one is reported every time.
    var seen: [String: String] = [:]
    for key in info.keys.sorted() {
      guard !key.isEmpty else {
        throw ValidationError(field: field, rule: "keys must not be empty")
      }
      guard key.unicodeScalars.allSatisfy({ (0x20...0x7E).contains($0.value) && $0 != "=" }) else {
        throw ValidationError(
          field: field,
          rule: "keys must be printable ASCII without '=' (got key \(self.quoted(key)))"
        )
      }
      let folded = String(String.UnicodeScalarView(key.unicodeScalars.map(self.asciiLowercased)))
      if let other = seen[folded] {
        throw ValidationError(
          field: field,
          rule: "keys must be unique ignoring case (got \(self.quoted(other)) and \(self.quoted(key)))"
        )
      }
      seen[folded] = key
    }
    let bytes = info.reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count }
    guard bytes <= self.discoveryInfoMaxBytes else {
      throw ValidationError(
        field: field,
        rule: "must be at most \(self.discoveryInfoMaxBytes) UTF-8 bytes of keys and values in total (got \(bytes))"
      )
    }
    return info
  }

  /// An invitation's context size in bytes: at most 4096 (4 KiB).
  @discardableResult
  public static func context(_ bytes: Int) throws(ValidationError) -> Int {
    guard bytes >= 0 else {
      throw ValidationError(field: "context", rule: "must not have a negative size (got \(bytes))")
    }
    guard bytes <= self.contextMaxBytes else {
      throw ValidationError(field: "context", rule: "must be at most \(self.contextMaxBytes) bytes (got \(bytes))")
    }
    return bytes
  }

  /// An invitation timeout: 1–300 seconds.
  @discardableResult
  public static func timeoutSeconds(_ seconds: Int) throws(ValidationError) -> Int {
    guard self.timeoutSecondsRange.contains(seconds) else {
      let range = self.timeoutSecondsRange
      throw ValidationError(
        field: "timeoutSeconds",
        rule: "must be \(range.lowerBound)–\(range.upperBound) seconds (got \(seconds))"
      )
    }
    return seconds
  }

  // MARK: - Helpers

  private static func isControlOrSeparator(_ scalar: Unicode.Scalar) -> Bool {
    switch scalar.properties.generalCategory {
    case .control, .lineSeparator, .paragraphSeparator: true
    default: false
    }
  }

  private static func isLowercaseLetter(_ scalar: Unicode.Scalar) -> Bool { ("a"..."z").contains(scalar) }

  private static func isDigit(_ scalar: Unicode.Scalar) -> Bool { ("0"..."9").contains(scalar) }

  private static func asciiLowercased(_ scalar: Unicode.Scalar) -> Unicode.Scalar {
    ("A"..."Z").contains(scalar) ? Unicode.Scalar(scalar.value + 0x20)! : scalar
  }

  /// `U+000A`: the code point in the usual notation, at least four hex digits.
  private static func codePoint(_ scalar: Unicode.Scalar) -> String {
    let hex = String(scalar.value, radix: 16, uppercase: true)
    return "U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
  }

  /// `"J"` for a printable ASCII character, `U+00E9` for anything else.
  private static func quoted(_ scalar: Unicode.Scalar) -> String {
    (0x21...0x7E).contains(scalar.value) ? "\"\(scalar)\"" : self.codePoint(scalar)
  }

  /// A user-supplied (or wire) string, quoted for an error message: printable ASCII as is (with `"` and `\`
  /// escaped), anything else as `\u{…}`, cut after `limit` characters so an error can never echo a huge input.
  static func quoted(_ text: String, limit: Int = 32) -> String {
    var result = "\""
    for (index, scalar) in text.unicodeScalars.enumerated() {
      if index == limit {
        result += "…"
        break
      }
      switch scalar {
      case "\"", "\\": result += "\\\(scalar)"
      case " "..."~": result.unicodeScalars.append(scalar)
      default: result += "\\u{\(String(scalar.value, radix: 16, uppercase: true))}"
      }
    }
    return result + "\""
  }
}
