public import MeshCore

/// A deterministic discrete-event simulator of a meshgate mesh: N nodes in one process, each running the real
/// ``MeshNode`` (``LinkManager``, ``Directory`` and ``SessionBook`` wired together once, for the node runtime and for
/// this simulator alike) over a simulated LAN (``NetworkModel``).
///
/// Everything is driven by one virtual millisecond clock and one priority queue of events; ties run in the
/// order they were scheduled, and every random choice (delays, loss, tick phases, node ids, the link managers'
/// jitter) comes from generators derived from the simulation's seed. The same seed and the same calls give the
/// same run, event for event.
///
/// The runtime per node only interprets ``MeshEffect``s (`Simulation+Runtime.swift`):
/// - `connect`, `send`, `broadcast`, `sendToNode` and `close` go to the simulated network (a session frame for a
///   node that is not linked is dropped and counted); connection opens, frames and closes come back as
///   ``MeshInput``s (`inboundOpened`, `outboundOpened`, `frameReceived`, `closed`, `outboundFailed`).
/// - `directoryEvent` and `sessionEvent` are appended to the peer's event log (``events(of:)``); `linkUp`,
///   `linkReplaced` and `linkDown` are counted.
/// - Each node ticks every ``NetworkModel/tickInterval`` and (with beacon discovery) announces itself every
///   ``NetworkModel/beaconInterval``.
/// - Session and invitation commands (``createSession(creator:strategy:encryption:maxPeers:)``,
///   ``invite(from:to:session:context:timeoutMillis:)``, ``accept(_:by:)`` …) do what the REST handlers do.
///
/// What browsers believe is computed from their event logs alone (found adds, lost removes), exactly as a client
/// of the REST API would, and compared with the ground truth: every peer advertising the service on a live node
/// that the browser's node can reach and is configured to link with.
public final class Simulation {
  /// The simulation's seed.
  public let seed: UInt64
  /// The network model; may be changed between runs (for example to stop loss).
  public var network: NetworkModel
  /// The virtual time in milliseconds.
  public internal(set) var now: UInt64 = 0
  /// Counters since the start.
  public internal(set) var stats = SimulationStats()
  /// The virtual time of the last change a browser or an operator could see: a `found` / `lost`, a link going
  /// up or down, or a command (peer added, partition, crash …).
  public internal(set) var lastChangeTime: UInt64 = 0
  /// ``stats`` as they were at ``lastChangeTime``.
  public internal(set) var statsAtLastChange = SimulationStats()

  var nodes: [SimulatedNode] = []
  var nodeIndex: [String: Int] = [:]
  var hostIndex: [String: Int] = [:]
  var wires: [Wire] = []
  var queue = EventQueue<SimulationEventKind>()
  var random: SplitMix64
  /// Partition group per node; nodes in different groups cannot reach each other.
  var group: [Int]
  /// Connection directions holding frames that wait for a partition to heal.
  var stalled: [WireEnd] = []
  /// Dials waiting at a partition (``NetworkModel/dialsWaitAtPartitions``).
  var waitingDials: [Int] = []
  var peerHome: [String: Int] = [:]
  var logs: [String: [PeerEvent]] = [:]
  /// What each browsing peer believes: service type → advertiser peer id → where and with which info.
  var beliefs: [String: [String: [String: Advertisement]]] = [:]
  /// Something changed since the last failed convergence check.
  var dirty = true
  /// The node each session was created on (its host), by session id.
  var sessionHosts: [String: Int] = [:]
  var nextSessionNumber = 1
  var nextInvitationNumber = 1
  /// Peers that left a session on their own, by session id.
  var departures: [String: Set<String>] = [:]
  /// Each node's transceivers (`POST /transceive`), kept apart from ``nodes`` so that a reconciliation can change
  /// a node's transceivers and its session book at once.
  var transceiveBooks: [TransceiveBook] = []
  /// Ticks per node in its current life; transceivers reconcile every ``transceiveEveryTicks``.
  var tickCount: [Int] = []
  /// Sessions created by transceive leaders, by id.
  public internal(set) var transceiveSessions: Set<String> = []
  /// Chat rooms as their adverts tell joiners: room id → name and hosting peer.
  var chatAdverts: [String: (name: String, host: Directory.PeerRef)] = [:]
  /// Settled chat joins, by `room/peer`.
  var chatJoins: [String: Bool] = [:]
  /// Chat messages acknowledged to their posters, per room.
  var acknowledged: [String: [ChatMessage]] = [:]
  var nextChatMessageNumber = 1
  /// Transfers and streams: the nodes' disks, offers and streams (`Simulation+Payloads.swift`).
  var payloadState = SimulatedPayloads()

