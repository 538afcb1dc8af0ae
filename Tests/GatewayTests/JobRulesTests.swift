import MeshCore
import Testing

@testable import Gateway

/// The Job Manager's field rules (DESIGN.md, Jobs) at their boundaries: name 1–200 characters without control
/// characters and not only whitespace; dueDate a real `YYYY-MM-DD` calendar date; payment a non-negative decimal with
/// at most two places (JSON number or string) kept as cents; notes at most 4096 UTF-8 bytes.
struct JobRulesTests {
  // MARK: Helpers

  /// The error `body` throws, or nil when it succeeds.
  func failure<T>(_ body: () throws(APIError) -> T) -> APIError? {
    do {
      _ = try body()
      return nil
    } catch {
      return error
    }
  }

  /// Expects `body` to fail with 400 `validation_failed` and a message that names `field`.
  func expectRejected<T>(
    _ field: String, _ input: String, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws(APIError) -> T
  ) {
    guard let error = failure(body) else {
      Issue.record("\(field) \(input) was accepted", sourceLocation: sourceLocation)
      return
    }
    #expect(error.status == 400, "\(field) \(input): \(error)", sourceLocation: sourceLocation)
    #expect(error.code == "validation_failed", "\(field) \(input): \(error)", sourceLocation: sourceLocation)
    #expect(error.message.contains(field), "\(field) \(input): \(error)", sourceLocation: sourceLocation)
  }

  // MARK: name

  @Test(
    "a name of 1–200 characters (grapheme clusters, not bytes or scalars) is kept as given",
    arguments: [
      "a",
      "Fix the sink",
      String(repeating: "a", count: 200),
      String(repeating: "漢", count: 200),
      String(repeating: "👍", count: 200),
      String(repeating: "👨‍👩‍👧‍👦", count: 200),  // 200 characters, 1 400 scalars, 5 000 bytes
      String(repeating: "🇫🇷", count: 200),
      String(repeating: "e\u{301}", count: 200),  // decomposed é: one character each
      "  padded name  ",
      String(repeating: " ", count: 199) + "x",
      "Ünïcödé – “quotes” & <tags>",
    ])
  func acceptedNames(_ name: String) throws {
    #expect(try JobRules.name(name) == name)
  }

  @Test(
    "a name that is empty, only whitespace, longer than 200 characters or holds control characters is rejected",
    arguments: [
      "",
      " ",
      "     ",
      "\u{00A0}\u{2003}\u{3000}",  // no-break, em and ideographic spaces
      "\n",
      " \t\r\n ",
      String(repeating: "a", count: 201),
      String(repeating: "漢", count: 201),
      String(repeating: "👍", count: 201),
      String(repeating: "👨‍👩‍👧‍👦", count: 201),
      String(repeating: "e\u{301}", count: 201),
      String(repeating: "a", count: 200) + " ",
      String(repeating: "a", count: 199) + "👍👍",
      "tab\there",
      "line\nbreak",
      "carriage\rreturn",
      "nul\u{0}byte",
      "bell\u{7}",
      "escape\u{1B}[31m",
      "delete\u{7F}",
      "next line\u{85}",  // C1 control
    ])
  func rejectedNames(_ name: String) {
    expectRejected("name", name.debugDescription) { () throws(APIError) in try JobRules.name(name) }
  }

  /// Each refusal names the rule the value broke: a name of three spaces is within 1–200 characters, so it is told
  /// it is only whitespace, and a payment over the largest one is told the largest (the message claimed rules the
  /// value met).
  @Test func refusalsNameTheRuleTheValueBroke() throws {
    let blank = failure { () throws(APIError) in try JobRules.name("   ") }?.message
    #expect(blank?.contains("only whitespace") == true, "\(blank ?? "nil")")
    #expect(blank?.contains("1–200") == false, "\(blank ?? "nil")")
    let huge = failure { () throws(APIError) in try JobRules.payment(.string("10000000000000")) }?.message
    #expect(huge?.contains("up to 9999999999999.99") == true, "\(huge ?? "nil")")
    #expect(try JobRules.payment(.string("9999999999999.99")) == 999_999_999_999_999)
  }

  @Test func nameLimitCountsCharactersNotBytes() {
    // 200 family emoji are 5 000 UTF-8 bytes yet 200 characters; 201 "a" are only 201 bytes yet too long.
    let families = String(repeating: "👨‍👩‍👧‍👦", count: 200)
    #expect(families.utf8.count == 5_000)
    #expect(failure { () throws(APIError) in try JobRules.name(families) } == nil)
    let message = failure { () throws(APIError) in try JobRules.name(String(repeating: "a", count: 201)) }?.message
    #expect(message?.contains("201") == true, "the message reports the length: \(message ?? "nil")")
    #expect(JobRules.maxNameCharacters == 200)
  }

