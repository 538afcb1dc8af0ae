import MeshCore
import Testing

struct JSONValueTests {
  @Test func parsesAndSerializesRoundTrip() throws {
    let text = #"{"a":1,"b":[true,false,null],"c":"x\"y\\z\n","d":-2.5,"e":{}}"#
    let value = try JSONValue.parse(text)
    #expect(value.serializedString() == text)
  }

  @Test func keepsKeyOrder() throws {
    let value = try JSONValue.parse(#"{"z":1,"a":2,"m":3}"#)
    #expect(value.objectValue?.keys == ["z", "a", "m"])
  }

  @Test func decodesEscapesAndSurrogatePairs() throws {
    let value = try JSONValue.parse(#""\u00e9\ud83d\ude00\/\t""#)
    #expect(value == .string("é😀/\t"))
  }

  @Test(arguments: [
    "", "{", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "01", "1.", "-", "tru", "\"abc", "\"\\x\"", "\"\\ud800\"",
    "{\"a\":1}x", "\"a\u{01}b\"", "{\"a\":1,\"a\":2}", "1e", "[1 2]", "nul",
  ])
  func rejectsMalformedDocuments(text: String) {
    #expect(throws: JSONParseError.self) { try JSONValue.parse(text) }
  }

  @Test func boundsNestingDepth() {
    let deep = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
    #expect(throws: JSONParseError.self) { try JSONValue.parse(deep, maxDepth: 64) }
    #expect((try? JSONValue.parse(deep, maxDepth: 128)) != nil)
  }

  @Test func reportsTheOffset() {
    do {
      _ = try JSONValue.parse(#"{"a": tru}"#)
      Issue.record("expected an error")
    } catch {
      #expect(error.offset == 6)
      #expect(error.description.contains("at byte 6"))
    }
  }

  @Test func numbersKeepTheirKind() throws {
    #expect(try JSONValue.parse("42") == .int(42))
    #expect(try JSONValue.parse("-0.5") == .double(-0.5))
    #expect(try JSONValue.parse("1e3") == .double(1000))
    #expect(try JSONValue.parse("9223372036854775808") == .double(9_223_372_036_854_775_808))
    #expect(JSONValue.double(3).serializedString() == "3")
    #expect(JSONValue.double(.nan).serializedString() == "null")
  }

  @Test func escapesControlCharactersOnOutput() throws {
    #expect(JSONValue.string("a\u{01}b").serializedString() == #""a\u0001b""#)
    #expect(JSONValue.string("\u{1f}").serializedString() == #""\u001f""#)
    #expect(JSONValue.string("q\"b\\n\nr\rt\t").serializedString() == #""q\"b\\n\nr\rt\t""#)
    #expect(JSONValue.string("").serializedString() == #""""#)
    #expect(JSONValue.string("é😀 plain").serializedString() == "\"é😀 plain\"")
    // Every string survives a round trip, escapes at the start, middle and end included.
    for text in ["\"", "\\x", "x\n", "\u{0}\u{7f}é\"", String(repeating: "ab\"", count: 100)] {
      #expect(try JSONValue.parse(JSONValue.string(text).serialized()) == .string(text), "\(text.debugDescription)")
    }
  }

  @Test func objectSubscriptSetsReplacesAndRemoves() {
    var object = JSONObject()
    object["a"] = 1
    object["b"] = 2
    object["a"] = 3
    object["b"] = nil
    #expect(JSONValue.object(object).serializedString() == #"{"a":3}"#)
  }

  /// The object writer gives the bytes the object would serialize to: member order, escapes, nulls and nested values.
  @Test func theObjectWriterWritesWhatTheObjectWouldSerializeTo() throws {
    let nested: JSONValue = ["id": "p2", "n": 3, "list": [true, nil, 1.5]]
    var writer = JSONObjectWriter(capacity: 8)
    writer.add("text", "quote \" backslash \\ newline \n tab \t bell \u{07} é 😀")
    writer.add("missing", nil as String?)
    writer.add("nested", nested)
    writer.add("serialized", JSONValue.serialized(Array(#"{"x":[1]}"#.utf8)))
    let written = writer.finish()
    let object: JSONValue = [
      "text": "quote \" backslash \\ newline \n tab \t bell \u{07} é 😀", "missing": nil, "nested": nested,
      "serialized": ["x": [1]],
    ]
    #expect(written.serializedString() == object.serializedString())
    #expect(try JSONValue.parse(written.serialized()) == object)
    #expect(JSONObjectWriter().finish().serializedString() == "{}")
  }
}
