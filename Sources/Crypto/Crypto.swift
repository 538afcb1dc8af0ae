/// Thin wrapper over OpenSSL's libcrypto: SHA-256 and the CSPRNG.
///
/// Layer 2 (thin safe wrappers). Every function is thread-safe: OpenSSL 3's
/// one-shot digest and `RAND_bytes` need no caller-side locking.
internal import COpenSSL

/// Errors from libcrypto.
public struct CryptoError: Error, Equatable, CustomStringConvertible {
  /// What failed.
  public let operation: String

  public var description: String { "OpenSSL \(operation) failed" }
}

/// Hashing and randomness backed by OpenSSL.
public enum Crypto {
  /// The SHA-256 digest of `bytes` (32 bytes).
  public static func sha256(_ bytes: some Collection<UInt8>) -> [UInt8] {
    var digest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
    let contiguous = Array(bytes)
    contiguous.withUnsafeBufferPointer { input in
      digest.withUnsafeMutableBufferPointer { output in
        _ = SHA256(input.baseAddress, input.count, output.baseAddress)
      }
    }
    return digest
  }

  /// The SHA-256 digest of the UTF-8 bytes of `string`, as lowercase hex.
  public static func sha256Hex(_ string: String) -> String {
    hex(sha256(Array(string.utf8)))
  }

  /// `count` bytes from OpenSSL's CSPRNG.
  public static func randomBytes(_ count: Int) throws(CryptoError) -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: count)
    let status = bytes.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32(count)) }
    guard status == 1 else { throw CryptoError(operation: "RAND_bytes") }
    return bytes
  }

  /// Lowercase hexadecimal of `bytes`.
  public static func hex(_ bytes: some Sequence<UInt8>) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out = [UInt8]()
    out.reserveCapacity(bytes.underestimatedCount * 2)
    for byte in bytes {
      out.append(digits[Int(byte >> 4)])
      out.append(digits[Int(byte & 0x0F)])
    }
    return String(decoding: out, as: UTF8.self)
  }

  /// URL-safe base64 without padding (RFC 4648 §5), for tokens that travel in query strings.
  public static func base64URL(_ bytes: [UInt8]) -> String {
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    var out = [UInt8]()
    out.reserveCapacity((bytes.count * 4 + 2) / 3)
    var index = 0
    while index + 3 <= bytes.count {
      let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
      for shift in [18, 12, 6, 0] { out.append(alphabet[Int((value >> UInt32(shift)) & 0x3F)]) }
      index += 3
    }
    let rest = bytes.count - index
    if rest == 1 {
      let value = UInt32(bytes[index]) << 16
      for shift in [18, 12] { out.append(alphabet[Int((value >> UInt32(shift)) & 0x3F)]) }
    } else if rest == 2 {
      let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
      for shift in [18, 12, 6] { out.append(alphabet[Int((value >> UInt32(shift)) & 0x3F)]) }
    }
    return String(decoding: out, as: UTF8.self)
  }
}
