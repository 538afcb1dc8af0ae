/// The node runtime: the actor that owns peers, subscribers and metrics, pinned to the lws service thread.
///
/// Layer 4 (node runtime) with the layer-6 request dispatch on top. `Node` is an actor whose executor is the
/// ``Server`` itself, so its methods run on the lws service thread and may call the server's loop-only
/// methods directly. lws callbacks enter it synchronously through ``ServerBridge`` with `assumeIsolated`.
/// Blocking work (SQLite) hops to the ``NodeStore``'s database actor; after every `await` the code
/// re-checks state it read before (a peer may have been deleted meanwhile).
import Crypto
import Foundation
import LWS
import Logging
import MeshCore

/// A live consumer of a peer's events: a WebSocket or an SSE stream.
final class Subscriber {
  enum Channel: Hashable {
    case webSocket(WebSocketID)
    case stream(RequestID)
  }

  let channel: Channel
  let peerID: String
  /// The newest event sequence delivered; events at or below it are never sent again.
  var lastSent: Int64 = 0
  /// While replaying from the store, live events are not queued: the replay reads on through the log until it has
  /// caught up with the newest live event (`newestLive`), then the subscriber goes live.
  var replaying = true
  var newestLive: Int64 = 0
  /// Events read from the log and not yet queued on the socket (the replay queues them only as the socket drains).
  var replayPage: [StoredEvent] = []
  var replayIndex = 0
  var fetching = false
  /// The last page read was short: the log had nothing more at that moment.
  var replayExhausted = false
  /// Events per log read, adapted to their size so a page holds about ``Node/replayPageBytes``.
  var pageLimit = 16
  var pageBytes = 0
  /// A reliable `{"op":"send"}` waits for room: reading is paused and messages that arrive meanwhile wait here.
  var holding = false
  var backlog: [WebSocketMessage] = []

  init(channel: Channel, peerID: String) {
    self.channel = channel
    self.peerID = peerID
  }
}

/// Counters exposed on `/metrics`.
struct NodeMetrics {
  var requests: [String: Int] = [:]
  var eventsAppended = 0
  var meshReadPauses = 0
  var slowConsumerDisconnects = 0
  var webSocketUpgradesRejected = 0
  var storageFailures = 0
  /// Events whose data broke their documented schema (checked in debug builds only).
  var eventsOffSchema = 0
}

