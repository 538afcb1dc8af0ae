/// Status line and headers of an HTTP/1.1 response.
struct HTTPResponseHead {
  var version: String
  var status: Int
  var reason: String
  var headers: [(String, String)]

  func header(_ name: String) -> String? {
    headers.first { $0.0.caseInsensitiveEquals(name) }?.1
  }

  /// All values of a header, split on commas (for list-valued headers such as `Connection`).
  func headerTokens(_ name: String) -> [String] {
    headers.filter { $0.0.caseInsensitiveEquals(name) }
      .flatMap { $0.1.split(separator: ",") }
      .map { $0.trimmingASCIIWhitespace().lowercased() }
  }

  var isChunked: Bool { headerTokens("Transfer-Encoding").contains("chunked") }

  /// The declared body length, or nil if absent; throws when malformed or contradictory.
  func contentLength() throws -> Int? {
    let values = headers.filter { $0.0.caseInsensitiveEquals("Content-Length") }.map { $0.1.trimmingASCIIWhitespace() }
    guard let first = values.first else { return nil }
    guard let length = Int(first), length >= 0, values.allSatisfy({ $0 == first }) else {
      throw TestSupportError.protocolViolation("invalid Content-Length header(s): \(values)")
    }
    return length
  }

  /// Reads a status line and header block (skipping any interim `1xx` responses other than `101`).
  static func read(from connection: BufferedConnection, deadline: Deadline, what: String) throws -> HTTPResponseHead {
    while true {
      let head = try readOne(from: connection, deadline: deadline, what: what)
      if head.status >= 100 && head.status < 200 && head.status != 101 { continue }
      return head
    }
  }

  private static func readOne(from connection: BufferedConnection, deadline: Deadline, what: String) throws
    -> HTTPResponseHead
  {
    var statusLine = try connection.readLine(deadline: deadline, context: "reading the status line of \(what)")
    // Tolerate stray blank lines before the status line (RFC 9112 §2.2).
    var blankLines = 0
    while statusLine.isEmpty && blankLines < 4 {
      blankLines += 1
      statusLine = try connection.readLine(deadline: deadline, context: "reading the status line of \(what)")
    }
    let text = String(decoding: statusLine, as: UTF8.self)
    let parts = text.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
    guard parts.count >= 2, parts[0].hasPrefix("HTTP/"), parts[1].count == 3, let status = Int(parts[1]) else {
      throw TestSupportError.protocolViolation("malformed status line in \(what): \"\(debugText(statusLine))\"")
    }
    var headers: [(String, String)] = []
    var total = 0
    while true {
      let line = try connection.readLine(deadline: deadline, context: "reading the headers of \(what)")
      if line.isEmpty { break }
      total += line.count
      if total > 256 * 1024 {
        throw TestSupportError.protocolViolation("header block of \(what) exceeds 256 KiB")
      }
      if line.first == 0x20 || line.first == 0x09, !headers.isEmpty {
        // Obsolete line folding: append to the previous value.
        headers[headers.count - 1].1 += " " + String(decoding: line, as: UTF8.self).trimmingASCIIWhitespace()
        continue
      }
      guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else {
        throw TestSupportError.protocolViolation("header line without a colon in \(what): \"\(debugText(line))\"")
      }
      let name = String(decoding: line[..<colon], as: UTF8.self)
      let value = String(decoding: line[(colon + 1)...], as: UTF8.self).trimmingASCIIWhitespace()
      headers.append((name, value))
    }
    return HTTPResponseHead(
      version: String(parts[0]), status: status, reason: parts.count > 2 ? String(parts[2]) : "", headers: headers)
  }

  /// Whether a response to `method` with this status can carry a body at all.
  func hasBody(requestMethod: String) -> Bool {
    if requestMethod.uppercased() == "HEAD" { return false }
    if status == 204 || status == 304 || (status >= 100 && status < 200) { return false }
    return true
  }

  /// Reads the complete body that follows this head: chunked, by Content-Length, or until EOF.
  func readBody(from connection: BufferedConnection, requestMethod: String, deadline: Deadline, what: String) throws
    -> [UInt8]
  {
    guard hasBody(requestMethod: requestMethod) else { return [] }
    if isChunked {
      var decoder = ChunkedDecoder()
      var body: [UInt8] = []
      while true {
        body += try decoder.decode(&connection.buffer)
        if decoder.isFinished { return body }
        guard try connection.fill(deadline: deadline, context: "reading the chunked body of \(what)") else {
          throw TestSupportError.connectionClosed(
            "EOF inside the chunked body of \(what) after \(body.count) decoded bytes (no terminating 0-size chunk)")
        }
      }
    }
    if let length = try contentLength() {
      return try connection.readExactly(
        length, deadline: deadline, context: "reading the \(length)-byte body of \(what)")
    }
    return try connection.readToEOF(deadline: deadline, context: "reading the body (until EOF) of \(what)")
  }
}

/// Incremental decoder for `Transfer-Encoding: chunked` (RFC 9112 §7.1). Consumes from a `ByteBuffer` exactly the
/// bytes that belong to the chunked body, leaving anything after the trailer section in place.
struct ChunkedDecoder {
  private enum State {
    case size
    case data(remaining: Int)
    case dataEnd
    case trailers
    case finished
  }

  private var state = State.size

  var isFinished: Bool {
    if case .finished = state { return true }
    return false
  }

  mutating func decode(_ buffer: inout ByteBuffer) throws -> [UInt8] {
    var out: [UInt8] = []
    while true {
      switch state {
      case .finished:
        return out
      case .size:
        guard let line = buffer.readLine() else {
          if buffer.readableCount > 4096 {
            throw TestSupportError.protocolViolation("chunk-size line longer than 4 KiB")
          }
          return out
        }
        let text = String(decoding: line, as: UTF8.self)
        let sizeText = text.split(separator: ";", maxSplits: 1).first.map { $0.trimmingASCIIWhitespace() } ?? ""
        guard !sizeText.isEmpty, sizeText.count <= 15, let size = Int(sizeText, radix: 16), size >= 0 else {
          throw TestSupportError.protocolViolation("malformed chunk-size line \"\(debugText(line))\"")
        }
        state = size == 0 ? .trailers : .data(remaining: size)
      case .data(let remaining):
        if buffer.isEmpty { return out }
        let take = min(remaining, buffer.readableCount)
        out += buffer.read(take)
        state = remaining - take == 0 ? .dataEnd : .data(remaining: remaining - take)
      case .dataEnd:
        guard let line = buffer.readLine() else {
          if buffer.readableCount >= 2 {
            throw TestSupportError.protocolViolation("chunk data not followed by CRLF")
          }
          return out
        }
        guard line.isEmpty else {
          throw TestSupportError.protocolViolation(
            "chunk data longer than its declared size (extra: \"\(debugText(line))\")")
        }
        state = .size
      case .trailers:
        guard let line = buffer.readLine() else { return out }
        if line.isEmpty { state = .finished }
      }
    }
  }
}

extension StringProtocol {
  func caseInsensitiveEquals(_ other: some StringProtocol) -> Bool {
    guard utf8.count == other.utf8.count else { return false }
    return zip(utf8, other.utf8).allSatisfy { asciiLower($0) == asciiLower($1) }
  }

  func trimmingASCIIWhitespace() -> String {
    let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" || $0 == "\n" }
    guard let start = firstIndex(where: { !isSpace($0) }) else { return "" }
    let end = lastIndex(where: { !isSpace($0) })!
    return String(self[start...end])
  }
}

private func asciiLower(_ byte: UInt8) -> UInt8 {
  byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte
}
