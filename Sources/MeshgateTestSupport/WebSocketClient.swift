import Foundation

/// One complete WebSocket message (or control event) as returned by `WebSocketClient.receive(timeout:)`.
public enum WebSocketMessage: Sendable, Equatable, CustomStringConvertible {
  /// A complete (possibly reassembled) text message.
  case text(String)
  /// A complete (possibly reassembled) binary message.
  case binary([UInt8])
  /// A pong frame with its payload (answers to `ping(_:timeout:)`, or unsolicited heartbeats).
  case pong([UInt8])
  /// The connection was closed. `code` is the status from the server's close frame (nil if the frame had no body);
  /// if the TCP connection ended without a close frame, `code` is 1006 and `reason` says so.
  case close(code: UInt16?, reason: String)

  /// A short rendering for failure messages.
  public var description: String {
    switch self {
    case .text(let text): "text(\(text.count > 300 ? String(text.prefix(300)) + "…" : text))"
    case .binary(let bytes): "binary(\(bytes.count) bytes)"
    case .pong(let bytes): "pong(\(bytes.count) bytes)"
    case .close(let code, let reason): "close(code: \(code.map(String.init) ?? "none"), reason: \"\(reason)\")"
    }
  }
}

/// WebSocket frame opcodes (RFC 6455 §5.2).
public enum WebSocketOpcode: UInt8, Sendable {
  /// Continuation of a fragmented message.
  case continuation = 0x0
  /// First frame of a text message.
  case text = 0x1
  /// First frame of a binary message.
  case binary = 0x2
  /// Close control frame.
  case close = 0x8
  /// Ping control frame.
  case ping = 0x9
  /// Pong control frame.
  case pong = 0xA
}

/// A minimal, strict RFC 6455 client over a blocking POSIX socket, for tests.
///
/// - The opening handshake happens in `init`; a non-`101` answer throws `TestSupportError.httpStatus(code, body)`.
/// - Client frames are masked; server frames must not be. Fragmented messages are reassembled, pings are answered
///   with pongs automatically (see `autoReplyToPings`), and several frames per read or frames split across reads are
///   handled through an internal buffer.
/// - Every blocking call takes a timeout; `receive` returns nil when it passes.
///
/// Thread-safety: not thread-safe. Use each instance from one thread at a time (it is deliberately not `Sendable`).
/// Many instances can be used from one thread, which is the intended way to run hundreds of clients.
public final class WebSocketClient {
  /// The HTTP status of the handshake response (always 101 once `init` returned).
  public let handshakeStatus: Int
  /// Header fields of the handshake response, in order.
  public let responseHeaders: [(String, String)]
  /// The subprotocol selected by the server (`Sec-WebSocket-Protocol`), if any.
  public let negotiatedProtocol: String?
  /// Host this client connected to.
  public let host: String
  /// Port this client connected to.
  public let port: Int
  /// Request target used for the handshake (path and query).
  public let path: String

  /// Whether server pings are answered with pongs automatically (default true). Turn off to test server heartbeats.
  public var autoReplyToPings = true
  /// Number of ping frames received from the server so far.
  public private(set) var pingsReceived = 0
  /// Largest message (after reassembly) accepted before `receive` throws a protocol violation. Default 64 MiB.
  public var maxMessageSize = 64 << 20
  /// The close code received from the server, once a close frame (or a connection drop, 1006) has been seen.
  public private(set) var closeCode: UInt16?
  /// Whether this client has sent a close frame.
  public private(set) var closeSent = false
  /// Whether the server's close frame (or the end of the TCP stream) has been received.
  public private(set) var closeReceived = false

  private let connection: BufferedConnection
  private var fragmentOpcode: WebSocketOpcode?
  private var fragments: [UInt8] = []
  private var closeReason = ""

