/// Mesh links between nodes: dialling, handshakes, heartbeats, loss detection, reconnects and duplicate links.
///
/// A sans-I/O state machine in the style of SWIM's `SWIM.Instance`: the node runtime feeds it what happened
/// (an address was discovered, a connection opened, a frame arrived, time passed) and carries out the
/// ``Action``s it returns (dial, send, close, report a link up or down, deliver a frame upward). Time is a
/// monotonic millisecond counter passed in by the caller; randomness (reconnect jitter) comes from a seeded
/// generator, so a simulator run is reproducible.
///
/// Protocol duties (docs/mesh-protocol.md):
/// - Both sides send `hello` first. A `hello` with our own node id is a self-link and is closed for good.
/// - Heartbeats every ``Configuration/heartbeatInterval``; a link silent for ``Configuration/deadAfter`` is dead.
/// - Two links between the same pair of nodes (both dialled at once): the one dialled by the node with the
///   smaller node id survives, the other is closed with `goodbye("duplicate link")`. Both sides decide alike.
/// - Addresses we dial are re-dialled after a loss with exponential backoff and jitter. Beacon-discovered nodes
///   are dialled only by the side with the smaller node id (the other waits for it), halving duplicate links;
///   static seeds are always dialled, because their node id is unknown until the handshake.
public struct LinkManager: Sendable {
  /// Timing knobs.
  public struct Configuration: Sendable, Equatable {
    /// How often a heartbeat is sent on each link.
    public var heartbeatInterval: UInt64 = 500
    /// Silence after which a link is declared dead.
    public var deadAfter: UInt64 = 2000
    /// How long a new connection may take to say hello.
    public var handshakeTimeout: UInt64 = 5000
    /// First reconnect delay.
    public var backoffMinimum: UInt64 = 250
    /// Largest reconnect delay.
    public var backoffMaximum: UInt64 = 5000
    /// Beacon-discovered addresses not heard from for this long are forgotten (unless linked).
    public var discoveryExpiry: UInt64 = 30_000

    public init() {}
  }

  /// Identifies one transport connection; allocated by the manager for dials, by the runtime for inbound ones.
  public typealias ConnectionID = UInt64

  /// How an address became known.
  public enum Source: String, Sendable, Hashable {
    /// `--peer` or `POST /mesh/nodes`: dialled always, forever.
    case seed
    /// The multicast beacon: dialled when our node id is smaller; forgotten when it stops announcing.
    case beacon
    /// DNS-SD (Avahi): like the beacon, every node browses every other, so only the smaller node id dials; the
    /// runtime repeats a result while the service is registered, and the address is forgotten when that stops.
    case dnssd
    /// Passed along by a linked node (`nodeDirectory`): dialled by whoever learns it (only the newcomer does),
    /// forgotten when quiet.
    case gossip

    /// Found rather than configured: the address expires when quiet.
    var isDiscovered: Bool { self != .seed }
    /// Every node hears every other (beacon, DNS-SD): only the side with the smaller node id dials, and no one
    /// needs the node directory passed along.
    var isHeardByAll: Bool { self == .beacon || self == .dnssd }
  }

  /// What the runtime must do.
  public enum Action: Sendable, Hashable {
    /// Open a WebSocket to `host:port/mesh`; report ``outboundOpened(_:now:)`` or ``outboundFailed(_:now:)``.
    case connect(ConnectionID, host: String, port: UInt16)
    /// Send a frame on a connection.
    case send(ConnectionID, MeshMessage)
    /// Close a connection (after sending anything already queued).
    case close(ConnectionID, reason: String)
    /// A node is linked (handshake done, the first link to it).
    case linkUp(NodeHello)
    /// A node is no longer linked.
    case linkDown(nodeID: String)
    /// The link to a node moved to a new connection (duplicate-link resolution picked the newer one). Frames sent
    /// on the old connection may be lost: resend state (snapshots) and treat unacknowledged data as failed.
    case linkReplaced(nodeID: String)
    /// A frame for the layers above (directory, sessions …) from a linked node.
    case deliver(MeshMessage, from: String)
  }

