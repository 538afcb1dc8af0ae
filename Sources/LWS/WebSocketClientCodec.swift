/// The client side of RFC 6455 for the connections this server dials (``Server/connect(host:port:path:subprotocol:tls:)``):
/// the opening handshake and a frame decoder that takes received bytes in bulk.
///
/// lws 4.1.6 parses what a WebSocket *client* receives one byte per function call (`lws_ws_client_rx_sm`), which
/// was more than half of a node's CPU while it received a file over a link it had dialled. Dialled connections are
/// therefore lws raw sockets, and this file is their WebSocket. Sans-I/O: bytes in, events out; no sockets, no clock.
internal import CLibWebSockets

/// The opening handshake of one dialled connection: the request to send, then the server's answer read as it comes.
struct WebSocketClientHandshake {
  /// The largest response head accepted (lws's own client allowed about as much).
  static let maxResponseHeadBytes = 16 * 1024

  let key: String
  let subprotocol: String
  private var head: [UInt8] = []

  /// A handshake offering `subprotocol`, with `key` as its Sec-WebSocket-Key (16 random bytes, base64).
  init(subprotocol: String, key: String = WebSocketClientHandshake.randomKey()) {
    self.subprotocol = subprotocol
    self.key = key
  }

  static func randomKey() -> String {
    var generator = SystemRandomNumberGenerator()
    return base64((0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) })
  }

  /// The upgrade request: the headers lws's own client sent, but no `Origin` (a node is not a web page, and a node
  /// refuses upgrades whose `Origin` it does not allow).
  func request(host: String, path: String) -> [UInt8] {
    let text =
      "GET \(path) HTTP/1.1\r\nPragma: no-cache\r\nCache-Control: no-cache\r\nHost: \(host)\r\n"
      + "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: \(key)\r\n"
      + "Sec-WebSocket-Protocol: \(subprotocol)\r\nSec-WebSocket-Version: 13\r\n\r\n"
    return Array(text.utf8)
  }

  /// What the server's answer says so far.
  enum Outcome: Equatable {
    /// The head is not complete yet.
    case incomplete
    /// The upgrade was accepted; `remainder` are the bytes after the head (the first frames).
    case accepted(remainder: [UInt8])
    /// The server refused, or answered something that is not a valid upgrade (the reason says which).
    case refused(String)
  }

  /// Takes the next bytes of the server's answer.
  mutating func receive(_ bytes: UnsafeRawBufferPointer) -> Outcome {
    let searchFrom = max(0, head.count - 3)
    head.append(contentsOf: bytes)
    guard let end = Self.endOfHead(head, from: searchFrom) else {
      return head.count > Self.maxResponseHeadBytes
        ? .refused("the upgrade response head is larger than \(Self.maxResponseHeadBytes) bytes") : .incomplete
    }
    if end > Self.maxResponseHeadBytes {
      return .refused("the upgrade response head is larger than \(Self.maxResponseHeadBytes) bytes")
    }
    let remainder = Array(head[end...])
    let lines = String(decoding: head[..<(end - 4)], as: UTF8.self).split(
      separator: "\r\n", omittingEmptySubsequences: false)
    head = []
    return evaluate(lines).map(Outcome.refused) ?? .accepted(remainder: remainder)
  }

  /// The index just past the first CRLFCRLF in `bytes` at or after `start`, if there is one.
  private static func endOfHead(_ bytes: [UInt8], from start: Int) -> Int? {
    var index = start
    while index + 4 <= bytes.count {
      if bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13 && bytes[index + 3] == 10 {
        return index + 4
      }
      index += 1
    }
    return nil
  }

  /// Why the response head in `lines` is not an accepted upgrade; nil when it is.
  private func evaluate(_ lines: [Substring]) -> String? {
    guard let statusLine = lines.first else { return "an empty upgrade response" }
    let parts = statusLine.split(separator: " ", maxSplits: 2)
    guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
      return "the upgrade response's status line is not HTTP/1.x: \(statusLine.prefix(80))"
    }
    guard status == 101 else { return "the server answered the upgrade with HTTP \(status), not 101" }
    var headers: [String: String] = [:]
    for line in lines.dropFirst() {
      guard let colon = line.firstIndex(of: ":") else {
        return "a malformed header line in the upgrade response: \(line.prefix(80))"
      }
      let name = line[..<colon].lowercased()
      let value = String(line[line.index(after: colon)...]).trimmingSpaces()
      headers[name] = headers[name].map { "\($0), \(value)" } ?? String(value)
    }
    guard headers["upgrade"]?.lowercased() == "websocket" else {
      return "the upgrade response lacks \"Upgrade: websocket\""
    }
    guard
      headers["connection"]?.lowercased().split(separator: ",").contains(where: {
        String($0).trimmingSpaces() == "upgrade"
      })
        == true
    else { return "the upgrade response lacks \"Connection: Upgrade\"" }
    guard headers["sec-websocket-accept"] == Self.acceptValue(for: key) else {
      return "the upgrade response's Sec-WebSocket-Accept does not match the key sent"
    }
    guard headers["sec-websocket-protocol"] == subprotocol else {
      return "the server did not select the subprotocol \(subprotocol)"
    }
    if let extensions = headers["sec-websocket-extensions"], !extensions.isEmpty {
      return "the server selected extensions that were not offered: \(extensions.prefix(80))"
    }
    return nil
  }

  /// RFC 6455's Sec-WebSocket-Accept for `key`: base64(SHA-1(key + the protocol's GUID)).
  static func acceptValue(for key: String) -> String {
    let input = Array((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").utf8)
    var digest = [UInt8](repeating: 0, count: 20)
    _ = lws_SHA1(input, input.count, &digest)
    return base64(digest)
  }

  /// Standard base64 with padding (lws's encoder, as lws's own client used for the key).
  static func base64(_ bytes: [UInt8]) -> String {
    // lws wants a byte to spare beyond the text and its terminating NUL.
    var out = [CChar](repeating: 0, count: (bytes.count + 2) / 3 * 4 + 2)
    let written = bytes.withUnsafeBufferPointer { input in
      input.withMemoryRebound(to: CChar.self) {
        lws_b64_encode_string($0.baseAddress, Int32(bytes.count), &out, Int32(out.count))
      }
    }
    precondition(written >= 0, "the output is sized for the whole encoding")
    return String(decoding: out.prefix(Int(written)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }
}

/// Decodes the frames a server sends a client (RFC 6455 section 5): unmasked, no extensions. Payload bytes are
/// copied once, in bulk, into the message they belong to.
struct WebSocketFrameDecoder {
  /// What the decoder found.
  enum Event: Equatable {
    case message(binary: Bool, [UInt8])
    case ping([UInt8])
    case pong
    /// The server's close frame: its status code (1005 when it carried none) and reason.
    case close(code: UInt16, reason: String)
  }

  /// A frame that breaks the protocol: the close code to answer it with, and why.
  struct ProtocolError: Error, Equatable {
    let code: UInt16
    let reason: String
  }

  let maxMessageBytes: Int
  private var pending: [UInt8] = []
  /// The message being reassembled from fragments, and whether it is binary; nil between messages.
  private var message: [UInt8]? = nil
  private var messageIsBinary = false
  /// The data frame whose payload is still arriving: how many of its bytes are left, and its control payload when it
  /// is a control frame.
  private var payloadLeft = 0
  private var inControl: (opcode: UInt8, bytes: [UInt8])? = nil
  private var frameIsFinal = false
  private var failed = false

  init(maxMessageBytes: Int) {
    self.maxMessageBytes = maxMessageBytes
  }

  /// Decodes `bytes`, calling `handle` for each event in order. Throws at the first protocol error; the decoder is
  /// then spent. `handle` returns false to stop: the rest is kept and decoded first by the next call (``resume(_:)``
  /// decodes it without new bytes). Returns false when `handle` stopped it.
  mutating func decode(
    _ bytes: UnsafeRawBufferPointer, _ handle: (Event) -> Bool
  ) throws(ProtocolError) -> Bool {
    precondition(!failed, "a decoder that threw is spent")
    do throws(ProtocolError) {
      guard pending.isEmpty else {
        // A header split across reads, or what a stop left: decode it with the new bytes behind it (rare: a copy).
        let combined = UnsafeMutableRawBufferPointer.allocate(byteCount: pending.count + bytes.count, alignment: 1)
        defer { combined.deallocate() }
        combined.copyBytes(from: pending)
        if !bytes.isEmpty { UnsafeMutableRawBufferPointer(rebasing: combined[pending.count...]).copyBytes(from: bytes) }
        pending = []
        var input = UnsafeRawBufferPointer(combined)[...]
        return try run(&input, handle)
      }
      var input = bytes[...]
      return try run(&input, handle)
    } catch {
      failed = true
      throw error
    }
  }

  /// Keeps `bytes` undecoded, behind anything kept before, for the next ``decode(_:_:)`` or ``resume(_:)`` (bytes
  /// that arrive while the reader is paused).
  mutating func keep(_ bytes: UnsafeRawBufferPointer) {
    pending.append(contentsOf: bytes)
  }

  /// Decodes what a stopped ``decode(_:_:)`` kept, until `handle` stops it again or it is all decoded.
  mutating func resume(_ handle: (Event) -> Bool) throws(ProtocolError) -> Bool {
    try decode(UnsafeRawBufferPointer(start: nil, count: 0), handle)
  }

  /// Whether bytes a stopped ``decode(_:_:)`` kept (beyond a partial frame header) are waiting for ``resume(_:)``.
  var hasKeptBytes: Bool { pending.count > 0 && (try? parseHeader(pending)) != nil }

  private mutating func run(
    _ input: inout Slice<UnsafeRawBufferPointer>, _ handle: (Event) -> Bool
  ) throws(ProtocolError) -> Bool {
    while true {
      if payloadLeft > 0 {
        guard !input.isEmpty else { return true }
        let take = min(payloadLeft, input.count)
        let piece = UnsafeRawBufferPointer(rebasing: input.prefix(take))
        if inControl != nil {
          inControl!.bytes.append(contentsOf: piece)
        } else {
          message!.append(contentsOf: piece)
        }
        input = input.dropFirst(take)
        payloadLeft -= take
        if payloadLeft > 0 { return true }
        if let event = try finishFrame(), !handle(event) {
          pending = Array(UnsafeRawBufferPointer(rebasing: input))
          return false
        }
        continue
      }
      // A frame header (at most 10 bytes: a server frame has no mask key).
      guard let header = try parseHeader(UnsafeRawBufferPointer(rebasing: input.prefix(10))) else {
        pending = Array(UnsafeRawBufferPointer(rebasing: input))
        return true
      }
      input = input.dropFirst(header.length)
      if let event = try startFrame(header), !handle(event) {
        pending = Array(UnsafeRawBufferPointer(rebasing: input))
        return false
      }
    }
  }

  private struct Header {
    var final: Bool
    var opcode: UInt8
    var payload: Int
    var length: Int
  }

  private func parseHeader(_ bytes: some RandomAccessCollection<UInt8>) throws(ProtocolError) -> Header? {
    let bytes = Array(bytes)
    guard bytes.count >= 2 else { return nil }
    guard bytes[0] & 0x70 == 0 else {
      throw ProtocolError(code: 1002, reason: "reserved bits set with no extension negotiated")
    }
    guard bytes[1] & 0x80 == 0 else { throw ProtocolError(code: 1002, reason: "a server frame was masked") }
    let short = Int(bytes[1] & 0x7F)
    var length = 2
    var payload = short
    if short == 126 {
      guard bytes.count >= 4 else { return nil }
      payload = Int(bytes[2]) << 8 | Int(bytes[3])
      length = 4
    } else if short == 127 {
      guard bytes.count >= 10 else { return nil }
      guard bytes[2] & 0x80 == 0 else { throw ProtocolError(code: 1002, reason: "a frame length over 2^63") }
      payload = (2..<10).reduce(0) { $0 << 8 | Int(bytes[$1]) }
      length = 10
    }
    return Header(final: bytes[0] & 0x80 != 0, opcode: bytes[0] & 0x0F, payload: payload, length: length)
  }

  private mutating func startFrame(_ header: Header) throws(ProtocolError) -> Event? {
    switch header.opcode {
    case 0x8, 0x9, 0xA:
      guard header.final, header.payload <= 125 else {
        throw ProtocolError(code: 1002, reason: "a control frame fragmented or over 125 bytes")
      }
      inControl = (header.opcode, [])
      inControl!.bytes.reserveCapacity(header.payload)
    case 0x1, 0x2:
      guard message == nil else {
        throw ProtocolError(code: 1002, reason: "a new message began before the last one's final fragment")
      }
      messageIsBinary = header.opcode == 0x2
      message = []
      try reserve(header.payload)
    case 0x0:
      guard message != nil else { throw ProtocolError(code: 1002, reason: "a continuation frame with no message") }
      try reserve(header.payload)
    default:
      throw ProtocolError(code: 1002, reason: "unknown opcode \(header.opcode)")
    }
    frameIsFinal = header.final
    payloadLeft = header.payload
    return payloadLeft == 0 ? try finishFrame() : nil
  }

  private mutating func reserve(_ payload: Int) throws(ProtocolError) {
    guard payload <= maxMessageBytes - message!.count else {
      throw ProtocolError(code: 1009, reason: "message larger than \(maxMessageBytes) bytes")
    }
    message!.reserveCapacity(message!.count + payload)
  }

  private mutating func finishFrame() throws(ProtocolError) -> Event? {
    if let control = inControl {
      inControl = nil
      switch control.opcode {
      case 0x9: return .ping(control.bytes)
      case 0xA: return .pong
      default:
        guard control.bytes.count != 1 else { throw ProtocolError(code: 1002, reason: "a close frame of one byte") }
        guard control.bytes.count >= 2 else { return .close(code: 1005, reason: "") }
        let code = UInt16(control.bytes[0]) << 8 | UInt16(control.bytes[1])
        return .close(code: code, reason: String(decoding: control.bytes[2...], as: UTF8.self))
      }
    }
    guard frameIsFinal, let complete = message else { return nil }
    message = nil
    if !messageIsBinary && !Self.isValidUTF8(complete) {
      throw ProtocolError(code: 1007, reason: "a text message that is not valid UTF-8")
    }
    return .message(binary: messageIsBinary, complete)
  }

  private static func isValidUTF8(_ bytes: [UInt8]) -> Bool {
    var iterator = bytes.makeIterator()
    var decoder = UTF8()
    while true {
      switch decoder.decode(&iterator) {
      case .scalarValue: continue
      case .emptyInput: return true
      case .error: return false
      }
    }
  }
}

/// Frame headers for what a client sends (RFC 6455 section 5.2), masked.
enum WebSocketClientFrame {
  /// The largest header a client frame has: 2 bytes, an 8-byte length, a 4-byte mask key.
  static let maxHeaderBytes = 14

  /// Writes the header of a final frame of `opcode` carrying `count` payload bytes, masked with `key`, so that it ends
  /// at `end` (the payload starts there); returns the header's first byte.
  static func writeHeader(
    before end: UnsafeMutablePointer<UInt8>, opcode: UInt8, count: Int, key: UInt32
  ) -> UnsafeMutablePointer<UInt8> {
    let lengthBytes = count < 126 ? 0 : count < 65536 ? 2 : 8
    let start = end - (2 + lengthBytes + 4)
    start[0] = 0x80 | opcode
    switch lengthBytes {
    case 0: start[1] = 0x80 | UInt8(count)
    case 2:
      start[1] = 0x80 | 126
      start[2] = UInt8(count >> 8)
      start[3] = UInt8(truncatingIfNeeded: count)
    default:
      start[1] = 0x80 | 127
      for index in 0..<8 { start[2 + index] = UInt8(truncatingIfNeeded: count >> (56 - 8 * index)) }
    }
    UnsafeMutableRawPointer(start + 2 + lengthBytes).storeBytes(of: key, as: UInt32.self)
    return start
  }

  /// A whole masked control frame (close, ping or pong) with `payload` (at most 125 bytes).
  static func control(opcode: UInt8, payload: [UInt8], key: UInt32 = .random(in: .min ... .max)) -> [UInt8] {
    precondition(payload.count <= 125, "control frames carry at most 125 bytes")
    var frame = [UInt8](repeating: 0, count: 6 + payload.count)
    frame.withUnsafeMutableBufferPointer { buffer in
      let base = buffer.baseAddress!
      _ = writeHeader(before: base + 6, opcode: opcode, count: payload.count, key: key)
      (base + 6).update(from: payload, count: payload.count)
      DialledLinks.mask(UnsafeMutableRawPointer(base + 6), count: payload.count, key: key)
    }
    return frame
  }

  /// A close frame's payload: the status code, then the reason cut to fit 125 bytes.
  static func closePayload(code: UInt16, reason: String) -> [UInt8] {
    [UInt8(code >> 8), UInt8(truncatingIfNeeded: code)] + Array(reason.utf8.prefix(123))
  }
}
