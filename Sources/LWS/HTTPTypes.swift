/// Value types of the HTTP and WebSocket surface the ``Server`` exposes.
///
/// None of them carries a C type: they are built on the service thread from the
/// lws header tables and are `Sendable`, so handlers may pass them anywhere.

/// An HTTP request method.
public enum HTTPMethod: String, Sendable, Hashable, CaseIterable {
  case get = "GET"
  case head = "HEAD"
  case post = "POST"
  case put = "PUT"
  case patch = "PATCH"
  case delete = "DELETE"
  case options = "OPTIONS"

  /// Whether requests with this method carry a body that lws delivers through body callbacks.
  public var hasRequestBody: Bool {
    switch self {
    case .post, .put, .patch: true
    default: false
    }
  }
}

/// Request headers, with case-insensitive lookup. Only the headers the server copies out of lws are present.
public struct HTTPHeaders: Sendable, Sequence {
  private var fields: [(name: String, value: String)]

  /// Creates headers from `(name, value)` pairs; names are lowercased.
  public init(_ fields: [(String, String)] = []) {
    self.fields = fields.map { (name: $0.0.lowercased(), value: $0.1) }
  }

  /// The first value of the header `name`, if present.
  public subscript(_ name: String) -> String? {
    let lowered = name.lowercased()
    return fields.first { $0.name == lowered }?.value
  }

  /// Appends a header.
  public mutating func add(_ name: String, _ value: String) {
    fields.append((name: name.lowercased(), value: value))
  }

  public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> {
    fields.makeIterator()
  }
}

/// Decoded query parameters in their original order. lws percent-decodes each `key=value` fragment.
public struct QueryItems: Sendable {
  /// The `(name, value)` pairs; a bare `flag` has an empty value.
  public let items: [(name: String, value: String)]

  /// Creates query items from pairs.
  public init(_ items: [(String, String)] = []) {
    self.items = items.map { (name: $0.0, value: $0.1) }
  }

  /// Parses already percent-decoded `key=value` fragments.
  public init(fragments: [String]) {
    self.items = fragments.map { fragment in
      guard let equals = fragment.firstIndex(of: "=") else { return (name: fragment, value: "") }
      return (name: String(fragment[..<equals]), value: String(fragment[fragment.index(after: equals)...]))
    }
  }

  /// The first value for `name`.
  public subscript(_ name: String) -> String? {
    items.first { $0.name == name }?.value
  }
}

/// The head of an HTTP request (or of a WebSocket upgrade).
public struct HTTPRequestHead: Sendable {
  /// The method.
  public let method: HTTPMethod
  /// The percent-decoded path, without the query string.
  public let path: String
  /// The decoded query parameters.
  public let query: QueryItems
  /// Selected request headers.
  public let headers: HTTPHeaders
  /// The `Content-Length`, when the client sent one.
  public let contentLength: Int?
  /// The client's IP address as text.
  public let remoteAddress: String
  /// The request came over TLS (`https://`, `wss://`).
  public let isTLS: Bool
  /// What the delegate chose to remember of this head when it was asked about its body
  /// (``RequestBodyPolicy/tag``): given back with the request, so that what it decided from the head is not decided
  /// again. Nil for a request without a body (the delegate is not asked).
  public internal(set) var tag: Int?

  public init(
    method: HTTPMethod, path: String, query: QueryItems = QueryItems(), headers: HTTPHeaders = HTTPHeaders(),
    contentLength: Int? = nil, remoteAddress: String = "", isTLS: Bool = false
  ) {
    self.isTLS = isTLS
    self.method = method
    self.path = path
    self.query = query
    self.headers = headers
    self.contentLength = contentLength
    self.remoteAddress = remoteAddress
  }
}

/// How a request's body is taken, as the delegate decides from its head (``ServerDelegate/bodyPolicy(for:)``).
public struct RequestBodyPolicy: Sendable, Equatable {
  /// The largest body accepted; a larger `Content-Length` is answered with 413.
  public var limit: Int
  /// Whether the body is streamed (see ``ServerDelegate/bodyPolicy(for:)``).
  public var streamed: Bool
  /// Anything the delegate wants back with the request (``HTTPRequestHead/tag``), e.g. which route it matched.
  public var tag: Int?

