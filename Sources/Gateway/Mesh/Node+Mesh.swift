/// The node runtime's mesh I/O: mesh-link WebSockets ⇄ ``MeshNode`` ⇄ peers' event logs.
///
/// Layer 4 (node runtime). Everything runs on the lws service thread inside the ``Node`` actor. The pure
/// ``MeshNode`` (links, directory, sessions, and the wiring between them) decides; this file reports what happened to
/// it (``Node/feed(_:)``) and implements the verbs of ``MeshRuntime``, whose `interpret(_:)` (in MeshCore, shared with
/// the simulator) carries out the ``MeshEffect``s in order: the verbs dial and close WebSockets (subprotocol
/// `meshgate-node.v1`, path `/mesh`), encode and decode frames with ``MeshFrameCodec``, tick the mesh every 100 ms,
/// turn what peers are told into `peer.*`, `session.*`, `invitation.*` and `node.*` events, and hand transfer and
/// stream frames to their feature. Everything else features act on (link changes, chat effects, session events,
/// invitations received or ended, directory and local-service changes) reaches them through ``NodeFeature``'s hooks,
/// over the feature registry: this file names no feature type.
import Dispatch
import LWS
import Logging
// Package: `Node` conforms to MeshCore's package-wide `MeshRuntime` (below).
package import MeshCore

/// Mesh state owned by the node actor.
struct MeshState {
  /// Links, directory, sessions and invitations. Change it only through ``Node/feed(_:)`` and its session commands,
  /// and carry out what they return with `interpret(_:)` (``MeshRuntime``).
  var node: MeshNode
  /// Read-only views of ``node``'s parts, for queries. Lent, not copied: a getter returning the part would copy the
  /// whole struct (retaining each of its tables) for every look-up through it, such as each send's session.
  var links: LinkManager { _read { yield node.links } }
  var directory: Directory { _read { yield node.directory } }
  var sessions: SessionBook { _read { yield node.sessions } }
  var chat: ChatBook { _read { yield node.chat } }
  /// Mesh-link WebSockets and the link manager's connection ids, both ways.
  var connectionBySocket: [WebSocketID: LinkManager.ConnectionID] = [:]
  var socketByConnection: [LinkManager.ConnectionID: WebSocketID] = [:]
  /// Dials waiting for their name to be looked up (NodeNames.swift), and whether the link manager closed them meanwhile.
  var resolving: [LinkManager.ConnectionID: Bool] = [:]
  /// How a host name is looked up (on a worker thread); tests put a fixed answer here (``Node/useNameResolver(_:)``).
  var resolveName: @Sendable (String) -> Result<[String], NodeNameError> = NodeNames.resolve
  /// The name's other addresses for a dial in progress, tried in turn while a connection cannot be made.
  var dialFallbacks: [LinkManager.ConnectionID: (port: UInt16, addresses: [String])] = [:]
  /// Names that did not resolve at their last lookup (logged once at info until they resolve again).
  var unresolvedNames: Set<String> = []
  var nextInboundConnection: LinkManager.ConnectionID = 1
  var framesIn = 0
  var framesOut = 0
  var badFrames = 0
  var unreliableDropped = 0
  /// Links refused for a security reason (pins, mesh secret).
  var linksRefused = 0
  /// Refusals already reported as events, so a node retrying every few seconds does not flood event logs.
  var refusalsReported: Set<String> = []
  /// Each mesh-link socket's outbound scheduler (control first, bulk producers round-robin); the socket pulls from it
  /// whenever it can take the next frame.
  var schedulers: [WebSocketID: LinkScheduler<MeshOutbound>] = [:]
  var roomWakePending = false
  /// Each mesh socket's `tcpi_data_segs_in` and when it last changed.
  var dataSegmentsIn: [WebSocketID: (count: UInt32, at: UInt64)] = [:]
  /// When the last mesh tick ran (a late tick would show in the silent-link log line).
  var lastTick: UInt64 = 0
  /// Events for local peers gathered by the mesh core's interpreter until its next flush point (``Node/flush()``); a
  /// session event told to many local peers in a row is one fan-out.
  var pendingEvents = EventGathering<SessionBook.Event>()
}

