import MeshCore
import Testing

/// The `ValidationError` that `body` throws, or nil when it does not throw.
private func failure<T>(_ body: () throws -> T) -> ValidationError? {
  do {
    _ = try body()
    return nil
  } catch let error as ValidationError {
    return error
  } catch {
    Issue.record("expected a ValidationError, got \(error)")
    return nil
  }
}

@Suite struct DisplayNameTests {
  @Test(arguments: [
    "a",
    "Alice",
    "Alice's iPhone",
    " leading and trailing spaces ",
    "Zoë",
    "日本語の名前",
    "👩‍👩‍👧‍👦",
    "a\u{200D}b",  // ZERO WIDTH JOINER (Cf) is allowed: emoji sequences need it.
    "tab\u{00A0}nbsp",
    String(repeating: "x", count: 63),
  ])
  func acceptsAndReturnsUnchanged(_ name: String) throws {
    #expect(try Validate.displayName(name) == name)
  }

  /// The limit is 63 characters counted as Unicode scalars, not 63 UTF-8 bytes: a name of 63 four-byte emoji (252
  /// bytes) passes, 64 characters of any width fail. It was 63 bytes, so 16 emoji or 22 CJK characters failed.
  @Test func boundaryIs63CharactersNot63Bytes() throws {
    let ascii63 = String(repeating: "a", count: 63)
    #expect(try Validate.displayName(ascii63) == ascii63)
    #expect(
      failure { try Validate.displayName(ascii63 + "a") }?.rule.hasPrefix("must be at most 63 characters (got 64")
        == true)

    let emoji63 = String(repeating: "😀", count: 63)
    #expect(emoji63.utf8.count == 252)
    #expect(try Validate.displayName(emoji63) == emoji63)
    let emoji64 = failure { try Validate.displayName(emoji63 + "😀") }
    #expect(emoji64?.rule.hasPrefix("must be at most 63 characters (got 64;") == true, "\(String(describing: emoji64))")

    let accented = String(repeating: "é", count: 63)
    #expect(try Validate.displayName(accented) == accented)
    #expect(failure { try Validate.displayName(accented + "é") } != nil)
    let cjk = String(repeating: "日", count: 63)
    #expect(try Validate.displayName(cjk) == cjk)

    // Every scalar counts: a family emoji is one grapheme but 7 scalars (4 people, 3 joiners); 9 of them are 63.
    let family = "👨‍👩‍👧‍👦"
    #expect(family.unicodeScalars.count == 7)
    let nine = String(repeating: family, count: 9)
    #expect(try Validate.displayName(nine) == nine)
    #expect(failure { try Validate.displayName(nine + "a") }?.rule.contains("(got 64;") == true)
    // A combining sequence counts each scalar: "e" + U+0301 is 2.
    let combining = String(repeating: "e\u{0301}", count: 32)
    #expect(failure { try Validate.displayName(combining) }?.rule.contains("(got 64;") == true)
  }

  @Test func rejectsEmpty() {
    let error = failure { try Validate.displayName("") }
    #expect(error == ValidationError(field: "displayName", rule: "must not be empty: give a name of 1–63 characters"))
    #expect(error?.description == "displayName must not be empty: give a name of 1–63 characters")
  }

  @Test func describesTheSeventyCharacterCase() {
    let error = failure { try Validate.displayName(String(repeating: "n", count: 70)) }
    #expect(
      error?.description
        == "displayName must be at most 63 characters (got 70; every Unicode code point counts, so an emoji made of "
        + "several, like a flag, counts as several)")
    #expect(error?.field == "displayName")
  }

  @Test(arguments: [
    ("line\nbreak", "U+000A"),
    ("car\rriage", "U+000D"),
    ("tab\there", "U+0009"),
    ("nul\u{0}byte", "U+0000"),
    ("\u{1B}[31mred", "U+001B"),
    ("del\u{7F}", "U+007F"),
    ("c1\u{85}next-line", "U+0085"),
    ("c1\u{9F}", "U+009F"),
    ("line\u{2028}separator", "U+2028"),
    ("paragraph\u{2029}separator", "U+2029"),
  ])
  func rejectsControlCharactersAndSeparators(_ name: String, _ codePoint: String) {
    let error = failure { try Validate.displayName(name) }
    #expect(error?.field == "displayName")
    #expect(error?.rule == "must not contain control characters or line/paragraph separators (found \(codePoint))")
  }

  @Test(arguments: [" ", "   ", "\u{00A0}", "\u{3000}", " \u{2003} ", String(repeating: " ", count: 63)])
  func rejectsOnlyWhitespace(_ name: String) {
    #expect(
      failure { try Validate.displayName(name) }
        == ValidationError(
          field: "displayName", rule: "must not be only spaces: give at least one letter, digit or symbol"))
  }

  @Test func lengthIsCheckedBeforeContent() {
    let error = failure { try Validate.displayName(String(repeating: "\n", count: 64)) }
    #expect(error?.rule.hasPrefix("must be at most 63 characters (got 64;") == true)
  }
}