/// The node actor.
public actor Node {
  nonisolated let server: Server
  let store: NodeStore
  let configuration: NodeConfiguration
  let nodeID: String
  let startedAt = Date()
  let router = Router.standard
  let staticFiles: StaticFiles
  let logger = Logger(component: "node")
  let httpLogger = Logger(component: "http")

  var peers: [String: StoredPeer] = [:]
  var peerIDsByTokenHash: [String: String] = [:]
  var subscribers: [Subscriber.Channel: Subscriber] = [:]
  var subscribersByPeer: [String: [Subscriber.Channel]] = [:]
  var routeLabels: [RequestID: String] = [:]
  var metrics = NodeMetrics()
  var keepAliveTask: Task<Void, Never>?
  var meshTask: Task<Void, Never>?
  var mesh: MeshRuntime
  var transceive = TransceiveBook(maxPeers: Node.largestMaxPeers)
  var pendingJobSends: [String: PendingJobSend] = [:]
  /// Jobs sent as a named event and not yet known to have failed, by session id.
  var deliveringJobs: [String: PendingJobSend] = [:]
  var publishQueue = PublishQueue<CheckedContinuation<Void, any Error>>()
  var publishing = false
  /// Whether mesh links are not read because the publish queue is over its high-water mark.
  var meshReadsPaused = false
  var chat: ChatRuntime
  var ticks: UInt64 = 0
  /// Admin token hash, limits and their counters (Admin.swift, Limits.swift).
  var guards: SecurityState
  /// DNS-SD registrations of the service types local peers advertise (nil without DNS-SD); see Node+DNSSD.swift.
  var dnssd: DNSSDDiscovery?
  let meshLogger = Logger(component: "mesh")
  let security: NodeSecurity
  var transfers = TransferRuntime()
  var streams = StreamRuntime()
  /// The names and addresses the node answers to (HostPolicy.swift).
  let hostPolicy: HostPolicy
  /// The data directory and database file the node opened, and why they are lost once they are (DataDirectoryHealth).
  let dataWatch: DataDirectoryWatch
  var dataDirectoryLost: String?
  var dataWatchTask: Task<Void, Never>?

  public nonisolated var unownedExecutor: UnownedSerialExecutor {
    server.asUnownedSerialExecutor()
  }

  init(
    server: Server, store: NodeStore, configuration: NodeConfiguration, nodeID: String, peers: [StoredPeer],
    services: [NodeStore.StoredService] = [], chatState: NodeStore.ChatState? = nil, staticFiles: StaticFiles,
    security: NodeSecurity = .none, adminTokenHash: String = "", limits: Limits = Limits()
  ) {
    self.guards = SecurityState(adminTokenHash: adminTokenHash, limits: limits)
    self.hostPolicy = HostPolicy.current(configuration)
    self.server = server
    self.security = security
    self.store = store
    self.configuration = configuration
    self.nodeID = nodeID
    self.staticFiles = staticFiles
    let dataPath = URL(fileURLWithPath: configuration.dataDirectory).standardizedFileURL.path
    self.dataWatch = DataDirectoryWatch(directory: dataPath, database: dataPath + "/meshgate.sqlite")
    let hello = NodeHello(
      nodeID: nodeID, name: configuration.name, softwareVersion: NodeConfiguration.version, port: UInt16(server.port))
    var directory = Directory(nodeID: nodeID)
    for peer in peers {
      self.peers[peer.id] = peer
      self.peerIDsByTokenHash[peer.tokenHash] = peer.id
      _ = directory.addLocalPeer(peer.id, displayName: peer.displayName)
    }
    // Restore advertising and browsing; no one is linked yet, so there is nothing to send or tell.
    for service in services where self.peers[service.peerID] != nil {
      if service.kind == "advertise" {
        _ = directory.startAdvertising(
          service.peerID, serviceType: service.serviceType, discoveryInfo: service.discoveryInfo)
      } else {
        _ = directory.startBrowsing(service.peerID, serviceType: service.serviceType)
      }
    }
    // Peers that transceived before the restart transceive again (their advertisement carries `transceive=1`).
    self.transceive = TransceiveBook(restoringFrom: directory, maxPeers: Self.largestMaxPeers)
    var chatBook = ChatBook(nodeID: nodeID)
    if let chatState {
      chatBook.restore(rooms: chatState.rooms, pending: chatState.pending, senderSeqs: chatState.senderSeqs)
    }
    self.chat = ChatRuntime(book: chatBook)
    var sessions = SessionBook(nodeID: nodeID, localFingerprint: security.fingerprint)
    // Links schedule senders round-robin, so reliable frames are numbered as they go on the wire.
    sessions.deferredSequencing = true
    self.mesh = MeshRuntime(
      node: MeshNode(
        links: LinkManager(
          local: hello, seed: UInt64(truncatingIfNeeded: nodeID.hashValue), secret: security.secret,
          pins: security.pins),
        directory: directory, sessions: sessions))
  }

  /// Starts periodic work (SSE keep-alives every 5 s, which also reveal vanished clients; mesh ticks). Runs on the
  /// service thread.
  func start() {
    keepAliveTask = Task { [weak self] in
      while !Task.isCancelled {
        try? await Task.sleep(for: .seconds(5))
        await self?.sendKeepAlives()
      }
    }
    dataWatchTask = Task { [weak self] in
      while !Task.isCancelled {
        try? await Task.sleep(for: .seconds(1))
        await self?.checkDataDirectory()
      }
    }
    startMesh()
    Task { await self.restoreTransfers() }
  }

  func stop() {
    keepAliveTask?.cancel()
    dataWatchTask?.cancel()
    meshTask?.cancel()
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
        let allowQueryToken = [.eventStream, .webSocket, .streamSocket].contains(route.operation)
        let authenticated = try authenticate(request.head, allowQueryToken: allowQueryToken)
        try checkRequestRate(peerID: authenticated.id)
        peer = authenticated
      }
      let context = RequestContext(request: request, parameters: parameters, peer: peer)
      var response = try await run(route.operation, context)
      if request.head.method == .head { response.omitBody = true }
      if !response.isStream || response.status != 200 || route.operation != .eventStream {
        respond(request, response)
      } else {
        startStream(request, response, context)
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
      token = String(parts[1]).trimmingCharacters(in: .whitespaces)
    } else if allowQueryToken {
      token = head.query["token"]
    }
    guard let token, !token.isEmpty else { throw .missingToken }
    guard let peerID = peerIDsByTokenHash[Crypto.sha256Hex(token)], let peer = peers[peerID] else {
      throw .invalidToken
    }
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
    if Self.streamSocketID(head.path) != nil {
      let decision = acceptStreamSocket(head)
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

  func webSocketOpened(_ id: WebSocketID, head: HTTPRequestHead) {
    if head.path == "/mesh" {
      meshSocketOpened(id, remoteAddress: head.remoteAddress)
      return
    }
    if Self.streamSocketID(head.path) != nil {
      streamSocketOpened(id, head: head)
      return
    }
    guard let peer = try? authenticate(head, allowQueryToken: true) else {
      server.close(id, code: 4401, reason: "token no longer valid")
      return
    }
    let since = (try? Self.parseCursor(head.query["since"], name: "since")) ?? nil
    let subscriber = addSubscriber(.webSocket(id), peerID: peer.id)
    Task { await self.beginDelivery(subscriber, since: since) }
  }

  func webSocketReceived(_ id: WebSocketID, _ message: WebSocketMessage) {
    if isMeshSocket(id) {
      meshSocketReceived(id, message)
      return
    }
    if streamSocketReceived(id, message) { return }
    guard let subscriber = subscribers[.webSocket(id)] else { return }
    if subscriber.holding {
      subscriber.backlog.append(message)
      return
    }
    let size: Int
    switch message {
    case .binary(let bytes), .text(let bytes): size = bytes.count
    }
    if let refusal = checkSocketMessage(id, size: size) {
      sendFrame(refusal.reply, to: subscriber)
      if refusal.close {
        removeSubscriber(.webSocket(id))
        server.close(id, code: 1009, reason: "message too large")
      }
      return
    }
    let reply: JSONValue
    switch message {
    case .binary:
      reply = Self.socketError("binary_not_supported", "this socket takes JSON text messages such as {\"op\":\"ping\"}")
    case .text(let bytes):
      let parsed: JSONValue
      do {
        parsed = try JSONValue.parse(bytes)
      } catch {
        reply = Self.socketError(
          error.isLimit ? "json_limit_exceeded" : "malformed_message",
          "\(error); send a JSON object with an \"op\" member, e.g. {\"op\":\"ping\"}")
        break
      }
      guard case .object(let object) = parsed, let op = object["op"]?.stringValue else {
        reply = Self.socketError(
          "malformed_message", "send a JSON object with an \"op\" member, e.g. {\"op\":\"ping\"}")
        break
      }
      switch op {
      case "ping":
        reply = ["type": "pong", "data": ["cursor": .string(String(subscriber.lastSent))]]
      case "send":
        guard let answer = socketSend(object, subscriber: subscriber, socket: id) else { return }
        reply = answer
      default:
        reply = Self.socketError(
          "unknown_op", "unknown op \(op.debugDescription); this node supports: ping, send")
      }
    }
    sendFrame(reply, to: subscriber)
  }

  static func socketError(_ code: String, _ message: String) -> JSONValue {
    ["type": "error", "data": ["code": .string(code), "message": .string(message)]]
  }

  func webSocketClosed(_ id: WebSocketID) {
    if isMeshSocket(id) {
      meshSocketClosed(id)
      return
    }
    if streamSocketClosed(id) { return }
    guards.socketLimiter.forget("\(id)")
    removeSubscriber(.webSocket(id))
  }

  /// Everything queued on WebSocket `id` was written: stream readers and event replays go on.
  func webSocketDrained(_ id: WebSocketID) {
    streamSocketDrained(id)
    if let subscriber = subscribers[.webSocket(id)] { pumpReplay(subscriber) }
  }

  /// Everything queued on streaming response `id` was written: stream readers and SSE replays go on.
  func streamDrained(_ id: RequestID) {
    streamResponseDrained(id)
    if let subscriber = subscribers[.stream(id)] { pumpReplay(subscriber) }
  }

  func requestClosed(_ id: RequestID) {
    routeLabels[id] = nil
    uploadRequestClosed(id)
    streamRequestClosed(id)
    removeSubscriber(.stream(id))
  }

  // MARK: - Subscribers and event delivery

  func addSubscriber(_ channel: Subscriber.Channel, peerID: String) -> Subscriber {
    let subscriber = Subscriber(channel: channel, peerID: peerID)
    subscribers[channel] = subscriber
    subscribersByPeer[peerID, default: []].append(channel)
    return subscriber
  }

  func removeSubscriber(_ channel: Subscriber.Channel) {
    guard let subscriber = subscribers.removeValue(forKey: channel) else { return }
    subscribersByPeer[subscriber.peerID]?.removeAll { $0 == channel }
    if subscribersByPeer[subscriber.peerID]?.isEmpty == true { subscribersByPeer[subscriber.peerID] = nil }
  }

  /// Bytes a replay keeps queued on a socket (it queues more only as the socket drains), and the target size of one
  /// read from the event log.
  static let replayHighWater = 1 << 20
  static let replayPageBytes = 8 << 20

  /// Sends `hello`, replays the log after `since` (if given), then switches the subscriber to live delivery.
  ///
  /// The replay is paced by the socket: it reads the log a page at a time and queues events only while less than
  /// ``replayHighWater`` waits on the socket, going on when the socket drains. So a client reading at full speed
  /// catches up with any backlog the log holds in one connection, and a slow one is never cut off by its replay.
  func beginDelivery(_ subscriber: Subscriber, since: Int64?) async {
    do {
      let latest = try await store.latestSequence(peerID: subscriber.peerID)
      guard subscribers[subscriber.channel] === subscriber, let peer = peers[subscriber.peerID] else { return }
      let hello: JSONValue = [
        "type": "hello",
        "data": ["peer": peerJSON(peer), "node": nodeJSON(), "cursor": .string(String(latest))],
      ]
      #if DEBUG
        checkDocumented("hello", hello.objectValue?["data"] ?? .null)
      #endif
      sendFrame(hello, to: subscriber, eventName: "hello")
      subscriber.lastSent = since ?? latest
      pumpReplay(subscriber)
    } catch {
      replayFailed(subscriber, error)
    }
  }

  /// Queues replayed events while the socket has room; reads the next page when this one is queued; goes live once
  /// the log has nothing newer than what was sent.
  func pumpReplay(_ subscriber: Subscriber) {
    guard subscriber.replaying, subscribers[subscriber.channel] === subscriber else { return }
    while subscriber.replayIndex < subscriber.replayPage.count {
      guard let queued = queuedBytes(subscriber) else { return }
      guard queued < Self.replayHighWater else { return }
      let event = subscriber.replayPage[subscriber.replayIndex]
      subscriber.replayIndex += 1
      deliver(event, to: subscriber)
      subscriber.pageBytes += max(0, (queuedBytes(subscriber) ?? queued) - queued)
      guard subscribers[subscriber.channel] === subscriber else { return }
    }
    if !subscriber.replayPage.isEmpty {
      // Adapt the next read to the size of these events (large session.data events come a few at a time).
      let average = max(1, subscriber.pageBytes / subscriber.replayPage.count)
      subscriber.pageLimit = max(1, min(500, Self.replayPageBytes / average))
      subscriber.replayPage = []
      subscriber.replayIndex = 0
      subscriber.pageBytes = 0
    }
    guard !subscriber.fetching else { return }
    if subscriber.replayExhausted && subscriber.newestLive <= subscriber.lastSent {
      subscriber.replaying = false
      return
    }
    subscriber.fetching = true
    Task { await self.readReplayPage(subscriber) }
  }

  func readReplayPage(_ subscriber: Subscriber) async {
    let limit = subscriber.pageLimit
    do {
      let page = try await store.events(peerID: subscriber.peerID, after: subscriber.lastSent, limit: limit)
      guard subscribers[subscriber.channel] === subscriber else { return }
      subscriber.fetching = false
      subscriber.replayExhausted = page.events.count < limit
      subscriber.replayPage = page.events
      subscriber.replayIndex = 0
      pumpReplay(subscriber)
    } catch {
      replayFailed(subscriber, error)
    }
  }

  func replayFailed(_ subscriber: Subscriber, _ error: any Error) {
    guard subscribers[subscriber.channel] === subscriber else { return }
    logger.warning("Event replay failed.", ["peer.id": subscriber.peerID, "error": String(describing: error)])
    disconnect(subscriber, code: 1011, reason: "event log unavailable; reconnect with since")
  }

  /// Bytes waiting on the subscriber's socket or stream; nil when it is gone.
  func queuedBytes(_ subscriber: Subscriber) -> Int? {
    switch subscriber.channel {
    case .webSocket(let id): server.queuedBytes(id)
    case .stream(let id): server.streamQueuedBytes(id)
    }
  }

  /// Appends events to peers' logs (in one transaction) and pushes them to live subscribers.
  ///
  /// Every append goes through one queue drained by one task, so each peer's events keep the order in which they
  /// were published: two tasks awaiting the store directly could reach it in either order. What goes into each
  /// transaction is ``PublishQueue``'s choice (small events are not held up behind large ones for other peers).
  func publish(_ entries: [(peerID: String, type: String, data: JSONValue)]) async throws {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
      enqueuePublish(entries, waiter: continuation)
    }
  }

  /// Publishes from a synchronous context, in order with every other publish.
  func publishInBackground(_ entries: [(peerID: String, type: String, data: JSONValue)]) {
    enqueuePublish(entries, waiter: nil)
  }

  func enqueuePublish(
    _ entries: [(peerID: String, type: String, data: JSONValue)], waiter: CheckedContinuation<Void, any Error>?
  ) {
    // Every type a peer can see is documented (EventCatalog, docs/events.md, OpenAPI); debug builds check it.
    assert(
      entries.allSatisfy { EventCatalog.loggedTypes.contains($0.type) },
      "an event type missing from EventCatalog: \(entries.map(\.type))")
    #if DEBUG
      for entry in entries { checkDocumented(entry.type, entry.data) }
    #endif
    publishQueue.append(entries, waiter: waiter)
    if publishQueue.bytes > PublishQueue<CheckedContinuation<Void, any Error>>.highWater { pauseMeshReads(true) }
    guard !publishing else { return }
    publishing = true
    Task { await self.drainPublishQueue() }
  }

  func drainPublishQueue() async {
    while !publishQueue.isEmpty {
      // One transaction per turn: one hop to the database queue and back for many events (fan-outs queue many
      // batches while a write is in flight), chosen so that small events are not stuck behind large ones.
      let batches = publishQueue.next()
      // Peers deleted meanwhile get nothing (their log is gone).
      let entries = batches.flatMap(\.entries).filter { peers[$0.peerID] != nil }
      do {
        if !entries.isEmpty {
          let events = try await store.appendEvents(entries, at: Timestamp.now())
          pushLive(events)
        }
        for batch in batches { batch.waiter?.resume() }
      } catch {
        logger.error("Could not append events.", ["error": String(describing: error)])
        for batch in batches { batch.waiter?.resume(throwing: error) }
      }
      if meshReadsPaused && publishQueue.bytes < PublishQueue<CheckedContinuation<Void, any Error>>.lowWater {
        pauseMeshReads(false)
      }
    }
    publishing = false
  }

  /// Stops (or resumes) reading every mesh link while the event log is far behind what the links bring in: the
  /// senders' TCP windows fill and their reliable sends wait for room, instead of this node's memory growing.
  func pauseMeshReads(_ paused: Bool) {
    guard meshReadsPaused != paused else { return }
    meshReadsPaused = paused
    metrics.meshReadPauses += paused ? 1 : 0
    logger.info(
      paused ? "Event log behind; pausing mesh reads." : "Event log caught up; resuming mesh reads.",
      ["queue.bytes": publishQueue.bytes])
    for socket in mesh.connectionBySocket.keys { server.setReceiveFlow(socket, enabled: !paused) }
  }

  func pushLive(_ events: [StoredEvent]) {
    metrics.eventsAppended += events.count
    // The recipients of one fan-out share the event (same sequence, same envelope): its WebSocket frame is built
    // once and the same message is queued on every socket.
    var shared: (sequence: Int64, frame: OutboundMessage)?
    for event in events {
      for channel in subscribersByPeer[event.peerID] ?? [] {
        guard let subscriber = subscribers[channel] else { continue }
        if subscriber.replaying {
          subscriber.newestLive = max(subscriber.newestLive, event.sequence)
        } else if case .webSocket = channel {
          if shared?.sequence != event.sequence {
            shared = (event.sequence, OutboundMessage(bytes: event.envelope.serialized(), binary: false))
          }
          deliver(event, to: subscriber, frame: shared?.frame)
        } else {
          deliver(event, to: subscriber)
        }
      }
    }
  }

  func deliver(_ event: StoredEvent, to subscriber: Subscriber, frame: OutboundMessage? = nil) {
    guard event.sequence > subscriber.lastSent else { return }
    subscriber.lastSent = event.sequence
    if let frame, case .webSocket(let id) = subscriber.channel {
      switch server.send(frame, to: id) {
      case .queued, .closed: break
      case .queueFull: slowConsumer(subscriber)
      }
      return
    }
    sendFrame(event.envelope, to: subscriber, eventName: event.type, eventID: String(event.sequence))
  }

  func sendFrame(_ value: JSONValue, to subscriber: Subscriber, eventName: String? = nil, eventID: String? = nil) {
    switch subscriber.channel {
    case .webSocket(let id):
      switch server.send(OutboundMessage(bytes: value.serialized(), binary: false), to: id) {
      case .queued, .closed: break
      case .queueFull: slowConsumer(subscriber)
      }
    case .stream(let id):
      var text = ""
      if let eventID { text += "id: \(eventID)\n" }
      if let eventName { text += "event: \(eventName)\n" }
      text += "data: \(value.serializedString())\n\n"
      if !server.writeStream(id, Array(text.utf8)) { slowConsumer(subscriber) }
    }
  }

  /// The largest number of event bytes that may wait in the node for one WebSocket or SSE client (README).
  static let slowConsumerBytes = 8 << 20

  /// Cuts off a client that let more than ``slowConsumerBytes`` of events pile up: what it has not started to receive
  /// is dropped (it is in the log), and it gets a close frame `4008` (WebSocket) or a final `error` event (SSE) right
  /// after what its socket already holds, so it knows to reconnect with `since` / `Last-Event-ID`.
  func slowConsumer(_ subscriber: Subscriber) {
    guard subscribers[subscriber.channel] === subscriber else { return }
    metrics.slowConsumerDisconnects += 1
    logger.notice(
      "Disconnecting a slow event consumer.", ["peer.id": subscriber.peerID, "cursor": subscriber.lastSent])
    removeSubscriber(subscriber.channel)
    let message =
      "client too slow: over \(Self.slowConsumerBytes >> 20) MiB of events unread; reconnect with since=<last event id>"
    switch subscriber.channel {
    case .webSocket(let id):
      server.close(id, code: 4008, reason: message, discardingQueued: true)
    case .stream(let id):
      let final: JSONValue = Self.socketError("slow_consumer", message + " (Last-Event-ID)")
      server.endStream(
        id, discardingQueued: true, final: Array("event: error\ndata: \(final.serializedString())\n\n".utf8))
    }
  }

  func disconnect(_ subscriber: Subscriber, code: UInt16, reason: String) {
    removeSubscriber(subscriber.channel)
    switch subscriber.channel {
    case .webSocket(let id): server.close(id, code: code, reason: reason)
    case .stream(let id): server.endStream(id)
    }
  }

  func sendKeepAlives() {
    for channel in subscribers.keys {
      if case .stream(let id) = channel { _ = server.writeStream(id, Array(": keep-alive\n\n".utf8)) }
    }
  }

  func startStream(_ request: HTTPRequest, _ response: HTTPResponse, _ context: RequestContext) {
    guard let peer = context.peer else { return }
    respond(request, response)
    let since =
      (try? Self.parseCursor(request.head.query["since"] ?? request.head.headers["last-event-id"], name: "since"))
      ?? nil
    let subscriber = addSubscriber(.stream(request.id), peerID: peer.id)
    _ = server.writeStream(request.id, Array("retry: 2000\n\n".utf8))
    Task { await self.beginDelivery(subscriber, since: since) }
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

/// What a handler gets.
struct RequestContext: Sendable {
  let request: HTTPRequest
  let parameters: [String: String]
  let peer: StoredPeer?

  /// The authenticated peer; only call on authenticated routes.
  var authenticatedPeer: StoredPeer {
    guard let peer else { preconditionFailure("authenticatedPeer read on a route without authentication") }
    return peer
  }
}

/// Bridges lws callbacks (on the service thread) into the ``Node`` actor.
final class ServerBridge: ServerDelegate {
  let node: Node
  let maxBodyBytes: Int

  init(node: Node, maxBodyBytes: Int) {
    self.node = node
    self.maxBodyBytes = maxBodyBytes
  }

  func bodyLimit(for head: HTTPRequestHead) -> Int {
    if isStreamWrite(head) { return 1 << 62 }
    return isUpload(head) ? node.configuration.maxTransferBytes : maxBodyBytes
  }

  /// Resource uploads (`POST /api/v1/sessions/{id}/resources`) and stream writes (`PUT /api/v1/streams/{id}`) are
  /// streamed rather than collected.
  func streamsBody(for head: HTTPRequestHead) -> Bool { isUpload(head) || isStreamWrite(head) }

  func isUpload(_ head: HTTPRequestHead) -> Bool {
    guard head.method == .post, head.path.hasSuffix("/resources") else { return false }
    let segments = head.path.split(separator: "/", omittingEmptySubsequences: true)
    return segments.count == 5 && segments[0] == "api" && segments[1] == "v1" && segments[2] == "sessions"
  }

  func isStreamWrite(_ head: HTTPRequestHead) -> Bool {
    guard head.method == .put else { return false }
    let segments = head.path.split(separator: "/", omittingEmptySubsequences: true)
    return segments.count == 4 && segments[0] == "api" && segments[1] == "v1" && segments[2] == "streams"
  }

  func requestBodyReceived(_ id: RequestID, _ bytes: [UInt8]) {
    node.assumeIsolated { $0.bodyReceived(id, bytes) }
  }

  func requestBodyEnded(_ id: RequestID) {
    node.assumeIsolated { $0.bodyEnded(id) }
  }

  func streamDrained(_ id: RequestID) {
    node.assumeIsolated { $0.streamDrained(id) }
  }

  func webSocketDrained(_ id: WebSocketID) {
    node.assumeIsolated { $0.webSocketDrained(id) }
  }

  func webSocketNextMessage(_ id: WebSocketID) -> OutboundMessage? {
    node.assumeIsolated { $0.meshNextFrame(id) }
  }

  func handle(_ request: HTTPRequest) {
    node.assumeIsolated { $0.handle(request) }
  }

  func requestClosed(_ id: RequestID) {
    node.assumeIsolated { $0.requestClosed(id) }
  }

  func shouldAccept(webSocket head: HTTPRequestHead) -> WebSocketDecision {
    node.assumeIsolated { $0.shouldAccept(webSocket: head) }
  }

  func webSocketOpened(_ id: WebSocketID, head: HTTPRequestHead) {
    node.assumeIsolated { $0.webSocketOpened(id, head: head) }
  }

  func webSocketReceived(_ id: WebSocketID, _ message: WebSocketMessage) {
    node.assumeIsolated { $0.webSocketReceived(id, message) }
  }

  func webSocketClosed(_ id: WebSocketID) {
    node.assumeIsolated { $0.webSocketClosed(id) }
  }

  func webSocketConnected(_ id: WebSocketID) {
    node.assumeIsolated { $0.meshSocketConnected(id) }
  }

  func webSocketConnectFailed(_ id: WebSocketID, reason: String) {
    node.assumeIsolated { $0.meshSocketClosed(id) }
  }

  func errorResponse(status: Int, message: String, head: HTTPRequestHead) -> HTTPResponse {
    node.assumeIsolated { $0.countRejected(head, status: status) }
    let code =
      switch status {
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

/// ISO 8601 timestamps in UTC with milliseconds.
enum Timestamp {
  static func now() -> String { format(Date()) }

  static func format(_ date: Date) -> String {
    let interval = date.timeIntervalSince1970
    var seconds = time_t(interval.rounded(.down))
    let millis = Int((interval - Double(seconds)) * 1000)
    var parts = tm()
    gmtime_r(&seconds, &parts)
    return String(
      format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
      Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), millis)
  }
}