  /// One known node or address, for `GET /api/v1/mesh/nodes`.
  public struct NodeStatus: Sendable, Equatable {
    public enum State: String, Sendable {
      case linked, connecting, backoff, waiting
    }
    public var nodeID: String?
    public var name: String?
    public var address: String?
    public var state: State
    public var rttMillis: UInt64?
    public var source: Source?
    public var inbound: Bool
    public var linkedSinceMillis: UInt64?
  }

  struct Address: Sendable {
    var host: String
    var port: UInt16
    var source: Source
    var nodeID: String?
    var connection: ConnectionID?
    var attempts = 0
    var retryAt: UInt64?
    var lastSeen: UInt64
    var isSelf = false
    var key: String { "\(host):\(port)" }
  }

  struct Connection: Sendable {
    var outbound: Bool
    var addressKey: String?
    var remoteHost: String?
    var openedAt: UInt64
    var hello: NodeHello?
    var lastHeard: UInt64
    var lastHeartbeatSent: UInt64 = 0
    var heartbeatSequence: UInt64 = 0
    var rttMillis: UInt64?
    var linkedSince: UInt64?
    var closing = false
  }

  /// Our own hello.
  public let local: NodeHello
  public let configuration: Configuration
  var addresses: [String: Address] = [:]
  var connections: [ConnectionID: Connection] = [:]
  /// The one live connection per linked node.
  var links: [String: ConnectionID] = [:]
  /// Nodes whose link the other side closed as a duplicate, and since when: the connection it kept is about to
  /// say hello, so the node is reported down only if that takes longer than the handshake timeout.
  var relinking: [String: UInt64] = [:]
  var nextConnectionID: ConnectionID = 1 << 32
  var random: SplitMix64

  public init(local: NodeHello, configuration: Configuration = Configuration(), seed: UInt64 = 0x5EED) {
    self.local = local
    self.configuration = configuration
    self.random = SplitMix64(seed: seed)
  }

  /// The ids of linked nodes.
  public var linkedNodeIDs: [String] { links.keys.sorted() }

  /// The connection carrying the link to `nodeID`, if linked.
  public func connection(of nodeID: String) -> ConnectionID? { links[nodeID] }

  /// The hello of a linked node.
  public func hello(of nodeID: String) -> NodeHello? {
    links[nodeID].flatMap { connections[$0]?.hello }
  }

  // MARK: - Discovery

  /// A static seed (`--peer`, `POST /mesh/nodes`): dialled now and after every loss.
  public mutating func addSeed(host: String, port: UInt16, now: UInt64) -> [Action] {
    var actions: [Action] = []
    let key = "\(host):\(port)"
    if addresses[key] == nil {
      addresses[key] = Address(host: host, port: port, source: .seed, lastSeen: now)
    } else {
      addresses[key]!.source = .seed
    }
    dialIfDue(key, now: now, into: &actions)
    return actions
  }

  /// The beacon (or DNS-SD, with `source: .dnssd`) found `nodeID` at `host:port`.
  public mutating func discovered(
    nodeID: String, host: String, port: UInt16, source: Source = .beacon, now: UInt64
  ) -> [Action] {
    var actions: [Action] = []
    guard nodeID != local.nodeID else { return actions }
    let key = "\(host):\(port)"
    if addresses[key] == nil {
      addresses[key] = Address(host: host, port: port, source: source, nodeID: nodeID, lastSeen: now)
    }
    addresses[key]!.lastSeen = now
    addresses[key]!.nodeID = nodeID
    // For beacon discoveries (which both sides make) the side with the smaller id dials; the other waits.
    if addresses[key]!.source.isHeardByAll && local.nodeID > nodeID { return actions }
    dialIfDue(key, now: now, into: &actions)
    return actions
  }

