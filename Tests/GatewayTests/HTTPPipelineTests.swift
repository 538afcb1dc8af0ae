import MeshCore
import Testing

@testable import Gateway
@testable import LWS

/// The HTTP pipeline: one match per request, the steps around its route, WebSocket upgrades through the routes that
/// declare them.
@Suite(.timeLimit(.minutes(1)))
struct HTTPPipelineTests {
  /// A request with a body is matched when the server asks how to take its body; the route's index comes back with
  /// the request as its head's tag, and the request is served by that route without a second search.
  @Test func aRequestWithABodyIsMatchedOnceAndItsRouteComesBackAsTheTag() async throws {
    try await InProcessNode.with { node in
      let upload = HTTPRequestHead(method: .post, path: "/api/v1/jobs", contentLength: 2)
      let policy = await Self.bodyPolicy(upload, on: node.node)
      let index = try #require(policy.tag)
      #expect(Router.standard.routes[index].pattern == "/api/v1/jobs")
      #expect(!policy.streamed && policy.limit == NodeConfiguration().maxBodyBytes)
      var tagged = upload
      tagged.tag = index
      #expect(Router.standard.match(routeAt: index, path: "/api/v1/jobs")?.route?.pattern == "/api/v1/jobs")
      #expect(await Self.match(tagged, on: node.node).route?.pattern == "/api/v1/jobs")
      // A tag is trusted only for a path its route matches.
      #expect(Router.standard.match(routeAt: index, path: "/api/v1/peers/me") == nil)
      let resource = HTTPRequestHead(
        method: .post, path: "/api/v1/sessions/s/resources", contentLength: 2)
      let streamed = await Self.bodyPolicy(resource, on: node.node)
      #expect(streamed.streamed && streamed.limit == NodeConfiguration().maxTransferBytes)
      #expect(await Self.bodyPolicy(HTTPRequestHead(method: .post, path: "/no/such"), on: node.node).tag == nil)
    }
  }

  private static func bodyPolicy(_ head: HTTPRequestHead, on node: isolated Node) -> RequestBodyPolicy {
    node.surface.bodyPolicy(for: head, node: node)
  }

  private static func match(_ head: HTTPRequestHead, on node: isolated Node) -> RouteMatch {
    node.surface.match(head)
  }

  @Test func everyWebSocketRouteDeclaresItsUpgradeAndNoOtherRouteDoes() {
    for route in Router.standard.routes {
      #expect((route.kind == .webSocket) == (route.upgrade != nil), "\(route.operationID)")
    }
  }

  @Test func requestsAreCountedUnderTheirRoutesPatternOnceEach() async throws {
    try await InProcessNode.with { node in
      let info = try await node.request(.get, "/api/v1/node")
      #expect(info.status == 200)
      #expect(try await node.request(.delete, "/api/v1/node").status == 405)
      #expect(try await node.request(.get, "/no/such/page").status == 404)
      #expect(try await node.request(.get, "/api/v1/peers/me").status == 401)
      let requests = await Self.requestCounts(node.node)
      #expect(requests["/api/v1/node|GET|200"] == 1)
      #expect(requests["/api/v1/node|DELETE|405"] == 1)
      #expect(requests["unmatched|GET|404"] == 1)
      #expect(requests["/api/v1/peers/me|GET|401"] == 1)
      #expect(await Self.openLabels(node.node) == 0, "every answered request's label is gone")
    }
  }

  @Test func theAccessARouteDeclaresIsWhatThePipelineAsks() async throws {
    try await InProcessNode.with { node in
      let peer = try await node.createPeerWithToken("ada")
      // An admin route refuses a peer token (403), a peer route the lack of one (401).
      #expect(try await node.request(.get, "/api/v1/node/settings", token: peer.token).status == 403)
      #expect(try await node.request(.get, "/api/v1/peers/me").status == 401)
      #expect(try await node.request(.get, "/api/v1/peers/me", token: peer.token).status == 200)
      if let admin = node.adminToken {
        #expect(try await node.request(.get, "/api/v1/node/settings", token: admin).status == 200)
      }
    }
  }

  @Test func aWebSocketUpgradeGoesToTheRouteThatDeclaresIt() async throws {
    try await InProcessNode.with { node in
      let peer = try await node.createPeerWithToken("ada")
      func upgrade(_ path: String, token: String?) async -> Int {
        let head = HTTPRequestHead(
          method: .get, path: path, query: QueryItems(token.map { [("token", $0)] } ?? []),
          headers: HTTPHeaders([("host", "127.0.0.1")]), remoteAddress: "127.0.0.1")
        switch await Self.shouldAccept(head, on: node.node) {
        case .accept: return 101
        case .reject(let response): return response.status
        }
      }
      #expect(await upgrade("/api/v1/ws", token: peer.token) == 101)
      #expect(await upgrade("/api/v1/ws", token: nil) == 401, "the route's access is asked for")
      #expect(await upgrade("/api/v1/peers/me", token: peer.token) == 404, "a route without an upgrade takes none")
      #expect(await upgrade("/api/v1/streams/none/ws", token: peer.token) == 404, "the stream route answers")
      #expect(await Self.upgradesRejected(node.node) == 3)
    }
  }

  private static func requestCounts(_ node: isolated Node) -> [String: Int] { node.surface.requestCounts }
  private static func openLabels(_ node: isolated Node) -> Int { node.surface.routeLabels.count }
  private static func upgradesRejected(_ node: isolated Node) -> Int { node.surface.webSocketUpgradesRejected }
  private static func shouldAccept(_ head: HTTPRequestHead, on node: isolated Node) -> WebSocketDecision {
    node.surface.shouldAccept(webSocket: head, node: node)
  }
}
