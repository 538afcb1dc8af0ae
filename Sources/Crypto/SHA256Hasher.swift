/// Incremental SHA-256 over OpenSSL's EVP digest API, for hashing files chunk by chunk.
///
/// Layer 2 (thin safe wrappers). A hasher owns one `EVP_MD_CTX`, freed in `deinit`. It is not thread-safe: use one
/// hasher from one thread (or one serial queue) at a time; it may move between threads between calls.
internal import COpenSSL

/// Feeds bytes in pieces and produces the SHA-256 digest of everything fed.
public final class SHA256Hasher {
  private let context: OpaquePointer
  private var finished = false

  /// A hasher with nothing fed yet.
  public init() {
    guard let context = EVP_MD_CTX_new() else {
      preconditionFailure("EVP_MD_CTX_new failed: OpenSSL is out of memory")
    }
    guard EVP_DigestInit_ex(context, EVP_sha256(), nil) == 1 else {
      preconditionFailure("EVP_DigestInit_ex(SHA-256) failed")
    }
    self.context = context
  }

  deinit { EVP_MD_CTX_free(context) }

  /// Feeds `count` bytes at `pointer`.
  public func update(_ pointer: UnsafeRawPointer, count: Int) {
    precondition(!finished, "SHA256Hasher.update after finalize")
    guard count > 0 else { return }
    _ = EVP_DigestUpdate(context, pointer, count)
  }

  /// Feeds `bytes`.
  public func update(_ bytes: [UInt8]) {
    bytes.withUnsafeBytes { buffer in
      if let base = buffer.baseAddress { update(base, count: buffer.count) }
    }
  }

  /// The 32-byte digest of everything fed. The hasher cannot be used afterwards.
  public func finalize() -> [UInt8] {
    precondition(!finished, "SHA256Hasher.finalize called twice")
    finished = true
    var digest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
    var length: UInt32 = 0
    digest.withUnsafeMutableBufferPointer { _ = EVP_DigestFinal_ex(context, $0.baseAddress, &length) }
    return digest
  }
}

@available(*, unavailable)
extension SHA256Hasher: Sendable {}