/// A frame waiting in a link's scheduler.
enum MeshOutbound {
  /// Encoded and ready to write.
  case frame(OutboundMessage)
  /// Reliable session data or a named event, numbered (``SessionBook/sequenceReliable(_:to:)``) and encoded when it
  /// goes on the wire, so sequence numbers follow wire order whatever the round-robin did.
  case reliable(MeshMessage, nodeID: String)
}

/// The WebSocket subprotocol of mesh links.
let meshSubprotocol = "meshgate-node.v1"

extension Node {
  /// Milliseconds on a monotonic clock, for the link manager.
  nonisolated static func monotonicMillis() -> UInt64 {
    DispatchTime.now().uptimeNanoseconds / 1_000_000
  }

  /// Starts mesh work: seeds are dialled and the link manager ticks every 100 ms.
  func startMesh() {
    let now = Self.monotonicMillis()
    for seed in configuration.seeds {
      feed(.seedAdded(host: seed.host, port: seed.port, now: now))
    }
    meshTimer = server.repeating(every: .milliseconds(100)) { [weak self] in
      self?.assumeIsolated { $0.meshTick() }
    }
  }

  func meshTick() {
    let now = Self.monotonicMillis()
    // Bytes the kernel received on a link count as hearing from its node even before they make a whole frame: over
    // TLS nothing reaches libwebsockets until a whole record (up to 16 KiB) is in, which on a lossy link that carries
    // a few hundred kbit/s takes more than a second, with the heartbeats queued behind it. Every link is sampled
    // before the same tick's dead check.
    var sampled: [LinkManager.ConnectionID: (status: TCPReceiveStatus, nodeID: String?)] = [:]
    for (socket, connection) in mesh.connectionBySocket {
      guard let status = server.receiveStatus(socket) else { continue }
      sampled[connection] = (status, mesh.links.nodeID(on: connection))
      if UInt64(status.millisSinceData) < now {
        feed(.bytesReceived(on: connection, now: now - UInt64(status.millisSinceData)))
      }
      if let segments = status.dataSegmentsIn, mesh.dataSegmentsIn[socket]?.count != segments {
        mesh.dataSegmentsIn[socket] = (segments, now)
      }
    }
    let effects = mesh.node.handle(.tick(now: now))
    logSilentLinks(effects, sampled, now: now)
    mesh.lastTick = now
    interpret(effects)
    featuresTick()
  }

  /// One line per link the tick declared dead, with what its kernel had received (docs/security.md, "Fault tests"):
  /// in-order data (what liveness counts), any data segment (one that arrived out of order behind a lost segment
  /// cannot be read yet), any ACK (the other kernel answers, its node may still be silent), and the retransmission
  /// timer. The netns suite checks each declaration against its own sampling of the declaring node's socket.
  func logSilentLinks(
    _ effects: [MeshEffect], _ sampled: [LinkManager.ConnectionID: (status: TCPReceiveStatus, nodeID: String?)],
    now: UInt64
  ) {
    for case .close(let connection, let reason) in effects where reason.hasPrefix("no heartbeat") {
      guard let socket = mesh.socketByConnection[connection], let (status, nodeID) = sampled[connection] else {
        continue
      }
      let sinceSegment: Int = mesh.dataSegmentsIn[socket].map { Int(now - $0.at) } ?? -1
      let bytes: Int = status.bytesReceived.map { Int($0) } ?? -1
      let ports = server.socketPorts(socket)
      meshLogger.info(
        "Mesh link silent: declaring it dead.",
        [
          "ws.connection.id": socket, "node.id": nodeID ?? "", "reason": reason,
          "tcp.ms_since_data": Int(status.millisSinceData), "tcp.ms_since_data_segment": sinceSegment,
          "tcp.ms_since_ack": Int(status.millisSinceAck), "tcp.bytes_received": bytes,
          "tcp.rto_ms": Int(status.rtoMicros / 1000), "tcp.backoff": Int(status.backoff),
          "tick.gap_ms": Int(now - mesh.lastTick), "tcp.local_port": ports.map { Int($0.local) } ?? -1,
          "tcp.remote_port": ports.map { Int($0.remote) } ?? -1,
        ])
    }
  }

  /// A node announced itself on the beacon (or was found by DNS-SD, `source: .dnssd`).
  func discovered(nodeID: String, host: String, port: UInt16, source: LinkManager.Source = .beacon) {
    feed(.discovered(nodeID: nodeID, host: host, port: port, source: source, now: Self.monotonicMillis()))
  }