  /// Where a linked node can be reached: the address we dialled, or its host and announced port.
  func reachableAddress(of id: ConnectionID) -> NodeAddress? {
    guard let connection = connections[id], let hello = connection.hello else { return nil }
    if let key = connection.addressKey, let address = addresses[key] {
      return NodeAddress(nodeID: hello.nodeID, host: address.host, port: address.port)
    }
    guard let host = connection.remoteHost, !host.isEmpty else { return nil }
    return NodeAddress(nodeID: hello.nodeID, host: host, port: hello.port)
  }

  /// Tells a newly linked node about every other linked node, so that it can dial them (a newcomer given one seed
  /// ends up linked to everyone). Skipped for nodes found by beacon: they hear every other node's beacon too, and
  /// sending each new link the whole directory would cost O(N³) bytes in a large beacon mesh.
  mutating func gossip(newLink id: ConnectionID, nodeID: String, into actions: inout [Action]) {
    if addresses.values.contains(where: { $0.nodeID == nodeID && $0.source.isHeardByAll }) { return }
    var others: [NodeAddress] = []
    for (otherNode, otherID) in links.sorted(by: { $0.key < $1.key }) where otherNode != nodeID {
      if let address = reachableAddress(of: otherID) { others.append(address) }
    }
    // The frame holds at most MeshFrameCodec.maxDirectoryNodes entries; a larger mesh links through the rest too.
    others = Array(others.prefix(MeshFrameCodec.maxDirectoryNodes))
    if !others.isEmpty { actions.append(.send(id, .nodeDirectory(others))) }
  }

  mutating func dialIfDue(_ key: String, now: UInt64, into actions: inout [Action]) {
    guard let address = addresses[key], !address.isSelf, address.connection == nil else { return }
    if let nodeID = address.nodeID, links[nodeID] != nil { return }
    if let retryAt = address.retryAt, retryAt > now { return }
    let id = nextConnectionID
    nextConnectionID += 1
    connections[id] = Connection(outbound: true, addressKey: key, openedAt: now, lastHeard: now)
    addresses[key]!.connection = id
    addresses[key]!.retryAt = nil
    actions.append(.connect(id, host: address.host, port: address.port))
  }

  // MARK: - Connection events

  /// An outbound connection opened: say hello.
  public mutating func outboundOpened(_ id: ConnectionID, now: UInt64) -> [Action] {
    guard connections[id] != nil else { return [] }
    connections[id]!.lastHeard = now
    return [.send(id, .hello(local))]
  }

  /// An outbound connection could not be opened.
  public mutating func outboundFailed(_ id: ConnectionID, now: UInt64) -> [Action] {
    closed(id, now: now)
  }

  /// A node dialled us on connection `id` (allocated by the runtime, below `1 << 32`) from `remoteHost`.
  public mutating func inboundOpened(_ id: ConnectionID, remoteHost: String? = nil, now: UInt64) -> [Action] {
    connections[id] = Connection(outbound: false, remoteHost: remoteHost, openedAt: now, lastHeard: now)
    return [.send(id, .hello(local))]
  }

  /// A frame arrived on connection `id`.
  public mutating func received(_ message: MeshMessage, on id: ConnectionID, now: UInt64) -> [Action] {
    guard var connection = connections[id], !connection.closing else { return [] }
    connection.lastHeard = now
    connections[id] = connection
    var actions: [Action] = []
    switch message {
    case .hello(let hello):
      handshake(id, hello, now: now, into: &actions)
    case .heartbeat(let sequence, let sentAt):
      actions.append(.send(id, .heartbeatAck(sequence: sequence, sentAtMillis: sentAt)))
    case .heartbeatAck(_, let sentAt):
      if now >= sentAt { connections[id]!.rttMillis = now - sentAt }
    case .nodeDirectory(let nodes):
      for node in nodes where node.nodeID != local.nodeID && links[node.nodeID] == nil {
        actions.append(
          contentsOf: discovered(nodeID: node.nodeID, host: node.host, port: node.port, source: .gossip, now: now))
      }
    case .goodbye(let reason):
      if reason == "duplicate link", let nodeID = connection.hello?.nodeID, links[nodeID] == id {
        relinking[nodeID] = now
        links[nodeID] = nil
      }
      actions.append(contentsOf: closed(id, now: now))
    default:
      guard let nodeID = connection.hello?.nodeID, links[nodeID] == id else { return actions }
      actions.append(.deliver(message, from: nodeID))
    }
    return actions
  }

