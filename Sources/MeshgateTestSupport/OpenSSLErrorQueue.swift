import CTestTLS

/// The calling thread's OpenSSL error queue, for tests of code that must not mistake another connection's error for
/// its own (`SSL_get_error` reads the queue).
public enum OpenSSLErrorQueue {
  /// Leaves an error on the calling thread's queue, as a failed OpenSSL call elsewhere on that thread would (here:
  /// loading a certificate file that does not exist). Returns whether the queue now holds an error.
  @discardableResult
  public static func leaveStaleError() -> Bool {
    guard let context = SSL_CTX_new(TLS_method()) else { return false }
    defer { SSL_CTX_free(context) }
    _ = SSL_CTX_use_certificate_file(context, "/nonexistent/meshgate-test.pem", SSL_FILETYPE_PEM)
    return ERR_peek_error() != 0
  }
}
