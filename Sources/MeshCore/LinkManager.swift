import Crypto

/// Mesh links between nodes: dialling, handshakes, heartbeats, loss detection, reconnects and duplicate links.
///
/// A sans-I/O state machine in the style of SWIM's `SWIM.Instance`: the node runtime feeds it what happened
/// (an address was discovered, a connection opened, a frame arrived, time passed) and carries out the
/// ``Action``s it returns (dial, send, close, report a link up or down, deliver a frame upward). Time is a
/// monotonic millisecond counter passed in by the caller; randomness (reconnect jitter) comes from a seeded
/// generator, so a simulator run is reproducible.
///
/// Protocol duties (docs/mesh-protocol.md):
/// - Both sides send `hello` first: the dialler at once, the accepting node once the dialler's hello (and mesh-secret
///   proof) passed its checks, so a dialler it refuses never takes the link for up. A `hello` with our own node id is
///   a self-link and is closed for good. A refusal `goodbye` backs off like a failed dial, even after a link up.
/// - Heartbeats every ``Configuration/heartbeatInterval``; a link silent for ``Configuration/deadAfter`` is dead.
/// - Two links between the same pair of nodes (both dialled at once): the one dialled by the node with the
///   smaller node id survives, the other is closed with `goodbye("duplicate link")`. Both sides decide alike.
/// - Addresses we dial are re-dialled after a loss with exponential backoff and jitter. Beacon-discovered nodes
///   are dialled only by the side with the smaller node id (the other waits for it), halving duplicate links;
///   static seeds are always dialled, because their node id is unknown until the handshake.
/// - Security (docs/security.md): the runtime reports each connection's ``Transport`` (TLS or not, both certificate
///   fingerprints, a fresh random challenge). A TLS link's certificate is pinned per node id on its first link (trust
///   on first use, ``Action/pin(nodeID:fingerprint:)``); a different certificate later, or a plaintext link from a
///   pinned node, is refused (``Action/refused(_:)``). With a mesh secret, both sides send `authChallenge` before
///   `hello`, and a link comes up only after the other side's `authProof`, an HMAC under the secret bound to the
///   challenge, the prover's role and both fingerprints, so the secret never travels and a relay in the middle
///   (whose certificates differ) cannot reuse a proof. A node without a secret that is challenged answers with an
///   empty proof and never brings that link up (it is refused). Of two links between the same nodes, a TLS one
///   beats a plaintext one before the node-id rule applies.
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

  /// How a connection is carried, as the runtime saw it open.
  public struct Transport: Sendable, Hashable {
    /// The connection runs over TLS.
    public var encrypted: Bool
    /// The fingerprint of the certificate this node presented on it (nil on plaintext).
    public var localFingerprint: String?
    /// The fingerprint of the certificate the other node presented (nil on plaintext, or if it sent none).
    public var remoteFingerprint: String?
    /// A fresh random challenge for the mesh-secret handshake (from a CSPRNG, 32 bytes); unused without a secret.
    public var challenge: [UInt8]

    public init(encrypted: Bool, localFingerprint: String?, remoteFingerprint: String?, challenge: [UInt8]) {
      self.encrypted = encrypted
      self.localFingerprint = localFingerprint
      self.remoteFingerprint = remoteFingerprint
      self.challenge = challenge
    }

    /// A plaintext connection without a challenge (tests and the simulator, which run without a mesh secret).
    public static let plaintext = Transport(
      encrypted: false, localFingerprint: nil, remoteFingerprint: nil, challenge: [])
  }

  /// Why a link was refused, for the log line and the `node.link.refused` event.
  public struct Refusal: Sendable, Hashable {
    /// `certificate_changed`, `certificate_missing`, `plaintext_from_pinned_node`, `mesh_secret_missing`,
    /// `mesh_secret_mismatch`; `refused_by_node` when the other node refused this one for one of those.
    public var code: String
    /// One sentence saying what happened and what to do.
    public var message: String
    /// The other node, if it said hello.
    public var nodeID: String?
    public var name: String?
    /// The fingerprint pinned for that node, and the one it presented now.
    public var pinnedFingerprint: String?
    public var presentedFingerprint: String?
  }

  /// What the runtime must do.
  public enum Action: Sendable, Hashable {
    /// Remember `fingerprint` as the certificate of `nodeID` (first TLS link to it: trust on first use).
    case pin(nodeID: String, fingerprint: String)
    /// A connection was refused for a security reason (it is being closed; nothing else to do but report it).
    case refused(Refusal)
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
    /// Whether the link runs over TLS (nil when not linked).
    public var encrypted: Bool?
    /// The node's certificate fingerprint: the one its link presented, else the pinned one.
    public var fingerprint: String?
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
    /// For `.gossip` addresses: the linked node whose `nodeDirectory` named it.
    var gossipedBy: String?
    /// The address answered as the node it was announced with (or was configured or found, not gossiped).
    var confirmed = false
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
    var transport: Transport = .plaintext
    /// The other side proved it knows the mesh secret.
    var authenticated = false
    /// We answered the other side's challenge.
    var proved = false
    /// We sent our `hello`. An accepting node holds it back until the dialler's hello (and, with a mesh secret, its
    /// proof) passed every check, so that a dialler it refuses never takes the link for up.
    var helloSent = false
    /// The dialler's challenge, kept by an accepting node until it has sent its hello.
    var pendingChallenge: [UInt8]?
    /// The address's count of failed dials when this link came up (and reset it), for a refusal that ends the link.
    var attemptsBeforeLink = 0
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

  /// The mesh secret's bytes; nil when this node has none.
  let secret: [UInt8]?
  /// Pinned certificate fingerprints by node id.
  public private(set) var pins: [String: String]
  /// Gossiped addresses taken from each linked node since it linked (``MeshLimits/gossipAddressesPerNode``).
  var gossipTaken: [String: Int] = [:]
  /// Frames or entries refused, by reason (`too_many_nodes`: gossip beyond the limit; `gossip_mismatch`: a gossiped
  /// address answered as another node).
  public private(set) var refusals: [String: Int] = [:]
  /// Outbound connections started (dials), for `meshgate_mesh_dials_total`.
  public private(set) var dials = 0
  /// The last gossiped addresses given up on, newest last (at most ``forgottenLimit``), for the admin's view.
  public private(set) var forgotten: [ForgottenAddress] = []
  /// How many given-up addresses ``forgotten`` keeps.
  public static let forgottenLimit = 64

  /// A gossiped address this node stopped dialling, and why.
  public struct ForgottenAddress: Sendable, Hashable {
    /// `host:port`.
    public var address: String
    /// The node id it was announced with.
    public var nodeID: String?
    /// The linked node whose `nodeDirectory` named it.
    public var gossipedBy: String?
    /// `unreachable` (never answered in ``MeshLimits/gossipDialAttempts`` dials) or `answered_as_another_node`.
    public var reason: String
    public var attempts: Int
  }

  mutating func forget(_ key: String, reason: String) {
    guard let address = addresses.removeValue(forKey: key) else { return }
    forgotten.append(
      ForgottenAddress(
        address: key, nodeID: address.nodeID, gossipedBy: address.gossipedBy, reason: reason,
        attempts: address.attempts + 1))
    if forgotten.count > Self.forgottenLimit { forgotten.removeFirst(forgotten.count - Self.forgottenLimit) }
  }

  public init(
    local: NodeHello, configuration: Configuration = Configuration(), seed: UInt64 = 0x5EED, secret: [UInt8]? = nil,
    pins: [String: String] = [:]
  ) {
    self.local = local
    self.configuration = configuration
    self.random = SplitMix64(seed: seed)
    self.secret = secret
    self.pins = pins
  }

  /// How the link to `nodeID` is carried, if linked.
  public func transport(of nodeID: String) -> Transport? {
    links[nodeID].flatMap { connections[$0]?.transport }
  }

  /// The ids of linked nodes.
  public var linkedNodeIDs: [String] { links.keys.sorted() }

  /// The ids of linked nodes as a set (no sorting: every session send asks).
  public var linkedNodeIDSet: Set<String> { Set(links.keys) }

  /// The connection carrying the link to `nodeID`, if linked.
  public func connection(of nodeID: String) -> ConnectionID? { links[nodeID] }

  /// The node that said hello on connection `id`, if it did.
  public func nodeID(on id: ConnectionID) -> String? { connections[id]?.hello?.nodeID }

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

  /// Addresses a linked node passed along. Each is dialled only while it has not answered as another node, at most
  /// ``MeshLimits/gossipDialAttempts`` times before it first answered as its node, and no node gets more than
  /// ``MeshLimits/gossipAddressesPerNode`` such addresses taken per link: so invented ids cannot make this node dial
  /// (or port-scan) on another node's behalf. The rest are refused and counted.
  mutating func gossipReceived(_ nodes: [NodeAddress], from sender: String, now: UInt64, into actions: inout [Action]) {
    for node in nodes where node.nodeID != local.nodeID && node.nodeID != sender && links[node.nodeID] == nil {
      let key = "\(node.host):\(node.port)"
      if addresses[key] == nil {
        guard gossipTaken[sender, default: 0] < MeshLimits.gossipAddressesPerNode else {
          refusals["too_many_nodes", default: 0] += 1
          continue
        }
        gossipTaken[sender, default: 0] += 1
        addresses[key] = Address(
          host: node.host, port: node.port, source: .gossip, nodeID: node.nodeID, lastSeen: now, gossipedBy: sender)
      } else if addresses[key]!.source == .gossip && addresses[key]!.nodeID != node.nodeID {
        // Another id for an address already known: the first claim stands.
        refusals["gossip_mismatch", default: 0] += 1
        continue
      }
      actions.append(
        contentsOf: discovered(nodeID: node.nodeID, host: node.host, port: node.port, source: .gossip, now: now))
    }
  }

  /// Gossiped addresses being dialled now.
  var gossipDialsInFlight: Int {
    addresses.values.filter { $0.source == .gossip && !$0.confirmed && $0.connection != nil }.count
  }

  mutating func dialIfDue(_ key: String, now: UInt64, into actions: inout [Action]) {
    guard let address = addresses[key], !address.isSelf, address.connection == nil else { return }
    if let nodeID = address.nodeID, links[nodeID] != nil { return }
    if let retryAt = address.retryAt, retryAt > now { return }
    if address.source == .gossip && !address.confirmed && gossipDialsInFlight >= MeshLimits.gossipDialsInFlight {
      // Wait for a slot; the tick tries again.
      addresses[key]!.retryAt = now
      return
    }
    dials += 1
    let id = nextConnectionID
    nextConnectionID += 1
    connections[id] = Connection(outbound: true, addressKey: key, openedAt: now, lastHeard: now)
    addresses[key]!.connection = id
    addresses[key]!.retryAt = nil
    actions.append(.connect(id, host: address.host, port: address.port))
  }

  // MARK: - Connection events

  /// An outbound connection opened: say hello (and challenge the other side first when this node has a mesh secret).
  public mutating func outboundOpened(_ id: ConnectionID, transport: Transport = .plaintext, now: UInt64) -> [Action] {
    guard connections[id] != nil else { return [] }
    connections[id]!.lastHeard = now
    connections[id]!.transport = transport
    return opening(id)
  }

  /// The first frames on a new connection. A node with a mesh secret sends its challenge first, so that a node without
  /// the secret learns that this node requires one before it takes a hello for a link. The dialler says hello at once;
  /// the accepting node says hello only once the dialler's hello (and proof) passed its checks
  /// (``acceptAndLinkUp(_:now:into:)``): it can refuse the dialler on identity, and a refused dialler must never get a
  /// hello it would take for a link.
  mutating func opening(_ id: ConnectionID) -> [Action] {
    var actions: [Action] = []
    if secret != nil { actions.append(.send(id, .authChallenge(nonce: connections[id]!.transport.challenge))) }
    if connections[id]!.outbound { sendHello(id, into: &actions) }
    return actions
  }

  /// Sends our hello on connection `id` (once), then the answer to a challenge that came before it.
  mutating func sendHello(_ id: ConnectionID, into actions: inout [Action]) {
    guard connections[id] != nil, !connections[id]!.helloSent else { return }
    connections[id]!.helloSent = true
    actions.append(.send(id, .hello(local)))
    if let nonce = connections[id]!.pendingChallenge {
      connections[id]!.pendingChallenge = nil
      answerChallenge(id, nonce, into: &actions)
    }
  }

  /// Answers the other side's mesh-secret challenge (an empty proof without a secret).
  mutating func answerChallenge(_ id: ConnectionID, _ nonce: [UInt8], into actions: inout [Action]) {
    let connection = connections[id]!
    connections[id]!.proved = true
    let mac =
      secret.map { secret in
        Self.proof(
          secret: secret, challenge: nonce, proverIsDialler: connection.outbound,
          proverFingerprint: connection.transport.localFingerprint,
          verifierFingerprint: connection.transport.remoteFingerprint)
      } ?? []
    actions.append(.send(id, .authProof(mac: mac)))
  }

  /// An outbound connection could not be opened.
  public mutating func outboundFailed(_ id: ConnectionID, now: UInt64) -> [Action] {
    closed(id, now: now)
  }

  /// A node dialled us on connection `id` (allocated by the runtime, below `1 << 32`) from `remoteHost`.
  public mutating func inboundOpened(
    _ id: ConnectionID, remoteHost: String? = nil, transport: Transport = .plaintext, now: UInt64
  ) -> [Action] {
    connections[id] = Connection(
      outbound: false, remoteHost: remoteHost, openedAt: now, lastHeard: now, transport: transport)
    return opening(id)
  }

  /// Bytes arrived on connection `id`, part of a frame is enough: the other node is alive and gets through, though a large
  /// frame on a slow or lossy link can take longer than ``Configuration/deadAfter`` to complete. Counts as hearing
  /// from it (a heartbeat queued behind that frame cannot arrive sooner).
  public mutating func heard(on id: ConnectionID, now: UInt64) {
    guard connections[id] != nil, !connections[id]!.closing else { return }
    connections[id]!.lastHeard = max(connections[id]!.lastHeard, now)
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
    case .authChallenge(let nonce):
      guard !connection.proved, connection.pendingChallenge == nil else { break }
      // An accepting node answers after its hello, which waits for the dialler's hello (hello stays first).
      guard connection.helloSent else {
        connections[id]!.pendingChallenge = nonce
        break
      }
      answerChallenge(id, nonce, into: &actions)
    case .authProof(let mac):
      verifyProof(id, mac, now: now, into: &actions)
    case .heartbeat(let sequence, let sentAt):
      actions.append(.send(id, .heartbeatAck(sequence: sequence, sentAtMillis: sentAt)))
    case .heartbeatAck(_, let sentAt):
      if now >= sentAt { connections[id]!.rttMillis = now - sentAt }
    case .nodeDirectory(let nodes):
      guard let sender = connection.hello?.nodeID, links[sender] == id else { break }
      gossipReceived(nodes, from: sender, now: now, into: &actions)
    case .goodbye(let reason):
      let refused = Self.refusalCodes.contains(reason)
      if refused {
        // A refused dialler has not seen the other node's hello: name the node its address last answered as.
        let nodeID = connection.hello?.nodeID ?? connection.addressKey.flatMap { addresses[$0]?.nodeID }
        let who =
          connection.hello.map { "node \($0.name) (\($0.nodeID))" } ?? nodeID.map { "node \($0)" } ?? "the other node"
        actions.append(
          .refused(
            Refusal(
              code: "refused_by_node",
              message: "\(who) refused the link: \(reason); see that node's log for what to fix",
              nodeID: nodeID, name: connection.hello?.name)))
      }
      if reason == "duplicate link", let nodeID = connection.hello?.nodeID, links[nodeID] == id {
        relinking[nodeID] = now
        links[nodeID] = nil
      }
      actions.append(contentsOf: closed(id, now: now, refused: refused))
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
      // Accepting our own dial: say hello so that the dialling side learns it is a self-link and stops dialling.
      sendHello(id, into: &actions)
      closeConnection(id, reason: "self link", into: &actions)
      return
    }
    connections[id]!.hello = hello
    if let key = connection.addressKey, let address = addresses[key] {
      if address.source == .gossip, let announced = address.nodeID, announced != hello.nodeID {
        // A gossiped address that answers as another node is not dialled again.
        refusals["gossip_mismatch", default: 0] += 1
        forget(key, reason: "answered_as_another_node")
        closeConnection(id, reason: "node id mismatch", into: &actions)
        return
      }
      addresses[key]!.nodeID = hello.nodeID
      addresses[key]!.confirmed = true
    }
    if let refusal = pinViolation(connection.transport, hello) {
      refuse(id, refusal, into: &actions)
      return
    }
    // With a mesh secret the link waits for the other side's proof (frames on a link are ordered: the proof
    // answers our challenge, which we sent before anything else).
    if secret != nil && !connections[id]!.authenticated { return }
    acceptAndLinkUp(id, now: now, into: &actions)
  }

  /// The other side passed every check (its hello, and its proof when this node has a secret): an accepting node now
  /// says its own hello (and answers the dialler's challenge), and the link comes up on this side.
  mutating func acceptAndLinkUp(_ id: ConnectionID, now: UInt64, into actions: inout [Action]) {
    sendHello(id, into: &actions)
    // Without a secret, a node that challenged us (before its hello, or held until ours) requires one: it refuses the
    // empty proof we answered with, so the link never comes up; its goodbye ends the connection, the address backs off.
    if secret == nil && connections[id]!.proved { return }
    linkUp(id, now: now, into: &actions)
  }

  /// Why a TLS or plaintext connection from `hello`'s node breaks its pin, if it does.
  func pinViolation(_ transport: Transport, _ hello: NodeHello) -> Refusal? {
    let pinned = pins[hello.nodeID]
    guard transport.encrypted else {
      guard let pinned else { return nil }
      return Refusal(
        code: "plaintext_from_pinned_node",
        message:
          "node \(hello.name) (\(hello.nodeID)) linked over plaintext, but its certificate \(pinned.prefix(16))… is "
          + "pinned here; pinned nodes must link over TLS (start it without --mesh-tls off)",
        nodeID: hello.nodeID, name: hello.name, pinnedFingerprint: pinned, presentedFingerprint: nil)
    }
    guard let presented = transport.remoteFingerprint else {
      return Refusal(
        code: "certificate_missing",
        message: "node \(hello.name) (\(hello.nodeID)) linked over TLS without presenting its node certificate",
        nodeID: hello.nodeID, name: hello.name, pinnedFingerprint: pinned, presentedFingerprint: nil)
    }
    if let pinned, pinned != presented {
      return Refusal(
        code: "certificate_changed",
        message:
          "node \(hello.name) (\(hello.nodeID)) presented certificate \(presented.prefix(16))…, but "
          + "\(pinned.prefix(16))… is pinned for it: refusing the link (a different machine may be using its id); "
          + "if its certificate was replaced on purpose, remove the pin with DELETE /api/v1/mesh/pins/\(hello.nodeID)",
        nodeID: hello.nodeID, name: hello.name, pinnedFingerprint: pinned, presentedFingerprint: presented)
    }
    return nil
  }

  /// The `goodbye` reasons of refused links.
  static let refusalCodes: Set<String> = [
    "certificate_changed", "certificate_missing", "plaintext_from_pinned_node", "mesh_secret_missing",
    "mesh_secret_mismatch",
  ]

  mutating func refuse(_ id: ConnectionID, _ refusal: Refusal, into actions: inout [Action]) {
    actions.append(.refused(refusal))
    closeConnection(id, reason: refusal.code, into: &actions)
  }

  /// The other side's answer to our challenge.
  mutating func verifyProof(_ id: ConnectionID, _ mac: [UInt8], now: UInt64, into actions: inout [Action]) {
    guard let secret, let connection = connections[id], !connection.authenticated else { return }
    let name = connection.hello?.name ?? "?"
    let who = connection.hello.map { "node \($0.name) (\($0.nodeID))" } ?? "a node"
    guard !mac.isEmpty else {
      refuse(
        id,
        Refusal(
          code: "mesh_secret_missing",
          message: "\(who) has no mesh secret, and this node requires one; start it with the same --mesh-secret",
          nodeID: connection.hello?.nodeID, name: connection.hello == nil ? nil : name),
        into: &actions)
      return
    }
    let expected = Self.proof(
      secret: secret, challenge: connection.transport.challenge, proverIsDialler: !connection.outbound,
      proverFingerprint: connection.transport.remoteFingerprint,
      verifierFingerprint: connection.transport.localFingerprint)
    guard Crypto.constantTimeEqual(expected, mac) else {
      refuse(
        id,
        Refusal(
          code: "mesh_secret_mismatch",
          message:
            "\(who) answered the mesh-secret challenge wrongly: its --mesh-secret differs from this node's (or "
            + "someone is relaying the link); give both nodes the same secret",
          nodeID: connection.hello?.nodeID, name: connection.hello == nil ? nil : name),
        into: &actions)
      return
    }
    connections[id]!.authenticated = true
    if connection.hello != nil && connection.linkedSince == nil { acceptAndLinkUp(id, now: now, into: &actions) }
  }

  /// The proof that the prover knows `secret`: HMAC-SHA256 over a label, the verifier's challenge, the prover's role
  /// and both certificate fingerprints as the prover sees them (empty on plaintext).
  public static func proof(
    secret: [UInt8], challenge: [UInt8], proverIsDialler: Bool, proverFingerprint: String?,
    verifierFingerprint: String?
  ) -> [UInt8] {
    var data = Array("meshgate-link-auth-v1".utf8) + [0]
    data.append(proverIsDialler ? 0x44 : 0x41)
    data.append(UInt8(challenge.count))
    data += challenge
    data += Array((proverFingerprint ?? "").utf8) + [0]
    data += Array((verifierFingerprint ?? "").utf8) + [0]
    return Crypto.hmacSHA256(key: secret, data: data)
  }

  /// The handshake is complete on connection `id` (hello, and the proof when a secret is set): the link comes up,
  /// or a duplicate is resolved.
  mutating func linkUp(_ id: ConnectionID, now: UInt64, into actions: inout [Action]) {
    let connection = connections[id]!
    let hello = connection.hello!
    if connection.transport.encrypted, let presented = connection.transport.remoteFingerprint,
      pins[hello.nodeID] == nil
    {
      pins[hello.nodeID] = presented
      actions.append(.pin(nodeID: hello.nodeID, fingerprint: presented))
    }
    if let existing = links[hello.nodeID], existing != id {
      // A TLS link beats a plaintext one; otherwise keep the link dialled by the smaller node id; ties (same
      // dialler) keep the older link. Both ends see the same encryption and diallers, so they decide alike.
      let existingDialler = connections[existing]!.outbound ? local.nodeID : hello.nodeID
      let newDialler = connection.outbound ? local.nodeID : hello.nodeID
      let existingEncrypted = connections[existing]!.transport.encrypted
      let keepNew =
        existingEncrypted != connection.transport.encrypted
        ? connection.transport.encrypted : newDialler < existingDialler
      if keepNew {
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
    if let key = connection.addressKey, let attempts = addresses[key]?.attempts {
      connections[id]!.attemptsBeforeLink = attempts
      addresses[key]!.attempts = 0
    }
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
    closed(id, now: now, refused: false)
  }

  /// `refused`: the other node closed the connection with a refusal `goodbye`, so its address backs off like a failed
  /// dial even if the link was up (a node of an older version says hello before it checks the dialler), rather than
  /// being re-dialled at the next tick.
  mutating func closed(_ id: ConnectionID, now: UInt64, refused: Bool) -> [Action] {
    guard let connection = connections.removeValue(forKey: id) else { return [] }
    var actions: [Action] = []
    if let nodeID = connection.hello?.nodeID, links[nodeID] == id {
      links[nodeID] = nil
      gossipTaken[nodeID] = nil
      actions.append(.linkDown(nodeID: nodeID))
    }
    if let key = connection.addressKey, addresses[key]?.connection == id {
      addresses[key]!.connection = nil
      if !addresses[key]!.isSelf {
        if refused && connection.linkedSince != nil {
          // Refused after the link came up: a failed dial after all, counted on from before that link.
          addresses[key]!.attempts = connection.attemptsBeforeLink
        }
        if connection.linkedSince != nil && !refused {
          // A link that was up just dropped: try again at the next tick; backoff starts if that fails.
          addresses[key]!.attempts = 0
          addresses[key]!.retryAt = now
        } else if addresses[key]!.source == .gossip && !addresses[key]!.confirmed
          && addresses[key]!.attempts + 1 >= MeshLimits.gossipDialAttempts
        {
          // A gossiped address that never answered as its node is forgotten after a few tries.
          forget(key, reason: "unreachable")
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
      guard connection.linkedSince != nil else {
        if now - connection.openedAt > configuration.handshakeTimeout && links[connection.hello!.nodeID] != id {
          closeConnection(
            id, reason: "no mesh-secret proof within \(configuration.handshakeTimeout) ms", into: &actions)
        }
        continue
      }
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
          linkedSinceMillis: connection.linkedSince, encrypted: connection.transport.encrypted,
          fingerprint: connection.transport.remoteFingerprint ?? pins[nodeID]))
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
          inbound: false, linkedSinceMillis: nil, encrypted: nil, fingerprint: address.nodeID.flatMap { pins[$0] }))
    }
    return result
  }
}

extension LinkManager {
  /// Forgets the pin of `nodeID` (its certificate was replaced on purpose); its next TLS link pins anew.
  /// Returns whether there was one.
  public mutating func unpin(_ nodeID: String) -> Bool {
    pins.removeValue(forKey: nodeID) != nil
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