  public init(limit: Int, streamed: Bool = false, tag: Int? = nil) {
    self.limit = limit
    self.streamed = streamed
    self.tag = tag
  }
}

/// A complete HTTP request: head and the collected body.
public struct HTTPRequest: Sendable {
  /// The identifier used to answer this request with ``Server/respond(to:with:)``.
  public let id: RequestID
  /// Method, path, query and headers.
  public let head: HTTPRequestHead
  /// The request body (empty when none was sent).
  public let body: [UInt8]

  public init(id: RequestID, head: HTTPRequestHead, body: [UInt8]) {
    self.id = id
    self.head = head
    self.body = body
  }
}

/// An HTTP response.
public struct HTTPResponse: Sendable {
  /// The status code.
  public var status: Int
  /// The `Content-Type`, if any.
  public var contentType: String?
  /// Extra headers (name without the trailing colon).
  public var headers: [(String, String)]
  /// The body bytes. Ignored for streaming responses.
  public var body: [UInt8]
  /// When true, only the head is sent now; the body follows through ``Server/writeStream(_:_:)``
  /// and ends with ``Server/endStream(_:)`` (the connection closes at the end, as HTTP/1.1 requires
  /// for a body without a length).
  public var isStream: Bool
  /// When true, the body is not sent (the answer to a `HEAD` request), but `Content-Length` still is.
  public var omitBody: Bool
  /// When set, the body is this byte range of a file, read in 64 KiB pieces as the socket drains (`body` is ignored).
  public var file: HTTPFileBody?

  public init(
    status: Int, contentType: String? = nil, headers: [(String, String)] = [], body: [UInt8] = [],
    isStream: Bool = false, omitBody: Bool = false
  ) {
    self.status = status
    self.contentType = contentType
    self.headers = headers
    self.body = body
    self.isStream = isStream
    self.omitBody = omitBody
  }
}

extension HTTPResponse {
  /// The reason phrase for a status line (RFC 9110), "Unknown" for codes it does not name.
  public static func reasonPhrase(_ status: Int) -> String {
    switch status {
    case 200: "OK"
    case 400: "Bad Request"
    case 401: "Unauthorized"
    case 403: "Forbidden"
    case 404: "Not Found"
    case 405: "Method Not Allowed"
    case 409: "Conflict"
    case 413: "Content Too Large"
    case 421: "Misdirected Request"
    case 426: "Upgrade Required"
    case 429: "Too Many Requests"
    case 431: "Request Header Fields Too Large"
    case 500: "Internal Server Error"
    case 503: "Service Unavailable"
    default: "Unknown"
    }
  }
}

/// A byte range of a file to send as a response body.
public struct HTTPFileBody: Sendable {
  /// The file's path.
  public var path: String
  /// The first byte to send.
  public var offset: Int
  /// How many bytes to send (the `Content-Length`).
  public var length: Int

  public init(path: String, offset: Int, length: Int) {
    self.path = path
    self.offset = offset
    self.length = length
  }
}

/// Identifies one HTTP exchange on the server. Unique for the life of the server.
public struct RequestID: Hashable, Sendable, CustomStringConvertible {
  /// The raw number.
  public let rawValue: UInt64

  public init(_ rawValue: UInt64) { self.rawValue = rawValue }

  public var description: String { "r\(rawValue)" }
}

/// Identifies one WebSocket connection on the server. Unique for the life of the server.
public struct WebSocketID: Hashable, Sendable, CustomStringConvertible {
  /// The raw number.
  public let rawValue: UInt64

  public init(_ rawValue: UInt64) { self.rawValue = rawValue }

  public var description: String { "ws\(rawValue)" }
}

/// A complete WebSocket message received from a client.
public enum WebSocketMessage: Sendable, Equatable {
  case text([UInt8])
  case binary([UInt8])
}

/// What the delegate decides about a WebSocket upgrade.
public enum WebSocketDecision: Sendable {
  /// Complete the upgrade.
  case accept
  /// Refuse it with an HTTP status and a body.
  case reject(HTTPResponse)
}

/// The outcome of queueing a WebSocket message.
public enum SendResult: Sendable, Equatable {
  /// Queued; it will be written when the socket is writable.
  case queued
  /// The connection's send queue is over its byte limit; nothing was queued.
  case queueFull
  /// The connection is closed or closing.
  case closed
}
