/// The link side of the node's mesh I/O: each mesh socket's outbound scheduler and the wake-ups of producers waiting
/// for its room, the TCP sampling behind liveness and the silent-link log, dialling (name lookups and the name's
/// other addresses), the frame guard's counting and logging, link refusals, and the frame counters.
///
/// Layer 4 (node runtime). Owned by the node actor (``Node/links``) and only touched on its executor (the lws service
/// thread); its methods that need the node's sockets, connection table or mesh core take it (`node: isolated Node`).
/// The node keeps the connection table (``MeshState/connectionBySocket`` and back), the ``MeshNode`` and the
/// interpreter (Mesh/Node+Mesh.swift).
///
/// Frame guard (docs/security.md, "What a linked node may do"): a linked node is trusted with nothing it cannot prove
/// from this node's own state:
/// - every id in a frame is well-formed (``WireIDs``: UUIDs, or short tokens for chat), so none can become a path
///   outside the data directory or an odd key; a frame with a bad id is refused whole (reason `invalid_id`);
/// - it speaks only for the peers it hosts: a frame whose sending peer (`from`) is not one of its peers in this
///   node's directory is refused (reason `not_own_peer`), and no frame may name one of this node's peers as hosted
///   elsewhere (the same reason);
/// - local peers it names must have agreed (``SessionBook`` and the transfer, stream and chat handlers check that,
///   reason `not_agreed`), and it may announce only so much (``MeshLimits``, reasons `too_many_peers`,
///   `too_many_nodes`).
/// Every refusal is counted in `meshgate_mesh_frames_refused_total{reason}` and logged at debug level, once per frame;
/// the link stays up (a hostile node gains nothing by being cut off and re-linking). The id and peer checks are the
/// mesh core's (``MeshNode``, pure); this type counts, logs and answers what it refuses.
import Crypto
import Dispatch
import LWS
import Logging
import MeshCore

final class MeshLinks {
  /// Unsent bytes a mesh link's kernel send queue may hold before the link's scheduler is asked for more: frames wait
  /// in the scheduler instead, where a small frame of one producer passes another's bulk backlog (the fairness bound
  /// is then one bulk frame plus this much, not several megabytes of socket buffer).
  static let unsentBytes = 128 << 10
  /// Bytes of a sender's lane on a mesh link above which its unreliable data is dropped (and counted).
  static let unreliableQueueLimit = 1 << 20
  /// The reasons `meshgate_mesh_frames_refused_total` always shows (at 0 until one happens).
  static let frameRefusalReasons = [
    "invalid_id", "not_own_peer", "not_agreed", "not_host", "not_member", "unknown_peer", "invalid_peer",
    "too_many_peers", "too_many_nodes", "too_many_invitations", "gossip_mismatch",
  ]
  /// The most `node.link.refused` events a node publishes in its lifetime (distinct node ids and reasons).
  static let maxRefusalEvents = 64

  static let logger = Logger(component: "mesh")

  /// Each mesh-link socket's outbound scheduler (control first, bulk producers round-robin); the socket pulls from it
  /// whenever it can take the next frame.
  private(set) var schedulers: [WebSocketID: LinkScheduler<MeshOutbound>] = [:]
  private var roomWakePending = false
  /// Each mesh socket's `tcpi_data_segs_in` and when it last changed.
  private var dataSegmentsIn: [WebSocketID: (count: UInt32, at: UInt64)] = [:]
  /// When the last mesh tick ran (a late tick would show in the silent-link log line).
  private var lastTick: UInt64 = 0
  /// Dials waiting for their name to be looked up (NodeNames.swift), and whether the link manager closed them meanwhile.
  private var resolving: [LinkManager.ConnectionID: Bool] = [:]
  /// How a host name is looked up (on a worker thread); tests put a fixed answer here.
  var resolveName: @Sendable (String) -> Result<[String], NodeNameError> = NodeNames.resolve
  /// The name's other addresses for a dial in progress, tried in turn while a connection cannot be made.
  private var dialFallbacks: [LinkManager.ConnectionID: (port: UInt16, addresses: [String])] = [:]
  /// Names that did not resolve at their last lookup (logged once at info until they resolve again).
  private var unresolvedNames: Set<String> = []
  private(set) var framesIn = 0
  private(set) var framesOut = 0
  private(set) var badFrames = 0
  private(set) var unreliableDropped = 0
  /// Links refused for a security reason (pins, mesh secret).
  private(set) var linksRefused = 0
  /// Refusals already reported as events, so a node retrying every few seconds does not flood event logs.
  private var refusalsReported: Set<String> = []
  /// Frames that spoke for peers their node does not host.
  private(set) var spoofedFrames = 0
  /// Mesh frames refused by the node runtime's own checks (``refuseFrame(_:from:_:)``), by reason.
  private var refusedFrames: [String: Int] = [:]

