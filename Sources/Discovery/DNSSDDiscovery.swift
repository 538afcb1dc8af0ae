/// DNS-SD (Bonjour) discovery and advertisement through Avahi: what `--discovery dnssd` and `auto` run.
///
/// Module `Discovery` (node runtime, layer 4), over the ``DNSSDClient`` wrapper. A node
/// - registers `_meshgate._tcp`: instance name = node name (Avahi picks "name #2" on a conflict), port = the
///   HTTP/WebSocket port, TXT `txtvers=1`, `id=<node id>`, `pv=<mesh protocol version>`, and `fp=<SHA-256 of the
///   node's TLS certificate>` once mesh links have one (see ``DNSSDAnnouncement/tlsFingerprint``);
/// - registers one `_<serviceType>._tcp` per service type its peers advertise (e.g. `_jobmanager-jobs._tcp`), with
///   TXT `txtvers=1`, `id=<node id>`, `peers=<how many local peers advertise it>`, withdrawn when the last one stops,
///   so `avahi-browse -a` and Bonjour browsers on the LAN list them;
/// - browses `_meshgate._tcp`, resolves each instance to an IPv4 address and port, and reports other nodes (by the
///   TXT `id`) through `onDiscovered`: at once, then again every 2 s while the instance stays registered, the way
///   the beacon repeats itself. The link manager dials them like beacon discoveries and forgets an address 30 s
///   after its reports stop.
///
/// All of it is scoped to the interface serving the node's bind address (every interface for `0.0.0.0`, loopback
/// for `127.0.0.1`), so a node never announces an address no one can reach.
///
/// If the daemon (or the system D-Bus it is reached through) is not reachable, the first registration or browse
/// fails at once; a daemon that goes away later fails them too. Either way `onUnavailable` is called exactly once,
/// the client stops and nothing more is reported; ``NodeDiscovery`` logs one line and falls back to the beacon.
///
/// Threading: events arrive on the DNS-SD client's thread; `onDiscovered` and `onUnavailable` are called there or on
/// the refresh timer's queue, and must hand work to the node actor themselves. Public methods are safe from any
/// thread.
import DNSSD
import Dispatch
import Logging
import Synchronization

/// What a node publishes about itself over DNS-SD.
struct DNSSDAnnouncement: Sendable, Equatable {
  /// The node id (TXT `id`).
  var nodeID: String
  /// The node name: the instance name of every registration.
  var name: String
  /// The node's HTTP/WebSocket port.
  var port: UInt16
  /// The mesh protocol version (TXT `pv`).
  var protocolVersion: UInt8
  /// Hex SHA-256 fingerprint of the node's TLS certificate (TXT `fp`); nil while mesh links have no TLS, and then
  /// no `fp` key is published.
  var tlsFingerprint: String?
  /// Interface to register and browse on (0: every interface the daemon uses).
  var interfaceIndex: UInt32

  /// The `_meshgate._tcp` TXT record.
  func meshTXT() throws(TXTRecord.EncodingError) -> [UInt8] {
    var pairs: [(key: String, value: String)] = [("txtvers", "1"), ("id", nodeID), ("pv", String(protocolVersion))]
    if let tlsFingerprint { pairs.append(("fp", tlsFingerprint)) }
    return try TXTRecord.encode(pairs)
  }

  /// The TXT record of a `_<serviceType>._tcp` registration advertised by `peers` local peers.
  func serviceTypeTXT(peers: Int) throws(TXTRecord.EncodingError) -> [UInt8] {
    try TXTRecord.encode([("txtvers", "1"), ("id", nodeID), ("peers", String(peers))])
  }
}

