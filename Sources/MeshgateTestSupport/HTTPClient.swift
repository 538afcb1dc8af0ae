import Foundation

/// A complete HTTP/1.1 response as received from the server.
public struct HTTPResponse: Sendable, CustomStringConvertible {
  /// The status code, e.g. `200`.
  public let status: Int
  /// The reason phrase from the status line (may be empty).
  public let reason: String
  /// Header fields in the order received, names as sent by the server.
  public let headers: [(String, String)]
  /// The decoded body (chunked transfer coding already removed).
  public let body: [UInt8]

  /// Creates a response value (mainly useful for tests of the helpers themselves).
  public init(status: Int, reason: String = "", headers: [(String, String)] = [], body: [UInt8] = []) {
    self.status = status
    self.reason = reason
    self.headers = headers
    self.body = body
  }

  /// The first value of the header `name`, compared case-insensitively; nil if absent.
  public func header(_ name: String) -> String? {
    headers.first { $0.0.caseInsensitiveEquals(name) }?.1
  }

  /// Every value of the header `name` (case-insensitive), in order.
  public func headerValues(_ name: String) -> [String] {
    headers.filter { $0.0.caseInsensitiveEquals(name) }.map(\.1)
  }

  /// The body decoded as UTF-8 (invalid sequences replaced).
  public var text: String { String(decoding: body, as: UTF8.self) }

  /// The body parsed with `JSONSerialization` (fragments allowed).
  public func json() throws -> Any {
    do {
      return try JSONSerialization.jsonObject(with: Data(body), options: [.fragmentsAllowed])
    } catch {
      throw TestSupportError.invalidJSON("HTTP \(status) body is not JSON (\(error)): \(debugText(body))")
    }
  }

  /// The body parsed as a JSON object; throws if it is not one.
  public func jsonObject() throws -> [String: Any] {
    guard let object = try json() as? [String: Any] else {
      throw TestSupportError.invalidJSON("HTTP \(status) body is not a JSON object: \(debugText(body))")
    }
    return object
  }

  /// The body parsed as a JSON array; throws if it is not one.
  public func jsonArray() throws -> [Any] {
    guard let array = try json() as? [Any] else {
      throw TestSupportError.invalidJSON("HTTP \(status) body is not a JSON array: \(debugText(body))")
    }
    return array
  }

  /// The body decoded with `JSONDecoder` into `type`.
  public func decode<T: Decodable>(_ type: T.Type) throws -> T {
    do {
      return try JSONDecoder().decode(type, from: Data(body))
    } catch {
      throw TestSupportError.invalidJSON(
        "cannot decode \(T.self) from HTTP \(status) body (\(error)): \(debugText(body))")
    }
  }

  /// `HTTP <status> <reason>`, the headers and (up to 2 KiB of) the body, for failure messages.
  public var description: String {
    var out = "HTTP \(status) \(reason)\n"
    for (name, value) in headers { out += "\(name): \(value)\n" }
    out += "\n" + debugText(body, limit: 2048)
    return out
  }
}

/// Blocking HTTP/1.1 client over plain POSIX sockets, for driving a server from tests.
///
/// Every call opens a fresh connection, sends `Connection: close`, and is bounded by a single overall timeout.
/// Use `HTTPConnection` for keep-alive and pipelining tests, and `raw(host:port:bytes:timeout:halfClose:)` for
/// deliberately malformed requests.
///
/// Instances just bundle a host, port, bearer token and timeout for the instance methods.
public struct HTTPClient: Sendable {
  /// Host used by the instance methods.
  public var host: String
  /// Port used by the instance methods.
  public var port: Int
  /// Bearer token sent by the instance methods, if any.
  public var token: String?
  /// Overall per-request timeout used by the instance methods.
  public var timeout: Duration

  /// Creates a client bound to one server (and optionally one peer token).
  public init(host: String = "127.0.0.1", port: Int, token: String? = nil, timeout: Duration = .seconds(10)) {
    self.host = host
    self.port = port
    self.token = token
    self.timeout = timeout
  }

  // MARK: Static API