  // MARK: dueDate

  @Test(
    "real calendar dates in YYYY-MM-DD are accepted, leap days only in leap years",
    arguments: [
      "2024-02-29",  // divisible by 4
      "2000-02-29",  // divisible by 400
      "2400-02-29",
      "2027-03-31",
      "2027-01-01",
      "2027-12-31",
      "2027-04-30",
      "2023-02-28",
      "1999-11-30",
      "9999-12-31",
    ])
  func acceptedDueDates(_ date: String) throws {
    #expect(try JobRules.dueDate(date) == date)
  }

  @Test(
    "impossible dates and other formats are rejected",
    arguments: [
      "2023-02-29",  // not a leap year
      "2100-02-29",  // divisible by 100 but not 400
      "1900-02-29",
      "2024-02-30",
      "2027-04-31",
      "2027-06-31",
      "2027-01-32",
      "2027-13-01",
      "2027-00-10",
      "2027-01-00",
      "2027-3-1",
      "2027-03-1",
      "2027-3-01",
      "27-03-01",
      "02027-03-01",
      "20270301",
      "2027/03/01",
      "2027.03.01",
      "01-03-2027",
      "2027-03-01T00:00:00Z",
      "2027-03-01 ",
      " 2027-03-01",
      "2027-03-01\n",
      "+2027-03-01",
      "-2027-03-01",
      "2027--03-01",
      "2027-03-01-",
      "2027-W09-1",
      "2027-060",
      "abcd-ef-gh",
      "2027-O3-01",  // letter O
      "２０２７-03-01",  // fullwidth digits
      "٢٠٢٧-03-01",  // Arabic-Indic digits
      "",
      "tomorrow",
    ])
  func rejectedDueDates(_ date: String) {
    expectRejected("dueDate", date.debugDescription) { () throws(APIError) in try JobRules.dueDate(date) }
  }

  @Test func everyDayOfALeapAndACommonYearIsAccepted() throws {
    // Walks every (month, day) pair 01…31 of 2024 and 2027 and checks exactly the real dates pass.
    let lengths2024 = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    let lengths2027 = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    for (year, lengths) in [(2024, lengths2024), (2027, lengths2027)] {
      for month in 1...12 {
        for day in 1...31 {
          let text = "\(year)-\(month < 10 ? "0" : "")\(month)-\(day < 10 ? "0" : "")\(day)"
          let accepted = failure { () throws(APIError) in try JobRules.dueDate(text) } == nil
          #expect(accepted == (day <= lengths[month - 1]), "\(text)")
        }
      }
    }
  }

  // MARK: payment

  @Test(
    "payments as JSON numbers or strings become exact cents",
    arguments: [
      (JSONValue.int(0), Int64(0)),
      (.int(120), 12_000),
      (.double(12.5), 1_250),
      (.double(12.34), 1_234),
      (.double(0.07), 7),
      (.double(0.0), 0),
      (.double(1e3), 100_000),
      (.string("99.50"), 9_950),
      (.string("0.01"), 1),
      (.string("0.1"), 10),
      (.string("120"), 12_000),
      (.string("120.00"), 12_000),
      (.string("0"), 0),
      (.string("0.00"), 0),
      (.int(9_999_999_999_999), 999_999_999_999_900),
      (.string("9999999999999.99"), 999_999_999_999_999),
    ])
  func acceptedPayments(_ value: JSONValue, _ cents: Int64) throws {
    #expect(try JobRules.payment(value) == cents, "\(value.serializedString())")
  }

  @Test(
    "negative, over-precise, malformed, non-numeric and huge payments are rejected",
    arguments: [
      JSONValue.int(-1),
      .double(-0.5),
      .string("-1"),
      .string("-0.01"),
      .double(1.234),
      .string("1.234"),
      .string("0.001"),
      .double(0.1 + 0.2),  // 0.30000000000000004
      .string("1."),
      .string(".5"),
      .string("."),
      .string(""),
      .string("abc"),
      .string("12,50"),
      .string(" 1.00"),
      .string("1.00 "),
      .string("+1"),
      .string("1e3"),
      .string("0x10"),
      .string("1.2.3"),
      .string("١٢"),  // Arabic-Indic digits
      .string("$5"),
      .bool(true),
      .bool(false),
      .null,
      .array([.int(1)]),
      .object(["amount": .int(1)]),
      .double(.infinity),
      .double(.nan),
      .double(1e20),
      .double(1e300),
      .int(Int64.max),
      .int(10_000_000_000_000),  // 14 whole digits
      .string("10000000000000"),
      .string("100000000000000000000"),
      .string("99999999999999999999999999.99"),
    ])
  func rejectedPayments(_ value: JSONValue) {
    expectRejected("payment", value.serializedString()) { () throws(APIError) in try JobRules.payment(value) }
  }