/// Registers this node and its advertised service types with DNS-SD and reports the other nodes it browses.
package final class DNSSDDiscovery: Sendable {
  /// The service type every node registers and browses.
  static let meshServiceType = "_meshgate._tcp"
  /// How often still-registered nodes are reported again.
  static let refreshInterval: DispatchTimeInterval = .seconds(2)

  let announcement: DNSSDAnnouncement
  private let onDiscovered: @Sendable (DiscoveredNode) -> Void
  private let onUnavailable: @Sendable (_ error: DNSSDError, _ wasRunning: Bool) -> Void
  private let state = Mutex(State())
  private let queue = DispatchQueue(label: "meshgate.dnssd.refresh")
  private let logger = Logger(component: "dnssd")

  private struct State {
    enum Phase { case idle, starting, running, unavailable, stopped }
    var phase = Phase.idle
    var client: DNSSDClient?
    var timer: (any DispatchSourceTimer)?
    var meshRegistration: DNSSDHandle?
    var registeredName: String?
    /// Local service types: their registration and how many local peers advertise each.
    var serviceTypes: [String: (handle: DNSSDHandle, peers: Int)] = [:]
    /// Other nodes' resolved instances, by "interface|instance name".
    var found: [String: DiscoveredNode] = [:]

    /// The client while registrations may be made.
    var activeClient: DNSSDClient? { phase == .starting || phase == .running ? client : nil }
  }

  init(
    announcement: DNSSDAnnouncement, onDiscovered: @escaping @Sendable (DiscoveredNode) -> Void,
    onUnavailable: @escaping @Sendable (_ error: DNSSDError, _ wasRunning: Bool) -> Void
  ) {
    self.announcement = announcement
    self.onDiscovered = onDiscovered
    self.onUnavailable = onUnavailable
  }

  deinit {
    stop()
  }

  /// Registers `_meshgate._tcp` and browses for other nodes; the outcome is a "DNS-SD discovery on." log line or
  /// one `onUnavailable` call. Call once.
  func start() {
    let txt: [UInt8]
    do {
      txt = try announcement.meshTXT()
    } catch {
      fail(DNSSDError(code: 0, operation: "TXT record", message: error.message))
      return
    }
    let client: DNSSDClient
    do {
      client = try DNSSDClient { [weak self] event in self?.handle(event) }
    } catch {
      fail(error)
      return
    }
    let queue = self.queue
    let started = state.withLock { state -> Bool in
      guard state.phase == .idle else { return false }
      state.phase = .starting
      state.client = client
      // Made and activated under the lock, so a racing stop() or failure always finds an active timer to cancel
      // (an inactive dispatch source must never be released).
      let timer = DispatchSource.makeTimerSource(queue: queue)
      timer.schedule(
        deadline: .now() + Self.refreshInterval, repeating: Self.refreshInterval, leeway: .milliseconds(100))
      timer.setEventHandler { [weak self] in self?.refresh() }
      timer.activate()
      state.timer = timer
      // The handle is known before any event about it can arrive (events come after the command is queued).
      state.meshRegistration = client.register(
        name: announcement.name, type: Self.meshServiceType, port: announcement.port, txt: txt,
        interfaceIndex: announcement.interfaceIndex)
      return true
    }
    guard started else {
      client.stop()
      return
    }
    client.browse(type: Self.meshServiceType, interfaceIndex: announcement.interfaceIndex)
  }

  /// Withdraws every registration and stops browsing. Idempotent; safe from any thread.
  func stop() {
    let (client, timer) = state.withLock { state -> (DNSSDClient?, (any DispatchSourceTimer)?) in
      defer {
        state.phase = .stopped
        state.client = nil
        state.timer = nil
        state.found = [:]
      }
      return (state.client, state.timer)
    }
    timer?.cancel()
    client?.stop()
  }

  /// Makes the `_<type>._tcp` registrations match `peersByServiceType` (service type → how many local peers
  /// advertise it): registers new types, withdraws types no one advertises any more, updates changed counts.
  /// Call from one place at a time (the node actor); never blocks.
  package func setAdvertisedServiceTypes(_ peersByServiceType: [String: Int]) {
    guard let client = state.withLock({ $0.activeClient }) else { return }
    let current = state.withLock { $0.serviceTypes }
    for (type, registration) in current where peersByServiceType[type] == nil {
      client.cancel(registration.handle)
      state.withLock { $0.serviceTypes[type] = nil }
      logger.debug("DNS-SD service type withdrawn.", ["dnssd.type": "_\(type)._tcp"])
    }
    for (type, peers) in peersByServiceType.sorted(by: { $0.key < $1.key }) {
      guard let txt = try? announcement.serviceTypeTXT(peers: peers) else { continue }
      if let registration = current[type] {
        guard registration.peers != peers else { continue }
        client.updateTXT(registration.handle, txt)
        state.withLock { $0.serviceTypes[type]?.peers = peers }
      } else {
        let handle = client.register(
          name: announcement.name, type: "_\(type)._tcp", port: announcement.port, txt: txt,
          interfaceIndex: announcement.interfaceIndex)
        state.withLock { $0.serviceTypes[type] = (handle, peers) }
      }
    }
  }

  // MARK: Events (on the DNS-SD client's thread)

  private func handle(_ event: DNSSDEvent) {
    switch event {
    case .registered(let handle, let name):
      let becameRunning = state.withLock { state -> Bool in
        guard handle == state.meshRegistration else { return false }
        state.registeredName = name
        guard state.phase == .starting else { return false }
        state.phase = .running
        return true
      }
      if becameRunning {
        logger.info(
          "DNS-SD discovery on.",
          [
            "dnssd.name": name, "dnssd.type": Self.meshServiceType, "dnssd.port": announcement.port,
            "dnssd.interface": announcement.interfaceIndex == 0 ? "any" : String(announcement.interfaceIndex),
          ])
      } else {
        logger.debug("DNS-SD service registered.", ["dnssd.name": name, "dnssd.handle": handle])
      }
    case .registrationFailed(let handle, let error):
      let serviceType = state.withLock { state -> String? in
        guard handle != state.meshRegistration else { return nil }
        guard let type = state.serviceTypes.first(where: { $0.value.handle == handle })?.key else { return nil }
        state.serviceTypes[type] = nil
        return type
      }
      if let serviceType, !error.isDaemonUnreachable {
        logger.warning(
          "DNS-SD could not register a service type; browsers on the LAN will not see it.",
          ["dnssd.type": "_\(serviceType)._tcp", "error": error.description])
      } else {
        fail(error)
      }
    case .browseFailed(_, let error):
      fail(error)
    case .resolved(_, let service):
      guard let nodeID = service.txt["id"], !nodeID.isEmpty, nodeID != announcement.nodeID else { return }
      let version = service.txt["pv"].flatMap(UInt8.init) ?? 0
      guard version == announcement.protocolVersion else {
        logger.debug(
          "Ignoring a node that speaks another mesh protocol version.",
          ["peer.node.id": nodeID, "dnssd.name": service.name, "dnssd.pv": service.txt["pv"] ?? "none"])
        return
      }
      let node = DiscoveredNode(
        nodeID: nodeID, name: service.name, host: service.address, httpPort: service.port, protocolVersion: version)
      let isNew = state.withLock { state -> Bool in
        guard state.phase == .starting || state.phase == .running else { return false }
        let known = state.found.values.contains { $0.nodeID == nodeID }
        state.found["\(service.interfaceIndex)|\(service.name)"] = node
        return !known
      }
      logger.debug(
        "DNS-SD found a node.",
        ["peer.node.id": nodeID, "dnssd.name": service.name, "dnssd.address": "\(service.address):\(service.port)"])
      // Another address of a node already reported waits for the refresh, which reports one address per node.
      if isNew { onDiscovered(node) }
    case .removed(_, let name, let interfaceIndex):
      let node = state.withLock { $0.found.removeValue(forKey: "\(interfaceIndex)|\(name)") }
      if let node { logger.debug("DNS-SD instance went away.", ["peer.node.id": node.nodeID, "dnssd.name": name]) }
    }
  }

  /// Reports every node still registered again (one address per node), so the link manager keeps it fresh.
  private func refresh() {
    let nodes = state.withLock { state -> [DiscoveredNode] in
      guard state.phase == .running || state.phase == .starting else { return [] }
      var byNode: [String: DiscoveredNode] = [:]
      for key in state.found.keys.sorted() {
        let node = state.found[key]!
        if byNode[node.nodeID] == nil { byNode[node.nodeID] = node }
      }
      return byNode.keys.sorted().map { byNode[$0]! }
    }
    for node in nodes { onDiscovered(node) }
  }

  private func fail(_ error: DNSSDError) {
    let previous = state.withLock { state -> (State.Phase, DNSSDClient?, (any DispatchSourceTimer)?)? in
      guard state.phase == .idle || state.phase == .starting || state.phase == .running else { return nil }
      defer {
        state.phase = .unavailable
        state.client = nil
        state.timer = nil
        state.found = [:]
        state.serviceTypes = [:]
      }
      return (state.phase, state.client, state.timer)
    }
    guard let (phase, client, timer) = previous else { return }
    timer?.cancel()
    client?.stop()
    onUnavailable(error, phase == .running)
  }
}
