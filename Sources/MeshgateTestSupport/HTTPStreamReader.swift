import Foundation

/// One Server-Sent Event, as dispatched by an `EventSource` (HTML Living Standard §9.2.6).
public struct SSEEvent: Sendable, Equatable, CustomStringConvertible {
  /// The last event ID at dispatch time. As in `EventSource`, an `id:` field persists to later events that carry no
  /// `id:` of their own; nil until the stream has sent any `id:` field.
  public var id: String?
  /// The `event:` field, or nil when the event had none (an `EventSource` would report `"message"`).
  public var event: String?
  /// The `data:` lines joined with `\n` (without a trailing newline).
  public var data: String

  /// `data` parsed as a JSON object; throws if it is not one.
  public func jsonObject() throws -> [String: Any] {
    guard let object = (try? JSONSerialization.jsonObject(with: Data(data.utf8))) as? [String: Any] else {
      throw TestSupportError.invalidJSON("SSE event data is not a JSON object: \(data.prefix(500))")
    }
    return object
  }

  /// `id`, `event` and `data` on one line, for failure messages.
  public var description: String {
    "SSEEvent(id: \(id ?? "nil"), event: \(event ?? "nil"), data: \(data.count > 300 ? data.prefix(300) + "…" : data))"
  }
}

/// Reads a `text/event-stream` response incrementally over a blocking POSIX socket.
///
/// `init` sends `GET path` with `Accept: text/event-stream`, reads the status line and headers, and throws
/// `TestSupportError.httpStatus(status, body)` unless the status is 2xx. The body may be chunked, delimited by
/// `Content-Length`, or run until EOF; `nextEvent(timeout:)` then parses events as they arrive.
///
/// Thread-safety: not thread-safe; use from one thread at a time.
public final class HTTPStreamReader {
  /// The response status (2xx once `init` returned).
  public let status: Int
  /// The response header fields, in order.
  public let headers: [(String, String)]
  /// The current last event ID (see `SSEEvent.id`).
  public private(set) var lastEventID: String?
  /// The latest `retry:` value in milliseconds, if the server sent one.
  public private(set) var retry: Int?
  /// Whether the response body has ended (server closed the stream or the framed body is complete).
  public private(set) var isEnded = false
  /// Request target used (path and query).
  public let path: String

  private let connection: BufferedConnection
  private var chunked: ChunkedDecoder?
  private var remainingLength: Int?
  private var body = ByteBuffer()
  private var pendingCR = false
  /// How much of `body` (from its read cursor) holds no line break.
  private var scanned = 0
  private var atStart = true
  private var dataLines: [String] = []
  private var eventType: String?

  /// Opens the stream. `token` adds `Authorization: Bearer <token>`; `headers` may add e.g. `Last-Event-ID`.
  public init(
    host: String = "127.0.0.1", port: Int, path: String, token: String? = nil, headers: [(String, String)] = [],
    timeout: Duration = .seconds(10)
  ) throws {
    self.path = path
    let deadline = Deadline(timeout)
    let what = "event stream GET \(path) on \(host):\(port)"
    connection = BufferedConnection(socket: try TCPSocket.connect(host: host, port: port, deadline: deadline))
    var all = HTTPClient.authorized(headers, token)
    if !all.contains(where: { $0.0.caseInsensitiveEquals("Accept") }) { all.append(("Accept", "text/event-stream")) }
    if !all.contains(where: { $0.0.caseInsensitiveEquals("Cache-Control") }) {
      all.append(("Cache-Control", "no-cache"))
    }
    let request = HTTPClient.buildRequest(
      host: host, port: port, method: "GET", path: path, headers: all, body: nil, connectionClose: false)
    try connection.socket.sendAll(request, deadline: deadline)
    let head = try HTTPResponseHead.read(from: connection, deadline: deadline, what: what)
    guard (200..<300).contains(head.status) else {
      var body: [UInt8]
      do {
        body = try head.readBody(from: connection, requestMethod: "GET", deadline: deadline, what: what)
      } catch {
        body = connection.buffer.readAll()
      }
      connection.socket.close()
      throw TestSupportError.httpStatus(head.status, String(decoding: body, as: UTF8.self))
    }
    status = head.status
    self.headers = head.headers
    if !head.hasBody(requestMethod: "GET") {
      isEnded = true
    } else if head.isChunked {
      chunked = ChunkedDecoder()
    } else if let length = try head.contentLength() {
      remainingLength = length
    }
    try decodeBuffered()
  }

  deinit { connection.socket.close() }

  /// The first value of a response header, compared case-insensitively.
  public func header(_ name: String) -> String? {
    headers.first { $0.0.caseInsensitiveEquals(name) }?.1
  }

