/// New identifiers for records (peers, jobs, sessions, invitations, transfers, streams …).
///
/// Layer 4 (node runtime). An identifier is a lowercase UUID, as the API has always shown, of version 7: 48 bits of
/// Unix milliseconds, then 74 random bits. Being time-ordered, a new record's id lands at the end of its table's id
/// index, so a commit of new rows rewrites the index's last leaf page instead of one random leaf per row. With the
/// random (version 4) ids before, every `POST /api/v1/jobs` dirtied a page of its own that the WAL and then the
/// checkpoint wrote again, and that disk traffic set the write path's p99 (6–8 ms against 2–3 ms, `bench/run.sh rest`).
/// The bits come from the system's generator (`getrandom`): Foundation's `UUID()` opened, read and closed
/// `/dev/urandom` for every identifier, on the service thread.
import Crypto
import Glibc

enum RecordID {
  /// A new identifier, e.g. `019ae8f2-6a4c-7b1e-9d2f-3c5a1b9e0f34`; later ones sort after earlier ones (by the
  /// millisecond; within one, in any order).
  static func make() -> String {
    var generator = SystemRandomNumberGenerator()
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    let milliseconds = UInt64(now.tv_sec) &* 1000 &+ UInt64(now.tv_nsec) / 1_000_000
    return format(milliseconds: milliseconds, high: generator.next(), low: generator.next())
  }

  /// The version 7 UUID of a time in Unix milliseconds (its low 48 bits) and random bits, with the version and the
  /// variant (RFC 9562) set.
  static func format(milliseconds: UInt64, high: UInt64, low: UInt64) -> String {
    let high = (milliseconds << 16) | (high & 0x0FFF) | 0x7000
    let low = (low & ~(0xC << 60)) | (0x8 << 60)
    let bytes = withUnsafeBytes(of: high.bigEndian, Array.init) + withUnsafeBytes(of: low.bigEndian, Array.init)
    var text = [UInt8]()
    text.reserveCapacity(36)
    for (index, digit) in Crypto.hex(bytes).utf8.enumerated() {
      if index == 8 || index == 12 || index == 16 || index == 20 { text.append(UInt8(ascii: "-")) }
      text.append(digit)
    }
    return String(decoding: text, as: UTF8.self)
  }
}
