import Testing

@testable import LWS

/// The sans-I/O WebSocket client of dialled connections (`WebSocketClientCodec.swift`), byte for byte: the upgrade
/// request and the checks on the server's answer, the decoder of server frames (every length form, every split of
/// the input, fragments, control frames, protocol errors, stopping and resuming), and the masked frames a client
/// sends.
@Suite struct WebSocketClientCodecTests {}

// MARK: - Helpers

private typealias Event = WebSocketFrameDecoder.Event
private typealias ProtocolError = WebSocketFrameDecoder.ProtocolError

/// A frame as a server sends it: unmasked unless `mask` is given, with the shortest length form unless `lengthBytes`
/// forces one (0, 2 or 8 bytes after the second header byte), and `bits` (RSV1-3) ORed into the first byte.
private func serverFrame(
  _ opcode: UInt8, _ payload: [UInt8] = [], final: Bool = true, bits: UInt8 = 0, mask: [UInt8]? = nil,
  lengthBytes: Int? = nil
) -> [UInt8] {
  var bytes: [UInt8] = [(final ? 0x80 : 0) | bits | opcode]
  let maskBit: UInt8 = mask == nil ? 0 : 0x80
  switch lengthBytes ?? (payload.count < 126 ? 0 : payload.count < 65536 ? 2 : 8) {
  case 0: bytes.append(maskBit | UInt8(payload.count))
  case 2: bytes += [maskBit | 126, UInt8(payload.count >> 8), UInt8(truncatingIfNeeded: payload.count)]
  default: bytes += [maskBit | 127] + bigEndian(UInt64(payload.count))
  }
  if let mask {
    bytes += mask + payload.enumerated().map { $1 ^ mask[$0 % 4] }
  } else {
    bytes += payload
  }
  return bytes
}

/// The header alone of a frame in the 64-bit length form announcing `length` payload bytes.
private func serverHeader64(_ opcode: UInt8, final: Bool = true, length: UInt64) -> [UInt8] {
  [(final ? 0x80 : 0) | opcode, 127] + bigEndian(length)
}

private func bigEndian(_ value: UInt64) -> [UInt8] {
  (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * UInt64($0))) }
}

private func text(_ string: String) -> Event { .message(binary: false, Array(string.utf8)) }

/// `count` ASCII letters (valid UTF-8, and not all the same byte).
private func letters(_ count: Int) -> [UInt8] { (0..<count).map { UInt8(ascii: "a") + UInt8($0 % 26) } }

/// `count` bytes running through every value (not valid UTF-8 from the 128th on).
private func bytePattern(_ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) } }

private func closePayloadBytes(_ code: UInt16, _ reason: String) -> [UInt8] {
  [UInt8(code >> 8), UInt8(truncatingIfNeeded: code)] + Array(reason.utf8)
}

extension WebSocketFrameDecoder {
  /// ``decode(_:_:)`` from an array.
  fileprivate mutating func feed(_ bytes: [UInt8], _ handle: (Event) -> Bool) throws -> Bool {
    try bytes.withUnsafeBytes { try decode($0, handle) }
  }
}

/// Every event a fresh decoder hands out for `chunks`, fed one call each (each call must not report a stop).
private func decodeAll(_ chunks: [[UInt8]], maxMessageBytes: Int = 1 << 20) throws -> [Event] {
  var decoder = WebSocketFrameDecoder(maxMessageBytes: maxMessageBytes)
  var events: [Event] = []
  for chunk in chunks {
    let going = try decoder.feed(chunk) {
      events.append($0)
      return true
    }
    #expect(going)
  }
  return events
}

/// The protocol error a fresh decoder throws for `bytes` (an issue is recorded when it throws none).
private func protocolError(
  _ bytes: [UInt8], maxMessageBytes: Int = 1 << 20, sourceLocation: SourceLocation = #_sourceLocation
) -> ProtocolError? {
  #expect(throws: ProtocolError.self, sourceLocation: sourceLocation) {
    _ = try decodeAll([bytes], maxMessageBytes: maxMessageBytes)
  }
}

/// Standard base64 with padding, decoded; nil when `text` is not that.
private func base64Decoded(_ text: String) -> [UInt8]? {
  let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
  let characters = Array(text.utf8)
  guard characters.count % 4 == 0 else { return nil }
  var out: [UInt8] = []
  for start in stride(from: 0, to: characters.count, by: 4) {
    let group = characters[start..<start + 4]
    let padding = group.reversed().prefix { $0 == UInt8(ascii: "=") }.count
    guard padding <= 2, padding == 0 || start + 4 == characters.count else { return nil }
    var value: UInt32 = 0
    for character in group.prefix(4 - padding) {
      guard let index = alphabet.firstIndex(of: character) else { return nil }
      value = value << 6 | UInt32(index)
    }
    value <<= 6 * UInt32(padding)
    out += [UInt8(value >> 16), UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value)]
      .prefix(3 - padding)
  }
  return out
}

// MARK: - Handshake

extension WebSocketClientHandshake {
  /// ``receive(_:)`` from an array.
  fileprivate mutating func receive(_ bytes: [UInt8]) -> Outcome { bytes.withUnsafeBytes { receive($0) } }
}