  /// Adds a static seed at run time (`POST /api/v1/mesh/nodes`).
  func addSeed(_ address: MeshAddress) {
    feed(.seedAdded(host: address.host, port: address.port, now: Self.monotonicMillis()))
  }

  func isMeshSocket(_ id: WebSocketID) -> Bool { mesh.connectionBySocket[id] != nil }

  // MARK: - Transport events

  func meshSocketOpened(_ id: WebSocketID, remoteAddress: String) {
    guard let transport = meshTransport(id) else { return }
    let connection = mesh.nextInboundConnection
    mesh.nextInboundConnection += 1
    mesh.connectionBySocket[id] = connection
    mesh.socketByConnection[connection] = id
    openScheduler(id)
    server.limitUnsentBytes(id, to: Self.meshUnsentBytes)
    if events.meshReadsPaused { server.setReceiveFlow(id, enabled: false) }
    feed(.inboundOpened(connection, remoteHost: remoteAddress, transport: transport, now: Self.monotonicMillis()))
  }

  func meshSocketConnected(_ id: WebSocketID) {
    guard let connection = mesh.connectionBySocket[id] else { return }
    guard let transport = meshTransport(id) else { return }
    mesh.dialFallbacks[connection] = nil
    server.limitUnsentBytes(id, to: Self.meshUnsentBytes)
    if events.meshReadsPaused { server.setReceiveFlow(id, enabled: false) }
    feed(.outboundOpened(connection, transport: transport, now: Self.monotonicMillis()))
  }

  func meshSocketReceived(_ id: WebSocketID, _ message: WebSocketMessage) {
    guard let connection = mesh.connectionBySocket[id] else { return }
    guard case .binary(let bytes) = message else {
      mesh.badFrames += 1
      server.close(id, code: 1003, reason: "mesh frames are binary")
      return
    }
    do {
      let frame = try MeshFrameCodec.decode(bytes)
      mesh.framesIn += 1
      feed(.frameReceived(frame, on: connection, now: Self.monotonicMillis()))
    } catch {
      mesh.badFrames += 1
      meshLogger.warning("Closing a mesh link after a malformed frame.", ["error": error.description])
      server.close(id, code: 1002, reason: "malformed frame")
    }
  }

  func meshSocketClosed(_ id: WebSocketID) {
    guard let connection = mesh.connectionBySocket.removeValue(forKey: id) else { return }
    mesh.socketByConnection[connection] = nil
    mesh.dialFallbacks[connection] = nil
    mesh.dataSegmentsIn[id] = nil
    var scheduler = mesh.schedulers.removeValue(forKey: id)
    let unsent = scheduler?.removeAll() ?? []
    feed(.closed(connection, now: Self.monotonicMillis()))
    // Reliable data accepted but never written: its senders are told, after what was written and not acknowledged.
    var reliable: [MeshMessage] = []
    for (item, _) in unsent {
      if case .reliable(let message, _) = item { reliable.append(message) }
    }
    if !reliable.isEmpty { interpret(mesh.node.unsent(reliable, reason: "link to node lost")) }
    // What was queued on the link is gone: sends held for its room go on (or are refused) without it.
    featuresLinkRoomFreed()
  }

  // MARK: - Outbound scheduling

  /// Unsent bytes a mesh link's kernel send queue may hold before the link's scheduler is asked for more: frames wait
  /// in the scheduler instead, where a small frame of one producer passes another's bulk backlog (the fairness bound
  /// is then one bulk frame plus this much, not several megabytes of socket buffer).
  static let meshUnsentBytes = 128 << 10
  /// Bytes of a sender's lane on a mesh link above which its unreliable data is dropped (and counted).
  static let unreliableQueueLimit = 1 << 20

  /// Gives `socket` its outbound scheduler (`scheduler`: frames already queued for its link connection) and puts it
  /// in pull mode.
  func openScheduler(_ socket: WebSocketID, carrying scheduler: LinkScheduler<MeshOutbound> = LinkScheduler()) {
    mesh.schedulers[socket] = scheduler
    server.setPulling(socket)
  }