@Suite struct ServiceTypeTests {
  @Test(arguments: [
    "jobmanager-jobs", "jobmanager-chat", "a", "z", "chat", "a1", "1a", "x-y", "a-b-c", "12345678901234a",
    "http", "mc-browser-2", "abcdefghijklmno", "0-a", "a-0",
  ])
  func accepts(_ type: String) throws {
    #expect(try Validate.serviceType(type) == type)
  }

  @Test func lengthBoundary() throws {
    #expect(try Validate.serviceType(String(repeating: "a", count: 15)).count == 15)
    let error = failure { try Validate.serviceType(String(repeating: "a", count: 16)) }
    #expect(error == ValidationError(field: "serviceType", rule: "must be 1–15 characters (got 16)"))
    #expect(failure { try Validate.serviceType("") }?.rule == "must be 1–15 characters (got 0)")
  }

  @Test(arguments: [
    ("Chat", "\"C\""),
    ("CHAT", "\"C\""),
    ("chat_room", "\"_\""),
    ("_chat", "\"_\""),
    ("chat.tcp", "\".\""),
    ("chat room", "U+0020"),
    ("chät", "U+00E4"),
    ("chat\n", "U+000A"),
    ("ｃhat", "U+FF43"),
    ("😀chat", "U+1F600"),
  ])
  func rejectsCharactersOutsideTheAlphabet(_ type: String, _ found: String) {
    let error = failure { try Validate.serviceType(type) }
    #expect(error?.field == "serviceType")
    #expect(error?.rule == "must contain only lowercase letters a-z, digits 0-9 and hyphens (found \(found))")
  }

  @Test(arguments: ["1", "123", "1-2", "2024", "123456789012345", "-", "---"])
  func requiresALetter(_ type: String) {
    #expect(failure { try Validate.serviceType(type) }?.rule == "must contain at least one letter a-z")
  }

  @Test(arguments: ["-chat", "chat-", "-chat-", "-a", "a-"])
  func rejectsLeadingOrTrailingHyphen(_ type: String) {
    #expect(failure { try Validate.serviceType(type) }?.rule == "must not start or end with a hyphen")
  }

  @Test(arguments: ["job--chat", "a--b", "a-b--c", "a---b"])
  func rejectsDoubleHyphen(_ type: String) {
    #expect(failure { try Validate.serviceType(type) }?.rule == "must not contain two hyphens in a row")
  }

  @Test func describesForAUser() {
    #expect(
      failure { try Validate.serviceType("Jobs") }?.description
        == "serviceType must contain only lowercase letters a-z, digits 0-9 and hyphens (found \"J\")")
  }
}

@Suite struct DiscoveryInfoTests {
  private func pairs(_ count: Int) -> [String: String] {
    Dictionary(uniqueKeysWithValues: (0..<count).map { ("k\($0)", "v") })
  }

  @Test func acceptsEmptyAndTypicalInfo() throws {
    #expect(try Validate.discoveryInfo([:]) == [:])
    let info = ["room": "Kitchen", "v": "1", "empty": "", "note": "ünïcödé ✓ 😀", "txtvers": "1"]
    #expect(try Validate.discoveryInfo(info) == info)
  }

  @Test func pairCountBoundary() throws {
    #expect(try Validate.discoveryInfo(self.pairs(16)).count == 16)
    let error = failure { try Validate.discoveryInfo(self.pairs(17)) }
    #expect(error == ValidationError(field: "discoveryInfo", rule: "must have at most 16 pairs (got 17)"))
  }

  @Test func totalByteBoundary() throws {
    // Key "k" (1 byte) + 399 bytes of value = 400.
    let exactly400 = ["k": String(repeating: "v", count: 399)]
    #expect(try Validate.discoveryInfo(exactly400) == exactly400)
    let error = failure { try Validate.discoveryInfo(["k": String(repeating: "v", count: 400)]) }
    #expect(error?.rule == "must be at most 400 UTF-8 bytes of keys and values in total (got 401)")

    // Spread over 16 pairs: keys "k00"…"k15" are 48 bytes; values of 22 bytes make 400, of 22 + one 23 make 401.
    var spread = Dictionary(
      uniqueKeysWithValues: (0..<16).map { (index: Int) -> (String, String) in
        (index < 10 ? "k0\(index)" : "k\(index)", String(repeating: "v", count: 22))
      })
    #expect(try Validate.discoveryInfo(spread).count == 16)
    spread["k00"] = String(repeating: "v", count: 23)
    #expect(failure { try Validate.discoveryInfo(spread) }?.rule.contains("(got 401)") == true)

    // Values count in UTF-8 bytes: 133 × "é" (266 bytes) + 133 × "a" + key "k" = 400; one more "a" is 401.
    let multibyte = ["k": String(repeating: "é", count: 133) + String(repeating: "a", count: 133)]
    #expect(try Validate.discoveryInfo(multibyte) == multibyte)
    let multibyte401 = ["k": String(repeating: "é", count: 133) + String(repeating: "a", count: 134)]
    #expect(failure { try Validate.discoveryInfo(multibyte401) }?.rule.contains("(got 401)") == true)

    // Keys count too.
    let longKey = [String(repeating: "k", count: 300): String(repeating: "v", count: 101)]
    #expect(failure { try Validate.discoveryInfo(longKey) }?.rule.contains("(got 401)") == true)
  }

