import Discovery
import Foundation
import Glibc
import LWS
import Logging
import MeshCore
import Synchronization
import Testing

@testable import Gateway

/// A node in this test process, built as `meshgate` builds one (``NodeParts``: data directory, store, identity) but on
/// an ``InMemoryServerPort`` instead of libwebsockets: no socket is opened and no lws loop runs. Its route handlers
/// can be called directly (``call(_:_:json:query:as:)``), or requests and WebSockets driven through the node's own
/// dispatch (``request(_:_:json:query:token:)``, ``openEventSocket(token:)``), the way the lws server would.
final class InProcessNode: Sendable {
  let node: Node
  let port: InMemoryServerPort
  let dataDirectory: String
  /// The admin token, shown once on a node's first start.
  let adminToken: String?
  private let nextID = Atomic<UInt64>(1)

  init(node: Node, port: InMemoryServerPort, dataDirectory: String, adminToken: String?) {
    self.node = node
    self.port = port
    self.dataDirectory = dataDirectory
    self.adminToken = adminToken
  }

  /// Builds and starts a node on a fresh data directory, runs `body` with it, and stops it (also when `body` throws).
  static func with<T>(
    configure: (inout NodeConfiguration) -> Void = { _ in }, startsDials: Bool = false,
    _ body: (InProcessNode) async throws -> T
  ) async throws -> T {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("inprocess-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: directory) }
    var configuration = NodeConfiguration()
    configuration.port = 0
    configuration.bindAddress = "127.0.0.1"
    configuration.dataDirectory = directory
    configuration.discovery = .off
    configure(&configuration)
    let parts = try await NodeParts.load(configuration, logger: Logger(component: "node"))
    try await parts.saveNewAdminToken()
    let port = InMemoryServerPort(port: configuration.port, startsDials: startsDials)
    let node = parts.makeNode(server: port)
    await node.start()
    let inProcess = InProcessNode(node: node, port: port, dataDirectory: directory, adminToken: parts.newAdminToken)
    do {
      let result = try await body(inProcess)
      await node.stop()
      return result
    } catch {
      await node.stop()
      throw error
    }
  }

  private func nextRequestID() -> RequestID { RequestID(nextID.wrappingAdd(1, ordering: .relaxed).oldValue) }

  /// Sends `method path` through the node's dispatch (host and origin checks, routing, authentication with `token`,
  /// the handler, error mapping) and returns the answer the node gave the port.
  func request(
    _ method: HTTPMethod, _ path: String, json: JSONValue? = nil, query: [(String, String)] = [],
    token: String? = nil
  ) async throws -> HTTPResponse {
    var headers = [("host", "127.0.0.1")]
    if json != nil { headers.append(("content-type", "application/json")) }
    if let token { headers.append(("authorization", "Bearer \(token)")) }
    let body = json?.serialized() ?? []
    let id = nextRequestID()
    let head = HTTPRequestHead(
      method: method, path: path, query: QueryItems(query), headers: HTTPHeaders(headers),
      contentLength: json == nil ? nil : body.count, remoteAddress: "127.0.0.1")
    await Self.handle(HTTPRequest(id: id, head: head, body: body), on: node)
    return try await port.response(to: id)
  }

  /// Hands `request` to the node's HTTP pipeline, as the server bridge does.
  private static func handle(_ request: HTTPRequest, on node: isolated Node) {
    node.surface.handle(request, node: node)
  }

  /// Opens a peer's event WebSocket (`/api/v1/ws?token=`) as the server would on an upgrade.
  func openEventSocket(token: String) async throws -> WebSocketID {
    let id = WebSocketID(nextID.wrappingAdd(1, ordering: .relaxed).oldValue)
    let head = HTTPRequestHead(
      method: .get, path: "/api/v1/ws", query: QueryItems([("token", token)]),
      headers: HTTPHeaders([("host", "127.0.0.1")]), remoteAddress: "127.0.0.1")
    guard case .accept = await Self.shouldAccept(head, on: node) else {
      throw InProcessFailure("the node refused the event socket")
    }
    port.accept(id)
    await Self.webSocketOpened(id, head: head, on: node)
    return id
  }

  /// Asks the node's HTTP surface whether to complete an upgrade, as the server bridge does.
  private static func shouldAccept(_ head: HTTPRequestHead, on node: isolated Node) -> WebSocketDecision {
    node.surface.shouldAccept(webSocket: head, node: node)
  }

  /// Tells the node's HTTP surface that an accepted socket opened, as the server bridge does.
  private static func webSocketOpened(_ id: WebSocketID, head: HTTPRequestHead, on node: isolated Node) {
    node.surface.webSocketOpened(id, head: head, node: node)
  }

  /// Waits for the first event of `type` on socket `id` whose data passes `matching`, and returns that data.
  func event(
    _ type: String, on id: WebSocketID, matching: @escaping @Sendable (JSONObject) -> Bool = { _ in true }
  ) async throws -> JSONObject {
    try await port.wait { recorded in
      for frame in recorded.frames[id] ?? [] {
        guard let object = (try? JSONValue.parse(frame.bytes))?.objectValue, object["type"]?.stringValue == type,
          let data = object["data"]?.objectValue, matching(data)
        else { continue }
        return data
      }
      return nil
    }
  }

  /// Creates a peer through the node's dispatch; returns its id and token.
  func createPeerWithToken(_ name: String) async throws -> (id: String, token: String) {
    let response = try await request(.post, "/api/v1/peers", json: ["displayName": .string(name)])
    #expect(response.status == 201)
    let object = try #require(response.object)
    let id = try #require(object["peer"]?.objectValue?["id"]?.stringValue)
    return (id, try #require(object["token"]?.stringValue))
  }

  /// Two peers of this node, alice and bob, each with an open event socket (bob's has said hello).
  func aliceAndBobListening() async throws -> (
    alice: (id: String, token: String), aliceSocket: WebSocketID, bob: (id: String, token: String),
    bobSocket: WebSocketID
  ) {
    let alice = try await createPeerWithToken("alice")
    let bob = try await createPeerWithToken("bob")
    let aliceSocket = try await openEventSocket(token: alice.token)
    let bobSocket = try await openEventSocket(token: bob.token)
    _ = try await event("hello", on: bobSocket)
    return (alice, aliceSocket, bob, bobSocket)
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
      id: nextRequestID(), head: head, body: json?.serialized() ?? [])
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

/// A harness step that could not be taken.
struct InProcessFailure: Error, CustomStringConvertible {
  let description: String
  init(_ description: String) { self.description = description }
}

/// The harness's waits end: a test waiting for something the node never does fails, and the test process goes on.
@Suite(.timeLimit(.minutes(1)))
struct InMemoryServerPortWaitTests {
  let socket = WebSocketID(7)

  @Test func aWaitEndsWithTheRecordItWaitsFor() async throws {
    let port = InMemoryServerPort()
    async let opened = port.wait { [socket] in $0.openSockets.contains(socket) ? true : nil }
    port.accept(socket)
    #expect(try await opened)
  }

  /// A suite's time limit cancels the test's task: the wait must end then, or the test process waits for ever.
  @Test func aWaitForARecordThatNeverComesEndsWhenItsTaskIsCancelled() async throws {
    let port = InMemoryServerPort()
    let waiting = Task { [socket] in try await port.wait { $0.closes[socket]?.code } }
    waiting.cancel()
    await #expect(throws: CancellationError.self) { try await waiting.value }
  }

  @Test func aWaitForARecordThatNeverComesEndsAfterItsBound() async throws {
    let port = InMemoryServerPort()
    await #expect(throws: InProcessFailure.self) {
      try await port.wait(within: .milliseconds(50)) { [socket] in $0.closes[socket]?.code }
    }
  }
}

extension HTTPResponse {
  /// The JSON body as an object.
  var object: JSONObject? { (try? JSONValue.parse(body))?.objectValue }
}

/// Route handlers driven in process: each feature's routes run against the real router and store on an
/// in-memory server port, without a process, a socket or an lws loop, so a handler's behaviour can be tested where it
/// lives.
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

  /// The in-process node binds nothing: it is built on the very port another socket of this test already listens on
  /// (`meshgate`'s start-up refuses that port as in use), its methods run on the in-memory port's executor, and it
  /// answers through the port.
  @Test func anInProcessNodeOpensNoSocketAndRunsOnThePort() async throws {
    let listener = try LoopbackListener()
    defer { listener.close() }
    try await InProcessNode.with(configure: { $0.port = listener.port }) { node in
      #expect(!(node.node.server is Server), "no libwebsockets server")
      #expect(await node.node.runsOnItsPort(), "node methods run on the in-memory port's executor")
      let info = try await node.request(.get, "/api/v1/node")
      #expect(info.status == 200)
      #expect(info.object?["openWebSockets"] == 0)
      #expect(try await node.request(.get, "/api/v1/no-such-route").status == 404)
    }
  }

  /// A published event reaches a peer's WebSocket and its SSE stream through the port: the frames the node queues are
  /// the ones a client would read.
  @Test func aPublishedEventReachesTheEventSocketAndStreamThroughThePort() async throws {
    try await InProcessNode.with { node in
      let alice = try await node.createPeerWithToken("alice")
      let bob = try await node.createPeerWithToken("bob")
      let socket = try await node.openEventSocket(token: alice.token)
      let hello = try await node.event("hello", on: socket)
      #expect(hello["peer"]?.objectValue?["id"]?.stringValue == alice.id)
      let stream = try await node.request(.get, "/api/v1/events/stream", token: alice.token)
      #expect(stream.status == 200 && stream.isStream)

      #expect(try await node.request(.put, "/api/v1/browsing/demo-svc", token: alice.token).status == 200)
      #expect(try await node.request(.put, "/api/v1/advertising/demo-svc", json: [:], token: bob.token).status == 200)
      let found = try await node.event("peer.found", on: socket) {
        $0["peer"]?.objectValue?["id"]?.stringValue == bob.id
      }
      #expect(found["serviceType"] == "demo-svc")
      let streamed = try await node.port.wait { recorded in
        recorded.streams.values.map { String(decoding: $0, as: UTF8.self) }.first { $0.contains("event: peer.found") }
      }
      #expect(streamed.contains("retry: 2000") && streamed.contains("event: hello") && streamed.contains(bob.id))

      // The client leaves: the node forgets the subscriber, and later events are not sent to the gone socket.
      node.port.drop(socket)
      await node.node.webSocketClosed(socket)
      #expect(await !node.node.hasSubscriber(.webSocket(socket)))
    }
  }

  /// The answer to what a client sent on its event socket (a pong, an error) is written at once, not left for the
  /// loop's next pass and the socket's writable callback; the replay after `hello` is not (its events are framed
  /// together as the socket drains).
  @Test func anEventSocketsRepliesAreWrittenAtOnce() async throws {
    try await InProcessNode.with { node in
      let alice = try await node.createPeerWithToken("alice")
      let socket = try await node.openEventSocket(token: alice.token)
      _ = try await node.event("hello", on: socket)
      await node.node.webSocketReceived(socket, .text(Array(#"{"op":"ping"}"#.utf8)))
      await node.node.webSocketReceived(socket, .text(Array(#"{"op":"nope"}"#.utf8)))
      _ = try await node.event("error", on: socket)
      let frames = node.port.recorded.frames[socket] ?? []
      let kinds = frames.map { (try? JSONValue.parse($0.bytes))?.objectValue?["type"]?.stringValue ?? "?" }
      #expect(kinds == ["hello", "pong", "error"])
      #expect(frames.map(\.writeNow) == [false, true, true])
    }
  }

  /// Sessions, invitations and jobs between two peers of one node, with no mesh: a job offer is an invitation, its
  /// acceptance delivers the job into the receiver's list and tells both sides; session data reaches the member.
  @Test func aJobOfferAndSessionDataFlowBetweenLocalPeersWithoutTheMesh() async throws {
    try await InProcessNode.with { node in
      let (alice, aliceSocket, bob, bobSocket) = try await node.aliceAndBobListening()

      let refused = try await node.request(
        .post, "/api/v1/jobs/nope/send", json: ["to": .string(bob.id)], token: alice.token)
      #expect(refused.status == 404)
      let created = try await node.request(.post, "/api/v1/jobs", json: ["name": "Fix the sink"], token: alice.token)
      #expect(created.status == 201)
      let jobID = try #require(created.object?["job"]?.objectValue?["id"]?.stringValue)
      let notReceiving = try await node.request(
        .post, "/api/v1/jobs/\(jobID)/send", json: ["to": .string(bob.id)], token: alice.token)
      #expect(notReceiving.status == 409, "bob does not receive jobs yet")
      #expect(
        try await node.request(.put, "/api/v1/advertising/jobmanager-jobs", json: [:], token: bob.token).status == 200)
      let offered = try await node.request(
        .post, "/api/v1/jobs/\(jobID)/send", json: ["to": .string(bob.id)], token: alice.token)
      #expect(offered.status == 202)
      let invitationID = try #require(offered.object?["invitation"]?.objectValue?["id"]?.stringValue)
      _ = try await node.event("invitation.received", on: bobSocket) {
        $0["invitation"]?.objectValue?["id"]?.stringValue == invitationID
      }
      let accepted = try await node.request(.post, "/api/v1/invitations/\(invitationID)/accept", token: bob.token)
      #expect(accepted.status == 200)
      let received = try await node.event("job.received", on: bobSocket)
      #expect(received["job"]?.objectValue?["name"] == "Fix the sink")
      let delivered = try await node.event("job.delivered", on: aliceSocket)
      #expect(delivered["job"]?.objectValue?["id"]?.stringValue == jobID)
      let bobJobs = try await node.request(.get, "/api/v1/jobs", token: bob.token)
      #expect(bobJobs.object?["jobs"].map { if case .array(let jobs) = $0 { jobs.count } else { -1 } } == 1)

      let session = try await node.request(.post, "/api/v1/sessions", json: [:], token: alice.token)
      #expect(session.status == 201)
      let sessionID = try #require(session.object?["session"]?.objectValue?["id"]?.stringValue)
      let invited = try await node.request(
        .post, "/api/v1/invitations", json: ["to": .string(bob.id), "session": .string(sessionID)], token: alice.token)
      #expect(invited.status == 201)
      let sessionInvitation = try #require(invited.object?["invitation"]?.objectValue?["id"]?.stringValue)
      _ = try await node.event("invitation.received", on: bobSocket) {
        $0["invitation"]?.objectValue?["id"]?.stringValue == sessionInvitation
      }
      #expect(
        try await node.request(.post, "/api/v1/invitations/\(sessionInvitation)/accept", token: bob.token).status == 200
      )
      _ = try await node.event("session.peer.state", on: aliceSocket) {
        $0["peer"]?.objectValue?["id"]?.stringValue == bob.id && $0["state"] == "connected"
      }
      let sent = try await node.request(
        .post, "/api/v1/sessions/\(sessionID)/data", json: ["hi": "bob"], token: alice.token)
      #expect(sent.status == 202)
      let data = try await node.event("session.data", on: bobSocket) { $0["sessionId"]?.stringValue == sessionID }
      #expect(data["from"]?.objectValue?["id"]?.stringValue == alice.id)
      #expect(data["text"] == #"{"hi":"bob"}"#)
    }
  }

  /// A deleted peer leaves nothing behind in the features that keep per-peer state: the job it delivered is no longer
  /// watched for a failed delivery once the peer (and with it the job) is gone.
  @Test func aDeletedPeersJobDeliveriesAreForgotten() async throws {
    try await InProcessNode.with { node in
      let (alice, aliceSocket, bob, bobSocket) = try await node.aliceAndBobListening()
      #expect(
        try await node.request(.put, "/api/v1/advertising/jobmanager-jobs", json: [:], token: bob.token).status == 200)
      let created = try await node.request(.post, "/api/v1/jobs", json: ["name": "Paint the fence"], token: alice.token)
      let jobID = try #require(created.object?["job"]?.objectValue?["id"]?.stringValue)
      let offered = try await node.request(
        .post, "/api/v1/jobs/\(jobID)/send", json: ["to": .string(bob.id)], token: alice.token)
      let invitationID = try #require(offered.object?["invitation"]?.objectValue?["id"]?.stringValue)
      _ = try await node.event("invitation.received", on: bobSocket) {
        $0["invitation"]?.objectValue?["id"]?.stringValue == invitationID
      }
      #expect(
        try await node.request(.post, "/api/v1/invitations/\(invitationID)/accept", token: bob.token).status == 200)
      _ = try await node.event("job.delivered", on: aliceSocket)
      #expect(await node.node.jobsInFlight(from: alice.id) == 1, "the delivery is watched while alice exists")

      #expect(try await node.request(.delete, "/api/v1/peers/me", token: alice.token).status == 204)
      #expect(await node.node.jobsInFlight(from: alice.id) == 0, "nothing of alice's is left in the jobs feature")
    }
  }

  /// The transfers stored before a start are listed to the first request after it: the node restores them in the
  /// background after it starts, and a request that came first saw none (a script polling a transfer right after a
  /// restart got 404 for it).
  @Test func theTransfersStoredBeforeAStartAnswerTheFirstRequestAfterIt() async throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("listed-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let alice = try await InProcessNode.with(configure: { $0.dataDirectory = directory }) { node in
      let alice = try await node.createPeerWithToken("alice")
      let now = Timestamp.now()
      let record = TransferRecord(
        id: UUID().uuidString.lowercased(),
        parties: PayloadParties(
          direction: .incoming, sessionID: "s",
          from: PayloadParty(peerID: "p", displayName: "Pat", nodeID: "n"),
          to: PayloadParty(peerID: alice.id, displayName: "alice", nodeID: await node.node.nodeID)),
        name: "kept.txt", contentType: "text/plain", size: 4, bytes: 4, state: .finished, reason: nil,
        sha256: nil, path: directory + "/kept.txt", resumedFrom: nil, createdAt: now, updatedAt: now)
      try await node.node.store.saveTransfer(record)
      return (alice.token, record.id)
    }
    try await InProcessNode.with(configure: { $0.dataDirectory = directory }) { node in
      let listed = try await node.request(.get, "/api/v1/transfers", token: alice.0)
      let ids = (listed.object?["transfers"]).map { value -> [String] in
        guard case .array(let items) = value else { return [] }
        return items.compactMap { $0.objectValue?["id"]?.stringValue }
      }
      #expect(ids == [alice.1], "\(String(decoding: listed.body, as: UTF8.self))")
      #expect(try await node.request(.get, "/api/v1/transfers/\(alice.1)", token: alice.0).status == 200)
    }
  }

  /// A deleted peer's streams end as when their other party goes away: the stream it reads fails at once, and its
  /// writer is told (`stream.closed`, failed), instead of writing into a stream nobody will ever read.
  @Test func aDeletedPeersStreamsEnd() async throws {
    try await InProcessNode.with { node in
      let (alice, aliceSocket, bob, bobSocket) = try await node.aliceAndBobListening()
      let session = try await node.request(.post, "/api/v1/sessions", json: [:], token: alice.token)
      let sessionID = try #require(session.object?["session"]?.objectValue?["id"]?.stringValue)
      let invited = try await node.request(
        .post, "/api/v1/invitations", json: ["to": .string(bob.id), "session": .string(sessionID)], token: alice.token)
      let invitationID = try #require(invited.object?["invitation"]?.objectValue?["id"]?.stringValue)
      _ = try await node.event("invitation.received", on: bobSocket) {
        $0["invitation"]?.objectValue?["id"]?.stringValue == invitationID
      }
      #expect(
        try await node.request(.post, "/api/v1/invitations/\(invitationID)/accept", token: bob.token).status == 200)
      _ = try await node.event("session.peer.state", on: aliceSocket) {
        $0["peer"]?.objectValue?["id"]?.stringValue == bob.id && $0["state"] == "connected"
      }
      let opened = try await node.request(
        .post, "/api/v1/sessions/\(sessionID)/streams", json: ["to": .string(bob.id), "name": "notes"],
        token: alice.token)
      #expect(opened.status == 201)
      let streamID = try #require(opened.object?["stream"]?.objectValue?["id"]?.stringValue)
      _ = try await node.event("stream.opened", on: bobSocket) {
        $0["stream"]?.objectValue?["id"]?.stringValue == streamID
      }
      #expect(await node.node.openStreams(of: bob.id) == 1, "bob reads the stream while he exists")

      #expect(try await node.request(.delete, "/api/v1/peers/me", token: bob.token).status == 204)
      try #require(
        await node.node.openStreams(of: bob.id) == 0, "nothing of bob's is left open in the payloads feature")
      let closed = try await node.event("stream.closed", on: aliceSocket) {
        $0["stream"]?.objectValue?["id"]?.stringValue == streamID
      }
      #expect(closed["stream"]?.objectValue?["state"] == "failed")
      #expect(closed["reason"] == "bob was deleted")
    }
  }