  mutating func handshake(_ id: ConnectionID, _ hello: NodeHello, now: UInt64, into actions: inout [Action]) {
    guard connections[id]!.hello == nil else { return }
    let connection = connections[id]!
    if hello.nodeID == local.nodeID {
      if let key = connection.addressKey { addresses[key]?.isSelf = true }
      closeConnection(id, reason: "self link", into: &actions)
      return
    }
    connections[id]!.hello = hello
    if let key = connection.addressKey { addresses[key]?.nodeID = hello.nodeID }
    if let existing = links[hello.nodeID], existing != id {
      // Keep the link dialled by the smaller node id; ties (same dialler) keep the older link.
      let existingDialler = connections[existing]!.outbound ? local.nodeID : hello.nodeID
      let newDialler = connection.outbound ? local.nodeID : hello.nodeID
      if newDialler < existingDialler {
        links[hello.nodeID] = id
        connections[id]!.linkedSince = connections[existing]!.linkedSince
        connections[existing]!.linkedSince = nil
        closeConnection(existing, reason: "duplicate link", into: &actions)
        actions.append(.linkReplaced(nodeID: hello.nodeID))
      } else {
        closeConnection(id, reason: "duplicate link", into: &actions)
      }
      return
    }
    links[hello.nodeID] = id
    connections[id]!.linkedSince = now
    if let key = connection.addressKey { addresses[key]?.attempts = 0 }
    if relinking.removeValue(forKey: hello.nodeID) != nil {
      actions.append(.linkReplaced(nodeID: hello.nodeID))
    } else {
      actions.append(.linkUp(hello))
    }
    gossip(newLink: id, nodeID: hello.nodeID, into: &actions)
  }

  mutating func closeConnection(_ id: ConnectionID, reason: String, into actions: inout [Action]) {
    guard connections[id] != nil, !connections[id]!.closing else { return }
    connections[id]!.closing = true
    actions.append(.send(id, .goodbye(reason: reason)))
    actions.append(.close(id, reason: reason))
  }

  /// Connection `id` is gone (closed by either side, or never opened).
  public mutating func closed(_ id: ConnectionID, now: UInt64) -> [Action] {
    guard let connection = connections.removeValue(forKey: id) else { return [] }
    var actions: [Action] = []
    if let nodeID = connection.hello?.nodeID, links[nodeID] == id {
      links[nodeID] = nil
      actions.append(.linkDown(nodeID: nodeID))
    }
    if let key = connection.addressKey, addresses[key]?.connection == id {
      addresses[key]!.connection = nil
      if !addresses[key]!.isSelf {
        if connection.linkedSince != nil {
          // A link that was up just dropped: try again at the next tick; backoff starts if that fails.
          addresses[key]!.attempts = 0
          addresses[key]!.retryAt = now
        } else {
          let attempts = addresses[key]!.attempts
          addresses[key]!.attempts = attempts + 1
          addresses[key]!.retryAt = now + jittered(backoff(attempts: attempts))
        }
      }
    }
    return actions
  }

  func backoff(attempts: Int) -> UInt64 {
    let base = min(configuration.backoffMaximum, configuration.backoffMinimum << UInt64(min(attempts, 16)))
    return base
  }

  // MARK: - Time