  /// Connects to `ws://host:port/path` and performs the opening handshake within `timeout`.
  ///
  /// `headers` are added to the handshake request; a header named like one of the standard handshake headers
  /// (`Host`, `Upgrade`, `Connection`, `Sec-WebSocket-Key`, `Sec-WebSocket-Version`, `Sec-WebSocket-Protocol`)
  /// replaces the standard one. `subprotocols` are offered in order; the server must pick one of them or none.
  /// Throws `TestSupportError.httpStatus(status, body)` if the server does not answer `101`.
  public init(
    host: String = "127.0.0.1", port: Int, path: String, headers: [(String, String)] = [],
    subprotocols: [String] = [], timeout: Duration = .seconds(10)
  ) throws {
    self.host = host
    self.port = port
    self.path = path
    let deadline = Deadline(timeout)
    let what = "WebSocket handshake for ws://\(HTTPClient.hostHeader(host: host, port: port))\(path)"
    let connection = BufferedConnection(socket: try TCPSocket.connect(host: host, port: port, deadline: deadline))

    func given(_ name: String) -> String? { headers.first { $0.0.caseInsensitiveEquals(name) }?.1 }
    let key = given("Sec-WebSocket-Key") ?? Data((0..<16).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
    var standard: [(String, String)] = [
      ("Host", HTTPClient.hostHeader(host: host, port: port)),
      ("Upgrade", "websocket"),
      ("Connection", "Upgrade"),
      ("Sec-WebSocket-Key", key),
      ("Sec-WebSocket-Version", "13"),
    ]
    if !subprotocols.isEmpty { standard.append(("Sec-WebSocket-Protocol", subprotocols.joined(separator: ", "))) }
    standard.removeAll { name, _ in given(name) != nil }
    var request = "GET \(path) HTTP/1.1\r\n"
    for (name, value) in standard + headers { request += "\(name): \(value)\r\n" }
    request += "\r\n"
    try connection.socket.sendAll(Array(request.utf8), deadline: deadline)

    let head = try HTTPResponseHead.read(from: connection, deadline: deadline, what: what)
    guard head.status == 101 else {
      var body: [UInt8]
      do {
        body = try head.readBody(from: connection, requestMethod: "GET", deadline: deadline, what: what)
      } catch {
        body = connection.buffer.readAll()  // report whatever arrived
      }
      connection.socket.close()
      throw TestSupportError.httpStatus(head.status, String(decoding: body, as: UTF8.self))
    }
    func fail(_ message: String) -> TestSupportError {
      connection.socket.close()
      return .protocolViolation("\(what): \(message); response headers: \(head.headers)")
    }
    guard head.headerTokens("Upgrade").contains("websocket") else { throw fail("101 without `Upgrade: websocket`") }
    guard head.headerTokens("Connection").contains("upgrade") else { throw fail("101 without `Connection: Upgrade`") }
    let expected = Self.acceptValue(forKey: key)
    guard let accept = head.header("Sec-WebSocket-Accept") else { throw fail("101 without Sec-WebSocket-Accept") }
    guard accept == expected else {
      throw fail("Sec-WebSocket-Accept is \"\(accept)\" but \"\(expected)\" was expected for key \"\(key)\"")
    }
    let chosen = head.header("Sec-WebSocket-Protocol")
    if let chosen, !subprotocols.contains(chosen) {
      throw fail("server selected subprotocol \"\(chosen)\" which was not offered (offered: \(subprotocols))")
    }
    self.connection = connection
    handshakeStatus = head.status
    responseHeaders = head.headers
    negotiatedProtocol = chosen
  }

  deinit { connection.socket.close() }

  /// The first value of a handshake response header, compared case-insensitively.
  public func responseHeader(_ name: String) -> String? {
    responseHeaders.first { $0.0.caseInsensitiveEquals(name) }?.1
  }

  /// Whether the TCP connection has been closed locally (after `close`, `abort`, or a completed close handshake).
  public var isClosed: Bool { connection.socket.isClosed }

  // MARK: Sending

  /// Sends one unfragmented text message.
  public func send(text: String, timeout: Duration = .seconds(10)) throws {
    try sendFrame(opcode: .text, payload: Array(text.utf8), timeout: timeout)
  }

  /// Sends one unfragmented binary message.
  public func send(binary: [UInt8], timeout: Duration = .seconds(10)) throws {
    try sendFrame(opcode: .binary, payload: binary, timeout: timeout)
  }

  /// Sends one masked frame. Use with `fin: false` and `.continuation` to send fragmented messages.
  public func sendFrame(opcode: WebSocketOpcode, payload: [UInt8], fin: Bool = true, timeout: Duration = .seconds(10))
    throws
  {
    if closeSent && opcode != .close {
      throw TestSupportError.webSocketClosed(code: closeCode, reason: "cannot send after a close frame was sent")
    }
    try sendRaw(Self.encodeFrame(opcode: opcode.rawValue, payload: payload, fin: fin), timeout: timeout)
  }

  /// Writes bytes verbatim to the connection (for malformed or hand-built frames).
  public func sendRaw(_ bytes: [UInt8], timeout: Duration = .seconds(10)) throws {
    guard !connection.socket.isClosed else {
      throw TestSupportError.webSocketClosed(code: closeCode, reason: "the connection is already closed")
    }
    try connection.socket.sendAll(bytes, deadline: Deadline(timeout))
  }

  /// Sends a ping; the server's pong is returned by `receive` as `.pong(payload)`.
  public func ping(_ payload: [UInt8] = [], timeout: Duration = .seconds(10)) throws {
    try sendFrame(opcode: .ping, payload: payload, timeout: timeout)
  }

  // MARK: Receiving

  /// Returns the next message, or nil if none completed within `timeout`.
  ///
  /// Pings are answered (when `autoReplyToPings`) and not returned. A close frame is echoed and returned as
  /// `.close`; a connection that ends without one is returned as `.close(code: 1006, ...)`. Calling `receive` again
  /// after a close throws `TestSupportError.webSocketClosed`. Frames that violate RFC 6455 throw
  /// `TestSupportError.protocolViolation`.
  public func receive(timeout: Duration = .seconds(10)) throws -> WebSocketMessage? {
    try receive(deadline: Deadline(timeout))
  }

  private func receive(deadline: Deadline) throws -> WebSocketMessage? {
    if closeReceived { throw TestSupportError.webSocketClosed(code: closeCode, reason: closeReason) }
    while true {
      if let frame = try parseFrame() {
        if let message = try handle(frame) { return message }
        continue
      }
      if connection.socket.isClosed {
        throw TestSupportError.webSocketClosed(code: closeCode, reason: "the connection was closed locally")
      }
      switch try connection.socket.read(deadline: deadline, resetIsEOF: true) {
      case .data(let bytes):
        connection.buffer.append(bytes)
      case .timedOut:
        return nil
      case .eof:
        let pending = connection.buffer.readableCount
        closeReceived = true
        closeCode = 1006
        closeReason =
          "connection closed without a close frame" + (pending > 0 ? " (\(pending) bytes of a partial frame)" : "")
        connection.socket.close()
        return .close(code: 1006, reason: closeReason)
      }
    }
  }

  /// Returns the next text message, skipping pongs. Throws on timeout, on a binary message, and on close.
  public func receiveText(timeout: Duration = .seconds(10)) throws -> String {
    try receiveData("text", timeout: timeout) { if case .text(let text) = $0 { text } else { nil } }
  }

  /// Returns the next binary message, skipping pongs. Throws on timeout, on a text message, and on close.
  public func receiveBinary(timeout: Duration = .seconds(10)) throws -> [UInt8] {
    try receiveData("binary", timeout: timeout) { if case .binary(let bytes) = $0 { bytes } else { nil } }
  }

  /// The next data message `extract` accepts (of the `kind` it names), skipping pongs. Throws on timeout, on a
  /// data message of the other kind, and on close.
  private func receiveData<Value>(
    _ kind: String, timeout: Duration, _ extract: (WebSocketMessage) -> Value?
  ) throws -> Value {
    let deadline = Deadline(timeout)
    while true {
      guard let message = try receive(deadline: deadline) else {
        throw TestSupportError.timeout("no \(kind) message on ws \(path) within \(timeout.shortDescription)")
      }
      if let value = extract(message) { return value }
      let got: String
      switch message {
      case .pong: continue
      case .close(let code, let reason): throw TestSupportError.webSocketClosed(code: code, reason: reason)
      case .text(let text): got = "text: \(text.prefix(300))"
      case .binary(let bytes): got = "binary(\(bytes.count) bytes): \(debugText(bytes, limit: 200))"
      }
      throw TestSupportError.unexpectedMessage("expected a \(kind) message on \(path) but got \(got)")
    }
  }

  /// Returns the next text message that parses as a JSON object and satisfies `predicate`, discarding other text
  /// messages and pongs. Handy for waiting for one event type: `receiveJSONObject { $0["type"] as? String == "x" }`.
  public func receiveJSONObject(
    timeout: Duration = .seconds(10), where predicate: ([String: Any]) throws -> Bool = { _ in true }
  ) throws -> [String: Any] {
    let deadline = Deadline(timeout)
    var skipped: [String] = []
    while true {
      let text: String
      do {
        text = try receiveText(timeout: max(.zero, deadline.instant - ContinuousClock.now))
      } catch TestSupportError.timeout {
        let shown = skipped.suffix(5).map { String($0.prefix(200)) }
        throw TestSupportError.timeout(
          "no matching JSON message on ws \(path) within \(timeout.shortDescription); skipped \(skipped.count) "
            + "message(s), last ones: \(shown)")
      }
      if let object = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any],
        try predicate(object)
      {
        return object
      }
      skipped.append(text)
    }
  }