extension WebSocketClientCodecTests {
  /// The upgrade request a dialled connection sends, the Sec-WebSocket-Accept and base64 it checks the answer with,
  /// and the checks themselves: an answer that is not exactly an accepted upgrade to the offered subprotocol is
  /// refused with a reason.
  @Suite struct Handshake {
    /// RFC 6455 section 1.3's example key and the Sec-WebSocket-Accept that answers it.
    static let key = "dGhlIHNhbXBsZSBub25jZQ=="
    static let accept = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

    /// The headers of an answer that accepts ``makeHandshake()``'s request.
    static let acceptingHeaders = [
      "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Accept: \(accept)",
      "Sec-WebSocket-Protocol: meshgate.v1",
    ]

    static func makeHandshake() -> WebSocketClientHandshake {
      WebSocketClientHandshake(subprotocol: "meshgate.v1", key: key)
    }

    /// A response head with `statusLine` and `headers` (the accepting ones by default), and `body` after it.
    static func response(
      statusLine: String = "HTTP/1.1 101 Switching Protocols", headers: [String] = acceptingHeaders,
      body: [UInt8] = []
    ) -> [UInt8] {
      Array(([statusLine] + headers).map { $0 + "\r\n" }.joined().utf8) + Array("\r\n".utf8) + body
    }

    /// The accepting headers with `name`'s line left out.
    static func headers(without name: String) -> [String] {
      acceptingHeaders.filter { !$0.hasPrefix(name + ":") }
    }

    /// The reason `response` is refused with (an issue is recorded when it is not refused).
    static func refusal(_ response: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) -> String {
      var handshake = makeHandshake()
      guard case .refused(let reason) = handshake.receive(response) else {
        Issue.record("not refused", sourceLocation: sourceLocation)
        return ""
      }
      return reason
    }

    @Test func theRequestCarriesTheUpgradeHeadersTheKeyAndTheSubprotocolButNoOrigin() {
      let request = Self.makeHandshake().request(host: "node.example:8443", path: "/mesh?x=1")
      #expect(request.suffix(4) == Array("\r\n\r\n".utf8))
      let head = String(decoding: request.dropLast(4), as: UTF8.self)
      let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
      #expect(lines.first == "GET /mesh?x=1 HTTP/1.1")
      #expect(!lines.contains(""), "the head ends at its first empty line")
      for expected in [
        "Host: node.example:8443", "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Key: \(Self.key)",
        "Sec-WebSocket-Protocol: meshgate.v1", "Sec-WebSocket-Version: 13",
      ] {
        #expect(lines.contains(expected), "missing \(expected)")
      }
      #expect(!lines.contains { $0.lowercased().hasPrefix("origin") })
      #expect(lines.dropFirst().allSatisfy { $0.contains(": ") }, "every line after the request line is a header")
    }

    @Test func theRequestCarriesTheHandshakesOwnKey() {
      let handshake = WebSocketClientHandshake(subprotocol: "p")
      let request = String(decoding: handshake.request(host: "h", path: "/"), as: UTF8.self)
      let lines = request.split(separator: "\r\n").map(String.init)
      #expect(lines.contains("Sec-WebSocket-Key: \(handshake.key)"))
      #expect(lines.contains("Sec-WebSocket-Protocol: p"))
    }

    @Test func theAcceptValueIsRFC6455sExample() {
      #expect(WebSocketClientHandshake.acceptValue(for: Self.key) == Self.accept)
      #expect(WebSocketClientHandshake.acceptValue(for: "x3JJHMbDL1EzLkh9GBhXDw==") == "HSmrc0sMlYUkAGmm5OPpG2HaGWk=")
    }

