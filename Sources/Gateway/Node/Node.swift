/// The node runtime: the actor that owns peers, subscribers and metrics, pinned to the lws service thread.
///
/// Layer 4 (node runtime) with the layer-6 request dispatch on top. `Node` is an actor whose executor is its
/// ``ServerPort`` (ServerPort.swift): for a running node the lws ``Server`` itself, so its methods run on the lws
/// service thread and may call the server's loop-only methods directly; in tests an in-memory port. lws callbacks
/// enter it synchronously through ``ServerBridge`` with `assumeIsolated`.
/// Blocking work (SQLite) hops to the ``NodeStore``'s database actor; after every `await` the code
/// re-checks state it read before (a peer may have been deleted meanwhile).
import Crypto
import Discovery
import Foundation
import LWS
import Logging
import MeshCore

/// Counters exposed on `/metrics`.
struct NodeMetrics {
  var requests: [String: Int] = [:]
  var webSocketUpgradesRejected = 0
  var storageFailures = 0
}

/// The node actor.
public actor Node {
  /// What the node serves on and runs on: the lws ``Server``, or a test's in-memory port (Node/ServerPort.swift).
  nonisolated let server: any ServerPort
  let store: NodeStore
  let configuration: NodeConfiguration
  let nodeID: String
  /// TLS identity, pins and the mesh secret (Security/NodeSecurity.swift).
  nonisolated let security: NodeSecurity
  /// Event delivery: subscribers, the ordered publish queue, replays (Events/EventHub.swift).
  let events: EventHub
  /// Links, directory and sessions (Mesh/).
  var mesh: MeshState
  /// The mesh tick, every 100 ms on the port's executor (``startMesh()``).
  var meshTimer: (any PortTimer)?
  /// Every feature, each the owner of its state (Node/NodeFeature.swift, Features/).
  let features: Features
  /// Who the local peers are, by id and token (Node/PeerTable.swift); the peers feature changes it.
  var peers: PeerTable
  /// Static files, host names, route labels (HTTP/HTTPSurface.swift).
  let surface: HTTPSurface
  /// Link security, limits, the data-directory watch (Security/NodeSafety.swift).
  let safety: NodeSafety

  static let logger = Logger(component: "node")
  static let httpLogger = Logger(component: "http")
  static let meshLogger = Logger(component: "mesh")
  nonisolated var logger: Logger { Self.logger }
  nonisolated var httpLogger: Logger { Self.httpLogger }
  nonisolated var meshLogger: Logger { Self.meshLogger }

  public nonisolated var unownedExecutor: UnownedSerialExecutor {
    server.asUnownedSerialExecutor()
  }

  init(
    server: any ServerPort, store: NodeStore, configuration: NodeConfiguration, nodeID: String, peers: [StoredPeer],
    services: [NodeStore.StoredService] = [], chatState: NodeStore.ChatState? = nil, staticFiles: StaticFiles,
    security: NodeSecurity = .none, adminTokenHash: String = "", limits: Limits = Limits()
  ) {
    self.events = EventHub()
    self.surface = HTTPSurface(staticFiles: staticFiles, hostPolicy: HostPolicy.current(configuration))
    self.server = server
    self.store = store
    self.configuration = configuration
    self.nodeID = nodeID
    let dataPath = URL(fileURLWithPath: configuration.dataDirectory).standardizedFileURL.path
    self.security = security
    self.safety = NodeSafety(
      guards: SecurityState(adminTokenHash: adminTokenHash, limits: limits),
      dataWatch: DataDirectoryWatch(directory: dataPath, database: dataPath + "/meshgate.sqlite"))
    let hello = NodeHello(
      nodeID: nodeID, name: configuration.name, softwareVersion: NodeConfiguration.version, port: UInt16(server.port))
    var directory = Directory(nodeID: nodeID)
    let table = PeerTable(peers)
    self.peers = table
    for peer in peers {
      _ = directory.addLocalPeer(peer.id, displayName: peer.displayName)
    }
    // Restore advertising and browsing; no one is linked yet, so there is nothing to send or tell.
    for service in services where table[service.peerID] != nil {
      if service.kind == "advertise" {
        _ = directory.startAdvertising(
          service.peerID, serviceType: service.serviceType, discoveryInfo: service.discoveryInfo)
      } else {
        _ = directory.startBrowsing(service.peerID, serviceType: service.serviceType)
      }
    }
    var chatBook = ChatBook(nodeID: nodeID)
    if let chatState {
      chatBook.restore(rooms: chatState.rooms, pending: chatState.pending, senderSeqs: chatState.senderSeqs)
    }
    // Peers that transceived before the restart transceive again (their advertisement carries `transceive=1`).
    self.features = Features(restoringFrom: directory)
    var sessions = SessionBook(nodeID: nodeID, localFingerprint: security.fingerprint)
    // Links schedule senders round-robin, so reliable frames are numbered as they go on the wire.
    sessions.deferredSequencing = true
    self.mesh = MeshState(
      node: MeshNode(
        links: LinkManager(
          local: hello, seed: UInt64(truncatingIfNeeded: nodeID.hashValue), secret: security.secret,
          pins: security.pins),
        directory: directory, sessions: sessions, chat: chatBook))
  }

  /// Starts periodic work (SSE keep-alives every 5 s, which also reveal vanished clients; mesh ticks, both on the
  /// port's timers; the data-directory watch). Runs on the service thread.
  func start() {
    events.start(node: self)
    // A loop, not a timer: each check reads the disk on a task of its own, and the loop keeps two from overlapping
    // (a stalled file system must not pile them up). A sleep that `stop()` cancels ends it at once.
    dataWatchTask = Task { [weak self] in
      while (try? await Task.sleep(for: .seconds(1))) != nil {
        await self?.checkDataDirectory()
      }
    }
    startMesh()
    featuresNodeStarted()
  }

  func stop() {
    events.stop()
    dataWatchTask?.cancel()
    meshTimer?.cancel()
  }

  /// Runs `body` on the service thread inside the actor; safe from any thread (file queues use it).
  nonisolated func onLoop(_ body: @escaping @Sendable (isolated Node) -> Void) {
    server.execute { [self] in self.assumeIsolated { body($0) } }
  }

  // MARK: - Requests

  func handle(_ request: HTTPRequest) {
    if let refusal = hostRefusal(request.head) ?? originRefusal(request.head, upgrade: false) {
      respond(request, refusal.response)
      return
    }
    if security.servesHTTPS && !request.head.isTLS && request.head.path != "/healthz" {
      refusePlaintext(request)
      return
    }
    switch router.match(method: request.head.method, path: request.head.path) {
    case .found(let route, let parameters):
      routeLabels[request.id] = route.pattern
      Task { await self.perform(route, parameters: parameters, request: request) }
    case .methodNotAllowed(let pattern, let allowed):
      routeLabels[request.id] = pattern
      let allow = allowed.map(\.rawValue).joined(separator: ", ")
      let error = APIError(
        status: 405, code: "method_not_allowed",
        message: "\(request.head.method.rawValue) is not allowed on \(request.head.path); allowed: \(allow)",
        headers: [("allow", allow)])
      respond(request, error.response)
    case .notFound:
      if request.head.method == .get || request.head.method == .head, !request.head.path.hasPrefix("/api/"),
        let file = staticFiles.lookup(request.head.path)
      {
        routeLabels[request.id] = "static"
        respond(request, StaticFiles.response(for: file, head: request.head))
        return
      }
      routeLabels[request.id] = "unmatched"
      let error = APIError.notFound(
        "no route for \(request.head.method.rawValue) \(request.head.path); see GET /api/v1/openapi.json for the API")
      respond(request, error.response)
    }
  }

  func perform(_ route: Route, parameters: [String: String], request: HTTPRequest) async {
    do {
      var peer: StoredPeer?
      if let lost = dataDirectoryLost, ![.get, .head].contains(request.head.method) {
        throw dataDirectoryLostError(lost)
      }
      if route.admin { try authenticateAdmin(request.head) }
      if route.authenticated {
        let authenticated = try authenticate(request.head, allowQueryToken: route.acceptsQueryToken)
        try checkRequestRate(peerID: authenticated.id)
        peer = authenticated
      }
      try route.checkQuery(request.head.query)
      let context = RequestContext(request: request, parameters: parameters, peer: peer)
      var response = try await route.handler(self, context)
      if request.head.method == .head { response.omitBody = true }
      if !response.isStream || response.status != 200 || !route.opensEventStream {
        respond(request, response)
      } else {
        events.startStream(request, response, context, node: self)
      }
    } catch let error as APIError {
      respond(request, error.response)
    } catch let error where APIError.storage(error) != nil {
      logger.error(
        "Request failed: storage.",
        ["http.request.id": request.id, "http.route": route.pattern, "error": String(describing: error)])
      metrics.storageFailures += 1
      // A write that failed may mean the directory is gone: look now rather than at the next periodic check.
      await checkDataDirectory()
      respond(request, (dataDirectoryLost.map(dataDirectoryLostError) ?? APIError.storage(error)!).response)
    } catch {
      logger.error(
        "Request failed.",
        ["http.request.id": request.id, "http.route": route.pattern, "error": String(describing: error)])
      let failure = APIError(
        status: 500, code: "internal_error",
        message: "the node failed to handle this request; see the node log for request \(request.id)")
      respond(request, failure.response)
    }
  }

  /// Counts a request the server answered itself (411, 413, 501) before it reached the router.
  func countRejected(_ head: HTTPRequestHead, status: Int) {
    let label: String =
      switch router.match(method: head.method, path: head.path) {
      case .found(let route, _): route.pattern
      case .methodNotAllowed(let pattern, _): pattern
      case .notFound: "unmatched"
      }
    metrics.requests["\(label)|\(head.method.rawValue)|\(status)", default: 0] += 1
  }

  func respond(_ request: HTTPRequest, _ response: HTTPResponse) {
    let label = routeLabels.removeValue(forKey: request.id) ?? "unmatched"
    metrics.requests["\(label)|\(request.head.method.rawValue)|\(response.status)", default: 0] += 1
    if httpLogger.isEnabled(.debug) {
      httpLogger.debug(
        "Request served.",
        [
          "http.request.id": request.id, "http.method": request.head.method.rawValue, "http.path": request.head.path,
          "http.status": response.status, "http.remote": request.head.remoteAddress,
        ])
    }
    server.respond(to: request.id, with: response)
  }

  /// The peer for the request's bearer token (or `?token=` where allowed).
  func authenticate(_ head: HTTPRequestHead, allowQueryToken: Bool) throws(APIError) -> StoredPeer {
    var token: String?
    if let header = head.headers["authorization"] {
      let parts = header.split(separator: " ", maxSplits: 1)
      guard parts.count == 2, parts[0].lowercased() == "bearer", !parts[1].isEmpty else {
        throw APIError(
          status: 401, code: "unauthorized",
          message:
            "the Authorization header must be 'Bearer <token>'; create a peer with POST /api/v1/peers to get a token")
      }
      token = HostPolicy.trimmed(String(parts[1]))
    } else if allowQueryToken {
      token = head.query["token"]
    }
    guard let token, !token.isEmpty else { throw .missingToken }
    guard let peer = peers.peer(forTokenHash: Crypto.sha256Hex(token)) else {
      throw .invalidToken
    }
    featuresPeerUsed(peer.id)
    return peer
  }

  // MARK: - WebSockets

  func shouldAccept(webSocket head: HTTPRequestHead) -> WebSocketDecision {
    // Nodes dial by any seed name, so a mesh link's Host is not checked; but a node sends no Origin, and a browser
    // page always does: a page from another site must not link in as a node.
    let hostRefused = head.path == "/mesh" ? nil : hostRefusal(head)
    if let refusal = hostRefused ?? originRefusal(head, upgrade: true) {
      metrics.webSocketUpgradesRejected += 1
      return .reject(refusal.response)
    }
    if head.path == "/mesh" {
      guard head.headers["sec-websocket-protocol"]?.contains(meshSubprotocol) == true else {
        metrics.webSocketUpgradesRejected += 1
        return .reject(
          APIError.badRequest("mesh links must request the WebSocket subprotocol \(meshSubprotocol)").response)
      }
      return .accept
    }
    if security.servesHTTPS && !head.isTLS {
      metrics.webSocketUpgradesRejected += 1
      return .reject(Self.httpsRequired(head).response)
    }
    if let decision = featuresWebSocketDecision(head) {
      if case .reject = decision { metrics.webSocketUpgradesRejected += 1 }
      return decision
    }
    guard head.path == "/api/v1/ws" else {
      metrics.webSocketUpgradesRejected += 1
      return .reject(
        APIError.notFound("no WebSocket endpoint at \(head.path); browsers connect to /api/v1/ws?token=<token>")
          .response)
    }
    do {
      _ = try authenticate(head, allowQueryToken: true)
      _ = try Self.parseCursor(head.query["since"], name: "since")
      return .accept
    } catch {
      metrics.webSocketUpgradesRejected += 1
      return .reject(error.response)
    }
  }

  /// An accepted WebSocket: what it is (a mesh link, a feature's socket such as a stream's writer or reader, a peer's
  /// event socket) is decided here, once, and every later callback for it goes straight to its owner.
  func webSocketOpened(_ id: WebSocketID, head: HTTPRequestHead) {
    if head.path == "/mesh" {
      surface.connections[id] = .mesh
      meshSocketOpened(id, remoteAddress: head.remoteAddress)
      return
    }
    if featuresWebSocketOpened(id, head: head) {
      surface.connections[id] = .feature
      return
    }
    guard let peer = try? authenticate(head, allowQueryToken: true) else {
      server.close(id, code: 4401, reason: "token no longer valid")
      return
    }
    surface.connections[id] = .events
    let since = (try? Self.parseCursor(head.query["since"], name: "since")) ?? nil
    events.webSocketOpened(id, peerID: peer.id, since: since, node: self)
  }

  func webSocketReceived(_ id: WebSocketID, _ message: WebSocketMessage) {
    switch surface.connections[id] {
    case .mesh: meshSocketReceived(id, message)
    case .feature: for feature in features.all { feature.webSocketReceived(id, message, node: self) }
    case .events: events.received(message, on: id, node: self)
    case nil: break
    }
  }

  static func socketError(_ code: String, _ message: String) -> JSONValue {
    ["type": "error", "data": ["code": .string(code), "message": .string(message)]]
  }

  func webSocketClosed(_ id: WebSocketID) {
    // Outbound sockets are mesh links (the only sockets this node dials); one that failed before it connected has no
    // kind yet.
    switch surface.connections.removeValue(forKey: id) ?? .mesh {
    case .mesh: meshSocketClosed(id)
    case .feature: for feature in features.all { feature.webSocketClosed(id, node: self) }
    case .events:
      guards.socketLimiter.forget(id)
      events.removeSubscriber(.webSocket(id))
    }
  }

  /// Everything queued on WebSocket `id` was written: features' sockets (stream readers) and event replays go on.
  func webSocketDrained(_ id: WebSocketID) {
    switch surface.connections[id] {
    case .feature: for feature in features.all { feature.webSocketDrained(id, node: self) }
    case .events: events.drained(.webSocket(id), node: self)
    case .mesh, nil: break
    }
  }

  /// Everything queued on streaming response `id` was written: features' responses (stream readers) and SSE replays
  /// go on.
  func streamDrained(_ id: RequestID) {
    featuresResponseDrained(id)
    events.drained(.stream(id), node: self)
  }

  func requestClosed(_ id: RequestID) {
    routeLabels[id] = nil
    featuresRequestClosed(id)
    events.removeSubscriber(.stream(id))
  }

  // MARK: - JSON views

  func peerJSON(_ peer: StoredPeer) -> JSONValue {
    [
      "id": .string(peer.id), "displayName": .string(peer.displayName), "nodeId": .string(nodeID),
      "discoveryInfo": .object(
        JSONObject(peer.discoveryInfo.sorted { $0.key < $1.key }.map { ($0.key, .string($0.value)) })),
      "createdAt": .string(peer.createdAt),
    ]
  }

  func nodeJSON() -> JSONValue {
    [
      "id": .string(nodeID), "name": .string(configuration.name), "version": .string(NodeConfiguration.version),
      "startedAt": .string(Timestamp.format(startedAt)),
      "uptimeSeconds": .double((Date().timeIntervalSince(startedAt) * 1000).rounded() / 1000),
      "peerCount": .int(Int64(peers.count)), "openWebSockets": .int(Int64(server.statistics().openWebSockets)),
    ]
  }

  /// Parses an event cursor: a non-negative decimal integer.
  static func parseCursor(_ text: String?, name: String) throws(APIError) -> Int64? {
    guard let text, !text.isEmpty else { return nil }
    guard text.count <= 18, text.allSatisfy(\.isASCII), text.allSatisfy(\.isNumber), let value = Int64(text) else {
      throw .badRequest(
        "\(name) must be an event id (a non-negative integer) from a previous event, not \(text.debugDescription)")
    }
    return value
  }
}
