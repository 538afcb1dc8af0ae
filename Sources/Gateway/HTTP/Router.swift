/// Routes and their matching: each feature declares its routes (with their handlers) beside its code, and the router
/// is their union.
///
/// Layer 6 (surface). `/api/v1/openapi.json` is generated from the routes, so the document describes exactly
/// the routes that exist; the router answers 404 for unknown paths and 405 (with `Allow`) for known paths
/// with the wrong method.
import LWS
import MeshCore

/// How a route takes its request body.
enum RequestBodyKind: Sendable, Equatable {
  /// Collected in memory up to `--max-body-bytes` (JSON, or none).
  case collected
  /// Raw bytes streamed to the handler as they arrive, up to `--max-transfer-bytes` (a file upload).
  case upload
  /// Raw bytes streamed with no size limit (a byte stream's writer).
  case unbounded
}

/// Who may call a route.
enum RouteAccess: Sendable, Equatable {
  /// Anyone who may reach the node (health, metrics, the OpenAPI document, creating a peer).
  case open
  /// A peer token (`Authorization: Bearer`).
  case peer
  /// The node's admin token (Admin.swift).
  case admin
}

/// What a route's connection becomes, and how it takes its body.
enum RouteKind: Sendable, Equatable {
  /// A request with a JSON body (or none) and one answer.
  case plain
  /// A raw body streamed to the handler, up to `--max-transfer-bytes` (a file upload).
  case upload
  /// A raw body streamed with no size limit (a byte stream's writer).
  case unboundedBody
  /// A `200` answer starts the peer's Server-Sent Events stream; the token may come as `?token=`.
  case eventStream
  /// A WebSocket endpoint (a plain GET is answered `426`); the token may come as `?token=`.
  case webSocket
}

/// What a query parameter's value must be: the one source of both its documented schema and the check every request
/// goes through before its handler runs (``Route/checkQuery(_:)``).
enum QueryRule: Sendable, Equatable {
  /// Any text (the handler reads it).
  case text
  /// A decimal integer (ASCII digits, a leading `-` allowed) from `minimum` to `maximum` (no upper bound when nil).
  case integer(minimum: Int64, maximum: Int64? = nil)
  /// One of these words.
  case oneOf([String])
  /// A cursor the node issued: empty (the start), or up to 18 ASCII digits.
  case numericCursor

  /// The JSON Schema the OpenAPI document gives the parameter.
  var schema: JSONValue {
    switch self {
    case .text: ["type": "string"]
    case .integer(let minimum, let maximum):
      maximum.map { ["type": "integer", "minimum": .int(minimum), "maximum": .int($0)] }
        ?? ["type": "integer", "minimum": .int(minimum)]
    case .oneOf(let values): ["type": "string", "enum": .array(values.map { .string($0) })]
    case .numericCursor: Schemas.cursorQuery
    }
  }

  /// The rule in words, for the message of a refusal.
  var requirement: String {
    switch self {
    case .text: "text"
    case .integer(let minimum, let maximum):
      maximum.map { "an integer from \(minimum) to \($0)" } ?? "an integer of at least \(minimum)"
    case .oneOf(let values): "one of \(values.joined(separator: ", "))"
    case .numericCursor: "a cursor this node issued (empty, or up to 18 digits)"
    }
  }

  /// Whether `value` keeps the rule.
  func accepts(_ value: String) -> Bool {
    switch self {
    case .text: return true
    case .integer(let minimum, let maximum):
      let digits = value.hasPrefix("-") ? value.dropFirst() : value[...]
      guard !digits.isEmpty, digits.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let number = Int64(value) else {
        return false
      }
      return number >= minimum && maximum.map { number <= $0 } ?? true
    case .oneOf(let values): return values.contains(value)
    case .numericCursor: return value.utf8.count <= 18 && value.utf8.allSatisfy { (0x30...0x39).contains($0) }
    }
  }
}

/// A query parameter a route documents, and the rule its value must keep.
struct QueryParameter: Sendable {
  let name: String
  let description: String
  let rule: QueryRule
  /// Whether a request without it is refused (by its handler, whose message says what to send).
  let required: Bool

  init(_ name: String, _ description: String, _ rule: QueryRule = .text, required: Bool = false) {
    self.name = name
    self.description = description
    self.rule = rule
    self.required = required
  }