  /// Creates `nodeCount` nodes, all up at time 0, and starts their discovery.
  public init(seed: UInt64, nodeCount: Int, network: NetworkModel = NetworkModel()) {
    precondition(nodeCount >= 1, "a simulation needs at least one node")
    precondition(network.tickInterval > 0 && network.beaconInterval > 0, "tick and beacon intervals must be > 0")
    self.seed = seed
    self.network = network
    self.random = SplitMix64(seed: seed)
    self.group = Array(repeating: 0, count: nodeCount)
    self.transceiveBooks = Array(repeating: TransceiveBook(), count: nodeCount)
    self.tickCount = Array(repeating: 0, count: nodeCount)
    var idGenerator = SplitMix64(seed: seed ^ 0x6E6F_6465_6964_7321)
    for index in 0..<nodeCount {
      let nodeID = Self.hex(idGenerator.next())
      let host = "n\(index)"
      nodes.append(
        SimulatedNode(index: index, nodeID: nodeID, host: host, mesh: mesh(for: nodeID, index: index, incarnation: 0))
      )
      nodeIndex[nodeID] = index
      hostIndex[host] = index
    }
    for index in 0..<nodeCount { boot(index) }
  }

  /// The number of nodes.
  public var nodeCount: Int { nodes.count }

  /// The node id of node `index`.
  public func nodeID(of index: Int) -> String { nodes[index].nodeID }

  /// The index of the node with id `nodeID`.
  public func index(of nodeID: String) -> Int? { nodeIndex[nodeID] }

  /// Whether node `index` is running.
  public func isAlive(_ index: Int) -> Bool { nodes[index].alive }

  /// The nodes node `index` currently has a link to, in index order.
  public func linkedNodes(of index: Int) -> [Int] {
    nodes[index].mesh.links.linkedNodeIDs.compactMap { nodeIndex[$0] }.sorted()
  }

  /// Node `index`'s link status, as `GET /api/v1/mesh/nodes` shows it.
  public func status(of index: Int) -> [LinkManager.NodeStatus] { nodes[index].mesh.links.status(now: now) }

  /// The node hosting `peerID`.
  public func home(of peerID: String) -> Int? { peerHome[peerID] }

  /// Every event peer `peerID` was told, in order.
  public func events(of peerID: String) -> [PeerEvent] { logs[peerID] ?? [] }

  static func hex(_ value: UInt64) -> String {
    let digits = Array("0123456789abcdef")
    var text = ""
    for shift in stride(from: 60, through: 0, by: -4) {
      text.append(digits[Int((value >> UInt64(shift)) & 0xF)])
    }
    return text
  }

  /// Fresh state machines for node `index` in its `incarnation`-th life, with the link manager's own jitter
  /// generator. Simulated ids are short names, so frames' ids are not checked as UUIDs.
  func mesh(for nodeID: String, index: Int, incarnation: Int, chat: ChatBook? = nil) -> MeshNode {
    var mixer = SplitMix64(seed: seed ^ (UInt64(index) << 20) ^ UInt64(incarnation))
    let links = LinkManager(
      local: NodeHello(nodeID: nodeID, name: "node\(index)", softwareVersion: "sim", port: Self.port),
      configuration: network.links, seed: mixer.next())
    return MeshNode(
      links: links, directory: Directory(nodeID: nodeID), sessions: SessionBook(nodeID: nodeID), chat: chat,
      checksWireIDs: false)
  }

  /// The port every simulated node listens on.
  static let port: UInt16 = 8080

  // MARK: - Peers

  /// Creates peer `peerID` on node `node` (kept across restarts of the node).
  public func addPeer(node: Int, peerID: String, name: String) {
    precondition(peerHome[peerID] == nil || peerHome[peerID] == node, "peer \(peerID) lives on another node")
    peerHome[peerID] = node
    if nodes[node].durable[peerID] == nil {
      nodes[node].durable[peerID] = DurablePeer(displayName: name)
    } else {
      nodes[node].durable[peerID]!.displayName = name
    }
    changed()
    guard nodes[node].alive else { return }
    feed(.localPeerAdded(peerID: peerID, displayName: name), on: node)
  }