  // MARK: - Sockets

  /// A mesh socket opened (inbound) or connected (dialled): it keeps at most ``unsentBytes`` in the kernel, and
  /// reads stay paused while the event queue is full.
  func socketReady(_ socket: WebSocketID, node: isolated Node) {
    node.server.limitUnsentBytes(socket, to: Self.unsentBytes)
    if node.events.meshReadsPaused { node.server.setReceiveFlow(socket, enabled: false) }
  }

  /// Decodes a message from mesh socket `socket`: the frame, or nil (counted, and the link closed) for a text message
  /// or a malformed frame.
  func decode(_ message: WebSocketMessage, on socket: WebSocketID, node: isolated Node) -> MeshMessage? {
    guard case .binary(let bytes) = message else {
      badFrames += 1
      node.server.close(socket, code: 1003, reason: "mesh frames are binary")
      return nil
    }
    do {
      let frame = try MeshFrameCodec.decode(bytes)
      framesIn += 1
      return frame
    } catch {
      badFrames += 1
      Self.logger.warning("Closing a mesh link after a malformed frame.", ["error": error.description])
      node.server.close(socket, code: 1002, reason: "malformed frame")
      return nil
    }
  }

  /// Mesh socket `socket` (of `connection`) is gone: the reliable data its scheduler still held (accepted but never
  /// written), whose senders are to be told.
  func socketClosed(_ socket: WebSocketID, connection: LinkManager.ConnectionID) -> [MeshMessage] {
    dialFallbacks[connection] = nil
    dataSegmentsIn[socket] = nil
    var scheduler = schedulers.removeValue(forKey: socket)
    var reliable: [MeshMessage] = []
    for (item, _) in scheduler?.removeAll() ?? [] {
      if case .reliable(let message, _) = item { reliable.append(message) }
    }
    return reliable
  }

  // MARK: - Liveness

  /// Samples every link's kernel receive state before the tick's dead check: bytes the kernel received on a link count
  /// as hearing from its node even before they make a whole frame (over TLS nothing reaches libwebsockets until a
  /// whole record, up to 16 KiB, is in, which on a lossy link that carries a few hundred kbit/s takes more than a
  /// second, with the heartbeats queued behind it).
  func sample(now: UInt64, node: isolated Node) -> [LinkManager.ConnectionID: (
    status: TCPReceiveStatus, nodeID: String?
  )] {
    var sampled: [LinkManager.ConnectionID: (status: TCPReceiveStatus, nodeID: String?)] = [:]
    for (socket, connection) in node.mesh.connectionBySocket {
      guard let status = node.server.receiveStatus(socket) else { continue }
      sampled[connection] = (status, node.mesh.node.links.nodeID(on: connection))
      if UInt64(status.millisSinceData) < now {
        node.feed(.bytesReceived(on: connection, now: now - UInt64(status.millisSinceData)))
      }
      if let segments = status.dataSegmentsIn, dataSegmentsIn[socket]?.count != segments {
        dataSegmentsIn[socket] = (segments, now)
      }
    }
    return sampled
  }

