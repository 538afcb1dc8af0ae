/// The node runtime's mesh I/O: mesh-link WebSockets ⇄ ``MeshNode`` ⇄ peers' event logs.
///
/// Layer 4 (node runtime). Everything runs on the lws service thread inside the ``Node`` actor. The pure
/// ``MeshNode`` (links, directory, sessions, and the wiring between them) decides; this file reports what happened to
/// it (``Node/feed(_:)``) and implements the verbs of ``MeshRuntime``, whose `interpret(_:)` (in MeshCore, shared with
/// the simulator) carries out the ``MeshEffect``s in order: the verbs dial, queue on and close WebSockets through the
/// link side, ``MeshLinks`` (MeshLinks.swift: schedulers, dialling, liveness sampling, the frame guard's counters;
/// subprotocol `meshgate-node.v1`, path `/mesh`), encode and decode frames with ``MeshFrameCodec``, tick the mesh every 100 ms,
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
  /// Mesh-link WebSockets and the link manager's connection ids, both ways.
  var connectionBySocket: [WebSocketID: LinkManager.ConnectionID] = [:]
  var socketByConnection: [LinkManager.ConnectionID: WebSocketID] = [:]
  var nextInboundConnection: LinkManager.ConnectionID = 1
  /// Events for local peers gathered by the mesh core's interpreter until its next flush point (``Node/flush()``); a
  /// session event told to many local peers in a row is one fan-out.
  var pendingEvents = EventGathering<SessionBook.Event>()
}

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
    // Every link is sampled before the same tick's dead check.
    let sampled = links.sample(now: now, node: self)
    let effects = mesh.node.handle(.tick(now: now))
    links.logSilentLinks(effects, sampled, now: now, node: self)
    interpret(effects)
    for feature in features.all { feature.tick(node: self) }
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
    guard let transport = links.transport(id, node: self) else { return }
    let connection = mesh.nextInboundConnection
    mesh.nextInboundConnection += 1
    mesh.connectionBySocket[id] = connection
    mesh.socketByConnection[connection] = id
    links.openScheduler(id, node: self)
    links.socketReady(id, node: self)
    feed(.inboundOpened(connection, remoteHost: remoteAddress, transport: transport, now: Self.monotonicMillis()))
  }

  func meshSocketConnected(_ id: WebSocketID) {
    guard let connection = mesh.connectionBySocket[id] else { return }
    guard let transport = links.transport(id, node: self) else { return }
    links.dialConnected(connection)
    links.socketReady(id, node: self)
    feed(.outboundOpened(connection, transport: transport, now: Self.monotonicMillis()))
  }

  func meshSocketReceived(_ id: WebSocketID, _ message: WebSocketMessage) {
    guard let connection = mesh.connectionBySocket[id] else { return }
    guard let frame = links.decode(message, on: id, node: self) else { return }
    feed(.frameReceived(frame, on: connection, now: Self.monotonicMillis()))
  }

  func meshSocketClosed(_ id: WebSocketID) {
    guard let connection = mesh.connectionBySocket.removeValue(forKey: id) else { return }
    mesh.socketByConnection[connection] = nil
    let reliable = links.socketClosed(id, connection: connection)
    feed(.closed(connection, now: Self.monotonicMillis()))
    // Reliable data accepted but never written: its senders are told, after what was written and not acknowledged.
    if !reliable.isEmpty { interpret(mesh.node.unsent(reliable, reason: "link to node lost")) }
    // What was queued on the link is gone: sends held for its room go on (or are refused) without it.
    for feature in features.all { feature.linkRoomFreed(node: self) }
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
          data: ["peer": peer.json, "serviceType": .string(serviceType), "discoveryInfo": .stringMap(info)]))
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
      let built = features.sessionEventJSON(event, for: peerID, node: self)
      return (built.type, built.data)
    }
    followUp(event, for: peerID)
  }

  /// Gathers session data or a named event for many local peers as one entry, one fan-out (published at the next
  /// ``flush()``): its data is built once, and the store writes it as one body.
  package func sessionEvents(peerIDs: [String], _ event: SessionBook.Event) {
    guard let first = peerIDs.first else { return }
    let built = features.sessionEventJSON(event, for: first, node: self)
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
    links.send(message, on: connection, node: self)
  }

  package func broadcast(_ message: MeshMessage, on connections: [LinkManager.ConnectionID]) {
    let frame = OutboundMessage(bytes: MeshFrameCodec.encode(message), binary: true)
    for connection in connections { links.sendFrame(frame, on: connection, node: self) }
  }

  /// Queues a session or invitation frame for node `nodeID` on its link `connection`.
  package func sendToNode(_ message: MeshMessage, nodeID: String, on connection: LinkManager.ConnectionID?) {
    links.sendToNode(message, nodeID: nodeID, on: connection, node: self)
  }

  package func close(_ connection: LinkManager.ConnectionID, reason: String) {
    links.close(connection, reason: reason, node: self)
  }

  package func drop(_ connection: LinkManager.ConnectionID, reason: String) {
    links.abandonDial(connection)
    if let socket = mesh.socketByConnection[connection] { server.close(socket, code: 1002, reason: reason) }
  }

  package func pin(nodeID: String, fingerprint: String) {
    meshLogger.notice(
      "Pinned a node certificate on first link (trust on first use).",
      ["node.id": nodeID, "tls.fingerprint": fingerprint])
    let store = self.store
    let logger = meshLogger
    Task {
      do {
        try await store.insertPin(nodeID: nodeID, fingerprint: fingerprint, at: Timestamp.now())
      } catch {
        logger.error("Could not store a certificate pin.", ["node.id": nodeID, "error": String(describing: error)])
      }
    }
  }

  package func refused(_ refusal: LinkManager.Refusal) {
    links.reportRefusal(refusal, node: self)
  }

  package func frameRefused(_ refusal: FrameRefusal) {
    links.frameRefused(refusal, node: self)
  }

  package func connect(_ connection: LinkManager.ConnectionID, host: String, port: UInt16) {
    links.connect(connection, host: host, port: port, node: self)
  }

  package func linkUp(_ hello: NodeHello, security: SessionBook.LinkSecurity) {
    meshLogger.info(
      "Node linked.",
      [
        "node.id": hello.nodeID, "node.name": hello.name, "link.encrypted": security.encrypted,
        "tls.fingerprint": security.remoteFingerprint,
      ])
    for feature in features.all { feature.nodeLinked(hello.nodeID, node: self) }
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
    for feature in features.all { feature.linkReplaced(nodeID, node: self) }
  }

  package func linkDown(nodeID: String) {
    meshLogger.info("Node unlinked.", ["node.id": nodeID])
    for feature in features.all { feature.nodeUnlinked(nodeID, node: self) }
    publishToAllPeers(type: "node.unlinked", data: ["node": ["id": .string(nodeID)]])
  }

  /// Chat effects go to the features (the chat feature queues each batch: store writes, then sends and events).
  package func chat(_ effect: MeshEffect) {
    for feature in features.all { feature.meshEffect(effect, node: self) }
  }

  /// What the payload book decided goes to the features.
  package func payload(_ effect: PayloadEffect) {
    for feature in features.all { feature.meshEffect(.payload(effect), node: self) }
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

  func publishToAllPeers(type: String, data: JSONValue) {
    // One fan-out naming every local peer: one event, serialized once.
    guard !peers.isEmpty else { return }
    events.publishInBackground(fanOuts: [EventFanOut(peerIDs: peers.keys.sorted(), type: type, data: data)], node: self)
  }
}

/// The node is its mesh core's runtime. `@preconcurrency`: the verbs are isolated to the node (the lws service
/// thread) while ``MeshRuntime``'s requirements are not; `interpret(_:)` is only called from the node's own isolated
/// methods, and the Swift runtime checks on every verb that it runs on the node's executor (a call from anywhere else
/// stops the process instead of racing).
extension Node: @preconcurrency MeshRuntime {}

extension JSONValue {
  /// A string map (discovery info) as a JSON object, its keys sorted.
  static func stringMap(_ map: [String: String]) -> JSONValue {
    .object(JSONObject(map.sorted { $0.key < $1.key }.map { ($0.key, .string($0.value)) }))
  }
}