  /// The scheduler lane of a frame the node sends: bulk frames of one producer share a lane (and keep their order
  /// within it), all else is control. (Features that send bulk frames of their own choose their lanes themselves.)
  static func lane(of message: MeshMessage) -> LinkScheduler<MeshOutbound>.Lane {
    switch message {
    case .sessionData(_, let fromPeerID, _, _, _), .sessionEvent(_, let fromPeerID, _, _, _, _):
      .bulk("peer:" + fromPeerID)
    case .chat:
      .bulk("chat")
    default:
      .control
    }
  }

  /// The scheduler of the link to `nodeID`, if linked.
  func scheduler(toNode nodeID: String) -> LinkScheduler<MeshOutbound>? {
    guard let connection = mesh.links.connection(of: nodeID), let socket = mesh.socketByConnection[connection] else {
      return nil
    }
    return mesh.schedulers[socket]
  }

  /// Whether bulk lane `producer` may queue on the link to `nodeID` (false when not linked).
  func linkHasRoom(_ nodeID: String, producer: String) -> Bool {
    scheduler(toNode: nodeID)?.hasRoom(for: producer) ?? false
  }

  /// Encodes `message` and queues it on `connection` in its lane.
  func sendMessage(_ message: MeshMessage, on connection: LinkManager.ConnectionID) {
    sendFrame(
      OutboundMessage(bytes: MeshFrameCodec.encode(message), binary: true), on: connection, lane: Self.lane(of: message)
    )
  }

  func enqueue(_ item: MeshOutbound, bytes: Int, lane: LinkScheduler<MeshOutbound>.Lane, on socket: WebSocketID) {
    guard mesh.schedulers[socket] != nil else { return }
    mesh.schedulers[socket]?.enqueue(item, bytes: bytes, lane: lane)
    server.wantsToWrite(socket)
  }

  /// The next frame for mesh socket `socket`, now that it can take one (the server's pull).
  func meshNextFrame(_ socket: WebSocketID) -> OutboundMessage? {
    var failed: [MeshMessage] = []
    var next: OutboundMessage?
    var freedBulk = false
    while next == nil, let (item, lane) = mesh.schedulers[socket]?.dequeue() {
      if case .bulk = lane { freedBulk = true }
      switch item {
      case .frame(let frame):
        next = frame
      case .reliable(let message, let nodeID):
        // Numbered only on the connection that is the node's link now; a replaced connection's leftovers fail.
        guard let connection = mesh.connectionBySocket[socket], mesh.links.connection(of: nodeID) == connection else {
          failed.append(message)
          continue
        }
        let numbered = mesh.node.sequenceReliable(message, to: nodeID)
        next = OutboundMessage(bytes: MeshFrameCodec.encode(numbered), binary: true)
      }
    }
    if next != nil { mesh.framesOut += 1 }
    if !failed.isEmpty { interpret(mesh.node.unsent(failed, reason: "link to node replaced")) }
    if freedBulk && !mesh.roomWakePending {
      // Producers waiting for room go on once this callback is over.
      mesh.roomWakePending = true
      Task { self.linkRoomFreed() }
    }
    return next
  }

  /// Bulk room was freed on some link: held reliable sends and the features' bulk producers try again.
  func linkRoomFreed() {
    mesh.roomWakePending = false
    featuresLinkRoomFreed()
  }

  // MARK: - Reporting to the mesh core

  /// Reports `input` to the mesh core and carries out what it returns (``MeshRuntime/interpret(_:)``). Inputs that
  /// change what local peers advertise are told to the features (DNS-SD registrations follow them).
  func feed(_ input: MeshInput) {
    interpret(mesh.node.handle(input))
    switch input {
    case .localPeerAdded, .localPeerRenamed, .localPeerRemoved, .advertisingStarted, .advertisingStopped,
      .browsingStarted, .browsingStopped:
      for feature in features.all { feature.localServicesChanged(node: self) }
    default:
      break
    }
  }

  // MARK: - The mesh runtime's verbs

  /// Gathers a `peer.found`, `peer.lost`, `presence.found` or `presence.lost` event for local peer `peerID`
  /// (published at the next ``flush()``).
  package func directoryEvent(peerID: String, _ event: Directory.Event) {
    switch event {
    case .peerFound(let peer, let serviceType, let info):
      mesh.pendingEvents.append(
        EventFanOut(
          peerIDs: [peerID], type: "peer.found",
          data: ["peer": peer.json, "serviceType": .string(serviceType), "discoveryInfo": Self.mapJSON(info)]))
    case .peerLost(let peer, let serviceType):
      mesh.pendingEvents.append(
        EventFanOut(
          peerIDs: [peerID], type: "peer.lost", data: ["peer": peer.json, "serviceType": .string(serviceType)]))
    case .peerPresent(let peer):
      mesh.pendingEvents.append(EventFanOut(peerIDs: [peerID], type: "presence.found", data: ["peer": peer.json]))
    case .peerAbsent(let peer):
      mesh.pendingEvents.append(EventFanOut(peerIDs: [peerID], type: "presence.lost", data: ["peer": peer.json]))
    }
  }