  /// Sends heartbeats, declares silent links dead, times out handshakes, re-dials addresses whose backoff ended
  /// and forgets beacon addresses that went quiet. Call every ~100 ms.
  public mutating func tick(now: UInt64) -> [Action] {
    var actions: [Action] = []
    for (nodeID, since) in relinking.sorted(by: { $0.key < $1.key })
    where now - since > configuration.handshakeTimeout {
      relinking[nodeID] = nil
      actions.append(.linkDown(nodeID: nodeID))
    }
    for id in connections.keys.sorted() {
      guard let connection = connections[id], !connection.closing else { continue }
      if connection.hello == nil {
        if now - connection.openedAt > configuration.handshakeTimeout {
          closeConnection(id, reason: "no hello within \(configuration.handshakeTimeout) ms", into: &actions)
        }
        continue
      }
      guard connection.linkedSince != nil else { continue }
      if now > connection.lastHeard && now - connection.lastHeard > configuration.deadAfter {
        closeConnection(id, reason: "no heartbeat for \(now - connection.lastHeard) ms", into: &actions)
        actions.append(contentsOf: closed(id, now: now))
        continue
      }
      if now - connection.lastHeartbeatSent >= configuration.heartbeatInterval {
        connections[id]!.lastHeartbeatSent = now
        connections[id]!.heartbeatSequence += 1
        actions.append(.send(id, .heartbeat(sequence: connections[id]!.heartbeatSequence, sentAtMillis: now)))
      }
    }
    for key in addresses.keys.sorted() {
      guard let address = addresses[key] else { continue }
      if address.source.isDiscovered && address.connection == nil
        && (address.nodeID.map { links[$0] == nil } ?? true)
        && now > address.lastSeen && now - address.lastSeen > configuration.discoveryExpiry
      {
        addresses[key] = nil
        continue
      }
      if address.source.isHeardByAll, let nodeID = address.nodeID, local.nodeID > nodeID { continue }
      if address.retryAt != nil { dialIfDue(key, now: now, into: &actions) }
    }
    return actions
  }

  /// Jitter for a reconnect delay: ±20 %.
  mutating func jittered(_ delay: UInt64) -> UInt64 {
    let spread = delay / 5
    guard spread > 0 else { return delay }
    return delay - spread + random.next() % (2 * spread + 1)
  }

  // MARK: - Status

  /// Every known node and address.
  public func status(now: UInt64) -> [NodeStatus] {
    var result: [NodeStatus] = []
    var reported = Set<String>()
    for (nodeID, id) in links.sorted(by: { $0.key < $1.key }) {
      guard let connection = connections[id] else { continue }
      let address =
        connection.addressKey
        ?? connection.hello.map { hello in
          let host = connection.remoteHost ?? "?"
          return host.contains(":") ? "[\(host)]:\(hello.port)" : "\(host):\(hello.port)"
        }
      // An inbound link to a node we also know an address for (a seed, the beacon, gossip) reports that source.
      let source = addresses[connection.addressKey ?? address ?? ""]?.source
      result.append(
        NodeStatus(
          nodeID: nodeID, name: connection.hello?.name, address: address, state: .linked,
          rttMillis: connection.rttMillis, source: source, inbound: !connection.outbound,
          linkedSinceMillis: connection.linkedSince))
      reported.insert(nodeID)
    }
    for key in addresses.keys.sorted() {
      let address = addresses[key]!
      if address.isSelf { continue }
      if let nodeID = address.nodeID, reported.contains(nodeID) { continue }
      let state: NodeStatus.State =
        address.connection != nil ? .connecting : address.retryAt != nil ? .backoff : .waiting
      result.append(
        NodeStatus(
          nodeID: address.nodeID, name: nil, address: key, state: state, rttMillis: nil, source: address.source,
          inbound: false, linkedSinceMillis: nil))
    }
    return result
  }
}

/// A small, fast, seedable generator (Steele, Lea & Flood's SplitMix64) for reproducible jitter.
public struct SplitMix64: RandomNumberGenerator, Sendable {
  var state: UInt64

  public init(seed: UInt64) { state = seed }

  public mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}