    @Test(
      arguments: zip(
        ["", "f", "fo", "foo", "foob", "fooba", "foobar"],
        ["", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"]))
    func base64EncodesRFC4648sTestVectors(input: String, expected: String) {
      #expect(WebSocketClientHandshake.base64(Array(input.utf8)) == expected)
    }

    @Test func base64UsesPlusAndSlashAndEncodesEveryByteValue() {
      #expect(WebSocketClientHandshake.base64([0xFB, 0xFF]) == "+/8=")
      #expect(WebSocketClientHandshake.base64([0xFF, 0xFE, 0xFD]) == "//79")
      #expect(WebSocketClientHandshake.base64([0]) == "AA==")
      #expect(WebSocketClientHandshake.base64([0, 0, 0, 0]) == "AAAAAA==")
      for count in 0..<70 {
        let bytes = bytePattern(count).map { $0 ^ UInt8(count) }
        let encoded = WebSocketClientHandshake.base64(bytes)
        #expect(encoded.utf8.count == (count + 2) / 3 * 4)
        #expect(base64Decoded(encoded) == bytes, "\(count) bytes")
      }
    }

    @Test func aRandomKeyIsSixteenBytesInBase64AndTwoKeysDiffer() {
      let first = WebSocketClientHandshake.randomKey()
      let second = WebSocketClientHandshake.randomKey()
      for key in [first, second] {
        #expect(key.utf8.count == 24)
        #expect(key.hasSuffix("=="))
        let decoded = base64Decoded(key)
        #expect(decoded?.count == 16)
        #expect(decoded.map(WebSocketClientHandshake.base64) == key, "canonical base64")
      }
      #expect(first != second)
      #expect(WebSocketClientHandshake(subprotocol: "p").key != WebSocketClientHandshake(subprotocol: "p").key)
    }

    @Test func aValid101IsAcceptedWithTheBytesAfterItsHeadAsTheRemainder() {
      var handshake = Self.makeHandshake()
      let frames: [UInt8] = [0x81, 0x02, 0x68, 0x69, 0x0D, 0x0A, 0x0D, 0x0A]
      #expect(handshake.receive(Self.response(body: frames)) == .accepted(remainder: frames))
      var bare = Self.makeHandshake()
      #expect(bare.receive(Self.response()) == .accepted(remainder: []))
    }

    @Test func aResponseFedOneByteAtATimeIsIncompleteUntilTheLastByteOfItsHead() {
      var handshake = Self.makeHandshake()
      let response = Self.response()
      for byte in response.dropLast() {
        #expect(handshake.receive([byte]) == .incomplete)
      }
      #expect(handshake.receive([response.last!]) == .accepted(remainder: []))
    }

    @Test func aResponseSplitAtEveryPositionIsAcceptedWithTheSameRemainder() {
      let body: [UInt8] = [0x82, 0x01, 0xFF]
      let response = Self.response(body: body)
      let headLength = response.count - body.count
      for split in 0...response.count {
        var handshake = Self.makeHandshake()
        let first = handshake.receive(Array(response[..<split]))
        if split < headLength {
          #expect(first == .incomplete, "split at \(split)")
          #expect(handshake.receive(Array(response[split...])) == .accepted(remainder: body), "split at \(split)")
        } else {
          #expect(first == .accepted(remainder: Array(response[headLength..<split])), "split at \(split)")
        }
      }
    }

    @Test func headerNamesAndTokenValuesAreCaseInsensitive() {
      var handshake = Self.makeHandshake()
      let response = Self.response(headers: [
        "UPGRADE: WebSocket", "connection: upgrade", "sec-websocket-accept: \(Self.accept)",
        "SEC-WEBSOCKET-PROTOCOL: meshgate.v1",
      ])
      #expect(handshake.receive(response) == .accepted(remainder: []))
    }

    @Test func otherHeadersAndAConnectionListNamingUpgradeAreAccepted() {
      var handshake = Self.makeHandshake()
      let response = Self.response(headers: [
        "Server: test", "Connection: keep-alive, Upgrade", "Upgrade: websocket", "Sec-WebSocket-Accept:\(Self.accept)",
        "Sec-WebSocket-Protocol:   meshgate.v1  ",
      ])
      #expect(handshake.receive(response) == .accepted(remainder: []))
    }

    @Test func aHeaderRepeatedOnSeveralLinesCountsAsOneList() {
      var handshake = Self.makeHandshake()
      let split = Self.headers(without: "Connection") + ["Connection: Upgrade", "Connection: keep-alive"]
      #expect(handshake.receive(Self.response(headers: split)) == .accepted(remainder: []))
      let twoProtocols = Self.acceptingHeaders + ["Sec-WebSocket-Protocol: chat"]
      #expect(Self.refusal(Self.response(headers: twoProtocols)).contains("subprotocol"))
    }

    @Test func aStatusOtherThan101IsRefusedNamingTheStatus() {
      let response = Self.response(
        statusLine: "HTTP/1.1 403 Forbidden", headers: ["Content-Length: 9"], body: Array("forbidden".utf8))
      let reason = Self.refusal(response)
      #expect(reason.contains("403"))
      #expect(Self.refusal(Self.response(statusLine: "HTTP/1.1 200 OK")).contains("200"))
    }

    @Test func aWrongSecWebSocketAcceptIsRefused() {
      var headers = Self.headers(without: "Sec-WebSocket-Accept")
      #expect(Self.refusal(Self.response(headers: headers)).contains("Sec-WebSocket-Accept"))
      headers.append("Sec-WebSocket-Accept: \(WebSocketClientHandshake.acceptValue(for: "AAAAAAAAAAAAAAAAAAAAAA=="))")
      #expect(Self.refusal(Self.response(headers: headers)).contains("Sec-WebSocket-Accept"))
    }

    @Test func aMissingOrDifferentSubprotocolIsRefused() {
      var headers = Self.headers(without: "Sec-WebSocket-Protocol")
      #expect(Self.refusal(Self.response(headers: headers)).contains("subprotocol"))
      headers.append("Sec-WebSocket-Protocol: chat")
      #expect(Self.refusal(Self.response(headers: headers)).contains("subprotocol"))
      var prefixed = Self.headers(without: "Sec-WebSocket-Protocol")
      prefixed.append("Sec-WebSocket-Protocol: meshgate.v1.1")
      #expect(Self.refusal(Self.response(headers: prefixed)).contains("subprotocol"))
    }

    @Test func aMissingOrWrongUpgradeHeaderIsRefused() {
      var headers = Self.headers(without: "Upgrade")
      #expect(Self.refusal(Self.response(headers: headers)).contains("Upgrade: websocket"))
      headers.append("Upgrade: h2c")
      #expect(Self.refusal(Self.response(headers: headers)).contains("Upgrade: websocket"))
    }

    @Test func aConnectionHeaderNotNamingUpgradeIsRefused() {
      var headers = Self.headers(without: "Connection")
      #expect(Self.refusal(Self.response(headers: headers)).contains("Connection: Upgrade"))
      headers.append("Connection: keep-alive")
      #expect(Self.refusal(Self.response(headers: headers)).contains("Connection: Upgrade"))
    }

    @Test func anExtensionsHeaderIsRefused() {
      let headers = Self.acceptingHeaders + ["Sec-WebSocket-Extensions: permessage-deflate"]
      #expect(Self.refusal(Self.response(headers: headers)).contains("permessage-deflate"))
    }

    @Test(arguments: ["HTTP/2 101", "HTTP/2.0 101 Switching Protocols", "ICY 101 OK", "101 Switching Protocols", ""])
    func aStatusLineThatIsNotHTTP1IsRefused(statusLine: String) {
      #expect(Self.refusal(Self.response(statusLine: statusLine)).contains("HTTP/1.x"))
    }

    @Test func aHeaderLineWithoutAColonIsRefused() {
      let headers = Self.acceptingHeaders + ["garbage"]
      #expect(Self.refusal(Self.response(headers: headers)).contains("garbage"))
    }

    @Test func aHeadLargerThanTheLimitWithoutItsEndIsRefusedOnceItPassesTheLimit() {
      var handshake = Self.makeHandshake()
      let limit = WebSocketClientHandshake.maxResponseHeadBytes
      var head = Array("HTTP/1.1 101 Switching Protocols\r\nX-Filler: ".utf8)
      head += [UInt8](repeating: UInt8(ascii: "x"), count: limit - head.count)
      #expect(handshake.receive(Array(head[..<1000])) == .incomplete)
      #expect(handshake.receive(Array(head[1000...])) == .incomplete, "exactly the limit, no end yet")
      guard case .refused(let reason) = handshake.receive(Array("x".utf8)) else {
        Issue.record("a head over the limit was not refused")
        return
      }
      #expect(reason.contains("\(limit)"))
    }

    @Test func aCompleteHeadOfExactlyTheLimitIsAcceptedAndOneByteMoreIsRefused() {
      let limit = WebSocketClientHandshake.maxResponseHeadBytes
      let base = Self.response().count
      let filler = "X-Filler: "
      // A header line is its text and CRLF.
      let fits = Self.acceptingHeaders + [filler + String(repeating: "y", count: limit - base - filler.utf8.count - 2)]
      var handshake = Self.makeHandshake()
      let response = Self.response(headers: fits, body: [0x8A, 0x00])
      #expect(response.count == limit + 2)
      #expect(handshake.receive(response) == .accepted(remainder: [0x8A, 0x00]))
      let over = Self.acceptingHeaders + [filler + String(repeating: "y", count: limit - base - filler.utf8.count - 1)]
      #expect(Self.refusal(Self.response(headers: over)).contains("\(limit)"))
    }
  }
}

// MARK: - Frame decoder

extension WebSocketClientCodecTests {
  /// The decoder of server frames: every length form, any split of the input, fragments with control frames between
  /// them, and each protocol error with the close code it is answered with.
  @Suite struct FrameDecoder {
    /// A stream of every kind of frame: the three length forms (the 64-bit one and a 16-bit one non-minimal), empty
    /// and non-UTF-8 payloads, control frames between fragments, a character split across fragments, a close.
    static let mixedStream: [UInt8] = Array(
      [
        serverFrame(0x1, []),
        serverFrame(0x2, [0xFF]),
        serverFrame(0x1, letters(125)),
        serverFrame(0x2, bytePattern(126)),
        serverFrame(0x1, letters(127)),
        serverFrame(0x9, Array("are you there".utf8)),
        serverFrame(0x2, bytePattern(300), final: false),
        serverFrame(0xA),
        serverFrame(0x0, [1, 2, 3, 4, 5], final: false, lengthBytes: 8),
        serverFrame(0x9),
        serverFrame(0x0, [], final: false),
        serverFrame(0x0, [6], lengthBytes: 2),
        // "✓" is three bytes: the first ends this fragment.
        serverFrame(0x1, Array("héllo wörld ✓".utf8.dropLast(2)), final: false),
        serverFrame(0x0, Array("héllo wörld ✓".utf8.suffix(2))),
        serverFrame(0x8, closePayloadBytes(1001, "going away")),
      ].joined())

    fileprivate static let mixedEvents: [Event] = [
      text(""), .message(binary: true, [0xFF]), .message(binary: false, letters(125)),
      .message(binary: true, bytePattern(126)), .message(binary: false, letters(127)),
      .ping(Array("are you there".utf8)), .pong, .ping([]),
      .message(binary: true, bytePattern(300) + [1, 2, 3, 4, 5, 6]), text("héllo wörld ✓"),
      .close(code: 1001, reason: "going away"),
    ]

    @Test(arguments: [0, 1, 125, 126, 127, 65535, 65536, 70000], [false, true])
    func aMessageOfEachLengthFormDecodes(length: Int, binary: Bool) throws {
      let payload = binary ? bytePattern(length) : letters(length)
      let frame = serverFrame(binary ? 0x2 : 0x1, payload)
      #expect(frame.count - payload.count == (length < 126 ? 2 : length < 65536 ? 4 : 10), "the form under test")
      #expect(try decodeAll([frame]) == [.message(binary: binary, payload)])
    }

    @Test func severalFramesInOneBufferDecodeInOrder() throws {
      let buffer = Array(
        [
          serverFrame(0x1, Array("hello".utf8)), serverFrame(0x2, [0, 1, 2]), serverFrame(0x9, [7]),
          serverFrame(0xA, [8]), serverFrame(0x2, bytePattern(70000)), serverFrame(0x1, Array("bye".utf8)),
          serverFrame(0x8, closePayloadBytes(1000, "done")),
        ].joined())
      #expect(
        try decodeAll([buffer]) == [
          text("hello"), .message(binary: true, [0, 1, 2]), .ping([7]), .pong,
          .message(binary: true, bytePattern(70000)), text("bye"), .close(code: 1000, reason: "done"),
        ])
    }

    @Test func theMixedStreamDecodesWhole() throws {
      #expect(try decodeAll([Self.mixedStream]) == Self.mixedEvents)
    }

    @Test func theMixedStreamSplitAtEveryPositionDecodesTheSame() throws {
      let stream = Self.mixedStream
      for split in 0...stream.count {
        let events = try decodeAll([Array(stream[..<split]), Array(stream[split...])])
        #expect(events == Self.mixedEvents, "split at \(split)")
        if events != Self.mixedEvents { return }
      }
    }

    @Test func theMixedStreamFedOneByteAtATimeDecodesTheSame() throws {
      #expect(try decodeAll(Self.mixedStream.map { [$0] }) == Self.mixedEvents)
    }

    @Test func aLargeFrameSplitInItsHeaderOrPayloadDecodesTheSame() throws {
      let frame = serverFrame(0x2, bytePattern(70000)) + serverFrame(0x9, [1])
      let expected: [Event] = [.message(binary: true, bytePattern(70000)), .ping([1])]
      let splits =
        Array(0...24) + Array(stride(from: 25, to: frame.count - 24, by: 997)) + Array(frame.count - 24...frame.count)
      for split in splits {
        #expect(try decodeAll([Array(frame[..<split]), Array(frame[split...])]) == expected, "split at \(split)")
      }
      #expect(try decodeAll(frame.map { [$0] }) == expected)
    }

    @Test func aFragmentedMessageIsReassembledWithControlFramesBetweenItsFragmentsHandedOutInBetween() throws {
      var decoder = WebSocketFrameDecoder(maxMessageBytes: 1 << 20)
      var events: [Event] = []
      let record: (Event) -> Bool = {
        events.append($0)
        return true
      }
      _ = try decoder.feed(serverFrame(0x1, Array("Hel".utf8), final: false), record)
      #expect(events.isEmpty)
      _ = try decoder.feed(serverFrame(0x9, Array("x".utf8)), record)
      #expect(events == [.ping(Array("x".utf8))], "the ping comes out before the message is complete")
      _ = try decoder.feed(serverFrame(0x0, Array("lo ".utf8), final: false) + serverFrame(0xA, [9]), record)
      #expect(events == [.ping(Array("x".utf8)), .pong])
      _ = try decoder.feed(serverFrame(0x0, Array("world".utf8)), record)
      #expect(events == [.ping(Array("x".utf8)), .pong, text("Hello world")])
    }

    @Test func aFragmentedBinaryMessageWithEmptyFragmentsIsReassembled() throws {
      let stream =
        serverFrame(0x2, [], final: false) + serverFrame(0x0, [1, 2], final: false)
        + serverFrame(0x0, [], final: false) + serverFrame(0x0, [3])
        + serverFrame(0x1, [], final: false) + serverFrame(0x0, [])
      #expect(try decodeAll([stream]) == [.message(binary: true, [1, 2, 3]), text("")])
    }

    @Test func aMessageAfterAFragmentedOneStartsAfresh() throws {
      let stream =
        serverFrame(0x2, [1], final: false) + serverFrame(0x0, [2]) + serverFrame(0x1, Array("a".utf8), final: false)
        + serverFrame(0x0, Array("b".utf8)) + serverFrame(0x2, [3])
      #expect(
        try decodeAll([stream]) == [.message(binary: true, [1, 2]), text("ab"), .message(binary: true, [3])])
    }

    @Test func aPingsPayloadIsHandedOutAndAPongsIsNot() throws {
      #expect(try decodeAll([serverFrame(0x9, bytePattern(125))]) == [.ping(bytePattern(125))])
      #expect(try decodeAll([serverFrame(0x9, [])]) == [.ping([])])
      #expect(try decodeAll([serverFrame(0xA, [1, 2, 3])]) == [.pong])
      #expect(try decodeAll([serverFrame(0xA, [])]) == [.pong])
    }

    @Test func aCloseFrameCarriesItsCodeAndReason() throws {
      #expect(
        try decodeAll([serverFrame(0x8, closePayloadBytes(1000, "normal closure"))]) == [
          .close(code: 1000, reason: "normal closure")
        ])
      #expect(try decodeAll([serverFrame(0x8, closePayloadBytes(4001, ""))]) == [.close(code: 4001, reason: "")])
      #expect(
        try decodeAll([serverFrame(0x8, closePayloadBytes(1011, "ünïcode ✓"))]) == [
          .close(code: 1011, reason: "ünïcode ✓")
        ])
    }

