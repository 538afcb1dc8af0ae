/// Timestamps as the API and the store write them.
///
/// Layer 4 (node runtime).
import Foundation

/// ISO 8601 timestamps in UTC with milliseconds.
enum Timestamp {
  static func now() -> String { format(Date()) }

  static func format(_ date: Date) -> String {
    let interval = date.timeIntervalSince1970
    var seconds = time_t(interval.rounded(.down))
    let millis = Int((interval - Double(seconds)) * 1000)
    var parts = tm()
    gmtime_r(&seconds, &parts)
    // Digits by hand: `String(format:)` cost ~2 % of a busy node's CPU (one timestamp per published batch).
    var bytes: [UInt8] = []
    bytes.reserveCapacity(24)
    func digits(_ value: Int, _ count: Int, then separator: UInt8?) {
      var divisor = 1
      for _ in 1..<count { divisor *= 10 }
      var rest = value
      while divisor > 0 {
        bytes.append(UInt8(ascii: "0") + UInt8((rest / divisor) % 10))
        rest %= divisor
        divisor /= 10
      }
      if let separator { bytes.append(separator) }
    }
    digits(Int(parts.tm_year) + 1900, 4, then: UInt8(ascii: "-"))
    digits(Int(parts.tm_mon) + 1, 2, then: UInt8(ascii: "-"))
    digits(Int(parts.tm_mday), 2, then: UInt8(ascii: "T"))
    digits(Int(parts.tm_hour), 2, then: UInt8(ascii: ":"))
    digits(Int(parts.tm_min), 2, then: UInt8(ascii: ":"))
    digits(Int(parts.tm_sec), 2, then: UInt8(ascii: "."))
    digits(min(999, max(0, millis)), 3, then: UInt8(ascii: "Z"))
    return String(decoding: bytes, as: UTF8.self)
  }
}