  /// One line per link the tick declared dead, with what its kernel had received (docs/security.md, "Fault tests"):
  /// in-order data (what liveness counts), any data segment (one that arrived out of order behind a lost segment
  /// cannot be read yet), any ACK (the other kernel answers, its node may still be silent), and the retransmission
  /// timer. The netns suite checks each declaration against its own sampling of the declaring node's socket.
  func logSilentLinks(
    _ effects: [MeshEffect], _ sampled: [LinkManager.ConnectionID: (status: TCPReceiveStatus, nodeID: String?)],
    now: UInt64, node: isolated Node
  ) {
    for case .close(let connection, let reason) in effects where reason.hasPrefix("no heartbeat") {
      guard let socket = node.mesh.socketByConnection[connection], let (status, nodeID) = sampled[connection] else {
        continue
      }
      let sinceSegment: Int = dataSegmentsIn[socket].map { Int(now - $0.at) } ?? -1
      let bytes: Int = status.bytesReceived.map { Int($0) } ?? -1
      let ports = node.server.socketPorts(socket)
      Self.logger.info(
        "Mesh link silent: declaring it dead.",
        [
          "ws.connection.id": socket, "node.id": nodeID ?? "", "reason": reason,
          "tcp.ms_since_data": Int(status.millisSinceData), "tcp.ms_since_data_segment": sinceSegment,
          "tcp.ms_since_ack": Int(status.millisSinceAck), "tcp.bytes_received": bytes,
          "tcp.rto_ms": Int(status.rtoMicros / 1000), "tcp.backoff": Int(status.backoff),
          "tick.gap_ms": Int(now - lastTick), "tcp.local_port": ports.map { Int($0.local) } ?? -1,
          "tcp.remote_port": ports.map { Int($0.remote) } ?? -1,
        ])
    }
    lastTick = now
  }

  // MARK: - Outbound scheduling

  /// Gives `socket` its outbound scheduler (`scheduler`: frames already queued for its link connection) and puts it
  /// in pull mode.
  func openScheduler(
    _ socket: WebSocketID, carrying scheduler: LinkScheduler<MeshOutbound> = LinkScheduler(), node: isolated Node
  ) {
    schedulers[socket] = scheduler
    node.server.setPulling(socket)
  }

  /// The scheduler of the link to `nodeID`, if linked.
  func scheduler(toNode nodeID: String, node: isolated Node) -> LinkScheduler<MeshOutbound>? {
    guard let connection = node.mesh.node.links.connection(of: nodeID),
      let socket = node.mesh.socketByConnection[connection]
    else {
      return nil
    }
    return schedulers[socket]
  }

  /// Whether bulk lane `producer` may queue on the link to `nodeID` (false when not linked).
  func hasRoom(_ nodeID: String, producer: String, node: isolated Node) -> Bool {
    scheduler(toNode: nodeID, node: node)?.hasRoom(for: producer) ?? false
  }

  /// Whether some link still holds bulk frames of lane `producer`.
  func holdsBulk(of producer: String) -> Bool {
    schedulers.values.contains { $0.queuedBytes(of: producer) > 0 }
  }

  /// Encodes `message` and queues it on `connection` in its lane.
  func send(_ message: MeshMessage, on connection: LinkManager.ConnectionID, node: isolated Node) {
    sendFrame(
      OutboundMessage(bytes: MeshFrameCodec.encode(message), binary: true), on: connection,
      lane: MeshOutbound.lane(of: message), node: node)
  }

  /// Queues an encoded frame on `connection` in `lane` (control unless said otherwise). Links are never closed for
  /// being busy: bulk producers check ``hasRoom(_:producer:node:)`` before they queue.
  func sendFrame(
    _ frame: OutboundMessage, on connection: LinkManager.ConnectionID,
    lane: LinkScheduler<MeshOutbound>.Lane = .control, node: isolated Node
  ) {
    guard let socket = node.mesh.socketByConnection[connection] else { return }
    enqueue(.frame(frame), bytes: frame.count, lane: lane, on: socket, node: node)
  }

  /// Queues a session or invitation frame for node `nodeID` on its link `connection`.
  func sendToNode(
    _ message: MeshMessage, nodeID: String, on connection: LinkManager.ConnectionID?, node: isolated Node
  ) {
    guard let connection, let socket = node.mesh.socketByConnection[connection] else { return }
    switch message {
    case .sessionData(_, let from, _, 0, _):
      // Unreliable data never queues without bound: past the limit it is dropped (and counted).
      let producer = "peer:" + from
      if let scheduler = schedulers[socket],
        scheduler.queuedBytes(of: producer) > Self.unreliableQueueLimit || !scheduler.hasRoom(for: producer)
      {
        unreliableDropped += 1
        return
      }
      send(message, on: connection, node: node)
    case .sessionData(_, _, _, SessionBook.unsequenced, let payload),
      .sessionEvent(_, _, _, SessionBook.unsequenced, _, let payload):
      // Numbered when it goes on the wire (nextFrame). Room was checked before the send was accepted.
      enqueue(
        .reliable(message, nodeID: nodeID), bytes: payload.count + 256, lane: MeshOutbound.lane(of: message),
        on: socket, node: node)
    default:
      send(message, on: connection, node: node)
    }
  }