    @Test func aCloseFrameWithNoPayloadIsCode1005() throws {
      #expect(try decodeAll([serverFrame(0x8, [])]) == [.close(code: 1005, reason: "")])
    }

    // MARK: Protocol errors

    @Test func aMaskedServerFrameIs1002() {
      #expect(protocolError(serverFrame(0x1, Array("hi".utf8), mask: [1, 2, 3, 4]))?.code == 1002)
      #expect(protocolError(serverFrame(0x9, [], mask: [0, 0, 0, 0]))?.code == 1002)
    }

    @Test(arguments: [0x40, 0x20, 0x10, 0x70] as [UInt8])
    func reservedBitsAre1002(bits: UInt8) {
      #expect(protocolError(serverFrame(0x2, [1], bits: bits))?.code == 1002)
    }

    @Test(arguments: [0x3, 0x4, 0x5, 0x6, 0x7, 0xB, 0xC, 0xD, 0xE, 0xF] as [UInt8])
    func anUnknownOpcodeIs1002(opcode: UInt8) {
      #expect(protocolError(serverFrame(opcode, [1]))?.code == 1002)
    }

    @Test(arguments: [0x8, 0x9, 0xA] as [UInt8])
    func aControlFrameOver125BytesIs1002(opcode: UInt8) throws {
      #expect(protocolError(serverFrame(opcode, letters(126)))?.code == 1002)
      #expect(
        try decodeAll([serverFrame(opcode, closePayloadBytes(1000, String(repeating: "r", count: 123)))]).count == 1)
    }

    @Test(arguments: [0x8, 0x9, 0xA] as [UInt8])
    func aFragmentedControlFrameIs1002(opcode: UInt8) {
      #expect(protocolError(serverFrame(opcode, [], final: false))?.code == 1002)
      #expect(
        protocolError(serverFrame(0x1, [0x61], final: false) + serverFrame(opcode, [], final: false))?.code == 1002)
    }

    @Test func aContinuationWithNoMessageIs1002() {
      #expect(protocolError(serverFrame(0x0, [1]))?.code == 1002)
      #expect(protocolError(serverFrame(0x0, [], final: false))?.code == 1002)
      #expect(protocolError(serverFrame(0x2, [1]) + serverFrame(0x0, [2]))?.code == 1002, "after a complete message")
    }

    @Test(arguments: [0x1, 0x2] as [UInt8], [0x1, 0x2] as [UInt8])
    func aNewMessageWhileAFragmentedOneIsOpenIs1002(first: UInt8, second: UInt8) {
      let stream =
        serverFrame(first, [0x61], final: false) + serverFrame(0x9) + serverFrame(0x0, [0x62], final: false)
        + serverFrame(second, [0x63])
      #expect(protocolError(stream)?.code == 1002)
    }

    @Test func aMessageOverTheLimitIs1009() throws {
      #expect(try decodeAll([serverFrame(0x2, bytePattern(100))], maxMessageBytes: 100).count == 1)
      #expect(protocolError(serverFrame(0x2, bytePattern(101)), maxMessageBytes: 100)?.code == 1009)
      #expect(protocolError(serverFrame(0x1, letters(70000)), maxMessageBytes: 65536)?.code == 1009)
    }

    @Test func fragmentsTotallingOverTheLimitAre1009() throws {
      let exactly = serverFrame(0x2, bytePattern(60), final: false) + serverFrame(0x0, bytePattern(40))
      #expect(try decodeAll([exactly], maxMessageBytes: 100).count == 1)
      let over =
        serverFrame(0x1, letters(60), final: false) + serverFrame(0x0, letters(40), final: false)
        + serverFrame(0x0, letters(1))
      #expect(protocolError(over, maxMessageBytes: 100)?.code == 1009)
    }

    @Test func aHugeAnnouncedLengthIs1009WithoutItsPayload() {
      #expect(protocolError(serverHeader64(0x2, length: 1 << 40))?.code == 1009)
      #expect(protocolError(serverHeader64(0x2, length: UInt64(Int.max)))?.code == 1009)
    }

    @Test func aContinuationAnnouncingAHugeLengthIs1009() {
      // The running total plus the announced length must not overflow.
      let stream = serverFrame(0x2, [1, 2, 3], final: false) + serverHeader64(0x0, length: UInt64(Int.max))
      #expect(protocolError(stream)?.code == 1009)
    }

    @Test func aLengthWithTheMostSignificantBitSetIs1002() {
      #expect(protocolError(serverHeader64(0x2, length: 1 << 63))?.code == 1002)
    }

    @Test(
      arguments: [
        [0xFF], [0x80], [0xC0, 0x80], [0xE0, 0x80, 0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xE2, 0x82],
        [0x61, 0xF0, 0x9F, 0x98],
      ] as [[UInt8]])
    func invalidUTF8InATextMessageIs1007(bytes: [UInt8]) throws {
      #expect(protocolError(serverFrame(0x1, bytes))?.code == 1007)
      #expect(protocolError(serverFrame(0x1, [0x61], final: false) + serverFrame(0x0, bytes))?.code == 1007)
      #expect(try decodeAll([serverFrame(0x2, bytes)]) == [.message(binary: true, bytes)], "binary is not checked")
    }

    @Test func aCloseFrameOfOneByteIs1002() {
      #expect(protocolError(serverFrame(0x8, [0x03]))?.code == 1002)
    }

    @Test func eventsBeforeAProtocolErrorAreHandedOut() {
      var decoder = WebSocketFrameDecoder(maxMessageBytes: 1 << 20)
      var events: [Event] = []
      let error = #expect(throws: ProtocolError.self) {
        _ = try decoder.feed(serverFrame(0x1, Array("ok".utf8)) + serverFrame(0x9, [1]) + serverFrame(0x5)) {
          events.append($0)
          return true
        }
      }
      #expect(error?.code == 1002)
      #expect(events == [text("ok"), .ping([1])])
    }

    @Test func anErrorInAHeaderSplitAcrossCallsIsThrownWhenTheHeaderIsComplete() throws {
      var decoder = WebSocketFrameDecoder(maxMessageBytes: 1 << 20)
      let frame = serverFrame(0x2, [1, 2], mask: [9, 9, 9, 9])
      #expect(try decoder.feed([frame[0]]) { _ in true })
      let error = #expect(throws: ProtocolError.self) { _ = try decoder.feed(Array(frame[1...])) { _ in true } }
      #expect(error?.code == 1002)
    }

    // MARK: Stopping and resuming

    /// Three messages in one buffer (the second empty, so that its event comes from its header alone).
    static let threeFrames =
      serverFrame(0x1, Array("one".utf8)) + serverFrame(0x1, []) + serverFrame(0x2, bytePattern(300))
    fileprivate static let threeEvents: [Event] = [text("one"), text(""), .message(binary: true, bytePattern(300))]

    /// A handler that records events and stops after the `stopAfter`th of them.
    fileprivate final class Recorder {
      var events: [Event] = []
      var stopAfter: Int

      init(stopAfter: Int = .max) { self.stopAfter = stopAfter }

      func handle(_ event: Event) -> Bool {
        events.append(event)
        return events.count < stopAfter
      }
    }

    @Test func aStopKeepsTheRestForResume() throws {
      let frames = Self.threeFrames
      let expected = Self.threeEvents
      var decoder = WebSocketFrameDecoder(maxMessageBytes: 1 << 20)
      let recorder = Recorder(stopAfter: 1)
      #expect(try decoder.feed(frames, recorder.handle) == false)
      #expect(recorder.events == [expected[0]])
      #expect(decoder.hasKeptBytes)
      recorder.stopAfter = .max
      #expect(try decoder.resume(recorder.handle))
      #expect(recorder.events == expected)
      #expect(!decoder.hasKeptBytes)
    }

    @Test func aResumeCanStopAgain() throws {
      let frames = Self.threeFrames
      let expected = Self.threeEvents
      var decoder = WebSocketFrameDecoder(maxMessageBytes: 1 << 20)
      let recorder = Recorder(stopAfter: 1)
      #expect(try decoder.feed(frames, recorder.handle) == false)
      recorder.stopAfter = 2
      #expect(try decoder.resume(recorder.handle) == false, "stopped at the second (empty) message")
      #expect(recorder.events == Array(expected.prefix(2)))
      #expect(decoder.hasKeptBytes)
      recorder.stopAfter = 3
      #expect(try decoder.resume(recorder.handle) == false, "stopped at the third, the last")
      #expect(recorder.events == expected)
      #expect(!decoder.hasKeptBytes)
      #expect(try decoder.resume(recorder.handle), "nothing left")
      #expect(recorder.events == expected)
    }

    @Test func aStopAtEachEventOfTheMixedStreamResumesToTheSameEvents() throws {
      for stop in 1...Self.mixedEvents.count {
        var decoder = WebSocketFrameDecoder(maxMessageBytes: 1 << 20)
        let recorder = Recorder(stopAfter: stop)
        let going = try decoder.feed(Self.mixedStream, recorder.handle)
        #expect(going == false, "stopped after event \(stop)")
        #expect(recorder.events == Array(Self.mixedEvents.prefix(stop)))
        #expect(decoder.hasKeptBytes == (stop < Self.mixedEvents.count), "stopped after event \(stop)")
        recorder.stopAfter = .max
        #expect(try decoder.resume(recorder.handle))
        #expect(recorder.events == Self.mixedEvents, "stopped after event \(stop)")
        #expect(!decoder.hasKeptBytes)
      }
    }

    @Test func aDecodeAfterAStopDeliversTheKeptMessagesFirst() throws {
      var decoder = WebSocketFrameDecoder(maxMessageBytes: 1 << 20)
      let recorder = Recorder(stopAfter: 1)
      let first = serverFrame(0x1, Array("a".utf8)) + serverFrame(0x1, Array("b".utf8)) + serverFrame(0x2, [0xC])
      #expect(try decoder.feed(first, recorder.handle) == false)
      #expect(decoder.hasKeptBytes)
      recorder.stopAfter = .max
      let second = serverFrame(0x1, Array("d".utf8)) + serverFrame(0x9, [0xE])
      #expect(try decoder.feed(second, recorder.handle))
      #expect(recorder.events == [text("a"), text("b"), .message(binary: true, [0xC]), text("d"), .ping([0xE])])
      #expect(!decoder.hasKeptBytes)
    }

    @Test func aDecodeAfterAStopCompletesAFrameTheStopKeptPartOf() throws {
      var decoder = WebSocketFrameDecoder(maxMessageBytes: 1 << 20)
      let recorder = Recorder(stopAfter: 1)
      let tail = serverFrame(0x2, bytePattern(1000))
      for cut in [1, 3, 500] {
        recorder.events = []
        recorder.stopAfter = 1
        #expect(try decoder.feed(serverFrame(0x1, Array("a".utf8)) + tail.prefix(cut), recorder.handle) == false)
        #expect(decoder.hasKeptBytes == (cut >= 4), "a partial header alone is not kept bytes")
        recorder.stopAfter = .max
        #expect(try decoder.resume(recorder.handle))
        #expect(recorder.events == [text("a")], "the frame is not complete yet")
        #expect(try decoder.feed(Array(tail[cut...]), recorder.handle))
        #expect(recorder.events == [text("a"), .message(binary: true, bytePattern(1000))])
        #expect(!decoder.hasKeptBytes)
      }
    }

    @Test func aStopOnAControlFrameBetweenFragmentsResumesTheMessage() throws {
      var decoder = WebSocketFrameDecoder(maxMessageBytes: 1 << 20)
      let recorder = Recorder(stopAfter: 1)
      let stream =
        serverFrame(0x1, Array("ab".utf8), final: false) + serverFrame(0x9, [1]) + serverFrame(0x0, Array("cd".utf8))
      #expect(try decoder.feed(stream, recorder.handle) == false)
      #expect(recorder.events == [.ping([1])])
      recorder.stopAfter = .max
      #expect(try decoder.resume(recorder.handle))
      #expect(recorder.events == [.ping([1]), text("abcd")])
    }
  }
}

