/// The state of a connection this server dialled (``Server/connect(host:port:path:subprotocol:tls:)``). lws carries
/// its bytes as a raw socket; its TLS (``TLSClientSession``) and its WebSocket (``WebSocketClientHandshake``,
/// ``WebSocketFrameDecoder``) are run by ``DialledLinks``. Confined to the service thread.
internal import CLibWebSockets

/// A TLS client session over memory buffers: ciphertext lws read goes in with ``feed(_:)``, plaintext comes out of
/// ``read(into:capacity:)``; plaintext goes in with ``write(_:)`` and the ciphertext to send comes out of
/// ``takeOutput(into:capacity:)``. Never blocks: OpenSSL only ever waits for more input.
///
/// OpenSSL's error queue is per thread, and lws's own TLS connections on the service thread leave errors in it (a
/// peer's close_notify, say). `SSL_get_error` reads that queue, so every call here empties it first: otherwise a stale
/// error from another connection reads as this session failing.
final class TLSClientSession {
  private let ssl: OpaquePointer
  private(set) var handshakeDone = false

  init?(context: OpaquePointer) {
    guard let ssl = clws_client_tls_session(context) else { return nil }
    self.ssl = ssl
  }

  deinit { SSL_free(ssl) }

  /// Hands received ciphertext to the session; false if it could not be buffered.
  func feed(_ bytes: UnsafeRawBufferPointer) -> Bool {
    guard let base = bytes.baseAddress, bytes.count > 0 else { return true }
    return clws_tls_feed(ssl, base, Int32(clamping: bytes.count)) == 1
  }

  /// What a step of the session came to.
  enum Step {
    /// Done, or waiting for more ciphertext from the server.
    case waiting
    /// The session failed (bad record, handshake refused, close_notify): the connection is over.
    case failed(String)
  }

  /// Advances the handshake with what was fed (its next flight, if any, is then in the output).
  func handshake() -> Step {
    guard !handshakeDone else { return .waiting }
    ERR_clear_error()
    let result = SSL_do_handshake(ssl)
    if result == 1 {
      handshakeDone = true
      return .waiting
    }
    return wouldWait(result) ? .waiting : .failed("TLS handshake failed: \(Self.lastError())")
  }

  /// Decrypts up to `capacity` bytes into `into`: the count, 0 when it needs more ciphertext, nil when the session is
  /// over (an error, or the server's close_notify; `failure` says which).
  func read(into buffer: UnsafeMutableRawPointer, capacity: Int) -> Int? {
    ERR_clear_error()
    let result = SSL_read(ssl, buffer, Int32(clamping: capacity))
    if result > 0 { return Int(result) }
    if wouldWait(result) { return 0 }
    failure = SSL_get_error(ssl, result) == SSL_ERROR_ZERO_RETURN ? "TLS closed by the server" : Self.lastError()
    return nil
  }

  /// Why the last ``read(into:capacity:)`` or ``write(_:)`` ended the session.
  private(set) var failure = ""

  /// Encrypts all of `bytes` into the output (a memory buffer always takes everything); false when the session failed.
  func write(_ bytes: UnsafeRawBufferPointer) -> Bool {
    guard let base = bytes.baseAddress, bytes.count > 0 else { return true }
    // SSL_write on a memory BIO never takes part of a buffer: it writes it all or fails.
    ERR_clear_error()
    let result = SSL_write(ssl, base, Int32(clamping: bytes.count))
    if result == bytes.count { return true }
    failure = Self.lastError()
    return false
  }

  /// Ciphertext waiting to be sent.
  var pendingOutput: Int { Int(clws_tls_pending_output(ssl)) }

  /// Moves up to `capacity` bytes of ciphertext to send into `into`; returns how many.
  func takeOutput(into buffer: UnsafeMutableRawPointer, capacity: Int) -> Int {
    Int(clws_tls_take_output(ssl, buffer, Int32(clamping: capacity)))
  }

  /// The certificate the server presented, DER-encoded; nil before the handshake or if it sent none.
  var peerCertificate: [UInt8]? {
    var der: UnsafeMutablePointer<UInt8>?
    let length = clws_tls_peer_certificate_der(ssl, &der)
    defer { clws_free(der) }
    guard length > 0, let der else { return nil }
    return Array(UnsafeBufferPointer(start: der, count: Int(length)))
  }

  private func wouldWait(_ result: Int32) -> Bool {
    let error = SSL_get_error(ssl, result)
    // Memory BIOs: WANT_WRITE cannot happen (the output always takes more), WANT_READ means "feed me".
    return error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE
  }

  private static func lastError() -> String {
    var text = [CChar](repeating: 0, count: 256)
    clws_tls_last_error(&text, text.count)
    let message = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return message.isEmpty ? "unknown TLS error" : message
  }
}

/// What ``DialledLinks`` keeps for one dialled connection: its WebSocket's outbound queue, and the TLS session,
/// handshake and decoder that run it.
final class DialledSocket {
  /// The outbound queue and close request, as for an accepted WebSocket.
  let connection: WebSocketConnection
  /// The TCP connect finished (the first writable callback).
  var connected = false
  /// The opening handshake; nil once the upgrade was accepted.
  var handshake: WebSocketClientHandshake?
  /// The upgrade request, sent once the connection (and its TLS) is up.
  let request: [UInt8]
  var decoder: WebSocketFrameDecoder
  let tls: TLSClientSession?
  /// Bytes to write ahead of the next message, whole (and masked): the upgrade request of a plaintext socket, then at
  /// most one pong. A server that pings faster than this socket writes gets a pong for its latest ping only (RFC 6455
  /// 5.5.3), so what waits here never grows with the pings.
  var requestUnsent = false
  var pong: [UInt8]?
  /// Why the dial failed, for the delegate and the log.
  var failure: String?
  /// The delegate paused reading (``Server/setReceiveFlow(_:enabled:)``): frames already read wait in the decoder.
  var paused = false
  /// The decoder threw, or the server's close frame came: nothing more is read.
  var doneReading = false
  /// A close frame went out; and whether the server's close came first (the socket then closes at once).
  var closeSent = false
  var serverClosed = false

  init(
    connection: WebSocketConnection, request: [UInt8], handshake: WebSocketClientHandshake, maxMessageBytes: Int,
    tls: TLSClientSession?
  ) {
    self.connection = connection
    self.request = request
    self.handshake = handshake
    self.decoder = WebSocketFrameDecoder(maxMessageBytes: maxMessageBytes)
    self.tls = tls
  }
}