  private func enqueue(
    _ item: MeshOutbound, bytes: Int, lane: LinkScheduler<MeshOutbound>.Lane, on socket: WebSocketID,
    node: isolated Node
  ) {
    guard schedulers[socket] != nil else { return }
    schedulers[socket]?.enqueue(item, bytes: bytes, lane: lane)
    node.server.wantsToWrite(socket)
  }

  /// The next frame for mesh socket `socket`, now that it can take one (the server's pull).
  func nextFrame(_ socket: WebSocketID, node: isolated Node) -> OutboundMessage? {
    var failed: [MeshMessage] = []
    var next: OutboundMessage?
    var freedBulk = false
    while next == nil, let (item, lane) = schedulers[socket]?.dequeue() {
      if case .bulk = lane { freedBulk = true }
      switch item {
      case .frame(let frame):
        next = frame
      case .reliable(let message, let nodeID):
        // Numbered only on the connection that is the node's link now; a replaced connection's leftovers fail.
        guard let connection = node.mesh.connectionBySocket[socket],
          node.mesh.node.links.connection(of: nodeID) == connection
        else {
          failed.append(message)
          continue
        }
        let numbered = node.mesh.node.sequenceReliable(message, to: nodeID)
        next = OutboundMessage(bytes: MeshFrameCodec.encode(numbered), binary: true)
      }
    }
    if next != nil { framesOut += 1 }
    if !failed.isEmpty { node.interpret(node.mesh.node.unsent(failed, reason: "link to node replaced")) }
    if freedBulk && !roomWakePending {
      // Producers waiting for room go on once this callback is over.
      roomWakePending = true
      Task { node.links.roomFreed(node: node) }
    }
    return next
  }

  /// Bulk room was freed on some link: held reliable sends and the features' bulk producers try again.
  func roomFreed(node: isolated Node) {
    roomWakePending = false
    for feature in node.features.all { feature.linkRoomFreed(node: node) }
  }

  /// Closes `connection`'s socket: control frames queued before the close (a goodbye) still go out; bulk frames are
  /// not sent once a link closes (their producers are told when the socket is gone).
  func close(_ connection: LinkManager.ConnectionID, reason: String, node: isolated Node) {
    abandonDial(connection)
    guard let socket = node.mesh.socketByConnection[connection] else { return }
    Self.logger.info("Closing a mesh link.", ["ws.connection.id": socket, "reason": reason])
    for item in schedulers[socket]?.removeControl() ?? [] {
      if case .frame(let frame) = item { _ = node.server.send(frame, to: socket) }
    }
    node.server.close(socket, code: 1000, reason: reason)
  }

  // MARK: - Dialling

  /// Dials `host` (an address literal, or a name looked up first on a worker thread, NodeNames.swift) for
  /// `connection`.
  func connect(_ connection: LinkManager.ConnectionID, host: String, port: UInt16, node: isolated Node) {
    guard !NodeNames.isAddressLiteral(host) else {
      dial(connection, address: host, port: port, node: node)
      return
    }
    // A name is looked up on a worker thread; the dial follows on the service thread.
    resolving[connection] = false
    let resolve = resolveName
    DispatchQueue.global(qos: .utility).async { [weak node] in
      let result = resolve(host)
      node?.onLoop { node in node.links.resolved(connection, host: host, result, port: port, node: node) }
    }
  }

