/// Which discovery a running node uses, and the fallback from DNS-SD to the beacon.
///
/// Module `Discovery` (node runtime, layer 4). `--discovery` picks a ``DiscoveryMode``:
/// - `auto` (the default) and `dnssd`: DNS-SD through avahi-daemon (``DNSSDDiscovery``). When the daemon is not
///   reachable, at start or later, one log line says so (a notice for `auto`, a warning for `dnssd`, which asked for
///   it) and the node falls back to the beacon for the rest of its run.
/// - `beacon`: the UDP multicast beacon only.
/// - `static`, `off`: neither (static seeds are dialled in every mode).
///
/// Both mechanisms report other nodes through `onDiscovered`, with the mechanism that found them; the caller hands
/// them to its link manager. The module knows nothing of the node that uses it.
import DNSSD
import Logging
import Synchronization

/// Discovery modes (`--discovery`).
public enum DiscoveryMode: String, Sendable, Equatable, CaseIterable {
  /// DNS-SD when the Avahi daemon is reachable, otherwise the beacon; plus static seeds.
  case auto
  /// DNS-SD (Bonjour) through the Avahi daemon plus static seeds; the beacon if the daemon is not reachable.
  case dnssd
  /// UDP multicast beacon plus static seeds.
  case beacon
  /// Static seeds only.
  case `static`
  /// No mesh discovery at all (static seeds are still dialled).
  case off
}

/// Which mechanism found a node.
package enum DiscoveryMechanism: Sendable, Equatable {
  case beacon, dnssd
}

/// What ``NodeDiscovery`` announces and how: the mode, where to announce, and what this node says about itself.
package struct DiscoverySettings: Sendable, Equatable {
  /// What `--discovery` asked for.
  package var mode: DiscoveryMode
  /// The node's bind address: DNS-SD runs on the interface serving it; a loopback one keeps the beacon on loopback.
  package var bindAddress: String
  /// The beacon's multicast group.
  package var beaconGroup: String
  /// The beacon's UDP port.
  package var beaconPort: UInt16
  /// This node's id.
  package var nodeID: String
  /// This node's name.
  package var name: String
  /// This node's HTTP/WebSocket port.
  package var httpPort: UInt16
  /// This node's mesh protocol version.
  package var protocolVersion: UInt8
  /// The hex SHA-256 fingerprint of this node's TLS certificate, published in the DNS-SD TXT record as `fp`; nil
  /// (no `fp` key) when mesh links are plaintext.
  package var tlsFingerprint: String?

  package init(
    mode: DiscoveryMode, bindAddress: String, beaconGroup: String, beaconPort: UInt16, nodeID: String, name: String,
    httpPort: UInt16, protocolVersion: UInt8, tlsFingerprint: String?
  ) {
    self.mode = mode
    self.bindAddress = bindAddress
    self.beaconGroup = beaconGroup
    self.beaconPort = beaconPort
    self.nodeID = nodeID
    self.name = name
    self.httpPort = httpPort
    self.protocolVersion = protocolVersion
    self.tlsFingerprint = tlsFingerprint
  }
}