  @Test func pairCountIsCheckedBeforeBytes() {
    var info = self.pairs(17)
    info["big"] = String(repeating: "x", count: 1000)
    #expect(failure { try Validate.discoveryInfo(info) }?.rule == "must have at most 16 pairs (got 18)")
  }

  @Test func rejectsEmptyKey() {
    let error = failure { try Validate.discoveryInfo(["": "value"]) }
    #expect(error == ValidationError(field: "discoveryInfo", rule: "keys must not be empty"))
  }

  @Test(arguments: [
    ("a=b", "\"a=b\""),
    ("=", "\"=\""),
    ("tab\tkey", "\"tab\\u{9}key\""),
    ("new\nline", "\"new\\u{A}line\""),
    ("ключ", "\"\\u{43A}\\u{43B}\\u{44E}\\u{447}\""),
    ("del\u{7F}", "\"del\\u{7F}\""),
    ("q\"=\\", "\"q\\\"=\\\\\""),  // Quotes and backslashes are escaped in the message.
  ])
  func rejectsKeysThatAreNotPrintableASCIIWithoutEquals(_ key: String, _ shown: String) {
    let error = failure { try Validate.discoveryInfo([key: "v"]) }
    #expect(error?.field == "discoveryInfo")
    #expect(error?.rule == "keys must be printable ASCII without '=' (got key \(shown))")
  }

  @Test func acceptsEveryPrintableASCIIKeyCharacterButEquals() throws {
    let printable = (0x20...0x7E).compactMap(Unicode.Scalar.init).filter { $0 != "=" }
    let key = String(String.UnicodeScalarView(printable))
    #expect(try Validate.discoveryInfo([key: ""]) == [key: ""])
    #expect(try Validate.discoveryInfo([" ": "space is printable"]).count == 1)
  }

  @Test func longBadKeysAreCutInTheMessage() {
    let key = String(repeating: "=", count: 1000)
    let rule = failure { try Validate.discoveryInfo([key: ""]) }?.rule
    #expect(rule == "keys must be printable ASCII without '=' (got key \"\(String(repeating: "=", count: 32))…\")")
  }

  @Test func rejectsKeysThatDifferOnlyInCase() {
    let error = failure { try Validate.discoveryInfo(["Room": "a", "room": "b"]) }
    #expect(error?.rule == "keys must be unique ignoring case (got \"Room\" and \"room\")")
  }

  @Test func reportsTheSameBadKeyEveryTime() {
    let info = ["b=": "", "a=": "", "c=": ""]
    for _ in 0..<20 {
      #expect(
        failure { try Validate.discoveryInfo(info) }?.rule
          == "keys must be printable ASCII without '=' (got key \"a=\")")
    }
  }

  @Test func valuesMayHoldAnyText() throws {
    let info = ["k": "line\nbreak=equals\u{0}nul 😀"]
    #expect(try Validate.discoveryInfo(info) == info)
  }
}

@Suite struct LimitTests {
  @Test func contextBoundary() throws {
    #expect(try Validate.context(0) == 0)
    #expect(try Validate.context(4096) == 4096)
    let error = failure { try Validate.context(4097) }
    #expect(error == ValidationError(field: "context", rule: "must be at most 4096 bytes (got 4097)"))
    #expect(error?.description == "context must be at most 4096 bytes (got 4097)")
    #expect(failure { try Validate.context(-1) }?.field == "context")
    #expect(failure { try Validate.context(.max) }?.field == "context")
  }

  @Test(arguments: [1, 2, 30, 299, 300])
  func acceptsTimeouts(_ seconds: Int) throws {
    #expect(try Validate.timeoutSeconds(seconds) == seconds)
  }

  @Test(arguments: [Int.min, -1, 0, 301, 3600, Int.max])
  func rejectsTimeouts(_ seconds: Int) {
    let error = failure { try Validate.timeoutSeconds(seconds) }
    #expect(error == ValidationError(field: "timeoutSeconds", rule: "must be 1–300 seconds (got \(seconds))"))
  }

  @Test func defaultTimeoutIsValid() throws {
    #expect(Validate.defaultTimeoutSeconds == 30)
    #expect(try Validate.timeoutSeconds(Validate.defaultTimeoutSeconds) == 30)
  }
}