  /// The lookup for connection `connection` ended: dial the address, unless the link manager closed the connection
  /// meanwhile (then it learns the dial failed) or the name did not resolve.
  private func resolved(
    _ connection: LinkManager.ConnectionID, host: String, _ result: Result<[String], NodeNameError>, port: UInt16,
    node: isolated Node
  ) {
    guard let closed = resolving.removeValue(forKey: connection) else { return }
    switch result {
    case .success(let addresses) where !closed:
      unresolvedNames.remove(host)
      if addresses.count > 1 { dialFallbacks[connection] = (port, Array(addresses.dropFirst())) }
      dial(connection, address: addresses[0], port: port, node: node)
    case .success:
      node.feed(.outboundFailed(connection, now: Node.monotonicMillis()))
    case .failure(let error):
      // Said once per name at info (a redial every few seconds would flood the log), then at debug. The set is
      // bounded: gossip may name ever new hosts.
      if unresolvedNames.count >= 1024 { unresolvedNames.removeAll() }
      let level: LogLevel = unresolvedNames.insert(error.host).inserted ? .info : .debug
      Self.logger.log(level, "Could not dial a node.", ["mesh.address": "\(error.host):\(port)", "reason": "\(error)"])
      node.feed(.outboundFailed(connection, now: Node.monotonicMillis()))
    }
  }

  /// Opens the WebSocket of connection `connection` to `address` (an address literal).
  private func dial(_ connection: LinkManager.ConnectionID, address host: String, port: UInt16, node: isolated Node) {
    if openLink(connection, to: host, port: port, node: node) == nil {
      node.feed(.outboundFailed(connection, now: Node.monotonicMillis()))
    }
  }

  /// Starts connection `connection`'s WebSocket to `host` (an address literal) with `scheduler`, the frames already
  /// queued for the connection; nil when it cannot even be started.
  private func openLink(
    _ connection: LinkManager.ConnectionID, to host: String, port: UInt16,
    carrying scheduler: LinkScheduler<MeshOutbound> = LinkScheduler(), node: isolated Node
  ) -> WebSocketID? {
    guard
      let socket = node.server.connect(
        host: host, port: Int(port), path: "/mesh", subprotocol: meshSubprotocol, tls: node.security.meshTLS)
    else { return nil }
    node.mesh.connectionBySocket[socket] = connection
    node.mesh.socketByConnection[connection] = socket
    openScheduler(socket, carrying: scheduler, node: node)
    return socket
  }

  /// The dialled socket of `connection` connected: no further address of its name is tried.
  func dialConnected(_ connection: LinkManager.ConnectionID) {
    dialFallbacks[connection] = nil
  }

  /// A dialled socket could not connect: the name's next address is tried on the same link connection (with the frames
  /// queued for it), or the link manager learns the connection is closed.
  func socketFailed(_ id: WebSocketID, node: isolated Node) {
    if let connection = node.mesh.connectionBySocket[id], var fallback = dialFallbacks[connection],
      !fallback.addresses.isEmpty
    {
      let next = fallback.addresses.removeFirst()
      dialFallbacks[connection] = fallback.addresses.isEmpty ? nil : fallback
      if openLink(connection, to: next, port: fallback.port, carrying: schedulers[id] ?? LinkScheduler(), node: node)
        != nil
      {
        node.mesh.connectionBySocket[id] = nil
        schedulers[id] = nil
        return
      }
    }
    node.meshSocketClosed(id)
  }

  /// The link manager closed connection `connection`: a lookup in progress ends as a failed dial, and no further
  /// address is tried.
  func abandonDial(_ connection: LinkManager.ConnectionID) {
    if resolving[connection] != nil { resolving[connection] = true }
    dialFallbacks[connection] = nil
  }

  // MARK: - Security of links

  /// The transport of mesh WebSocket `id` for the link manager: TLS or not, both fingerprints, a fresh challenge.
  /// Nil (and the socket is closed) when the CSPRNG fails.
  func transport(_ id: WebSocketID, node: isolated Node) -> LinkManager.Transport? {
    let seen = node.server.transportSecurity(of: id) ?? TransportSecurity(encrypted: false, peerCertificate: nil)
    guard let challenge = try? Crypto.randomBytes(32) else {
      Self.logger.error("The random number generator failed; closing a mesh link.", ["ws.connection.id": id])
      node.server.close(id, code: 1011, reason: "random number generator failed")
      return nil
    }
    return LinkManager.Transport(
      encrypted: seen.encrypted, localFingerprint: seen.encrypted ? node.security.fingerprint : nil,
      remoteFingerprint: seen.peerCertificate.map(Certificate.fingerprint(der:)), challenge: challenge)
  }