  /// Gathers a `session.*` or `invitation.*` event for local peer `peerID` (published at the next ``flush()``).
  package func sessionEvent(peerID: String, _ event: SessionBook.Event) {
    // A fan-out notifies many local peers of the same event in a row: its data is built once and it stays one entry
    // naming them all (the event log stores it as one body, serialized once, off this loop).
    mesh.pendingEvents.add(peerID, event: event) {
      let built = featuresSessionEventJSON(event, for: peerID)
      return (built.type, built.data)
    }
    followUp(event, for: peerID)
  }

  /// Gathers session data or a named event for many local peers as one entry, one fan-out (published at the next
  /// ``flush()``): its data is built once, and the store writes it as one body.
  package func sessionEvents(peerIDs: [String], _ event: SessionBook.Event) {
    guard let first = peerIDs.first else { return }
    let built = featuresSessionEventJSON(event, for: first)
    mesh.pendingEvents.append(EventFanOut(peerIDs: peerIDs, type: built.type, data: built.data))
    for peerID in peerIDs { followUp(event, for: peerID) }
  }

  /// What a session event sets off beyond the peer's event log (a job offer arriving, a job delivery failing) is the
  /// features' to say.
  func followUp(_ event: SessionBook.Event, for peerID: String) {
    for feature in features.all { feature.sessionEvent(event, for: peerID, node: self) }
  }

  /// Publishes the gathered events in one batch.
  package func flush() {
    guard !mesh.pendingEvents.isEmpty else { return }
    events.publishInBackground(fanOuts: mesh.pendingEvents.take(), node: self)
  }

  package func send(_ message: MeshMessage, on connection: LinkManager.ConnectionID) {
    sendMessage(message, on: connection)
  }

  package func broadcast(_ message: MeshMessage, on connections: [LinkManager.ConnectionID]) {
    let frame = OutboundMessage(bytes: MeshFrameCodec.encode(message), binary: true)
    for connection in connections { sendFrame(frame, on: connection) }
  }

  /// Queues a session or invitation frame for node `nodeID` on its link `connection`.
  package func sendToNode(_ message: MeshMessage, nodeID: String, on connection: LinkManager.ConnectionID?) {
    guard let connection, let socket = mesh.socketByConnection[connection] else { return }
    switch message {
    case .sessionData(_, let from, _, 0, _):
      // Unreliable data never queues without bound: past the limit it is dropped (and counted).
      let producer = "peer:" + from
      if let scheduler = mesh.schedulers[socket],
        scheduler.queuedBytes(of: producer) > Self.unreliableQueueLimit || !scheduler.hasRoom(for: producer)
      {
        mesh.unreliableDropped += 1
        return
      }
      sendMessage(message, on: connection)
    case .sessionData(_, _, _, SessionBook.unsequenced, let payload),
      .sessionEvent(_, _, _, SessionBook.unsequenced, _, let payload):
      // Numbered when it goes on the wire (meshNextFrame). Room was checked before the send was accepted.
      enqueue(.reliable(message, nodeID: nodeID), bytes: payload.count + 256, lane: Self.lane(of: message), on: socket)
    default:
      sendMessage(message, on: connection)
    }
  }

  package func close(_ connection: LinkManager.ConnectionID, reason: String) {
    abandonDial(connection)
    guard let socket = mesh.socketByConnection[connection] else { return }
    meshLogger.info("Closing a mesh link.", ["ws.connection.id": socket, "reason": reason])
    // Control frames queued before the close (a goodbye) still go out; bulk frames are not sent once a link closes
    // (their producers are told when the socket is gone).
    for item in mesh.schedulers[socket]?.removeControl() ?? [] {
      if case .frame(let frame) = item { _ = server.send(frame, to: socket) }
    }
    server.close(socket, code: 1000, reason: reason)
  }

