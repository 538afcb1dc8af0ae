/// The lws server's delegate: its callbacks (on the service thread) enter the ``Node`` actor synchronously, and what a
/// connection is (a request with a collected, streamed or spooled body; a WebSocket of which kind) is decided here once,
/// from the matched route. Also the context a route handler gets.
///
/// Layer 6 (REST/WS surface).
import LWS
import MeshCore

/// What a handler gets.
struct RequestContext: Sendable {
  let request: HTTPRequest
  let parameters: [String: String]
  /// The peer of the token, once ``PeerAuthMiddleware`` checked it (on routes with ``RouteAccess/peer``).
  var peer: StoredPeer?
  /// What the request matched, once, when it arrived: the pipeline's steps read the route's needs from it.
  var match: RouteMatch = .notFound

  /// The matched route.
  var route: Route? { match.route }

  /// The authenticated peer; only call on authenticated routes.
  var authenticatedPeer: StoredPeer {
    guard let peer else { preconditionFailure("authenticatedPeer read on a route without authentication") }
    return peer
  }
}

/// Bridges lws callbacks (on the service thread) into the ``Node`` actor.
final class ServerBridge: ServerDelegate {
  let node: Node

  init(node: Node) {
    self.node = node
  }

  /// How a request's body is taken: the route decides (``HTTPSurface/bodyPolicy(for:node:)``).
  func bodyPolicy(for head: HTTPRequestHead) -> RequestBodyPolicy {
    node.assumeIsolated { $0.surface.bodyPolicy(for: head, node: $0) }
  }

  func requestBodyReceived(_ id: RequestID, _ bytes: [UInt8]) {
    node.assumeIsolated { node in
      for feature in node.features.all { feature.requestBodyReceived(id, bytes, node: node) }
    }
  }

  func requestBodyEnded(_ id: RequestID) {
    node.assumeIsolated { node in
      for feature in node.features.all { feature.requestBodyEnded(id, node: node) }
    }
  }

  func streamDrained(_ id: RequestID) {
    node.assumeIsolated { $0.streamDrained(id) }
  }

  func webSocketDrained(_ id: WebSocketID) {
    node.assumeIsolated { $0.webSocketDrained(id) }
  }

  func webSocketNextMessage(_ id: WebSocketID) -> OutboundMessage? {
    node.assumeIsolated { $0.links.nextFrame(id, node: $0) }
  }

  func handle(_ request: HTTPRequest) {
    node.assumeIsolated { $0.surface.handle(request, node: $0) }
  }

  func requestClosed(_ id: RequestID) {
    node.assumeIsolated { $0.requestClosed(id) }
  }

  func shouldAccept(webSocket head: HTTPRequestHead) -> WebSocketDecision {
    node.assumeIsolated { $0.surface.shouldAccept(webSocket: head, node: $0) }
  }

  func webSocketOpened(_ id: WebSocketID, head: HTTPRequestHead) {
    node.assumeIsolated { $0.surface.webSocketOpened(id, head: head, node: $0) }
  }

  func webSocketReceived(_ id: WebSocketID, _ message: WebSocketMessage) {
    node.assumeIsolated { $0.webSocketReceived(id, message) }
  }

  func webSocketClosed(_ id: WebSocketID) {
    node.assumeIsolated { $0.webSocketClosed(id) }
  }

  func webSocketConnected(_ id: WebSocketID) {
    node.assumeIsolated { node in
      node.surface.connections[id] = .mesh
      node.meshSocketConnected(id)
    }
  }

  func webSocketConnectFailed(_ id: WebSocketID, reason: String) {
    node.assumeIsolated { node in
      node.surface.connections[id] = nil
      node.links.socketFailed(id, node: node)
    }
  }

  func errorResponse(status: Int, message: String, head: HTTPRequestHead) -> HTTPResponse {
    node.assumeIsolated { $0.surface.countRejected(head, status: status) }
    let code =
      switch status {
      case 408: "request_timeout"
      case 411: "length_required"
      case 413: "payload_too_large"
      case 431: "request_header_fields_too_large"
      case 503: "too_many_connections"
      case 501: "not_implemented"
      default: "bad_request"
      }
    return APIError(status: status, code: code, message: message).response
  }
}