  @Test(
    "formatPayment prints cents with exactly two places",
    arguments: [
      (Int64(0), "0.00"),
      (1, "0.01"),
      (9, "0.09"),
      (10, "0.10"),
      (99, "0.99"),
      (100, "1.00"),
      (101, "1.01"),
      (1_250, "12.50"),
      (9_950, "99.50"),
      (12_000, "120.00"),
      (100_000, "1000.00"),
      (999_999_999_999_999, "9999999999999.99"),
    ])
  func formattedPayments(_ cents: Int64, _ text: String) throws {
    #expect(JobRules.formatPayment(cents) == text)
    // What the server prints, it accepts back unchanged.
    #expect(try JobRules.payment(.string(text)) == cents)
  }

  // MARK: notes

  @Test(
    "notes of at most 4096 UTF-8 bytes are accepted, whatever the characters",
    arguments: [
      "",
      "Kitchen, 2nd floor.\nBring a wrench;\ttabs and newlines are fine in notes.",
      String(repeating: "a", count: 4_096),
      String(repeating: "é", count: 2_048),  // 2 bytes each
      String(repeating: "€", count: 1_365) + "a",  // 3 bytes each + 1
      String(repeating: "😀", count: 1_024),  // 4 bytes each
    ])
  func acceptedNotes(_ notes: String) throws {
    #expect(notes.utf8.count <= 4_096)
    #expect(try JobRules.notes(notes) == notes)
  }

  @Test(
    "notes over 4096 UTF-8 bytes are rejected even when they are fewer characters",
    arguments: [
      String(repeating: "a", count: 4_097),
      String(repeating: "é", count: 2_049),
      String(repeating: "€", count: 1_366),  // 1 366 characters, 4 098 bytes
      String(repeating: "😀", count: 1_024) + "a",
      String(repeating: "😀", count: 1_025),
    ])
  func rejectedNotes(_ notes: String) {
    #expect(notes.utf8.count > 4_096)
    expectRejected("notes", "of \(notes.utf8.count) bytes") { () throws(APIError) in try JobRules.notes(notes) }
  }

  // MARK: JSON form

  @Test func jobJSONHasEveryFieldWithNullsAndPaymentAsString() throws {
    var job = Job(
      id: "j1", ownerPeerID: "p1", name: "Fix the sink", dueDate: nil, paymentCents: nil, notes: nil,
      assignedTo: nil, receivedFrom: nil, createdAt: "2027-01-01T00:00:00.000Z", updatedAt: "2027-01-01T00:00:00.000Z")
    let bare: JSONValue = [
      "id": "j1", "name": "Fix the sink", "dueDate": nil, "payment": nil, "notes": nil, "assignedTo": nil,
      "receivedFrom": nil, "createdAt": "2027-01-01T00:00:00.000Z", "updatedAt": "2027-01-01T00:00:00.000Z",
    ]
    #expect(try JSONValue.parse(job.json.serialized()) == bare)

    job.dueDate = "2027-03-31"
    job.paymentCents = 1_250
    job.notes = "Kitchen"
    job.assignedTo = JobParty(peerID: "p2", displayName: "bob", nodeID: "n2")
    job.receivedFrom = JobParty(peerID: "p0", displayName: "carol", nodeID: "n0")
    guard case .object(let object) = try JSONValue.parse(job.json.serialized()) else {
      Issue.record("job JSON is not an object: \(job.json.serializedString())")
      return
    }
    #expect(object["dueDate"] == "2027-03-31")
    #expect(object["payment"] == "12.50")
    #expect(object["notes"] == "Kitchen")
    #expect(object["assignedTo"] == ["id": "p2", "displayName": "bob", "nodeId": "n2"])
    #expect(object["receivedFrom"] == ["id": "p0", "displayName": "carol", "nodeId": "n0"])
    #expect(!object.keys.contains("ownerPeerId"), "the owner is implied by the token, not part of the JSON")
  }
}