  /// Removes peer `peerID` (`DELETE /peers/me`).
  public func removePeer(_ peerID: String) {
    let node = home(peerID)
    nodes[node].durable[peerID] = nil
    peerHome[peerID] = nil
    beliefs[peerID] = nil
    changed()
    guard nodes[node].alive else { return }
    feed(.localPeerRemoved(peerID: peerID, now: now), on: node)
  }

  /// `PUT /advertising/{serviceType}`.
  public func advertise(_ peerID: String, serviceType: String, discoveryInfo: [String: String] = [:]) {
    peerCommand(peerID, .advertisingStarted(peerID: peerID, serviceType: serviceType, discoveryInfo: discoveryInfo)) {
      $0.advertising[serviceType] = discoveryInfo
    }
  }

  /// `DELETE /advertising/{serviceType}`.
  public func stopAdvertising(_ peerID: String, serviceType: String) {
    peerCommand(peerID, .advertisingStopped(peerID: peerID, serviceType: serviceType)) {
      $0.advertising[serviceType] = nil
    }
  }

  /// `PUT /browsing/{serviceType}`.
  public func browse(_ peerID: String, serviceType: String) {
    peerCommand(peerID, .browsingStarted(peerID: peerID, serviceType: serviceType)) { $0.browsing.insert(serviceType) }
  }

  /// `DELETE /browsing/{serviceType}`: the peer forgets what it found for that service.
  public func stopBrowsing(_ peerID: String, serviceType: String) {
    beliefs[peerID]?[serviceType] = nil
    peerCommand(peerID, .browsingStopped(peerID: peerID, serviceType: serviceType)) { $0.browsing.remove(serviceType) }
  }

  /// A command of peer `peerID`: kept in its durable record (`change`, what the real node stores) and, when its node
  /// is running, reported to the node's ``MeshNode``.
  func peerCommand(_ peerID: String, _ input: MeshInput, change: (inout DurablePeer) -> Void) {
    let node = home(peerID)
    change(&nodes[node].durable[peerID]!)
    changed()
    guard nodes[node].alive else { return }
    feed(input, on: node)
  }

  func home(_ peerID: String) -> Int {
    guard let node = peerHome[peerID] else { preconditionFailure("unknown peer \(peerID)") }
    return node
  }

  /// Marks a change visible to browsers or made by the operator.
  func changed() {
    lastChangeTime = now
    statsAtLastChange = stats
    dirty = true
  }

  // MARK: - Faults

  /// Splits the network: nodes in different groups cannot reach each other. Nodes in no group form one more group.
  public func partition(_ groups: [[Int]]) {
    var assignment = Array(repeating: groups.count, count: nodes.count)
    for (number, members) in groups.enumerated() {
      for node in members { assignment[node] = number }
    }
    group = assignment
    changed()
    releaseStalled()
  }

  /// Removes every partition; frames held at the partition are delivered.
  public func heal() {
    group = Array(repeating: 0, count: nodes.count)
    changed()
    releaseStalled()
  }

  /// Whether nodes `a` and `b` can reach each other.
  public func reachable(_ a: Int, _ b: Int) -> Bool { group[a] == group[b] }

  /// Resets every open connection between nodes `a` and `b`, as a lost frame does (both ends hear of it after a
  /// frame delay); the link managers re-dial as usual. Returns how many connections were reset.
  @discardableResult
  public func resetConnections(between a: Int, and b: Int) -> Int {
    var count = 0
    for wire in wires.indices where wires[wire].state == .open && !wires[wire].broken {
      let ends = Set(wires[wire].ends.map(\.node))
      guard ends == [a, b] else { continue }
      wires[wire].broken = true
      stats.connectionResets += 1
      transmit(.fin, on: wire, toward: 0)
      transmit(.fin, on: wire, toward: 1)
      count += 1
    }
    changed()
    return count
  }

