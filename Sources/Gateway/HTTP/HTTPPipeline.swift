/// The steps of the HTTP pipeline around every route: Host and Origin policy, the HTTPS-only refusal, request
/// metrics, error mapping, the data-directory refusal, admin and peer authentication with the request rate, and the
/// query check.
///
/// Layer 6 (surface). Each step has the shape of Hummingbird's `RouterMiddleware`: it gets the request (with the
/// route it matched, once, when it arrived) and the next step, and either answers itself or calls `next`. A step that
/// concerns routes of one kind reads it from the route (``Route/access``, ``Route/queryParameters``). The steps hold
/// no state: the counters and limiters they use belong to the node's defences (``NodeSafety``) and to the surface
/// (``HTTPSurface``). ``HTTPSurface/middleware`` lists them, outermost first.
import LWS
import Logging
import MeshCore

/// The rest of the pipeline after a step: the steps from `index` on, then the route (``HTTPSurface/run(_:_:node:)``).
struct RouteResponder {
  let index: Int

  func callAsFunction(_ context: RequestContext, _ node: isolated Node) async throws -> HTTPResponse {
    try await node.surface.run(index, context, node: node)
  }
}

/// One step around a route.
protocol RouteMiddleware {
  func handle(_ context: RequestContext, node: isolated Node, next: RouteResponder) async throws -> HTTPResponse
}

/// `421` for a `Host` that names no name or address of the node, `403` for a state-changing request from a page on
/// another site (HostPolicy.swift). Answered before anything else, and counted as `unmatched`.
struct HostOriginMiddleware: RouteMiddleware {
  func handle(_ context: RequestContext, node: isolated Node, next: RouteResponder) async throws -> HTTPResponse {
    let head = context.request.head
    if let refusal = node.safety.hostRefusal(head) ?? node.safety.originRefusal(head, upgrade: false) {
      return refusal.response
    }
    return try await next(context, node)
  }
}

/// On a node that serves HTTPS (`--tls-cert`), a plaintext request other than `/healthz` is refused: a browser asking
/// for a page is redirected (`308`), anything else gets `403 https_required`. Counted as `plaintext`.
struct PlaintextMiddleware: RouteMiddleware {
  func handle(_ context: RequestContext, node: isolated Node, next: RouteResponder) async throws -> HTTPResponse {
    let head = context.request.head
    guard node.security.servesHTTPS, !head.isTLS, head.path != "/healthz" else { return try await next(context, node) }
    node.surface.routeLabels[context.request.id] = "plaintext"
    if (head.method == .get || head.method == .head) && !head.path.hasPrefix("/api/"), let host = head.headers["host"] {
      let location = "https://\(host)\(head.path)"
      return HTTPResponse(
        status: 308, contentType: "text/plain", headers: [("location", location)],
        body: Array("Moved to \(location)\n".utf8))
    }
    return NodeSafety.httpsRequired(head).response
  }
}

/// Labels the request for `meshgate_http_requests_total`: its route's pattern (also on a `405`), `static` for a
/// dashboard file, `unmatched` otherwise. ``HTTPSurface/respond(_:_:)`` counts the answer under the label.
struct RequestMetricsMiddleware: RouteMiddleware {
  func handle(_ context: RequestContext, node: isolated Node, next: RouteResponder) async throws -> HTTPResponse {
    let label: String =
      switch context.match {
      case .found(let route, _): route.pattern
      case .methodNotAllowed(let pattern, _): pattern
      case .notFound: node.surface.staticFile(for: context.request.head) == nil ? "unmatched" : "static"
      }
    node.surface.routeLabels[context.request.id] = label
    return try await next(context, node)
  }
}

/// Turns what the steps inside it throw into answers: an ``APIError`` is its own answer; a storage error is `507` or
/// `503` (or `503 data_directory_lost` when the failed write found the data directory gone); anything else is a
/// `500` naming the request in the node log.
struct ErrorMiddleware: RouteMiddleware {
  func handle(_ context: RequestContext, node: isolated Node, next: RouteResponder) async throws -> HTTPResponse {
    let request = context.request
    do {
      return try await next(context, node)
    } catch let error as APIError {
      return error.response
    } catch let error where APIError.storage(error) != nil {
      node.logger.error(
        "Request failed: storage.",
        ["http.request.id": request.id, "http.route": context.route?.pattern ?? "", "error": String(describing: error)])
      node.surface.storageFailures += 1
      // A write that failed may mean the directory is gone: look now rather than at the next periodic check.
      await node.safety.checkDataDirectory(node: node)
      return (node.safety.dataDirectoryLost.map(NodeSafety.dataDirectoryLostError) ?? APIError.storage(error)!)
        .response
    } catch {
      node.logger.error(
        "Request failed.",
        ["http.request.id": request.id, "http.route": context.route?.pattern ?? "", "error": String(describing: error)])
      let failure = APIError(
        status: 500, code: "internal_error",
        message: "the node failed to handle this request; see the node log for request \(request.id)")
      return failure.response
    }
  }
}

/// Once the data directory is lost, a route refuses every write (anything but GET and HEAD) with
/// `503 data_directory_lost`; reads go on from what the node holds.
struct DataDirectoryMiddleware: RouteMiddleware {
  func handle(_ context: RequestContext, node: isolated Node, next: RouteResponder) async throws -> HTTPResponse {
    if context.route != nil, let lost = node.safety.dataDirectoryLost,
      ![.get, .head].contains(context.request.head.method)
    {
      throw NodeSafety.dataDirectoryLostError(lost)
    }
    return try await next(context, node)
  }
}

/// A route with ``RouteAccess/admin`` needs the node's admin token (Admin.swift).
struct AdminAuthMiddleware: RouteMiddleware {
  func handle(_ context: RequestContext, node: isolated Node, next: RouteResponder) async throws -> HTTPResponse {
    if context.route?.access == .admin {
      try node.safety.authenticateAdmin(context.request.head, peers: node.peers)
    }
    return try await next(context, node)
  }
}

/// A route with ``RouteAccess/peer`` needs a peer token (`?token=` too on event streams and WebSockets), within the
/// token's request rate (`429` with `Retry-After`); the handler gets the peer.
struct PeerAuthMiddleware: RouteMiddleware {
  func handle(_ context: RequestContext, node: isolated Node, next: RouteResponder) async throws -> HTTPResponse {
    guard let route = context.route, route.authenticated else { return try await next(context, node) }
    var context = context
    let peer = try node.authenticate(context.request.head, allowQueryToken: route.acceptsQueryToken)
    try node.safety.checkRequestRate(peerID: peer.id)
    context.peer = peer
    return try await next(context, node)
  }
}

/// A documented query parameter whose value breaks its rule is `400`, before the handler runs.
struct QueryMiddleware: RouteMiddleware {
  func handle(_ context: RequestContext, node: isolated Node, next: RouteResponder) async throws -> HTTPResponse {
    try context.route?.checkQuery(context.request.head.query)
    return try await next(context, node)
  }
}
