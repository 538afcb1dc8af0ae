import MeshCore

// The node runtime (the verbs of ``MeshRuntime``, as `Node+Mesh.swift` implements them for a real node) and the
// simulated network.

extension Simulation {
  // MARK: - Running

  /// Processes every event up to and including virtual time `time`.
  public func run(until time: UInt64) {
    while let next = queue.nextTime, next <= time { step() }
    now = max(now, time)
  }

  /// Runs for `duration` virtual milliseconds.
  public func run(for duration: UInt64) { run(until: now + duration) }

  func step() {
    guard let entry = queue.pop() else { return }
    now = entry.time
    stats.events += 1
    handle(entry.event)
  }

  func handle(_ event: SimulationEventKind) {
    switch event {
    case .tick(let node, let incarnation):
      guard nodes[node].alive, nodes[node].incarnation == incarnation else { return }
      feed(.tick(now: now), on: node)
      tickCount[node] += 1
      if tickCount[node] % Self.transceiveEveryTicks == 0 { reconcileTransceivers(on: node) }
      queue.schedule(.tick(node: node, incarnation: incarnation), at: now + network.tickInterval)
    case .beacon(let node, let incarnation):
      guard nodes[node].alive, nodes[node].incarnation == incarnation else { return }
      let nodeID = nodes[node].nodeID
      let host = nodes[node].host
      for listener in nodes.indices where listener != node && nodes[listener].alive && reachable(node, listener) {
        feed(.discovered(nodeID: nodeID, host: host, port: Self.port, source: .beacon, now: now), on: listener)
      }
      queue.schedule(.beacon(node: node, incarnation: incarnation), at: now + network.beaconInterval)
    case .establish(let wire):
      establish(wire)
    case .dialFailed(let wire):
      guard wires[wire].state == .dialling else { return }  // It connected after waiting at a partition.
      failDial(wire)
    case .arrive(let wire, let side):
      arrive(wire, side)
    case .release(let wire, let side):
      release(wire, side)
    case .closedLocally(let node, let incarnation, let id):
      guard nodes[node].alive, nodes[node].incarnation == incarnation else { return }
      feed(.closed(id, now: now), on: node)
    }
  }

  // MARK: - Carrying out effects (the node runtime)

  /// Reports `input` to node `node`'s ``MeshNode`` and carries out what it returns.
  func feed(_ input: MeshInput, on node: Int) { interpret(nodes[node].mesh.handle(input), on: node) }

  /// Carries out a node's effects on the simulated network and the peers' event logs, through the interpreter the
  /// gateway's node uses too (``MeshRuntime/interpret(_:)``).
  func interpret(_ effects: [MeshEffect], on node: Int) {
    SimulatedRuntime(simulation: self, node: node).interpret(effects)
  }

  func record(_ event: Directory.Event, for peerID: String) {
    stats.notifications += 1
    switch event {
    case .peerFound(let peer, let serviceType, let info):
      logs[peerID, default: []].append(
        PeerEvent(time: now, kind: .found(peer, serviceType: serviceType, discoveryInfo: info)))
      beliefs[peerID, default: [:]][serviceType, default: [:]][peer.peerID] = Advertisement(
        nodeID: peer.nodeID, discoveryInfo: info)
    case .peerLost(let peer, let serviceType):
      logs[peerID, default: []].append(PeerEvent(time: now, kind: .lost(peer, serviceType: serviceType)))
      beliefs[peerID]?[serviceType]?[peer.peerID] = nil
    case .peerPresent, .peerAbsent:
      // Simulated peers do not watch presence; the simulation checks what browsers believe.
      return
    }
    changed()
  }

  // MARK: - Network

  func delay() -> UInt64 { uniform(network.minDelay, network.maxDelay) }

  func uniform(_ low: UInt64, _ high: UInt64) -> UInt64 {
    guard high > low else { return low }
    return low + random.next() % (high - low + 1)
  }

  func dial(from node: Int, id: LinkManager.ConnectionID, host: String) {
    stats.dials += 1
    let target = hostIndex[host] ?? -1
    let wire = wires.count
    wires.append(
      Wire(
        ends: [Wire.End(node: node, id: id, open: true), Wire.End(node: target, id: 0, open: false)], dialledAt: now))
    nodes[node].endpoints[id] = WireEnd(wire: wire, side: 0)
    queue.schedule(.establish(wire: wire), at: now + uniform(network.minConnectDelay, network.maxConnectDelay))
  }

