/// The HTTP surface: the one pipeline every request goes through, and what it keeps beside the routes (the static
/// dashboard, each open request's route label, the counters `/metrics` shows, what each WebSocket is, when the node
/// started). Owned by the node actor.
///
/// Layer 6 (surface). A request is matched against ``Router/standard`` once, when it arrives (``match(_:)``; the
/// server's questions about its body read the same match), and then runs through ``middleware`` around its route, in
/// the shape of Hummingbird's `RouterMiddleware`: each step reads what it needs from the request and from the route
/// it matched (who may call it is data on the route), answers itself or calls the next step. The last step is the
/// route's handler (or the static file, 405 or 404 of a request that matched no route).
import Foundation
import LWS
import Logging

final class HTTPSurface {
  static let logger = Logger(component: "http")

  let startedAt = Date()
  let staticFiles: StaticFiles
  /// What the surface answers on (the node's ``ServerPort``).
  let server: any ServerPort
  /// The steps around every request, outermost first (HTTPPipeline.swift).
  let middleware: [any RouteMiddleware] = [
    HostOriginMiddleware(), PlaintextMiddleware(), RequestMetricsMiddleware(), ErrorMiddleware(),
    DataDirectoryMiddleware(), AdminAuthMiddleware(), PeerAuthMiddleware(), QueryMiddleware(),
  ]
  var routeLabels: [RequestID: String] = [:]
  /// `meshgate_http_requests_total`, by `route|method|status`.
  var requestCounts: [String: Int] = [:]
  /// Requests refused because the data directory was full or failing (`507`/`503`).
  var storageFailures = 0
  /// WebSocket upgrades refused.
  var webSocketUpgradesRejected = 0
  /// What each open WebSocket is, decided once when it opens (``webSocketOpened(_:head:node:)``).
  var connections: [WebSocketID: ConnectionKind] = [:]

  init(staticFiles: StaticFiles, server: any ServerPort) {
    self.staticFiles = staticFiles
    self.server = server
  }

  /// Every route of the node (``Router/standard``).
  var router: Router { .standard }

  /// The route `head` matches, searched once per request: a request with a body was matched when the server asked
  /// how to take its body (``bodyPolicy(for:node:)``), and the route's index came back with it as the head's tag.
  func match(_ head: HTTPRequestHead) -> RouteMatch {
    if let index = head.tag, let match = router.match(routeAt: index, path: head.path) { return match }
    return router.match(method: head.method, path: head.path)
  }

  /// How the matched route takes its body: an upload up to `--max-transfer-bytes` and a stream write without a limit,
  /// both streamed; anything else collected, up to `--max-body-bytes`. The route's index rides along as the tag.
  func bodyPolicy(for head: HTTPRequestHead, node: isolated Node) -> RequestBodyPolicy {
    let (match, index) = router.matchIndexed(method: head.method, path: head.path)
    switch match.route?.body ?? .collected {
    case .collected: return RequestBodyPolicy(limit: node.configuration.maxBodyBytes, tag: index)
    case .upload: return RequestBodyPolicy(limit: node.configuration.maxTransferBytes, streamed: true, tag: index)
    case .unbounded: return RequestBodyPolicy(limit: 1 << 62, streamed: true, tag: index)
    }
  }

  // MARK: - Requests

  /// A complete request (for a streamed body, its head): matched once, then served through the pipeline.
  func handle(_ request: HTTPRequest, node: isolated Node) {
    let match = match(request.head)
    var parameters: [String: String] = [:]
    if case .found(_, let found) = match { parameters = found }
    let context = RequestContext(request: request, parameters: parameters, peer: nil, match: match)
    Task { await node.surface.serve(context, node: node) }
  }

  /// Runs `context` through the pipeline and answers it (an event stream's answer was sent when it started).
  func serve(_ context: RequestContext, node: isolated Node) async {
    let response: HTTPResponse
    do {
      response = try await RouteResponder(index: 0)(context, node)
    } catch {
      // ``ErrorMiddleware`` maps every error; nothing reaches here.
      response = APIError(status: 500, code: "internal_error", message: "\(error)").response
    }
    guard !Self.startsEventStream(response, context) else { return }
    respond(context.request, response)
  }

  /// Runs the steps from `index` on, then the endpoint.
  func run(_ index: Int, _ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    guard index < middleware.count else { return try await Self.endpoint(context, node: node) }
    return try await middleware[index].handle(context, node: node, next: RouteResponder(index: index + 1))
  }

  /// Whether `response` to `context` starts the peer's Server-Sent Events stream (a `200` on an event-stream route).
  static func startsEventStream(_ response: HTTPResponse, _ context: RequestContext) -> Bool {
    response.isStream && response.status == 200 && context.route?.opensEventStream == true
  }

  /// The innermost step: the route's handler (an event stream starts here, its answer sent), or for a request that
  /// matched no route its static file, 405 or 404.
  private static func endpoint(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let head = context.request.head
    switch context.match {
    case .found(let route, _):
      var response = try await route.handler(node, context)
      if head.method == .head { response.omitBody = true }
      if startsEventStream(response, context) {
        node.events.startStream(context.request, response, context, node: node)
      }
      return response
    case .methodNotAllowed(_, let allowed):
      let allow = allowed.map(\.rawValue).joined(separator: ", ")
      throw APIError(
        status: 405, code: "method_not_allowed",
        message: "\(head.method.rawValue) is not allowed on \(head.path); allowed: \(allow)",
        headers: [("allow", allow)])
    case .notFound:
      if let file = node.surface.staticFile(for: head) { return StaticFiles.response(for: file, head: head) }
      throw APIError.notFound(
        "no route for \(head.method.rawValue) \(head.path); see GET /api/v1/openapi.json for the API")
    }
  }

