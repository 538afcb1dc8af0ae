/// X.509 certificates for node identity and TLS, and the MAC used by the mesh secret.
///
/// Layer 2 (thin safe wrappers). A node's certificate is self-signed (EC P-256, SHA-256 signature); what other nodes
/// remember of it is its fingerprint, the SHA-256 of its DER encoding as lowercase hex.
internal import COpenSSL
import Glibc

/// Why a certificate could not be created or loaded; the description says what to do.
public struct CertificateError: Error, Equatable, CustomStringConvertible {
  /// The one-line message.
  public let message: String

  public init(_ message: String) { self.message = message }

  public var description: String { message }
}

/// A loaded certificate (its DER bytes); the private key stays in its file, where lws reads it.
public struct Certificate: Sendable, Equatable {
  /// The DER encoding.
  public let der: [UInt8]

  public init(der: [UInt8]) { self.der = der }

  /// SHA-256 of the DER encoding, lowercase hex (64 characters).
  public var fingerprint: String { Self.fingerprint(der: der) }

  /// The fingerprint of a DER-encoded certificate.
  public static func fingerprint(der: [UInt8]) -> String { Crypto.hex(Crypto.sha256(der)) }

  /// Loads the PEM certificate at `certificatePath`; with `keyPath`, also checks that the PEM key there is its key.
  public static func load(certificatePath: String, keyPath: String?) throws(CertificateError) -> Certificate {
    var der: UnsafeMutablePointer<UInt8>?
    let length: Int32 =
      if let keyPath {
        copenssl_load_certificate(certificatePath, keyPath, &der)
      } else {
        copenssl_load_certificate(certificatePath, nil, &der)
      }
    defer { copenssl_free(der) }
    switch length {
    case -1:
      throw CertificateError("\(certificatePath) holds no readable PEM certificate")
    case -2:
      throw CertificateError("\(keyPath ?? "") holds no readable PEM private key (an encrypted key is not supported)")
    case -3:
      throw CertificateError("the private key \(keyPath ?? "") does not belong to the certificate \(certificatePath)")
    default:
      guard length > 0, let der else { throw CertificateError("\(certificatePath) holds no readable PEM certificate") }
      return Certificate(der: Array(UnsafeBufferPointer(start: der, count: Int(length))))
    }
  }

  /// Creates a self-signed certificate valid for `days` days: the key goes to `keyPath` (created with mode 0600; it
  /// must not exist), the certificate to `certificatePath`. Returns the loaded certificate.
  @discardableResult
  public static func createSelfSigned(
    certificatePath: String, keyPath: String, commonName: String, days: Int = 36500
  ) throws(CertificateError) -> Certificate {
    let status = copenssl_create_self_signed(certificatePath, keyPath, commonName, Int32(days))
    guard status == 0 else {
      unlink(certificatePath)
      unlink(keyPath)
      let reason =
        status <= -11
        ? "cannot write the files (\(String(cString: strerror(errno))))" : "OpenSSL step \(-status) failed"
      throw CertificateError("cannot create a certificate at \(certificatePath): \(reason)")
    }
    return try load(certificatePath: certificatePath, keyPath: keyPath)
  }
}

extension Crypto {
  /// HMAC-SHA256 of `data` under `key` (32 bytes).
  public static func hmacSHA256(key: [UInt8], data: [UInt8]) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: 32)
    let status = key.withUnsafeBytes { keyBuffer in
      data.withUnsafeBufferPointer { dataBuffer in
        out.withUnsafeMutableBufferPointer { outBuffer in
          copenssl_hmac_sha256(
            keyBuffer.baseAddress, Int32(key.count), dataBuffer.baseAddress, dataBuffer.count, outBuffer.baseAddress!)
        }
      }
    }
    precondition(status == 1, "HMAC-SHA256 failed")
    return out
  }

  /// Whether two byte strings are equal, in time independent of where they differ (for MACs).
  public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    guard !a.isEmpty else { return true }
    return a.withUnsafeBytes { left in
      b.withUnsafeBytes { right in CRYPTO_memcmp(left.baseAddress, right.baseAddress, a.count) == 0 }
    }
  }
}