  /// Stops node `index` at once: its state machines (links, directory, sessions, invitations, chat) are gone (its chat
  /// store stays, as on disk), its
  /// connections vanish (see
  /// ``NetworkModel/CrashDetection``). Its peers' event logs record ``PeerEvent/Kind/nodeCrashed``.
  public func crash(_ index: Int) {
    precondition(nodes[index].alive, "node \(index) is not running")
    nodes[index].alive = false
    nodes[index].incarnation += 1
    for (_, end) in nodes[index].endpoints.sorted(by: { $0.key < $1.key }) {
      wires[end.wire].ends[end.side].open = false
      if network.crashDetection == .reset && wires[end.wire].state == .open && !wires[end.wire].broken {
        wires[end.wire].broken = true
        transmit(.fin, on: end.wire, toward: 1 - end.side)
      }
    }
    nodes[index].endpoints = [:]
    for peerID in nodes[index].durable.keys.sorted() {
      logs[peerID, default: []].append(PeerEvent(time: now, kind: .nodeCrashed))
      beliefs[peerID] = nil
    }
    changed()
  }

  /// Starts node `index` again with fresh state machines and the same node id; its peers are re-created from
  /// the durable list (with their advertisements and browsing), as the real node reloads them from its store, and
  /// so are its transceivers (from those advertisements).
  public func restart(_ index: Int) {
    precondition(!nodes[index].alive, "node \(index) is running")
    nodes[index].alive = true
    nodes[index].mesh = mesh(
      for: nodes[index].nodeID, index: index, incarnation: nodes[index].incarnation, chat: restoredChatBook(index))
    nodes[index].nextInbound = 1
    tickCount[index] = 0
    for peerID in nodes[index].durable.keys.sorted() {
      logs[peerID, default: []].append(PeerEvent(time: now, kind: .nodeRestarted))
    }
    changed()
    restorePayloads(on: index)
    boot(index)
    // Transceivers come back from the advertisements the node reloads (`transceive=1`), as in `Node.init`.
    transceiveBooks[index] = TransceiveBook(restoringFrom: nodes[index].mesh.directory)
  }

  /// Adds the node's local peers and starts discovery and its timers.
  func boot(_ index: Int) {
    for peerID in nodes[index].durable.keys.sorted() {
      let peer = nodes[index].durable[peerID]!
      feed(.localPeerAdded(peerID: peerID, displayName: peer.displayName), on: index)
      for service in peer.advertising.keys.sorted() {
        feed(
          .advertisingStarted(peerID: peerID, serviceType: service, discoveryInfo: peer.advertising[service]!),
          on: index)
      }
      for service in peer.browsing.sorted() {
        feed(.browsingStarted(peerID: peerID, serviceType: service), on: index)
      }
    }
    for target in seeds(of: index) {
      feed(.seedAdded(host: nodes[target].host, port: Self.port, now: now), on: index)
    }
    let incarnation = nodes[index].incarnation
    queue.schedule(.tick(node: index, incarnation: incarnation), at: now + random.next() % network.tickInterval)
    if network.discovery == .beacon {
      // The beacon announces at once on start, then every interval.
      queue.schedule(.beacon(node: index, incarnation: incarnation), at: now + random.next() % 20)
    }
  }

  /// The nodes `index` is configured to dial as static seeds.
  func seeds(of index: Int) -> [Int] {
    let count = nodes.count
    switch network.discovery {
    case .beacon:
      return []
    case .seedRing:
      guard count > 1 else { return [] }
      return Array(Set([(index + count - 1) % count, (index + 1) % count])).sorted()
    case .seedStar(let hub):
      return index == hub ? [] : [hub]
    case .seedFull:
      return (0..<count).filter { $0 != index }
    }
  }

  /// Whether nodes `a` and `b` are meant to be linked, partitions aside. Every topology here is connected, and
  /// linked nodes pass each other's addresses along (`nodeDirectory`), so every pair ends up linked.
  public func adjacent(_ a: Int, _ b: Int) -> Bool {
    true
  }
}

// MARK: - Public value types