// MARK: - Client frames

extension WebSocketClientCodecTests {
  /// The masked frames a client sends: header bytes, the mask key, the masked payload, close payloads.
  @Suite struct ClientFrame {
    @Test(arguments: [0x8, 0x9, 0xA] as [UInt8], [0, 1, 7, 8, 13, 125])
    func aControlFrameIsFinalMaskedAndUnmasksToItsPayload(opcode: UInt8, length: Int) {
      let key: UInt32 = 0x1122_3344
      let payload = bytePattern(length)
      let frame = WebSocketClientFrame.control(opcode: opcode, payload: payload, key: key)
      #expect(frame.count == 6 + length)
      #expect(frame[0] == 0x80 | opcode)
      #expect(frame[1] == 0x80 | UInt8(length))
      let mask = Array(frame[2..<6])
      #expect(mask == withUnsafeBytes(of: key) { Array($0) }, "the key's bytes, as masked with")
      let unmasked = frame[6...].enumerated().map { $1 ^ mask[$0 % 4] }
      #expect(unmasked == payload)
      if length >= 4 { #expect(Array(frame[6...]) != payload, "masked") }
    }

    @Test func twoControlFramesWithDefaultKeysAreMaskedDifferently() {
      let payload = letters(32)
      let first = WebSocketClientFrame.control(opcode: 0x9, payload: payload)
      let second = WebSocketClientFrame.control(opcode: 0x9, payload: payload)
      #expect(first[2..<6] != second[2..<6])
      for frame in [first, second] {
        #expect(frame[6...].enumerated().map { $1 ^ frame[2 + $0 % 4] } == payload)
      }
    }

    @Test func aClosePayloadIsTheCodeBigEndianThenTheReason() {
      #expect(WebSocketClientFrame.closePayload(code: 1000, reason: "bye") == [0x03, 0xE8] + Array("bye".utf8))
      #expect(WebSocketClientFrame.closePayload(code: 4001, reason: "") == [0x0F, 0xA1])
      #expect(WebSocketClientFrame.closePayload(code: 0xFFFF, reason: "é") == [0xFF, 0xFF, 0xC3, 0xA9])
    }

    @Test func aClosePayloadsReasonIsCutTo123Bytes() {
      let fits = String(repeating: "r", count: 123)
      #expect(WebSocketClientFrame.closePayload(code: 1001, reason: fits) == [0x03, 0xE9] + Array(fits.utf8))
      let long = String(decoding: letters(200), as: UTF8.self)
      let payload = WebSocketClientFrame.closePayload(code: 1001, reason: long)
      #expect(payload == [0x03, 0xE9] + letters(123))
      #expect(payload.count == 125)
      let frame = WebSocketClientFrame.control(opcode: 0x8, payload: payload, key: 0)
      #expect(frame.count == 131)
      #expect(frame[1] == 0x80 | 125)
    }

    @Test(
      arguments: zip(
        [0, 1, 125, 126, 65535, 65536, 0x1_0000_0001],
        [
          [0x80], [0x81], [0xFD], [0xFE, 0x00, 0x7E], [0xFE, 0xFF, 0xFF], [0xFF, 0, 0, 0, 0, 0, 1, 0, 0],
          [0xFF, 0, 0, 0, 1, 0, 0, 0, 1],
        ] as [[UInt8]]))
    func aHeaderEndsWhereThePayloadStartsWithTheShortestLengthForm(count: Int, lengthField: [UInt8]) {
      let key: UInt32 = 0xA1B2_C3D4
      var buffer = [UInt8](repeating: 0xEE, count: 32)
      let headerLength = buffer.withUnsafeMutableBufferPointer { buffer in
        let end = buffer.baseAddress! + 20
        let start = WebSocketClientFrame.writeHeader(before: end, opcode: 0x2, count: count, key: key)
        return end - start
      }
      #expect(headerLength == 1 + lengthField.count + 4)
      #expect(headerLength == (count < 126 ? 2 : count < 65536 ? 4 : 10) + 4)
      #expect(headerLength <= WebSocketClientFrame.maxHeaderBytes)
      let header = Array(buffer[(20 - headerLength)..<20])
      #expect(header.first == 0x82, "final, binary")
      #expect(Array(header.dropFirst().prefix(lengthField.count)) == lengthField, "mask bit and length")
      #expect(Array(header.suffix(4)) == withUnsafeBytes(of: key) { Array($0) }, "the mask key")
      #expect(buffer[..<(20 - headerLength)].allSatisfy { $0 == 0xEE }, "nothing written before the header")
      #expect(buffer[20...].allSatisfy { $0 == 0xEE }, "nothing written from the end on")
    }
  }
}