  /// The parameter's JSON Schema in the OpenAPI document.
  var schema: JSONValue { rule.schema }

  /// Refuses `value` (400) unless it keeps the rule; the message names the parameter and the rule.
  func check(_ value: String) throws(APIError) {
    guard rule.accepts(value) else {
      throw APIError.badRequest("\(name) must be \(rule.requirement), not \(value.debugDescription)")
    }
  }

  /// A page size from 1 to `max` (``Paging``).
  static func limit(max: Int) -> QueryParameter {
    QueryParameter("limit", "Page size, 1–\(max), default 100.", .integer(minimum: 1, maximum: Int64(max)))
  }
  /// The opaque cursor of a paged list.
  static let cursor = QueryParameter("cursor", "The nextCursor of the previous page.")
}

/// What a WebSocket route does with an upgrade the pipeline let through (Host, Origin, HTTPS, and the peer token when
/// the route needs one: `peer` is its peer): whether to complete it, and the socket once it is open.
struct WebSocketUpgrade: Sendable {
  /// What the socket becomes; every later callback for it goes to its owner.
  let connection: ConnectionKind
  let accept: @Sendable (isolated Node, HTTPRequestHead, StoredPeer?) -> WebSocketDecision
  let opened: @Sendable (isolated Node, WebSocketID, HTTPRequestHead, StoredPeer?) -> Void
}

extension WebSocketUpgrade {
  /// The answer to a plain request on a WebSocket endpoint: `426` with how to connect.
  static func required(_ context: RequestContext) -> APIError {
    APIError(
      status: 426, code: "upgrade_required",
      message: "this endpoint is a WebSocket: connect with ws://host:port\(context.request.head.path)?token=<token>",
      headers: [("upgrade", "websocket")])
  }
}

/// An OpenAPI link from a route's `2xx` answer to an operation that takes an id the answer carries: what lets a
/// client (and schemathesis's stateful phase) go from creating an object to using it.
struct RouteLink: Sendable {
  /// The operation the id goes to.
  let operationID: String
  /// Its path parameter that takes the id.
  let parameter: String
  /// Where the id is in the answer's JSON body (a JSON pointer, such as `/session/id`).
  let pointer: String
}

extension [RouteLink] {
  /// The id at `pointer` of the answer, as `parameter` of each of `operations`.
  static func id(at pointer: String, as parameter: String, to operations: [String]) -> [RouteLink] {
    operations.map { RouteLink(operationID: $0, parameter: parameter, pointer: pointer) }
  }
}

/// One REST route: where it is, who may call it, how it takes its body, what it answers (for the OpenAPI document),
/// and the handler that runs it on the node's executor.
///
/// A route is documented by one text: its first lines are the summary, then one line per answer, `NNN description`.
/// A `2xx` answer carries the `returns` schema, `101` nothing, any other the error schema.
///
/// A class (immutable, so `Sendable`): a request's context carries the route it matched through every step of the
/// pipeline, and passing it on costs one reference rather than a copy of every field.
final class Route: Sendable {
  /// Runs the request on the node (isolated to it: handlers call node methods synchronously).
  typealias Handler = @Sendable (isolated Node, RequestContext) async throws -> HTTPResponse

  let method: HTTPMethod
  let pattern: String
  let operationID: String
  let access: RouteAccess
  let kind: RouteKind
  let requestSchema: JSONValue?
  let queryParameters: [QueryParameter]
  let summary: String
  let responses: [(status: Int, description: String, schema: JSONValue?)]
  /// Links from the first `2xx` answer to the operations that take the ids it carries.
  let links: [RouteLink]
  /// A WebSocket route's upgrade (``RouteKind/webSocket``; the handler answers a plain request).
  let upgrade: WebSocketUpgrade?
  let handler: Handler