  // MARK: Closing

  /// Performs the closing handshake: sends a close frame (`code` nil sends an empty body), waits up to `timeout` for
  /// the server's close frame (discarding other messages), then closes the socket. Never throws.
  public func close(code: UInt16? = 1000, reason: String = "", timeout: Duration = .seconds(2)) {
    guard !connection.socket.isClosed else { return }
    let deadline = Deadline(timeout)
    if !closeSent {
      var payload: [UInt8] = []
      if let code { payload = [UInt8(code >> 8), UInt8(code & 0xFF)] + Array(reason.utf8) }
      closeSent = true
      try? sendRaw(Self.encodeFrame(opcode: WebSocketOpcode.close.rawValue, payload: payload), timeout: timeout)
    }
    while !closeReceived && !connection.socket.isClosed {
      guard case .some = try? receive(deadline: deadline) else { break }
    }
    connection.socket.close()
  }

  /// Drops the TCP connection without a closing handshake.
  public func abort() {
    connection.socket.close()
  }

  // MARK: Frames

  /// Encodes one frame. `opcode` is a raw value so that invalid opcodes can be produced on purpose; `rsv` sets the
  /// three reserved bits (0...7). Client frames must be masked (`masked: true`, random key).
  public static func encodeFrame(opcode: UInt8, payload: [UInt8], fin: Bool = true, masked: Bool = true, rsv: UInt8 = 0)
    -> [UInt8]
  {
    var frame: [UInt8] = [(fin ? 0x80 : 0) | (rsv & 0x7) << 4 | (opcode & 0x0F)]
    let maskBit: UInt8 = masked ? 0x80 : 0
    switch payload.count {
    case 0..<126:
      frame.append(maskBit | UInt8(payload.count))
    case 126...0xFFFF:
      frame.append(maskBit | 126)
      frame += [UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
    default:
      frame.append(maskBit | 127)
      let length = UInt64(payload.count)
      for shift in stride(from: 56, through: 0, by: -8) { frame.append(UInt8(truncatingIfNeeded: length >> shift)) }
    }
    guard masked else { return frame + payload }
    let key = (0..<4).map { _ in UInt8.random(in: 0...255) }
    frame += key
    var body = payload
    body.withUnsafeMutableBufferPointer { buffer in
      for i in buffer.indices { buffer[i] ^= key[i & 3] }
    }
    return frame + body
  }

  /// The `Sec-WebSocket-Accept` value a server must answer for `key`: base64(SHA-1(key + GUID)) (RFC 6455 §4.2.2).
  public static func acceptValue(forKey key: String) -> String {
    Data(sha1(Array((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").utf8))).base64EncodedString()
  }

  private struct Frame {
    var fin: Bool
    var opcode: UInt8
    var payload: [UInt8]
  }

  /// Removes one complete frame from the buffer, or returns nil if more bytes are needed.
  private func parseFrame() throws -> Frame? {
    // Read through `connection.buffer` directly: a local copy would force a copy-on-write of the whole buffer below.
    func byte(_ offset: Int) -> UInt8 { connection.buffer.peek(offset) }
    let available = connection.buffer.readableCount
    guard available >= 2 else { return nil }
    let first = byte(0)
    let second = byte(1)
    let fin = first & 0x80 != 0
    let rsv = (first >> 4) & 0x7
    let opcode = first & 0x0F
    let masked = second & 0x80 != 0
    var length = UInt64(second & 0x7F)
    var headerLength = 2
    if length == 126 {
      guard available >= 4 else { return nil }
      length = UInt64(byte(2)) << 8 | UInt64(byte(3))
      headerLength = 4
    } else if length == 127 {
      guard available >= 10 else { return nil }
      length = (2..<10).reduce(0) { $0 << 8 | UInt64(byte($1)) }
      headerLength = 10
    }
    let header = "frame (opcode \(opcode), fin \(fin), length \(length)) from \(connection.endpoint)\(path)"
    guard rsv == 0 else { throw TestSupportError.protocolViolation("\(header) has reserved bits \(rsv) set") }
    guard !masked else { throw TestSupportError.protocolViolation("\(header) is masked; server frames must not be") }
    guard [0, 1, 2, 8, 9, 10].contains(opcode) else {
      throw TestSupportError.protocolViolation("\(header) uses a reserved opcode")
    }
    if opcode >= 8 && (!fin || length > 125) {
      throw TestSupportError.protocolViolation("\(header): control frames must be final and at most 125 bytes")
    }
    guard length <= UInt64(maxMessageSize) else {
      throw TestSupportError.protocolViolation("\(header) exceeds maxMessageSize \(maxMessageSize)")
    }
    guard available >= headerLength + Int(length) else { return nil }
    connection.buffer.skip(headerLength)
    return Frame(fin: fin, opcode: opcode, payload: connection.buffer.read(Int(length)))
  }

  /// Applies one frame; returns a message when one is complete.
  private func handle(_ frame: Frame) throws -> WebSocketMessage? {
    let origin = "from \(connection.endpoint)\(path)"
    switch WebSocketOpcode(rawValue: frame.opcode)! {
    case .ping:
      pingsReceived += 1
      if autoReplyToPings && !closeSent {
        try sendRaw(Self.encodeFrame(opcode: WebSocketOpcode.pong.rawValue, payload: frame.payload))
      }
      return nil
    case .pong:
      return .pong(frame.payload)
    case .close:
      if frame.payload.count == 1 {
        throw TestSupportError.protocolViolation("close frame \(origin) with a 1-byte body")
      }
      let code = frame.payload.count >= 2 ? UInt16(frame.payload[0]) << 8 | UInt16(frame.payload[1]) : nil
      let reasonBytes = Array(frame.payload.dropFirst(2))
      guard let reason = String(validating: reasonBytes, as: UTF8.self) else {
        throw TestSupportError.protocolViolation("close frame \(origin) with a non-UTF-8 reason")
      }
      closeReceived = true
      closeCode = code
      closeReason = reason
      if !closeSent {
        closeSent = true
        let echo = code.map { [UInt8($0 >> 8), UInt8($0 & 0xFF)] } ?? []
        try? sendRaw(Self.encodeFrame(opcode: WebSocketOpcode.close.rawValue, payload: echo), timeout: .seconds(2))
      }
      connection.socket.close()
      return .close(code: code, reason: reason)
    case .text, .binary:
      guard fragmentOpcode == nil else {
        throw TestSupportError.protocolViolation(
          "new data frame \(origin) while a fragmented message (\(fragments.count) bytes so far) is unfinished")
      }
      if frame.fin { return try complete(opcode: frame.opcode, payload: frame.payload) }
      fragmentOpcode = WebSocketOpcode(rawValue: frame.opcode)
      fragments = frame.payload
      return nil
    case .continuation:
      guard let opcode = fragmentOpcode else {
        throw TestSupportError.protocolViolation("continuation frame \(origin) without a fragmented message")
      }
      fragments += frame.payload
      guard fragments.count <= maxMessageSize else {
        throw TestSupportError.protocolViolation("reassembled message \(origin) exceeds maxMessageSize")
      }
      guard frame.fin else { return nil }
      let payload = fragments
      fragments = []
      fragmentOpcode = nil
      return try complete(opcode: opcode.rawValue, payload: payload)
    }
  }

  private func complete(opcode: UInt8, payload: [UInt8]) throws -> WebSocketMessage {
    guard opcode == WebSocketOpcode.text.rawValue else { return .binary(payload) }
    guard let text = String(validating: payload, as: UTF8.self) else {
      throw TestSupportError.protocolViolation(
        "text message from \(connection.endpoint)\(path) is not valid UTF-8: \(debugText(payload, limit: 100))")
    }
    return .text(text)
  }
}