  /// The dashboard file a request that matched no route asks for (GET or HEAD outside `/api/`).
  func staticFile(for head: HTTPRequestHead) -> StaticFile? {
    guard head.method == .get || head.method == .head, !head.path.hasPrefix("/api/") else { return nil }
    return staticFiles.lookup(head.path)
  }

  /// Sends `response`, counting it under the request's route label.
  func respond(_ request: HTTPRequest, _ response: HTTPResponse) {
    let label = routeLabels.removeValue(forKey: request.id) ?? "unmatched"
    requestCounts["\(label)|\(request.head.method.rawValue)|\(response.status)", default: 0] += 1
    if Self.logger.isEnabled(.debug) {
      Self.logger.debug(
        "Request served.",
        [
          "http.request.id": request.id, "http.method": request.head.method.rawValue, "http.path": request.head.path,
          "http.status": response.status, "http.remote": request.head.remoteAddress,
        ])
    }
    server.respond(to: request.id, with: response)
  }

  /// Counts a request the server answered itself (411, 413, 501) before it reached the pipeline.
  func countRejected(_ head: HTTPRequestHead, status: Int) {
    let label: String =
      switch match(head) {
      case .found(let route, _): route.pattern
      case .methodNotAllowed(let pattern, _): pattern
      case .notFound: "unmatched"
      }
    requestCounts["\(label)|\(head.method.rawValue)|\(status)", default: 0] += 1
  }

  /// The request is gone (answered or its client left).
  func requestClosed(_ id: RequestID) {
    routeLabels[id] = nil
  }
}

@available(*, unavailable) extension HTTPSurface: Sendable {}

// MARK: - WebSocket upgrades

extension HTTPSurface {
  /// Whether to complete a WebSocket upgrade. A mesh link (`/mesh`, the node's own endpoint, in no route table) needs
  /// the mesh subprotocol and a browser-free Origin; any other upgrade goes through the same steps as a request (Host
  /// and Origin, HTTPS only, the route matched once, the peer token its route asks for) to the route that declares
  /// it (``Route/upgrade``).
  func shouldAccept(webSocket head: HTTPRequestHead, node: isolated Node) -> WebSocketDecision {
    let decision = upgradeDecision(head, node: node)
    if case .reject = decision { webSocketUpgradesRejected += 1 }
    return decision
  }

  private func upgradeDecision(_ head: HTTPRequestHead, node: isolated Node) -> WebSocketDecision {
    // Nodes dial by any seed name, so a mesh link's Host is not checked; but a node sends no Origin, and a browser
    // page always does: a page from another site must not link in as a node.
    let hostRefused = head.path == "/mesh" ? nil : node.safety.hostRefusal(head)
    if let refusal = hostRefused ?? node.safety.originRefusal(head, upgrade: true) {
      return .reject(refusal.response)
    }
    if head.path == "/mesh" {
      guard head.headers["sec-websocket-protocol"]?.contains(meshSubprotocol) == true else {
        return .reject(
          APIError.badRequest("mesh links must request the WebSocket subprotocol \(meshSubprotocol)").response)
      }
      return .accept
    }
    if node.security.servesHTTPS && !head.isTLS {
      return .reject(NodeSafety.httpsRequired(head).response)
    }
    guard let route = match(head).route, let upgrade = route.upgrade else {
      return .reject(
        APIError.notFound("no WebSocket endpoint at \(head.path); browsers connect to /api/v1/ws?token=<token>")
          .response)
    }
    do {
      let peer = route.authenticated ? try node.authenticate(head, allowQueryToken: route.acceptsQueryToken) : nil
      return upgrade.accept(node, head, peer)
    } catch {
      return .reject(error.response)
    }
  }

  /// An accepted WebSocket: what it is (a mesh link, a stream's writer or reader, a peer's event socket) is decided
  /// here, once, from the route that accepted it, and every later callback for it goes straight to its owner.
  func webSocketOpened(_ id: WebSocketID, head: HTTPRequestHead, node: isolated Node) {
    if head.path == "/mesh" {
      connections[id] = .mesh
      node.meshSocketOpened(id, remoteAddress: head.remoteAddress)
      return
    }
    guard let route = match(head).route, let upgrade = route.upgrade else {
      node.server.close(id, code: 1008, reason: "no WebSocket endpoint here")
      return
    }
    connections[id] = upgrade.connection
    var peer: StoredPeer?
    if route.authenticated {
      // The peer may have been deleted since the upgrade was accepted.
      guard let authenticated = try? node.authenticate(head, allowQueryToken: route.acceptsQueryToken) else {
        node.server.close(id, code: 4401, reason: "token no longer valid")
        return
      }
      peer = authenticated
    }
    upgrade.opened(node, id, head, peer)
  }
}

/// What a WebSocket connection is.
enum ConnectionKind: Sendable {
  /// A link to another node (`/mesh`, accepted or dialled).
  case mesh
  /// A socket a feature's WebSocket route took when it opened (``Route/upgrade``), such as a byte stream's writer or
  /// reader.
  case feature
  /// A peer's event socket (`/api/v1/ws`).
  case events
}