  init(
    _ method: HTTPMethod, _ pattern: String, _ operationID: String, access: RouteAccess = .peer,
    kind: RouteKind = .plain, body requestSchema: JSONValue? = nil, returns: JSONValue? = nil,
    query: [QueryParameter] = [], links: [RouteLink] = [], upgrade: WebSocketUpgrade? = nil, _ documentation: String,
    handler: @escaping Handler
  ) {
    precondition((kind == .webSocket) == (upgrade != nil), "\(operationID): a WebSocket route declares its upgrade")
    self.method = method
    self.pattern = pattern
    self.operationID = operationID
    self.access = access
    self.kind = kind
    self.requestSchema = requestSchema
    self.queryParameters = query
    self.links = links
    self.upgrade = upgrade
    self.handler = handler
    var summary: [Substring] = []
    var responses: [(status: Int, description: String, schema: JSONValue?)] = []
    for line in documentation.split(separator: "\n") {
      if let status = Int(line.prefix(3)), line.dropFirst(3).first == " ", (100..<600).contains(status) {
        let schema = status == 101 ? nil : (200..<300).contains(status) ? returns : Schemas.error
        responses.append((status, String(line.dropFirst(4)), schema))
      } else {
        precondition(responses.isEmpty, "\(operationID): the summary comes before the answers")
        summary.append(line)
      }
    }
    self.summary = summary.joined(separator: " ")
    self.responses = responses
  }

  /// Whether a peer token is required.
  var authenticated: Bool { access == .peer }
  /// Whether the node's admin token is required (Admin.swift).
  var admin: Bool { access == .admin }
  /// How the request body is taken (JSON collected, or raw bytes streamed).
  var body: RequestBodyKind {
    switch kind {
    case .upload: .upload
    case .unboundedBody: .unbounded
    case .plain, .eventStream, .webSocket: .collected
    }
  }
  /// Whether the peer token may come as `?token=` (for browsers, which cannot set headers on EventSource and
  /// WebSocket).
  var acceptsQueryToken: Bool { kind == .eventStream || kind == .webSocket }
  /// A `200` answer starts the peer's Server-Sent Events stream on the connection.
  var opensEventStream: Bool { kind == .eventStream }
  /// The route is a WebSocket endpoint (a plain GET is answered `426`).
  var isWebSocket: Bool { kind == .webSocket }

  /// The request body is raw bytes (`application/octet-stream`), streamed rather than JSON.
  var rawRequestBody: Bool { body != .collected }

  /// The pattern's segments, parsed (the router does this once per route).
  var patternSegments: [Router.PatternSegment] {
    pattern.split(separator: "/", omittingEmptySubsequences: true).map(Router.PatternSegment.init)
  }

  /// Whether the pattern has a `{name}` segment (the resource it names may not exist: 404).
  var hasPathParameters: Bool {
    patternSegments.contains { if case .parameter = $0 { true } else { false } }
  }

  /// Refuses (400) a documented query parameter whose value breaks its rule, every occurrence of it: the one check
  /// every request's query goes through before its handler runs, so no handler can miss one.
  func checkQuery(_ query: QueryItems) throws(APIError) {
    for parameter in queryParameters where parameter.rule != .text {
      for item in query.items where item.name == parameter.name { try parameter.check(item.value) }
    }
  }

  /// The path parameters if `pathSegments` match the pattern.
  func match(_ pathSegments: [Substring]) -> [String: String]? {
    Router.parameters(of: patternSegments, in: pathSegments)
  }
}

/// The outcome of routing a request.
enum RouteMatch: Sendable {
  case found(Route, parameters: [String: String])
  case methodNotAllowed(pattern: String, allowed: [HTTPMethod])
  case notFound

  /// The matched route, if one matched.
  var route: Route? {
    if case .found(let route, _) = self { return route }
    return nil
  }
}

/// All routes of the node.
struct Router: Sendable {
  let routes: [Route]
  /// The indexes of the routes with each number of path segments, in table order, with their patterns parsed once:
  /// a request is compared only with routes of its own length, segment by segment, without string slicing.
  let routesBySegmentCount: [Int: [(index: Int, segments: [PatternSegment])]]

  /// One segment of a route's pattern.
  enum PatternSegment: Sendable {
    /// Matches exactly this text.
    case literal(String)
    /// `{name}`: matches any non-empty segment, which becomes the parameter `name`.
    case parameter(String)

    init(_ segment: Substring) {
      self =
        segment.hasPrefix("{") && segment.hasSuffix("}")
        ? .parameter(String(segment.dropFirst().dropLast())) : .literal(String(segment))
    }
  }

