/// Which discovery a running node uses, and the fallback from DNS-SD to the beacon.
///
/// Layer 4 (node runtime). `--discovery` picks:
/// - `auto` (the default) and `dnssd`: DNS-SD through avahi-daemon (``DNSSDDiscovery``). When the daemon is not
///   reachable, at start or later, one log line says so (a notice for `auto`, a warning for `dnssd`, which asked for
///   it) and the node falls back to the beacon for the rest of its run.
/// - `beacon`: the UDP multicast beacon only.
/// - `static`, `off`: neither (static seeds are dialled in every mode).
///
/// Both mechanisms report other nodes to the ``Node`` actor on the lws service thread (`server.execute`), which
/// feeds them to the link manager as `beacon` or `dnssd` discoveries.
import DNSSD
import LWS
import Logging
import MeshCore
import Synchronization

/// The discovery mechanisms of one running node. Safe from any thread.
final class RuntimeDiscovery: Sendable {
  let configuration: NodeConfiguration
  let server: Server
  let node: Node
  private let logger = Logger(component: "node")
  private let running = Mutex(Running())

  private struct Running {
    var beacon: Beacon?
    var dnssd: DNSSDDiscovery?
    var stopped = false
  }

  init(configuration: NodeConfiguration, server: Server, node: Node) {
    self.configuration = configuration
    self.server = server
    self.node = node
  }

  /// The hex SHA-256 fingerprint of this node's TLS certificate, published in the DNS-SD TXT record as `fp`; nil
  /// (no `fp` key) when mesh links are plaintext (`--mesh-tls off`).
  var meshTLSFingerprint: String? {
    let security = node.security
    return security.meshTLS && !security.fingerprint.isEmpty ? security.fingerprint : nil
  }

  /// Starts what `--discovery` asks for.
  func start() {
    switch configuration.discovery {
    case .auto, .dnssd:
      startDNSSD()
    case .beacon:
      startBeacon()
    case .static, .off:
      break
    }
  }

  /// Stops every discovery mechanism. Idempotent.
  func stop() {
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
    let configuration = self.configuration
    guard let interfaceIndex = NetworkInterfaces.index(servingBindAddress: configuration.bindAddress) else {
      fallBack(
        "DNS-SD discovery unavailable: no network interface carries the bind address \(configuration.bindAddress); "
          + "using the beacon instead.",
        error: nil)
      return
    }
    let announcement = DNSSDAnnouncement(
      nodeID: node.nodeID, name: configuration.name, port: UInt16(server.port), protocolVersion: meshProtocolVersion,
      tlsFingerprint: meshTLSFingerprint, interfaceIndex: interfaceIndex)
    let server = self.server
    let node = self.node
    let discovery = DNSSDDiscovery(
      announcement: announcement,
      onDiscovered: { discovered in
        server.execute {
          node.assumeIsolated {
            $0.discovered(
              nodeID: discovered.nodeID, host: discovered.host, port: discovered.httpPort, source: .dnssd)
          }
        }
      },
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
    server.execute { node.assumeIsolated { $0.attachDNSSD(discovery) } }
  }

  /// One log line, then the beacon. Called at most once per run (DNS-SD reports unavailability once).
  private func fallBack(_ message: String, error: DNSSDError?) {
    let metadata: KeyValuePairs<String, Any> = [
      "discovery": configuration.discovery.rawValue, "error": error?.description ?? "none",
    ]
    if configuration.discovery == .dnssd {
      logger.warning(message, metadata)
    } else {
      logger.notice(message, metadata)
    }
    server.execute { [node] in node.assumeIsolated { $0.attachDNSSD(nil) } }
    startBeacon()
  }

  // MARK: Beacon

  /// Starts the multicast beacon. A node bound to loopback announces on loopback (where its address is reachable); a
  /// host without a multicast route falls back to loopback, then to static discovery, with one log line saying so.
  private func startBeacon() {
    let server = self.server
    let node = self.node
    let announcement = BeaconAnnouncement(
      nodeID: node.nodeID, name: configuration.name, httpPort: UInt16(server.port), protocolVersion: meshProtocolVersion
    )
    let loopbackOnly = configuration.bindAddress.hasPrefix("127.") || configuration.bindAddress == "::1"
    var interfaces: [String?] = loopbackOnly ? ["127.0.0.1"] : [nil, "127.0.0.1"]
    var lastError: BeaconError?
    while !interfaces.isEmpty {
      let interface = interfaces.removeFirst()
      let beaconConfiguration = BeaconConfiguration(
        group: configuration.beaconGroup, port: configuration.beaconPort, interfaceAddress: interface)
      do {
        let beacon = try Beacon(configuration: beaconConfiguration, announcement: announcement) { discovered in
          server.execute {
            node.assumeIsolated {
              $0.discovered(nodeID: discovered.nodeID, host: discovered.host, port: discovered.httpPort)
            }
          }
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
            ["beacon.group": configuration.beaconGroup, "beacon.port": configuration.beaconPort])
        }
        logger.info(
          "Beacon discovery on.",
          [
            "beacon.group": configuration.beaconGroup, "beacon.port": configuration.beaconPort,
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
