/// The Job Manager app's model: a job, its validation rules and its JSON form.
///
/// Layer 5 (apps). Pure values and functions; persistence is in ``NodeStore`` and the REST/mesh flow in
/// ``JobsFeature``. Rules (DESIGN.md, Jobs): name 1–200 characters; `dueDate` an ISO 8601 calendar date
/// (`YYYY-MM-DD`); `payment` a non-negative decimal with at most two places (sent as a JSON number or string,
/// kept exactly as cents, returned as a string such as `"12.50"`); `notes` at most 4 KiB of UTF-8.
import MeshCore

/// A peer reference stored with a job (who it was assigned to, who sent it): the directory's peer reference.
typealias JobParty = Directory.PeerRef

/// One job in a peer's list.
struct Job: Sendable, Equatable {
  var id: String
  var ownerPeerID: String
  var name: String
  var dueDate: String?
  var paymentCents: Int64?
  var notes: String?
  var assignedTo: JobParty?
  var receivedFrom: JobParty?
  var createdAt: String
  var updatedAt: String

  /// The job as every response and event shows it, written straight to bytes (a page holds up to 500 of them).
  var json: JSONValue {
    var object = JSONObjectWriter(capacity: 320 + (notes?.utf8.count ?? 0))
    object.add("id", id)
    object.add("name", name)
    object.add("dueDate", dueDate)
    object.add("payment", paymentCents.map(JobRules.formatPayment))
    object.add("notes", notes)
    object.add("assignedTo", assignedTo?.json ?? .null)
    object.add("receivedFrom", receivedFrom?.json ?? .null)
    object.add("createdAt", createdAt)
    object.add("updatedAt", updatedAt)
    return object.finish()
  }
}

/// Validation of job fields; every failure names the field and the rule.
enum JobRules {
  static let maxNameCharacters = 200
  static let maxNotesBytes = 4096
  /// How long a job offer waits for its answer when `timeoutSeconds` is not given (a plain invitation waits 30 s).
  static let defaultOfferTimeoutSeconds = 60
  static let serviceType = "jobmanager-jobs"
  /// The named session event that carries a job to its receiver.
  static let transferEvent = "jobmanager.job"

  static func name(_ value: String) throws(APIError) -> String {
    guard !value.isEmpty, value.count <= maxNameCharacters else {
      throw .badRequest(
        "name must be 1–\(maxNameCharacters) characters (got \(value.count))", code: "validation_failed")
    }
    guard !value.trimmingWhitespace().isEmpty else {
      throw .badRequest("name must not be only whitespace; give the job a visible name", code: "validation_failed")
    }
    guard !value.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
      throw .badRequest("name must not contain control characters", code: "validation_failed")
    }
    return value
  }

  static func notes(_ value: String) throws(APIError) -> String {
    guard value.utf8.count <= maxNotesBytes else {
      throw .badRequest(
        "notes must be at most \(maxNotesBytes) UTF-8 bytes (got \(value.utf8.count))", code: "validation_failed")
    }
    return value
  }

  /// `YYYY-MM-DD`, a real calendar date (leap years included).
  static func dueDate(_ value: String) throws(APIError) -> String {
    let parts = value.split(separator: "-", omittingEmptySubsequences: false)
    let fail = APIError.badRequest(
      "dueDate must be an ISO 8601 date like 2027-03-31 (got \(value.debugDescription))", code: "validation_failed")
    guard parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
      parts.allSatisfy({ $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }),
      let year = Int(parts[0]), let month = Int(parts[1]), let day = Int(parts[2]), (1...12).contains(month)
    else { throw fail }
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
    let days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]
    guard (1...days).contains(day) else { throw fail }
    return value
  }

  /// Digits a payment may have before its decimal point: up to 9 999 999 999 999.99, whose cents a JSON number still
  /// holds exactly (under 2^53).
  static let maxPaymentWholeDigits = 13
  static let maxPaymentCents: Int64 = 999_999_999_999_999

  /// Cents from a JSON number or decimal string with at most two places.
  static func payment(_ value: JSONValue) throws(APIError) -> Int64 {
    let fail = APIError.badRequest(
      "payment must be a non-negative decimal with at most 2 places and at most \(maxPaymentWholeDigits) digits before"
        + " the point (up to \(formatPayment(maxPaymentCents))), like 120 or \"99.50\" (got \(value.serializedString()))",
      code: "validation_failed")
    let text: String
    switch value {
    case .int(let number): text = String(number)
    case .double(let number) where number.isFinite: text = String(number)
    case .string(let string): text = string
    default: throw fail
    }
    let pieces = text.split(separator: ".", omittingEmptySubsequences: false)
    guard (1...2).contains(pieces.count), !pieces[0].isEmpty, pieces[0].count <= maxPaymentWholeDigits,
      pieces.allSatisfy({ $0.allSatisfy { $0.isASCII && $0.isNumber } }),
      let whole = Int64(pieces[0])
    else { throw fail }
    var fraction = pieces.count == 2 ? String(pieces[1]) : ""
    // A JSON number such as 12.5 prints as "12.5"; a float artefact like 0.30000000000000004 fails here.
    guard fraction.count <= 2, pieces.count == 1 || !fraction.isEmpty else { throw fail }
    while fraction.count < 2 { fraction += "0" }
    return whole * 100 + Int64(fraction)!
  }

  static func formatPayment(_ cents: Int64) -> String {
    let fraction = cents % 100
    return "\(cents / 100).\(fraction < 10 ? "0" : "")\(fraction)"
  }
}

extension String {
  func trimmingWhitespace() -> Substring {
    var view = self[...]
    while let first = view.first, first.isWhitespace { view.removeFirst() }
    while let last = view.last, last.isWhitespace { view.removeLast() }
    return view
  }
}