  /// The path parameters if `pathSegments` match `pattern`, segment by segment; nil when they do not.
  static func parameters(of pattern: [PatternSegment], in pathSegments: [Substring]) -> [String: String]? {
    guard pattern.count == pathSegments.count else { return nil }
    var parameters: [String: String] = [:]
    for (segment, actual) in zip(pattern, pathSegments) {
      switch segment {
      case .literal(let text):
        guard actual == text else { return nil }
      case .parameter(let name):
        guard !actual.isEmpty else { return nil }
        parameters[name] = String(actual)
      }
    }
    return parameters
  }

  init(routes: [Route]) {
    self.routes = routes
    var buckets: [Int: [(index: Int, segments: [PatternSegment])]] = [:]
    for (index, route) in routes.enumerated() {
      let segments = route.patternSegments
      buckets[segments.count, default: []].append((index, segments))
    }
    self.routesBySegmentCount = buckets
  }

  func match(method: HTTPMethod, path: String) -> RouteMatch { matchIndexed(method: method, path: path).match }

  /// The route a request matches, with its index in ``routes`` when one was found (``match(routeAt:path:)`` takes it
  /// back without searching again).
  func matchIndexed(method: HTTPMethod, path: String) -> (match: RouteMatch, index: Int?) {
    let pathSegments = path.split(separator: "/", omittingEmptySubsequences: true)
    var allowed: [HTTPMethod] = []
    var pattern = ""
    for (index, segments) in routesBySegmentCount[pathSegments.count] ?? [] {
      guard let parameters = Self.parameters(of: segments, in: pathSegments) else { continue }
      let route = routes[index]
      if route.method == method || (method == .head && route.method == .get) {
        return (.found(route, parameters: parameters), index)
      }
      allowed.append(route.method)
      pattern = route.pattern
    }
    if allowed.isEmpty { return (.notFound, nil) }
    if allowed.contains(.get) { allowed.append(.head) }
    return (.methodNotAllowed(pattern: pattern, allowed: allowed), nil)
  }

  /// The route at `index` (found for this request before) with the parameters `path` gives it; nil if the index is
  /// not a route this path matches.
  func match(routeAt index: Int, path: String) -> RouteMatch? {
    guard routes.indices.contains(index) else { return nil }
    let route = routes[index]
    let pathSegments = path.split(separator: "/", omittingEmptySubsequences: true)
    guard let parameters = Self.parameters(of: route.patternSegments, in: pathSegments) else { return nil }
    return .found(route, parameters: parameters)
  }

  /// Every route of the node: the union of the features' tables, in the order of the OpenAPI document.
  static let standard = Router(
    routes: SystemRoutes.routes + PeerRoutes.routes + EventRoutes.routes + DiscoveryRoutes.routes
      + AdminRoutes.routes + PeerRoutes.adminRoutes + SessionRoutes.routes + InvitationRoutes.routes
      + TransceiveRoutes.routes + JobRoutes.routes
      + ChatRoutes.routes
      + PayloadRoutes.routes)

}