  /// Sends one request and reads the whole response.
  ///
  /// Adds `Host` and `Connection: close` unless `headers` already contains them. Adds `Content-Length` when `body`
  /// is non-nil, unless `headers` contains a `Content-Length` (used verbatim; an empty value means "send no
  /// Content-Length at all", e.g. to provoke `411`) or a `Transfer-Encoding` (the body is then sent verbatim; see
  /// `chunkedEncode(_:)`). The response body is read by Content-Length, chunked decoding, or until EOF.
  public static func request(
    host: String = "127.0.0.1", port: Int, method: String, path: String, headers: [(String, String)] = [],
    body: [UInt8]? = nil, timeout: Duration = .seconds(10), sourceAddress: String? = nil
  ) throws -> HTTPResponse {
    let deadline = Deadline(timeout)
    let what = "\(method) \(path) on \(host):\(port)"
    let socket = try TCPSocket.connect(host: host, port: port, deadline: deadline, sourceAddress: sourceAddress)
    defer { socket.close() }
    let connection = BufferedConnection(socket: socket)
    let bytes = buildRequest(
      host: host, port: port, method: method, path: path, headers: headers, body: body, connectionClose: true)
    do {
      try socket.sendAll(bytes, deadline: deadline)
    } catch TestSupportError.connectionClosed(let message) {
      // The server may answer early (e.g. 413) and close; try to read that answer before failing.
      if let response = try? readResponse(from: connection, method: method, deadline: deadline, what: what) {
        return response
      }
      throw TestSupportError.connectionClosed("\(what): \(message)")
    }
    return try readResponse(from: connection, method: method, deadline: deadline, what: what)
  }

  /// `GET path`, with `Authorization: Bearer <token>` when `token` is given.
  public static func get(
    host: String = "127.0.0.1", port: Int, path: String, token: String? = nil, headers: [(String, String)] = [],
    timeout: Duration = .seconds(10)
  ) throws -> HTTPResponse {
    try request(
      host: host, port: port, method: "GET", path: path, headers: authorized(headers, token), timeout: timeout)
  }

  /// `POST path` with a JSON body (`Content-Type: application/json`).
  public static func post(
    host: String = "127.0.0.1", port: Int, path: String, json: String, token: String? = nil,
    headers: [(String, String)] = [], timeout: Duration = .seconds(10)
  ) throws -> HTTPResponse {
    try request(
      host: host, port: port, method: "POST", path: path, headers: jsonHeaders(authorized(headers, token)),
      body: Array(json.utf8), timeout: timeout)
  }

  /// `POST path` with a raw body and an optional `Content-Type`.
  public static func post(
    host: String = "127.0.0.1", port: Int, path: String, body: [UInt8], contentType: String? = nil,
    token: String? = nil, headers: [(String, String)] = [], timeout: Duration = .seconds(10)
  ) throws -> HTTPResponse {
    var all = authorized(headers, token)
    if let contentType, !all.contains(where: { $0.0.caseInsensitiveEquals("Content-Type") }) {
      all.append(("Content-Type", contentType))
    }
    return try request(host: host, port: port, method: "POST", path: path, headers: all, body: body, timeout: timeout)
  }

  /// `PUT path` with an optional JSON body (`Content-Length: 0` when `json` is nil).
  public static func put(
    host: String = "127.0.0.1", port: Int, path: String, json: String? = nil, token: String? = nil,
    headers: [(String, String)] = [], timeout: Duration = .seconds(10)
  ) throws -> HTTPResponse {
    try request(
      host: host, port: port, method: "PUT", path: path,
      headers: json == nil ? authorized(headers, token) : jsonHeaders(authorized(headers, token)),
      body: json.map { Array($0.utf8) } ?? [], timeout: timeout)
  }

  /// `PATCH path` with a JSON body.
  public static func patch(
    host: String = "127.0.0.1", port: Int, path: String, json: String, token: String? = nil,
    headers: [(String, String)] = [], timeout: Duration = .seconds(10)
  ) throws -> HTTPResponse {
    try request(
      host: host, port: port, method: "PATCH", path: path, headers: jsonHeaders(authorized(headers, token)),
      body: Array(json.utf8), timeout: timeout)
  }

  /// `DELETE path` without a body.
  public static func delete(
    host: String = "127.0.0.1", port: Int, path: String, token: String? = nil, headers: [(String, String)] = [],
    timeout: Duration = .seconds(10)
  ) throws -> HTTPResponse {
    try request(
      host: host, port: port, method: "DELETE", path: path, headers: authorized(headers, token), timeout: timeout)
  }

