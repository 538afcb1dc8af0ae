/// The node runtime: the actor that owns peers, subscribers and metrics, pinned to the lws service thread.
///
/// Layer 4 (node runtime); requests and WebSocket upgrades go through the HTTP pipeline of its ``HTTPSurface``
/// (HTTP/HTTPSurface.swift), and its defences are ``NodeSafety``'s. `Node` is an actor whose executor is its
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
  /// The ``MeshNode`` (links, directory, sessions, chat) and the mesh sockets' connection table (Mesh/Node+Mesh.swift).
  var mesh: MeshState
  /// The link side of the mesh: schedulers, dialling, liveness sampling, the frame guard's counters (Mesh/MeshLinks).
  let links = MeshLinks()
  /// The mesh tick, every 100 ms on the port's executor (``startMesh()``).
  var meshTimer: (any PortTimer)?
  /// Every feature, each the owner of its state (Node/NodeFeature.swift, Features/).
  let features: Features
  /// Who the local peers are, by id and token (Node/PeerTable.swift); the peers feature changes it.
  var peers: PeerTable
  /// The HTTP pipeline with its static files, route labels and request counters (HTTP/HTTPSurface.swift).
  let surface: HTTPSurface
  /// Host and Origin policy, the admin token, limits, the data-directory watch (Security/NodeSafety.swift).
  let safety: NodeSafety

  static let logger = Logger(component: "node")
  static let meshLogger = Logger(component: "mesh")
  nonisolated var logger: Logger { Self.logger }
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
    self.surface = HTTPSurface(staticFiles: staticFiles, server: server)
    self.server = server
    self.store = store
    self.configuration = configuration
    self.nodeID = nodeID
    let dataPath = URL(fileURLWithPath: configuration.dataDirectory).standardizedFileURL.path
    self.security = security
    self.safety = NodeSafety(
      guards: SecurityState(adminTokenHash: adminTokenHash, limits: limits),
      hostPolicy: HostPolicy.current(configuration),
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
        directory: directory, sessions: sessions, chat: chatBook, holdsOffers: true))
  }

  /// Starts periodic work (SSE keep-alives every 5 s, which also reveal vanished clients; mesh ticks, both on the
  /// port's timers; the data-directory watch). Runs on the service thread.
  func start() {
    events.start(node: self)
    safety.startWatching(node: self)
    startMesh()
    for feature in features.all { feature.nodeStarted(node: self) }
  }

  func stop() {
    events.stop()
    safety.stopWatching()
    meshTimer?.cancel()
  }

  /// Runs `body` on the service thread inside the actor; safe from any thread (file queues use it).
  nonisolated func onLoop(_ body: @escaping @Sendable (isolated Node) -> Void) {
    server.execute { [self] in self.assumeIsolated { body($0) } }
  }

  // MARK: - Requests

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
    for feature in features.all { feature.peerUsed(peer.id, node: self) }
    return peer
  }

  // MARK: - WebSockets

  func webSocketReceived(_ id: WebSocketID, _ message: WebSocketMessage) {
    switch surface.connections[id] {
    case .mesh: meshSocketReceived(id, message)
    case .feature: for feature in features.all { feature.webSocketReceived(id, message, node: self) }
    case .events: events.received(message, on: id, node: self)
    case nil: break
    }
  }

  func webSocketClosed(_ id: WebSocketID) {
    // Outbound sockets are mesh links (the only sockets this node dials); one that failed before it connected has no
    // kind yet.
    switch surface.connections.removeValue(forKey: id) ?? .mesh {
    case .mesh: meshSocketClosed(id)
    case .feature: for feature in features.all { feature.webSocketClosed(id, node: self) }
    case .events:
      safety.guards.socketLimiter.forget(id)
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
    for feature in features.all { feature.responseDrained(id, node: self) }
    events.drained(.stream(id), node: self)
  }

  func requestClosed(_ id: RequestID) {
    surface.requestClosed(id)
    for feature in features.all { feature.requestClosed(id, node: self) }
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
      "startedAt": .string(Timestamp.format(surface.startedAt)),
      "uptimeSeconds": .double((Date().timeIntervalSince(surface.startedAt) * 1000).rounded() / 1000),
      "peerCount": .int(Int64(peers.count)), "openWebSockets": .int(Int64(server.statistics().openWebSockets)),
    ]
  }
}