  func establish(_ wire: Int) {
    let dialler = wires[wire].ends[0]
    guard dialler.open, wires[wire].state == .dialling else {
      wires[wire].state = .closed  // The dialler gave up (handshake timeout) or crashed.
      return
    }
    let target = wires[wire].ends[1].node
    guard target >= 0, nodes[target].alive, reachable(dialler.node, target) else {
      if target >= 0 && (!reachable(dialler.node, target) || network.crashDetection == .silence) {
        // Nobody answers: the dial times out.
        let failAt = max(now, wires[wire].dialledAt + network.unreachableDialTimeout)
        queue.schedule(.dialFailed(wire: wire), at: failAt)
        if network.dialsWaitAtPartitions && nodes[target].alive { waitingDials.append(wire) }
      } else {
        failDial(wire)  // Refused.
      }
      return
    }
    let id = nodes[target].nextInbound
    nodes[target].nextInbound += 1
    wires[wire].ends[1].id = id
    wires[wire].ends[1].open = true
    wires[wire].state = .open
    nodes[target].endpoints[id] = WireEnd(wire: wire, side: 1)
    stats.connectionsOpened += 1
    feed(
      .inboundOpened(
        id, remoteHost: nodes[dialler.node].host, transport: transport(local: target, remote: dialler.node), now: now),
      on: target)
    if wires[wire].ends[0].open {
      feed(
        .outboundOpened(dialler.id, transport: transport(local: dialler.node, remote: target), now: now),
        on: dialler.node)
    }
  }

  /// How node `local` sees its connection to node `remote` (``NetworkModel/tls``).
  func transport(local: Int, remote: Int) -> LinkManager.Transport {
    guard network.tls else { return .plaintext }
    return LinkManager.Transport(
      encrypted: true, localFingerprint: "cert-" + nodes[local].nodeID,
      remoteFingerprint: "cert-" + nodes[remote].nodeID,
      challenge: [])
  }

  func failDial(_ wire: Int) {
    let dialler = wires[wire].ends[0]
    wires[wire].state = .closed
    guard dialler.open else { return }
    wires[wire].ends[0].open = false
    nodes[dialler.node].endpoints[dialler.id] = nil
    stats.failedDials += 1
    feed(.outboundFailed(dialler.id, now: now), on: dialler.node)
  }

  func send(_ message: MeshMessage, from node: Int, on id: LinkManager.ConnectionID) {
    guard let end = nodes[node].endpoints[id], wires[end.wire].state == .open, !wires[end.wire].broken else {
      stats.framesDiscarded += 1
      return
    }
    stats.framesSent += 1
    if network.countBytes { stats.bytesSent += MeshFrameCodec.encode(message).count }
    if network.loss > 0 && Double(random.next() >> 11) / Double(1 << 53) < network.loss {
      // Lost: TCP would stall and then reset the connection; both ends hear of it after a while.
      stats.framesLost += 1
      stats.connectionResets += 1
      wires[end.wire].broken = true
      transmit(.fin, on: end.wire, toward: 0)
      transmit(.fin, on: end.wire, toward: 1)
      return
    }
    transmit(.frame(message), on: end.wire, toward: 1 - end.side)
  }

  func close(_ id: LinkManager.ConnectionID, on node: Int) {
    guard let end = nodes[node].endpoints.removeValue(forKey: id) else { return }
    wires[end.wire].ends[end.side].open = false
    if wires[end.wire].state == .open && !wires[end.wire].broken {
      if network.closeResets {
        stats.framesLost += wires[end.wire].ends[1 - end.side].inbox.count
        wires[end.wire].ends[1 - end.side].inbox.removeAll()
      }
      transmit(.fin, on: end.wire, toward: 1 - end.side)
    }
    queue.schedule(.closedLocally(node: node, incarnation: nodes[node].incarnation, id: id), at: now)
  }

  /// Puts `item` on its way to side `side` of `wire`, behind everything already travelling that way.
  func transmit(_ item: Wire.Item, on wire: Int, toward side: Int) {
    let at = max(now + delay(), wires[wire].ends[side].lastArrival)
    wires[wire].ends[side].lastArrival = at
    wires[wire].ends[side].inbox.append(item)
    queue.schedule(.arrive(wire: wire, side: side), at: at)
  }

  func arrive(_ wire: Int, _ side: Int) {
    let from = wires[wire].ends[1 - side].node
    let to = wires[wire].ends[side].node
    if wires[wire].ends[side].held > 0 || !reachable(from, to) {
      // Held at the partition (TCP keeps retransmitting); delivered in order when it heals.
      if wires[wire].ends[side].held == 0 { stalled.append(WireEnd(wire: wire, side: side)) }
      wires[wire].ends[side].held += 1
      return
    }
    deliverNext(wire, side)
  }

  func deliverNext(_ wire: Int, _ side: Int) {
    guard let item = wires[wire].ends[side].inbox.removeFirst() else { return }
    let end = wires[wire].ends[side]
    guard end.open else {
      if case .frame = item { stats.framesDiscarded += 1 }
      return
    }
    switch item {
    case .frame(let message):
      stats.framesDelivered += 1
      feed(.frameReceived(message, on: end.id, now: now), on: end.node)
    case .fin:
      wires[wire].ends[side].open = false
      if !wires[wire].ends[1 - side].open { wires[wire].state = .closed }
      nodes[end.node].endpoints[end.id] = nil
      feed(.closed(end.id, now: now), on: end.node)
    }
  }