  /// Writes `bytes` verbatim and returns everything the server sends back until it closes the connection or
  /// `timeout` passes (whatever arrived by then is returned; a timeout is not an error). With `halfClose`, the
  /// sending side is shut down after writing. A connection reset is treated as end of stream.
  public static func raw(
    host: String = "127.0.0.1", port: Int, bytes: [UInt8], timeout: Duration = .seconds(5), halfClose: Bool = false
  ) throws -> [UInt8] {
    let deadline = Deadline(timeout)
    let socket = try TCPSocket.connect(host: host, port: port, deadline: deadline)
    defer { socket.close() }
    do {
      try socket.sendAll(bytes, deadline: deadline)
    } catch TestSupportError.connectionClosed {
      // The server may reject early and close; still collect what it said.
    } catch TestSupportError.timeout {
      // Could not write everything in time; fall through and collect any answer.
    }
    if halfClose { socket.shutdownWrite() }
    var received: [UInt8] = []
    while true {
      switch try socket.read(deadline: deadline, resetIsEOF: true) {
      case .data(let chunk): received += chunk
      case .eof, .timedOut: return received
      }
    }
  }

  /// Encodes `chunks` with the chunked transfer coding, including the terminating zero-size chunk. Pass the result as
  /// `body` together with a `("Transfer-Encoding", "chunked")` header.
  public static func chunkedEncode(_ chunks: [[UInt8]]) -> [UInt8] {
    var out: [UInt8] = []
    for chunk in chunks where !chunk.isEmpty {
      out += Array(String(chunk.count, radix: 16).utf8) + [0x0D, 0x0A] + chunk + [0x0D, 0x0A]
    }
    out += Array("0\r\n\r\n".utf8)
    return out
  }

  /// `request(...)` run on a dedicated thread, for async tests that must not block the cooperative pool.
  public static func requestAsync(
    host: String = "127.0.0.1", port: Int, method: String, path: String, headers: [(String, String)] = [],
    body: [UInt8]? = nil, timeout: Duration = .seconds(10)
  ) async throws -> HTTPResponse {
    try await onDedicatedThread {
      try request(host: host, port: port, method: method, path: path, headers: headers, body: body, timeout: timeout)
    }
  }

  // MARK: Instance API

  /// Sends a request to this client's server, adding its bearer token (if any, and unless `headers` has
  /// `Authorization`).
  public func request(method: String, path: String, headers: [(String, String)] = [], body: [UInt8]? = nil) throws
    -> HTTPResponse
  {
    try Self.request(
      host: host, port: port, method: method, path: path, headers: Self.authorized(headers, token), body: body,
      timeout: timeout)
  }

  /// `GET path` on this client's server.
  public func get(_ path: String, headers: [(String, String)] = []) throws -> HTTPResponse {
    try request(method: "GET", path: path, headers: headers)
  }

  /// `POST path` with a JSON body on this client's server.
  public func post(_ path: String, json: String, headers: [(String, String)] = []) throws -> HTTPResponse {
    try request(method: "POST", path: path, headers: Self.jsonHeaders(headers), body: Array(json.utf8))
  }

  /// `PUT path` with an optional JSON body on this client's server.
  public func put(_ path: String, json: String? = nil, headers: [(String, String)] = []) throws -> HTTPResponse {
    try request(
      method: "PUT", path: path, headers: json == nil ? headers : Self.jsonHeaders(headers),
      body: json.map { Array($0.utf8) } ?? [])
  }

  /// `PATCH path` with a JSON body on this client's server.
  public func patch(_ path: String, json: String, headers: [(String, String)] = []) throws -> HTTPResponse {
    try request(method: "PATCH", path: path, headers: Self.jsonHeaders(headers), body: Array(json.utf8))
  }

  /// `DELETE path` on this client's server.
  public func delete(_ path: String, headers: [(String, String)] = []) throws -> HTTPResponse {
    try request(method: "DELETE", path: path, headers: headers)
  }

  // MARK: Internals

  static func authorized(_ headers: [(String, String)], _ token: String?) -> [(String, String)] {
    guard let token, !headers.contains(where: { $0.0.caseInsensitiveEquals("Authorization") }) else { return headers }
    return headers + [("Authorization", "Bearer \(token)")]
  }

  static func jsonHeaders(_ headers: [(String, String)]) -> [(String, String)] {
    if headers.contains(where: { $0.0.caseInsensitiveEquals("Content-Type") }) { return headers }
    return headers + [("Content-Type", "application/json")]
  }

