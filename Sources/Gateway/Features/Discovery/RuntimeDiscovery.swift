/// Runs the `Discovery` module for a node: what `--discovery` asks for, with the node's id, name, port and TLS
/// fingerprint.
///
/// Every node found is handed to the ``Node`` actor on the lws service thread (`server.execute`), which feeds it to
/// the link manager as a `beacon` or `dnssd` discovery; the running DNS-SD discovery is attached to the node so it
/// can publish the service types local peers advertise (``DiscoveryFeature``).
import Discovery
import LWS
import MeshCore

/// The discovery mechanisms of one running node. Safe from any thread.
final class RuntimeDiscovery: Sendable {
  private let discovery: NodeDiscovery

  init(configuration: NodeConfiguration, server: Server, node: Node) {
    let security = node.security
    let settings = DiscoverySettings(
      mode: configuration.discovery, bindAddress: configuration.bindAddress, beaconGroup: configuration.beaconGroup,
      beaconPort: configuration.beaconPort, nodeID: node.nodeID, name: configuration.name,
      httpPort: UInt16(server.port), protocolVersion: meshProtocolVersion,
      // Published as the TXT `fp` only when mesh links run over TLS.
      tlsFingerprint: security.meshTLS && !security.fingerprint.isEmpty ? security.fingerprint : nil)
    discovery = NodeDiscovery(
      settings: settings,
      onDiscovered: { discovered, mechanism in
        let source: LinkManager.Source =
          switch mechanism {
          case .beacon: .beacon
          case .dnssd: .dnssd
          }
        server.execute {
          node.assumeIsolated {
            $0.discovered(nodeID: discovered.nodeID, host: discovered.host, port: discovered.httpPort, source: source)
          }
        }
      },
      onDNSSDChanged: { dnssd in
        server.execute { node.assumeIsolated { $0.features.discovery.attachDNSSD(dnssd, node: $0) } }
      })
  }

  /// Starts what `--discovery` asks for.
  func start() {
    discovery.start()
  }

  /// Stops every discovery mechanism. Idempotent.
  func stop() {
    discovery.stop()
  }
}