  /// Returns the next dispatched event, or nil if none completed within `timeout`. Comment lines are ignored.
  /// Throws `TestSupportError.connectionClosed` once the stream has ended and no complete event remains.
  public func nextEvent(timeout: Duration = .seconds(10)) throws -> SSEEvent? {
    let deadline = Deadline(timeout)
    while true {
      if let event = try parseBufferedEvent() { return event }
      if isEnded {
        throw TestSupportError.connectionClosed("event stream \(path) ended" + pendingDescription())
      }
      if connection.socket.isClosed {
        throw TestSupportError.connectionClosed("event stream \(path) was closed locally")
      }
      switch try connection.socket.read(deadline: deadline, resetIsEOF: true) {
      case .data(let bytes):
        connection.buffer.append(bytes)
        try decodeBuffered()
      case .timedOut:
        return nil
      case .eof:
        if chunked != nil && !(chunked?.isFinished ?? true) || (remainingLength ?? 0) > 0 {
          isEnded = true
          throw TestSupportError.connectionClosed(
            "event stream \(path) dropped mid-body (framing incomplete)" + pendingDescription())
        }
        isEnded = true
      }
    }
  }

  /// Returns the next event satisfying `predicate`, skipping others; throws on timeout or end of stream.
  public func nextEvent(timeout: Duration = .seconds(10), where predicate: (SSEEvent) throws -> Bool) throws
    -> SSEEvent
  {
    let deadline = Deadline(timeout)
    var skipped: [SSEEvent] = []
    while true {
      guard let event = try nextEvent(timeout: max(.zero, deadline.instant - ContinuousClock.now)) else {
        throw TestSupportError.timeout(
          "no matching event on \(path) within \(timeout.shortDescription); skipped \(skipped.count), last ones: "
            + skipped.suffix(5).map(\.description).joined(separator: "; "))
      }
      if try predicate(event) { return event }
      skipped.append(event)
    }
  }

  /// Closes the connection; idempotent.
  public func close() { connection.socket.close() }

  // MARK: Parsing

  private func pendingDescription() -> String {
    dataLines.isEmpty && body.isEmpty ? "" : " (an unterminated event was discarded: \(debugText(body.readable)))"
  }

  /// Moves body bytes from the socket buffer into `body`, removing the transfer framing.
  private func decodeBuffered() throws {
    if var decoder = chunked {
      body.append(try decoder.decode(&connection.buffer))
      chunked = decoder
      if decoder.isFinished { isEnded = true }
    } else if let remaining = remainingLength {
      let take = min(remaining, connection.buffer.readableCount)
      body.append(connection.buffer.read(take))
      remainingLength = remaining - take
      if remaining - take == 0 { isEnded = true }
    } else if !isEnded {
      body.append(connection.buffer.readAll())
    }
  }

  /// Extracts one line terminated by CRLF, LF or CR.
  private func nextLine() -> [UInt8]? {
    if pendingCR, !body.isEmpty {
      if body.peek(0) == 0x0A {
        body.skip(1)
        scanned = max(0, scanned - 1)
      }
      pendingCR = false
    }
    if atStart, body.readableCount >= 3 {
      if body.peek(0) == 0xEF && body.peek(1) == 0xBB && body.peek(2) == 0xBF {
        body.skip(3)
        scanned = max(0, scanned - 3)
      }
      atStart = false
    }
    // Bytes already searched for a line break are not searched again when more arrive.
    guard let length = body.firstLineBreak(from: scanned) else {
      scanned = body.readableCount
      return nil
    }
    scanned = 0
    let terminator = body.peek(length)
    let line = body.read(length)
    body.skip(1)
    if terminator == 0x0D { pendingCR = true }
    atStart = false
    return line
  }

  private func parseBufferedEvent() throws -> SSEEvent? {
    while let line = nextLine() {
      if line.isEmpty {
        defer {
          dataLines = []
          eventType = nil
        }
        guard !dataLines.isEmpty else { continue }
        return SSEEvent(id: lastEventID, event: eventType, data: dataLines.joined(separator: "\n"))
      }
      if line.first == UInt8(ascii: ":") { continue }
      let field: String
      var value: ArraySlice<UInt8>
      if let colon = line.firstIndex(of: UInt8(ascii: ":")) {
        field = String(decoding: line[..<colon], as: UTF8.self)
        value = line[(colon + 1)...]
        if value.first == 0x20 { value = value.dropFirst() }
      } else {
        field = String(decoding: line, as: UTF8.self)
        value = []
      }
      let text = String(decoding: value, as: UTF8.self)
      switch field {
      case "event": eventType = text
      case "data": dataLines.append(text)
      case "id": if !value.contains(0) { lastEventID = text }
      case "retry": if !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) { retry = Int(text) }
      default: break
      }
    }
    return nil
  }
}
