/// The discovery feature: local peers' advertising and browsing, announced on the mesh and, with DNS-SD, on the LAN.
/// Owned by the node actor.
import Discovery
import MeshCore

final class DiscoveryFeature: NodeFeature {
  /// DNS-SD registrations of the service types local peers advertise (nil without DNS-SD); see Node+DNSSD.swift.
  var dnssd: DNSSDDiscovery?
}

@available(*, unavailable) extension DiscoveryFeature: Sendable {}

extension Node {
  var dnssd: DNSSDDiscovery? {
    get { features.discovery.dnssd }
    set { features.discovery.dnssd = newValue }
  }
}