  static func hostHeader(host: String, port: Int) -> String {
    host.contains(":") && !host.hasPrefix("[") ? "[\(host)]:\(port)" : "\(host):\(port)"
  }

  static func buildRequest(
    host: String, port: Int, method: String, path: String, headers: [(String, String)], body: [UInt8]?,
    connectionClose: Bool
  ) -> [UInt8] {
    func has(_ name: String) -> Bool { headers.contains { $0.0.caseInsensitiveEquals(name) } }
    var head = "\(method) \(path) HTTP/1.1\r\n"
    if !has("Host") { head += "Host: \(hostHeader(host: host, port: port))\r\n" }
    if connectionClose && !has("Connection") { head += "Connection: close\r\n" }
    for (name, value) in headers {
      if name.caseInsensitiveEquals("Content-Length") && value.isEmpty { continue }
      head += "\(name): \(value)\r\n"
    }
    if let body, !has("Content-Length"), !has("Transfer-Encoding") {
      head += "Content-Length: \(body.count)\r\n"
    }
    head += "\r\n"
    return Array(head.utf8) + (body ?? [])
  }

  static func readResponse(from connection: BufferedConnection, method: String, deadline: Deadline, what: String)
    throws -> HTTPResponse
  {
    let head = try HTTPResponseHead.read(from: connection, deadline: deadline, what: what)
    let body = try head.readBody(from: connection, requestMethod: method, deadline: deadline, what: what)
    return HTTPResponse(status: head.status, reason: head.reason, headers: head.headers, body: body)
  }
}

/// A persistent (keep-alive) HTTP/1.1 connection for tests of connection reuse, pipelining and server-side closing.
///
/// Not thread-safe: use from one thread at a time.
public final class HTTPConnection {
  private let connection: BufferedConnection
  /// Host this connection was opened to.
  public let host: String
  /// Port this connection was opened to.
  public let port: Int

  /// Connects to `host:port` within `timeout`.
  public init(host: String = "127.0.0.1", port: Int, timeout: Duration = .seconds(10)) throws {
    self.host = host
    self.port = port
    connection = BufferedConnection(socket: try TCPSocket.connect(host: host, port: port, deadline: Deadline(timeout)))
  }

  deinit { connection.socket.close() }

  /// Sends one request on this connection (adding `Host` and `Content-Length` as `HTTPClient.request` does, but no
  /// `Connection` header unless given) and reads its response.
  public func send(
    method: String, path: String, headers: [(String, String)] = [], body: [UInt8]? = nil,
    timeout: Duration = .seconds(10)
  ) throws -> HTTPResponse {
    let deadline = Deadline(timeout)
    let bytes = HTTPClient.buildRequest(
      host: host, port: port, method: method, path: path, headers: headers, body: body, connectionClose: false)
    try connection.socket.sendAll(bytes, deadline: deadline)
    return try HTTPClient.readResponse(
      from: connection, method: method, deadline: deadline, what: "\(method) \(path) on \(host):\(port)")
  }

  /// Writes bytes verbatim (e.g. several pipelined requests); read the answers with `readResponse`.
  public func sendRaw(_ bytes: [UInt8], timeout: Duration = .seconds(10)) throws {
    try connection.socket.sendAll(bytes, deadline: Deadline(timeout))
  }

  /// Reads the next response; `method` tells whether a body is expected (`HEAD` has none).
  public func readResponse(method: String = "GET", timeout: Duration = .seconds(10)) throws -> HTTPResponse {
    try HTTPClient.readResponse(
      from: connection, method: method, deadline: Deadline(timeout), what: "response on \(host):\(port)")
  }

  /// Whether the server has closed the connection, waiting up to `within` for that to happen. Unread response bytes
  /// are kept for `readResponse`.
  public func isClosedByPeer(within: Duration = .zero) throws -> Bool {
    if connection.sawEOF { return true }
    let deadline = Deadline(within)
    while true {
      let more: Bool?
      do {
        more = try connection.tryFill(deadline: deadline)
      } catch {
        return true  // a reset counts as closed
      }
      guard let more else { return false }  // timed out: still open
      if !more { return true }
    }
  }

  /// Closes the connection; idempotent.
  public func close() { connection.socket.close() }
}
