/// New identifiers for records (peers, jobs, sessions, invitations, transfers, streams …).
///
/// Layer 4 (node runtime). The form is the one the API has always shown: a random (version 4) UUID in lowercase.
/// Foundation's `UUID()` opens, reads and closes `/dev/urandom` for every identifier on Linux (four system calls on
/// the service thread for each request that creates something); this draws the same 122 random bits from the
/// system's generator (`getrandom`) instead.
enum RecordID {
  /// A new random identifier, e.g. `3f2b8c1e-9d4a-4f6b-8e2d-7c5a1b9e0f34`.
  static func make() -> String {
    var generator = SystemRandomNumberGenerator()
    return format(high: generator.next(), low: generator.next())
  }

  /// The UUID of these 128 bits with the version (4) and variant (RFC 9562) bits set.
  static func format(high: UInt64, low: UInt64) -> String {
    let high = (high & ~0xF000) | 0x4000
    let low = (low & ~(0xC << 60)) | (0x8 << 60)
    let hex = Array("0123456789abcdef".utf8)
    var text = [UInt8]()
    text.reserveCapacity(36)
    for (half, value) in [high, low].enumerated() {
      for nibble in 0..<16 {
        let position = half * 16 + nibble
        if position == 8 || position == 12 || position == 16 || position == 20 { text.append(UInt8(ascii: "-")) }
        text.append(hex[Int((value >> UInt64(60 - 4 * nibble)) & 0xF)])
      }
    }
    return String(decoding: text, as: UTF8.self)
  }
}