  /// A mesh dial goes to the port, not to the network: the admin adds a seed and the port records the connection the
  /// node asked for (and refuses it, as an unreachable node would).
  @Test func aMeshDialGoesThroughThePort() async throws {
    try await InProcessNode.with { node in
      let dial = try await node.dialAfterAddingSeed("127.0.0.1:9")
      #expect(
        dial
          == .init(
            host: "127.0.0.1", port: 9, path: "/mesh", subprotocol: meshSubprotocol, tls: node.node.security.meshTLS))
    }
  }

  /// A name with several addresses: when a connection to one cannot be made, the same dial goes on to the next
  /// (IPv4 first, without a second lookup); after the last one the link manager hears of it, and its redial after the
  /// backoff looks the name up afresh and starts again at the first address.
  @Test func aDialGoesOnToTheNamesNextAddress() async throws {
    try await InProcessNode.with(startsDials: true) { node in
      let lookups = Atomic<Int>(0)
      await node.node.useNameResolver { _ in
        lookups.add(1, ordering: .relaxed)
        return .success(["10.9.9.1", "10.9.9.2"])
      }
      let first = try await node.dialAfterAddingSeed("two-addresses.test:9")
      #expect(first.host == "10.9.9.1")
      let socket = try #require(try await node.port.wait { $0.dialSockets.first })
      await node.node.dialFailed(socket)
      let second = try await node.port.wait { $0.dials.count > 1 ? $0.dials[1] : nil }
      #expect(
        second == .init(host: "10.9.9.2", port: 9, path: first.path, subprotocol: first.subprotocol, tls: first.tls))
      #expect(lookups.load(ordering: .relaxed) == 1, "the fallback uses the addresses already found")
      let next = try #require(try await node.port.wait { $0.dialSockets.count > 1 ? $0.dialSockets[1] : nil })
      await node.node.dialFailed(next)
      // Only the link manager's redial (after its backoff) dials again; it comes from a fresh lookup.
      let redial = try await node.port.wait { $0.dials.count > 2 ? $0.dials[2] : nil }
      #expect(redial == first, "the redial starts again at the first address")
      #expect(lookups.load(ordering: .relaxed) == 2, "the redial looked the name up again")
    }
  }

  /// A seed given by name is looked up before the dial (off the service thread), so the server, which would resolve it
  /// with a blocking lookup on its service thread, is handed the address.
  @Test func aSeedNameIsDialledAtItsAddress() async throws {
    try await InProcessNode.with { node in
      let dial = try await node.dialAfterAddingSeed("localhost:9")
      #expect(["127.0.0.1", "::1"].contains(dial.host), "\(dial)")
    }
  }
}