extension Router {
  /// The OpenAPI 3.1 document for these routes.
  func openAPIDocument(version: String) -> JSONValue {
    var paths = JSONObject()
    for route in routes {
      var operation = JSONObject()
      operation["operationId"] = .string(route.operationID)
      operation["summary"] = .string(route.summary)
      var parameters: [JSONValue] = []
      for case .parameter(let name) in route.patternSegments {
        parameters.append([
          "name": .string(name), "in": "path", "required": true,
          "schema": name == "serviceType" ? Schemas.serviceType : ["type": "string"],
        ])
      }
      for query in route.queryParameters {
        parameters.append([
          "name": .string(query.name), "in": "query", "required": .bool(query.required),
          "description": .string(query.description),
          "schema": query.schema,
        ])
      }
      if !parameters.isEmpty { operation["parameters"] = .array(parameters) }
      if let schema = route.requestSchema {
        // A body whose schema needs no member may be left out entirely (the handler takes an empty body).
        let needed = schema.objectValue?["required"] != nil || schema.objectValue?["minProperties"] != nil
        operation["requestBody"] = [
          "required": .bool(needed), "content": ["application/json": ["schema": schema]],
        ]
      } else if route.rawRequestBody {
        let schema: JSONValue = ["type": "string", "contentMediaType": "application/octet-stream"]
        operation["requestBody"] = ["required": true, "content": ["application/octet-stream": ["schema": schema]]]
      }
      var responses = JSONObject()
      let linked = route.responses.first { (200..<300).contains($0.status) }?.status
      for response in route.responses {
        var entry: JSONObject = ["description": .string(response.description)]
        if let schema = response.schema {
          entry["content"] = ["application/json": ["schema": schema]]
        }
        if response.status == linked, !route.links.isEmpty {
          var links = JSONObject()
          for link in route.links {
            let name = "\(link.operationID)By\(link.parameter.prefix(1).uppercased())\(link.parameter.dropFirst())"
            links[name] = [
              "operationId": .string(link.operationID),
              "parameters": [link.parameter: .string("$response.body#\(link.pointer)")],
            ]
          }
          entry["links"] = .object(links)
        }
        responses[String(response.status)] = .object(entry)
      }
      // Every peer route may also answer 401 (token) and 429 (the token's request rate); admin routes 401/403.
      var common: [(Int, String)] =
        route.authenticated
        ? [(401, "Missing or unknown token."), (429, "Over this token's request rate; see Retry-After.")]
        : route.admin ? [(401, "Missing or unknown admin token."), (403, "A peer token, not the admin token.")] : []
      // Any route may answer 400 (a malformed query or body), and one with a path parameter 404 (unknown id).
      common.append((400, "Invalid request: the message names the field and the rule."))
      // Every route answers only for the node's own names (DNS rebinding protection); a browser page from another
      // site may not change state or open a WebSocket; a JSON body must be sent as application/json.
      common.append((421, "The Host header names no name or address of this node (host_not_allowed)."))
      if route.method != .get || route.isWebSocket {
        common.append((403, "The Origin header names another site (origin_not_allowed)."))
      }
      if route.requestSchema != nil { common.append((415, "The body is not sent as application/json.")) }
      // The server refuses a request body over --max-body-bytes before a handler sees it (uploads and stream PUTs
      // have their own limits, declared with their routes).
      if route.method.hasRequestBody && !route.rawRequestBody {
        common.append((413, "payload_too_large: the body is over --max-body-bytes (1 MiB unless configured)."))
      }
      if route.hasPathParameters { common.append((404, "Not found for this caller.")) }
      // Any request: a head over 16 KiB (431), or a connection over --max-connections (503 too_many_connections
      // with Retry-After).
      common.append((431, "request_header_fields_too_large: the request head (cookies included) is over 16 KiB."))
      // Any write may find the data directory full, failing or gone (StorageErrors.swift, DataDirectoryHealth.swift).
      if route.method != .get {
        common.append(
          (
            503,
            "storage_unavailable (an I/O error; Retry-After) or data_directory_lost (the data directory was deleted "
              + "or replaced while the node ran; /healthz says so too): nothing was stored. Also "
              + "too_many_connections (Retry-After) when the node is at --max-connections."
          ))
        common.append((507, "storage_full: the data directory's disk is full; nothing was stored."))
      } else {
        common.append((503, "too_many_connections: the node is at --max-connections; retry after Retry-After."))
      }
      for (status, description) in common where responses[String(status)] == nil {
        responses[String(status)] = [
          "description": .string(description), "content": ["application/json": ["schema": Schemas.error]],
        ]
      }
      operation["responses"] = .object(responses)
      if route.authenticated { operation["security"] = [["bearer": []]] }
      if route.admin { operation["security"] = [["admin": []]] }
      var item = paths[route.pattern]?.objectValue ?? JSONObject()
      item[route.method.rawValue.lowercased()] = .object(operation)
      paths[route.pattern] = .object(item)
    }
    // Named schemas: the shared shapes, and one per event type with `Event`, their envelope (EventCatalog).
    var schemas: JSONObject = ["Error": Schemas.error, "Peer": Schemas.peer, "Node": Schemas.node]
    for (name, schema) in EventCatalog.openAPISchemas() { schemas[name] = schema }
    return [
      "openapi": "3.1.0",
      "info": [
        "title": "meshgate", "version": .string(version),
        "description": "LAN peer gateway: discovery, invitations, sessions and events for browsers and curl.",
      ],
      "paths": .object(paths),
      "components": [
        "securitySchemes": [
          "bearer": ["type": "http", "scheme": "bearer", "description": "A peer token from POST /api/v1/peers."],
          "admin": [
            "type": "http", "scheme": "bearer",
            "description": "The node's admin token, printed once on its first start (meshgate admin-token=…).",
          ],
        ],
        "schemas": .object(schemas),
      ],
    ]
  }
}