/// The discovery mechanisms of one running node. Safe from any thread.
///
/// `onDiscovered` is called on the beacon's queue or the DNS-SD client's thread for every report (repeats
/// included). `onDNSSDChanged` is called with the running ``DNSSDDiscovery`` once it started (the caller publishes
/// its service types through it) and with nil when it fell back to the beacon.
package final class NodeDiscovery: Sendable {
  package let settings: DiscoverySettings
  private let onDiscovered: @Sendable (DiscoveredNode, DiscoveryMechanism) -> Void
  private let onDNSSDChanged: @Sendable (DNSSDDiscovery?) -> Void
  private let logger = Logger(component: "node")
  private let running = Mutex(Running())

  private struct Running {
    var beacon: Beacon?
    var dnssd: DNSSDDiscovery?
    var stopped = false
  }

  package init(
    settings: DiscoverySettings, onDiscovered: @escaping @Sendable (DiscoveredNode, DiscoveryMechanism) -> Void,
    onDNSSDChanged: @escaping @Sendable (DNSSDDiscovery?) -> Void
  ) {
    self.settings = settings
    self.onDiscovered = onDiscovered
    self.onDNSSDChanged = onDNSSDChanged
  }

  /// Starts what the mode asks for.
  package func start() {
    switch settings.mode {
    case .auto, .dnssd:
      startDNSSD()
    case .beacon:
      startBeacon()
    case .static, .off:
      break
    }
  }

  /// Stops every discovery mechanism. Idempotent.
  package func stop() {
    let (beacon, dnssd) = running.withLock { running -> (Beacon?, DNSSDDiscovery?) in
      defer {
        running.stopped = true
        running.beacon = nil
        running.dnssd = nil
      }
      return (running.beacon, running.dnssd)
    }
    dnssd?.stop()
    beacon?.stop()
  }

  // MARK: DNS-SD

  private func startDNSSD() {
    let settings = self.settings
    guard let interfaceIndex = NetworkInterfaces.index(servingBindAddress: settings.bindAddress) else {
      fallBack(
        "DNS-SD discovery unavailable: no network interface carries the bind address \(settings.bindAddress); "
          + "using the beacon instead.",
        error: nil)
      return
    }
    let announcement = DNSSDAnnouncement(
      nodeID: settings.nodeID, name: settings.name, port: settings.httpPort, protocolVersion: settings.protocolVersion,
      tlsFingerprint: settings.tlsFingerprint, interfaceIndex: interfaceIndex)
    let onDiscovered = self.onDiscovered
    let discovery = DNSSDDiscovery(
      announcement: announcement,
      onDiscovered: { discovered in onDiscovered(discovered, .dnssd) },
      onUnavailable: { [weak self] error, wasRunning in
        let what =
          wasRunning
          ? "Lost the Avahi daemon; DNS-SD discovery stopped, using the beacon instead."
          : "DNS-SD discovery unavailable: the Avahi daemon is not reachable over the system D-Bus (start dbus and "
            + "avahi-daemon; in Docker, mount the host's /var/run/dbus/system_bus_socket); using the beacon instead."
        self?.fallBack(what, error: error)
      })
    let proceed = running.withLock { running -> Bool in
      guard !running.stopped else { return false }
      running.dnssd = discovery
      return true
    }
    guard proceed else { return }
    discovery.start()
    onDNSSDChanged(discovery)
  }

  /// One log line, then the beacon. Called at most once per run (DNS-SD reports unavailability once).
  private func fallBack(_ message: String, error: DNSSDError?) {
    let metadata: KeyValuePairs<String, Any> = [
      "discovery": settings.mode.rawValue, "error": error?.description ?? "none",
    ]
    if settings.mode == .dnssd {
      logger.warning(message, metadata)
    } else {
      logger.notice(message, metadata)
    }
    onDNSSDChanged(nil)
    startBeacon()
  }

  // MARK: Beacon

  /// Starts the multicast beacon. A node bound to loopback announces on loopback (where its address is reachable); a
  /// host without a multicast route falls back to loopback, then to static discovery, with one log line saying so.
  private func startBeacon() {
    let settings = self.settings
    let onDiscovered = self.onDiscovered
    let announcement = BeaconAnnouncement(
      nodeID: settings.nodeID, name: settings.name, httpPort: settings.httpPort,
      protocolVersion: settings.protocolVersion)
    let loopbackOnly = settings.bindAddress.hasPrefix("127.") || settings.bindAddress == "::1"
    var interfaces: [String?] = loopbackOnly ? ["127.0.0.1"] : [nil, "127.0.0.1"]
    var lastError: BeaconError?
    while !interfaces.isEmpty {
      let interface = interfaces.removeFirst()
      let beaconConfiguration = BeaconConfiguration(
        group: settings.beaconGroup, port: settings.beaconPort, interfaceAddress: interface)
      do {
        let beacon = try Beacon(configuration: beaconConfiguration, announcement: announcement) { discovered in
          onDiscovered(discovered, .beacon)
        }
        let kept = running.withLock { running -> Bool in
          guard !running.stopped else { return false }
          running.beacon = beacon
          return true
        }
        guard kept else {
          beacon.stop()
          return
        }
        beacon.start()
        if interface != nil && !loopbackOnly {
          logger.notice(
            "No multicast route on the default interface; the beacon only reaches nodes on this host.",
            ["beacon.group": settings.beaconGroup, "beacon.port": settings.beaconPort])
        }
        logger.info(
          "Beacon discovery on.",
          [
            "beacon.group": settings.beaconGroup, "beacon.port": settings.beaconPort,
            "beacon.interface": interface ?? "default",
          ])
        return
      } catch {
        lastError = error
      }
    }
    logger.warning(
      "Beacon discovery unavailable; only static seeds (--peer, POST /api/v1/mesh/nodes) will be linked.",
      ["error": lastError?.description ?? "unknown"])
  }
}
