/// Another node, as a ``Beacon`` heard it or ``DNSSDDiscovery`` resolved it.
public struct DiscoveredNode: Sendable, Equatable {
  /// The node's id.
  public var nodeID: String
  /// The node's display name.
  public var name: String
  /// Its IPv4 address as text, e.g. `192.168.1.20`: the beacon datagram's source, or the resolved DNS-SD address.
  public var host: String
  /// The node's HTTP/WebSocket port.
  public var httpPort: UInt16
  /// The node's mesh protocol version.
  public var protocolVersion: UInt8
}