  package func drop(_ connection: LinkManager.ConnectionID, reason: String) {
    abandonDial(connection)
    if let socket = mesh.socketByConnection[connection] { server.close(socket, code: 1002, reason: reason) }
  }

  package func pin(nodeID: String, fingerprint: String) {
    pinCertificate(nodeID: nodeID, fingerprint: fingerprint)
  }

  package func refused(_ refusal: LinkManager.Refusal) {
    reportRefusal(refusal)
  }

  package func linkUp(_ hello: NodeHello, security: SessionBook.LinkSecurity) {
    meshLogger.info(
      "Node linked.",
      [
        "node.id": hello.nodeID, "node.name": hello.name, "link.encrypted": security.encrypted,
        "tls.fingerprint": security.remoteFingerprint,
      ])
    featuresNodeLinked(hello.nodeID)
    publishToAllPeers(
      type: "node.linked",
      data: [
        "node": [
          "id": .string(hello.nodeID), "name": .string(hello.name), "version": .string(hello.softwareVersion),
          "encrypted": .bool(security.encrypted),
          "fingerprint": security.remoteFingerprint.isEmpty ? .null : .string(security.remoteFingerprint),
        ]
      ])
  }

  package func linkReplaced(nodeID: String, security: SessionBook.LinkSecurity) {
    meshLogger.debug("Link moved to a new connection.", ["node.id": nodeID, "link.encrypted": security.encrypted])
    // Frames in flight on the old connection may be lost: chat re-syncs, transfers resume from the receiver's offset.
    featuresLinkReplaced(nodeID)
  }

  package func linkDown(nodeID: String) {
    meshLogger.info("Node unlinked.", ["node.id": nodeID])
    featuresNodeUnlinked(nodeID)
    publishToAllPeers(type: "node.unlinked", data: ["node": ["id": .string(nodeID)]])
  }

  /// Frames the mesh core hands to the runtime (transfers and streams) go to the features.

  /// Chat effects go to the features (the chat feature queues each batch: store writes, then sends and events).
  package func chat(_ effect: MeshEffect) {
    featuresMeshEffect(effect)
  }

  /// What the payload book decided goes to the features.
  package func payload(_ effect: PayloadEffect) {
    featuresMeshEffect(.payload(effect))
  }

  package func chatFrameMalformed(nodeID: String, detail: String) {
    meshLogger.warning("Ignoring a malformed chat frame.", ["node.id": nodeID, "error": detail])
  }

  package func directoryChanged() {
    for feature in features.all { feature.directoryChanged(node: self) }
  }

  package func invitationReceived(_ invitation: SessionBook.Invitation) {
    for feature in features.all { feature.invitationReceived(invitation, node: self) }
  }

  package func invitationEnded(_ invitation: SessionBook.Invitation) {
    for feature in features.all { feature.invitationEnded(invitation, node: self) }
  }

  /// Queues an encoded frame on `connection` in `lane` (control unless said otherwise). Links are never closed for
  /// being busy: bulk producers check ``linkHasRoom(_:producer:)`` before they queue.
  func sendFrame(
    _ frame: OutboundMessage, on connection: LinkManager.ConnectionID,
    lane: LinkScheduler<MeshOutbound>.Lane = .control
  ) {
    guard let socket = mesh.socketByConnection[connection] else { return }
    enqueue(.frame(frame), bytes: frame.count, lane: lane, on: socket)
  }

  func publishToAllPeers(type: String, data: JSONValue) {
    // One fan-out naming every local peer: one event, serialized once.
    guard !peers.isEmpty else { return }
    events.publishInBackground(fanOuts: [EventFanOut(peerIDs: peers.keys.sorted(), type: type, data: data)], node: self)
  }

  static func mapJSON(_ map: [String: String]) -> JSONValue {
    .object(JSONObject(map.sorted { $0.key < $1.key }.map { ($0.key, .string($0.value)) }))
  }
}

/// The node is its mesh core's runtime. `@preconcurrency`: the verbs are isolated to the node (the lws service
/// thread) while ``MeshRuntime``'s requirements are not; `interpret(_:)` is only called from the node's own isolated
/// methods, and the Swift runtime checks on every verb that it runs on the node's executor (a call from anywhere else
/// stops the process instead of racing).
extension Node: @preconcurrency MeshRuntime {}