  /// After the partition changed: everything held is re-examined (shortly, as TCP retransmits).
  func releaseStalled() {
    let held = stalled
    stalled = []
    for end in held {
      queue.schedule(.release(wire: end.wire, side: end.side), at: now + delay())
    }
    // A dial waiting at the partition connects with its next SYN.
    let dials = waitingDials
    waitingDials = []
    for wire in dials where wires[wire].state == .dialling && wires[wire].ends[0].open {
      let target = wires[wire].ends[1].node
      if reachable(wires[wire].ends[0].node, target) {
        queue.schedule(.establish(wire: wire), at: now + delay())
      } else {
        waitingDials.append(wire)
      }
    }
  }

  func release(_ wire: Int, _ side: Int) {
    let count = wires[wire].ends[side].held
    guard count > 0 else { return }
    let from = wires[wire].ends[1 - side].node
    let to = wires[wire].ends[side].node
    guard reachable(from, to) else {
      let end = WireEnd(wire: wire, side: side)
      if !stalled.contains(end) { stalled.append(end) }
      return
    }
    wires[wire].ends[side].held = 0
    for _ in 0..<count { deliverNext(wire, side) }
  }
}

/// Node `node`'s runtime: the verbs of ``MeshRuntime`` on the simulated network and the peers' event logs. The
/// wiring between links, directory and sessions is ``MeshNode``'s and the order of the verbs is
/// ``MeshRuntime/interpret(_:)``'s, both shared with the gateway's node; only I/O and bookkeeping happen here.
struct SimulatedRuntime: MeshRuntime {
  let simulation: Simulation
  let node: Int

  func connect(_ id: LinkManager.ConnectionID, host: String, port: UInt16) {
    simulation.dial(from: node, id: id, host: host)
  }

  func send(_ message: MeshMessage, on id: LinkManager.ConnectionID) {
    simulation.send(message, from: node, on: id)
  }

  func broadcast(_ message: MeshMessage, on ids: [LinkManager.ConnectionID]) {
    for id in ids { simulation.send(message, from: node, on: id) }
  }

  func sendToNode(_ message: MeshMessage, nodeID: String, on id: LinkManager.ConnectionID?) {
    guard let id else {
      simulation.stats.sessionFramesUnlinked += 1
      return
    }
    simulation.send(message, from: node, on: id)
  }

  func close(_ id: LinkManager.ConnectionID, reason: String) { simulation.close(id, on: node) }

  func drop(_ id: LinkManager.ConnectionID, reason: String) { simulation.close(id, on: node) }

  // Simulated links are secretless and their certificates trusted (nothing is pinned or refused), and the simulated
  // peers are honest. Transfers and streams are simulated in `Simulation+Payloads.swift`, chat in
  // `Simulation+Chat.swift`.
  func pin(nodeID: String, fingerprint: String) {}
  func refused(_ refusal: LinkManager.Refusal) {}
  func frameRefused(_ refusal: FrameRefusal) {}
  func chatFrameMalformed(nodeID: String, detail: String) {}

  /// Chat effects, carried out as the gateway's chat feature does (Simulation+Chat.swift).
  func chat(_ effect: MeshEffect) { simulation.carryOutChat(effect, on: node) }

  func linkUp(_ hello: NodeHello, security: SessionBook.LinkSecurity) {
    simulation.payloadsLinked(hello.nodeID, on: node)
    simulation.stats.linkUps += 1
    simulation.changed()
  }

  func linkReplaced(nodeID: String, security: SessionBook.LinkSecurity) {
    simulation.stats.linkReplacements += 1
  }

  func linkDown(nodeID: String) {
    simulation.payloadsUnlinked(nodeID, on: node)
    simulation.stats.linkDowns += 1
    simulation.changed()
  }

  func directoryEvent(peerID: String, _ event: Directory.Event) { simulation.record(event, for: peerID) }

  func sessionEvent(peerID: String, _ event: SessionBook.Event) {
    simulation.stats.sessionNotifications += 1
    simulation.logs[peerID, default: []].append(PeerEvent(time: simulation.now, kind: .session(event)))
    simulation.changed()
  }

  /// Events go to the logs as they are told.
  func flush() {}

  func directoryChanged() { simulation.reconcileTransceivers(on: node) }

  func invitationReceived(_ invitation: SessionBook.Invitation) {
    simulation.transceiverReceived(invitation, on: node)
  }

  /// Job offers are not simulated.
  func invitationEnded(_ invitation: SessionBook.Invitation) {}
}
