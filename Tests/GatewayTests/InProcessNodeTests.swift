import Discovery
import Foundation
import LWS
import Logging
import MeshCore
import Synchronization
import Testing

@testable import Gateway

/// A node in this test process: its real router, store and libwebsockets server (on an ephemeral loopback port, with
/// no client connected), whose route handlers the tests call directly, the way the server would, without starting a
/// `meshgate` process or speaking HTTP.
final class InProcessNode: Sendable {
  let node: Node
  let dataDirectory: String
  private let nextRequest = Atomic<UInt64>(1)

  init(node: Node, dataDirectory: String) {
    self.node = node
    self.dataDirectory = dataDirectory
  }

  /// Starts a node, runs `body` with it, and stops it (also when `body` throws).
  static func with<T>(_ body: (InProcessNode) async throws -> T) async throws -> T {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("inprocess-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: directory) }
    var configuration = NodeConfiguration()
    configuration.port = 0
    configuration.bindAddress = "127.0.0.1"
    configuration.dataDirectory = directory
    configuration.discovery = .off
    configuration.logLevel = .warning
    let runtime = try await NodeRuntime.start(configuration)
    let server = runtime.server
    let stopped = Atomic<Bool>(false)
    let thread = Thread {
      server.run()
      stopped.store(true, ordering: .releasing)
    }
    thread.start()
    defer {
      server.stop()
      while !stopped.load(ordering: .acquiring) { usleep(1000) }
    }
    return try await body(InProcessNode(node: runtime.node, dataDirectory: directory))
  }

  /// Routes `method path` with the standard router and runs the route's handler with `body` (JSON) as `peer`.
  /// Errors a handler throws come back as their HTTP answer, as the server would send them.
  func call(
    _ method: HTTPMethod, _ path: String, json: JSONValue? = nil, query: [(String, String)] = [],
    as peer: StoredPeer? = nil
  ) async throws -> HTTPResponse {
    guard case .found(let route, let parameters) = Router.standard.match(method: method, path: path) else {
      Issue.record("no route for \(method.rawValue) \(path)")
      return HTTPResponse(status: 404)
    }
    let head = HTTPRequestHead(
      method: method, path: path, query: QueryItems(query),
      headers: HTTPHeaders(
        json == nil ? [("host", "127.0.0.1")] : [("host", "127.0.0.1"), ("content-type", "application/json")]),
      contentLength: json.map { $0.serialized().count }, remoteAddress: "127.0.0.1")
    let request = HTTPRequest(
      id: RequestID(nextRequest.wrappingAdd(1, ordering: .relaxed).oldValue), head: head, body: json?.serialized() ?? []
    )
    do {
      return try await route.handler(node, RequestContext(request: request, parameters: parameters, peer: peer))
    } catch let error as APIError {
      return error.response
    }
  }

  /// Creates a peer through its route and returns it as the node stores it.
  func createPeer(_ name: String) async throws -> StoredPeer {
    let response = try await call(.post, "/api/v1/peers", json: ["displayName": .string(name)])
    #expect(response.status == 201)
    let id = try #require(try JSONValue.parse(response.body).objectValue?["peer"]?.objectValue?["id"]?.stringValue)
    return try #require(await node.peers[id])
  }
}

extension HTTPResponse {
  /// The JSON body as an object.
  var object: JSONObject? { (try? JSONValue.parse(body))?.objectValue }
}

/// Route handlers driven in process (issue 15): each feature's routes run against the real router and store without a
/// process or a socket, so a handler's behaviour can be tested where it lives.
@Suite(.timeLimit(.minutes(1)))
struct InProcessNodeTests {
  @Test func createsAPeerAndReadsItBackThroughTheHandlers() async throws {
    try await InProcessNode.with { node in
      let alice = try await node.createPeer("alice")
      let me = try await node.call(.get, "/api/v1/peers/me", as: alice)
      #expect(me.status == 200)
      #expect(me.object?["peer"]?.objectValue?["displayName"] == "alice")
      let renamed = try await node.call(.patch, "/api/v1/peers/me", json: ["displayName": "Alice B."], as: alice)
      #expect(renamed.object?["peer"]?.objectValue?["displayName"] == "Alice B.")
    }
  }

  @Test func jobHandlersValidateStoreAndIsolatePeers() async throws {
    try await InProcessNode.with { node in
      let alice = try await node.createPeer("alice")
      let bob = try await node.createPeer("bob")
      let refused = try await node.call(.post, "/api/v1/jobs", json: ["name": ""], as: alice)
      #expect(refused.status == 400)
      let created = try await node.call(.post, "/api/v1/jobs", json: ["name": "Fix the sink"], as: alice)
      #expect(created.status == 201)
      let id = try #require(created.object?["job"]?.objectValue?["id"]?.stringValue)
      #expect(try await node.call(.get, "/api/v1/jobs/\(id)", as: alice).status == 200)
      #expect(try await node.call(.get, "/api/v1/jobs/\(id)", as: bob).status == 404, "another peer's job")
      let list = try await node.call(.get, "/api/v1/jobs", as: alice)
      #expect(list.object?["jobs"].map { if case .array(let jobs) = $0 { jobs.count } else { -1 } } == 1)
      #expect(try await node.call(.delete, "/api/v1/jobs/\(id)", as: alice).status == 204)
    }
  }

  @Test func aSessionHandlerAnswersTheDocumentedErrors() async throws {
    try await InProcessNode.with { node in
      let alice = try await node.createPeer("alice")
      let created = try await node.call(.post, "/api/v1/sessions", json: [:], as: alice)
      #expect(created.status == 201)
      let id = try #require(created.object?["session"]?.objectValue?["id"]?.stringValue)
      let unknown = try await node.call(.get, "/api/v1/sessions/\(UUID().uuidString.lowercased())", as: alice)
      #expect(unknown.status == 404)
      #expect(try await node.call(.get, "/api/v1/sessions/\(id)", as: alice).status == 200)
      #expect(try await node.call(.delete, "/api/v1/sessions/\(id)/members/me", as: alice).status == 204)
    }
  }
}
