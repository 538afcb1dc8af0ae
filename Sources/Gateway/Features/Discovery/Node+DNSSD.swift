/// Keeps the DNS-SD `_<serviceType>._tcp` registrations in step with what local peers advertise.
///
/// Layer 4 (node runtime), on the node actor. Every directory change (advertising started or stopped, a peer
/// deleted, advertising restored at start) recomputes how many local peers advertise each service type and hands
/// that to ``DNSSDDiscovery`` (module `Discovery`), which registers, updates or withdraws only what changed.
import Discovery
import MeshCore

extension Node {
  /// Starts (or, with nil, stops) publishing local service types through `discovery`.
  func attachDNSSD(_ discovery: DNSSDDiscovery?) {
    dnssd = discovery
    publishLocalServiceTypes()
  }

  /// Hands the service types local peers advertise, with how many peers advertise each, to DNS-SD.
  func publishLocalServiceTypes() {
    guard let dnssd else { return }
    var peersByServiceType: [String: Int] = [:]
    for peerID in peers.keys {
      for type in mesh.directory.advertising(of: peerID).keys { peersByServiceType[type, default: 0] += 1 }
    }
    dnssd.setAdvertisedServiceTypes(peersByServiceType)
  }
}