extension InProcessNode {
  /// Adds seed `address` (port 9) as the admin and returns the dial the node then hands its port.
  func dialAfterAddingSeed(_ address: String) async throws -> InMemoryServerPort.Dial {
    let admin = try #require(adminToken)
    let added = try await request(.post, "/api/v1/mesh/nodes", json: ["address": .string(address)], token: admin)
    #expect((200..<300).contains(added.status))
    return try await port.wait { $0.dials.first { $0.port == 9 } }
  }
}

extension Node {
  /// Looks host names up with `resolve` from now on (a name with fixed addresses).
  func useNameResolver(_ resolve: @escaping @Sendable (String) -> Result<[String], NodeNameError>) {
    links.resolveName = resolve
  }

  /// A dialled socket could not connect, as the server bridge reports it.
  func dialFailed(_ id: WebSocketID) { links.socketFailed(id, node: self) }

  /// Whether this runs on the executor of the node's in-memory port (checked inside the actor).
  func runsOnItsPort() -> Bool { (server as? InMemoryServerPort)?.isCurrent == true }

  /// Whether events still go to `channel`.
  func hasSubscriber(_ channel: Subscriber.Channel) -> Bool { events.subscribers[channel] != nil }

  /// Open streams the payloads feature holds for local peer `peerID` (as their writer or reader on this node).
  func openStreams(of peerID: String) -> Int {
    let streams = features.payloads.streams
    return (Array(streams.outgoing.values) + Array(streams.incoming.values)).filter { stream in
      let record = stream.record
      return record.state == .open && (record.direction == .outgoing ? record.fromPeerID : record.toPeerID) == peerID
    }.count
  }

  /// Job offers and deliveries of local peer `peerID` the jobs feature still watches.
  func jobsInFlight(from peerID: String) -> Int {
    features.jobs.pendingSends.values.filter { $0.senderPeerID == peerID }.count
      + features.jobs.delivering.values.filter { $0.senderPeerID == peerID }.count
  }
}

/// A TCP socket listening on an ephemeral loopback port, to prove that nothing else can listen there.
struct LoopbackListener {
  let descriptor: Int32
  let port: Int

  init() throws {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard descriptor >= 0 else { throw InProcessFailure("socket: \(String(cString: strerror(errno)))") }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
        bind(descriptor, pointer, length) == 0 && listen(descriptor, 1) == 0
          && getsockname(descriptor, pointer, &length) == 0
      }
    }
    guard bound else {
      let message = String(cString: strerror(errno))
      Glibc.close(descriptor)
      throw InProcessFailure("listen on 127.0.0.1: \(message)")
    }
    self.descriptor = descriptor
    self.port = Int(UInt16(bigEndian: address.sin_port))
  }

  func close() { Glibc.close(descriptor) }
}
