/// SHA-1 (FIPS 180-4) of `message`, 20 bytes. Only used for the WebSocket `Sec-WebSocket-Accept` check, where SHA-1
/// is mandated by RFC 6455; not for anything security-relevant.
func sha1(_ message: [UInt8]) -> [UInt8] {
  var h0: UInt32 = 0x6745_2301
  var h1: UInt32 = 0xEFCD_AB89
  var h2: UInt32 = 0x98BA_DCFE
  var h3: UInt32 = 0x1032_5476
  var h4: UInt32 = 0xC3D2_E1F0

  var padded = message
  padded.append(0x80)
  while padded.count % 64 != 56 { padded.append(0) }
  let bitLength = UInt64(message.count) &* 8
  for shift in stride(from: 56, through: 0, by: -8) { padded.append(UInt8(truncatingIfNeeded: bitLength >> shift)) }

  var w = [UInt32](repeating: 0, count: 80)
  for chunk in stride(from: 0, to: padded.count, by: 64) {
    for i in 0..<16 {
      let j = chunk + i * 4
      w[i] = UInt32(padded[j]) << 24 | UInt32(padded[j + 1]) << 16 | UInt32(padded[j + 2]) << 8 | UInt32(padded[j + 3])
    }
    for i in 16..<80 { w[i] = rotateLeft(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1) }

    var a = h0
    var b = h1
    var c = h2
    var d = h3
    var e = h4
    for i in 0..<80 {
      let f: UInt32
      let k: UInt32
      switch i {
      case 0..<20:
        f = (b & c) | (~b & d)
        k = 0x5A82_7999
      case 20..<40:
        f = b ^ c ^ d
        k = 0x6ED9_EBA1
      case 40..<60:
        f = (b & c) | (b & d) | (c & d)
        k = 0x8F1B_BCDC
      default:
        f = b ^ c ^ d
        k = 0xCA62_C1D6
      }
      let temp = rotateLeft(a, 5) &+ f &+ e &+ k &+ w[i]
      e = d
      d = c
      c = rotateLeft(b, 30)
      b = a
      a = temp
    }
    h0 = h0 &+ a
    h1 = h1 &+ b
    h2 = h2 &+ c
    h3 = h3 &+ d
    h4 = h4 &+ e
  }

  var digest: [UInt8] = []
  digest.reserveCapacity(20)
  for word in [h0, h1, h2, h3, h4] {
    for shift in stride(from: 24, through: 0, by: -8) { digest.append(UInt8(truncatingIfNeeded: word >> shift)) }
  }
  return digest
}

private func rotateLeft(_ value: UInt32, _ count: UInt32) -> UInt32 {
  (value << count) | (value >> (32 - count))
}