  /// A link was refused: one warning per attempt; one `node.link.refused` event per node id and reason (a refused
  /// node redials every few seconds), and at most ``maxRefusalEvents`` in all, so that a stranger claiming ever new
  /// node ids cannot flood the peers' event logs (the log lines and the metric still count every refusal).
  func reportRefusal(_ refusal: LinkManager.Refusal, node: isolated Node) {
    linksRefused += 1
    Self.logger.warning(
      "Refused a mesh link.",
      [
        "reason": refusal.code, "node.id": refusal.nodeID ?? "?", "node.name": refusal.name ?? "?",
        "tls.pinned": refusal.pinnedFingerprint ?? "", "tls.presented": refusal.presentedFingerprint ?? "",
        "detail": refusal.message,
      ])
    let key = "\(refusal.code)|\(refusal.nodeID ?? "")|"
    guard refusalsReported.count < Self.maxRefusalEvents, refusalsReported.insert(key).inserted else {
      return
    }
    var object = JSONObject()
    object["id"] = refusal.nodeID.map { .string($0) } ?? .null
    object["name"] = refusal.name.map { .string($0) } ?? .null
    node.publishToAllPeers(
      type: "node.link.refused",
      data: [
        "node": .object(object), "code": .string(refusal.code), "message": .string(refusal.message),
        "pinnedFingerprint": refusal.pinnedFingerprint.map { .string($0) } ?? .null,
        "presentedFingerprint": refusal.presentedFingerprint.map { .string($0) } ?? .null,
      ])
  }

  /// Node `nodeID`'s pin was removed: its next refusal is reported again.
  func forgetRefusals(of nodeID: String) {
    refusalsReported = refusalsReported.filter { !$0.contains("|\(nodeID)|") }
  }

  // MARK: - Frame guard

  /// Counts and logs one refused frame.
  func refuseFrame(_ reason: String, from nodeID: String?, _ detail: String) {
    refusedFrames[reason, default: 0] += 1
    Self.logger.debug(
      "Refused a mesh frame.", ["node.id": nodeID ?? "?", "refusal.reason": reason, "refusal.detail": detail])
  }

  /// A frame refused by the mesh core's frame guard (``MeshNode``): counted, logged, and handed to the features (the
  /// one whose offer it was tells the sender, so that nothing waits for an answer that never comes).
  func frameRefused(_ refusal: FrameRefusal, node: isolated Node) {
    refuseFrame(refusal.reason, from: refusal.nodeID, refusal.detail)
    if refusal.spoofedSender { spoofedFrames += 1 }
    if refusal.reason == "not_own_peer" {
      Self.logger.warning(
        "Dropped a mesh frame that speaks for peers the sending node does not host.",
        ["node.id": refusal.nodeID ?? "?", "refusal.detail": refusal.detail])
    }
    for feature in node.features.all { feature.meshEffect(.frameRefused(refusal), node: node) }
  }

  /// Refusals counted by the state machines (sessions, chat, directory, links) and by this type, by reason.
  func frameRefusals(node: isolated Node) -> [String: Int] {
    var counts = refusedFrames
    for (reason, count) in node.mesh.node.sessions.refusals { counts[reason, default: 0] += count }
    for (reason, count) in node.mesh.node.directory.refusals { counts[reason, default: 0] += count }
    for (reason, count) in node.mesh.node.links.refusals { counts[reason, default: 0] += count }
    for (reason, count) in node.mesh.node.chat.refusals { counts[reason, default: 0] += count }
    return counts
  }
}

@available(*, unavailable) extension MeshLinks: Sendable {}

/// A frame waiting in a link's scheduler.
enum MeshOutbound {
  /// Encoded and ready to write.
  case frame(OutboundMessage)
  /// Reliable session data or a named event, numbered (``SessionBook/sequenceReliable(_:to:)``) and encoded when it
  /// goes on the wire, so sequence numbers follow wire order whatever the round-robin did.
  case reliable(MeshMessage, nodeID: String)

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
}

/// The WebSocket subprotocol of mesh links.
let meshSubprotocol = "meshgate-node.v1"