/// Counters of a simulation run.
public struct SimulationStats: Sendable, Equatable {
  /// Frames handed to an open connection (including lost ones).
  public var framesSent = 0
  /// Frames that reached an open connection end.
  public var framesDelivered = 0
  /// Frames lost by the loss model (each took its connection down).
  public var framesLost = 0
  /// Frames sent on, or arriving at, a connection that was already closed.
  public var framesDiscarded = 0
  /// Encoded bytes of the frames sent (only with ``NetworkModel/countBytes``).
  public var bytesSent = 0
  /// Dials started.
  public var dials = 0
  /// Dials that failed.
  public var failedDials = 0
  /// Connections opened.
  public var connectionsOpened = 0
  /// Connections reset by the loss model.
  public var connectionResets = 0
  /// `linkUp` actions.
  public var linkUps = 0
  /// `linkReplaced` actions (duplicate links resolved in favour of the newer connection).
  public var linkReplacements = 0
  /// `linkDown` actions.
  public var linkDowns = 0
  /// `found` / `lost` events told to peers.
  public var notifications = 0
  /// Session and invitation events told to local peers (``PeerEvent/Kind/session(_:)``).
  public var sessionNotifications = 0
  /// Session frames dropped because their node was not linked.
  public var sessionFramesUnlinked = 0
  /// `chat.*` events told to local peers.
  public var chatNotifications = 0
  /// Simulation events processed.
  public var events = 0

  public init() {}
}

/// One entry of a peer's event log.
public struct PeerEvent: Sendable, Hashable {
  public enum Kind: Sendable, Hashable {
    /// `peer.found`.
    case found(Directory.PeerRef, serviceType: String, discoveryInfo: [String: String])
    /// `peer.lost`.
    case lost(Directory.PeerRef, serviceType: String)
    /// The peer's node crashed: everything it had found is void.
    case nodeCrashed
    /// The peer's node started again and re-created the peer.
    case nodeRestarted
    /// `invitation.*`, `session.peer.state`, `session.data`, `session.event` or `session.send.failed`.
    case session(SessionBook.Event)
    /// `chat.message`, `chat.member.joined`, `chat.member.left` or `chat.ended` about room `roomID`.
    case chat(roomID: String, ChatBook.Event)
  }

  /// Virtual milliseconds.
  public var time: UInt64
  public var kind: Kind
}

/// An advertiser as a browser believes in it.
public struct Advertisement: Sendable, Hashable {
  public var nodeID: String
  public var discoveryInfo: [String: String]

  public init(nodeID: String, discoveryInfo: [String: String]) {
    self.nodeID = nodeID
    self.discoveryInfo = discoveryInfo
  }
}

// MARK: - Internal state

struct DurablePeer {
  var displayName: String
  var advertising: [String: [String: String]] = [:]
  var browsing: Set<String> = []
}

struct WireEnd: Hashable {
  var wire: Int
  var side: Int
}

struct SimulatedNode {
  let index: Int
  let nodeID: String
  let host: String
  var alive = true
  /// Bumped at every crash; timers of an earlier life are ignored.
  var incarnation = 0
  /// Links, directory and sessions, wired as in the node runtime.
  var mesh: MeshNode
  var endpoints: [LinkManager.ConnectionID: WireEnd] = [:]
  var nextInbound: LinkManager.ConnectionID = 1
  var durable: [String: DurablePeer] = [:]
  /// The node's chat tables: kept across crashes, as on disk.
  var chatStore = SimulatedChatStore()

  init(index: Int, nodeID: String, host: String, mesh: MeshNode) {
    self.index = index
    self.nodeID = nodeID
    self.host = host
    self.mesh = mesh
  }
}

/// One transport connection: side 0 dialled, side 1 accepted.
struct Wire {
  enum State { case dialling, open, closed }
  enum Item {
    case frame(MeshMessage)
    /// The other side closed (or the connection was reset).
    case fin
  }

  struct End {
    var node: Int
    var id: LinkManager.ConnectionID
    var open: Bool
    /// Items travelling toward this end, in order.
    var inbox = FIFO<Item>()
    /// The latest scheduled arrival toward this end (arrivals never overtake each other).
    var lastArrival: UInt64 = 0
    /// Arrivals held at a partition, waiting at the head of `inbox`.
    var held = 0
  }

  var ends: [End]
  var state: State = .dialling
  /// Reset by loss or a crash: nothing more is carried.
  var broken = false
  var dialledAt: UInt64
}

enum SimulationEventKind {
  case tick(node: Int, incarnation: Int)
  case beacon(node: Int, incarnation: Int)
  case establish(wire: Int)
  case dialFailed(wire: Int)
  case arrive(wire: Int, side: Int)
  case release(wire: Int, side: Int)
  case closedLocally(node: Int, incarnation: Int, id: LinkManager.ConnectionID)
}
