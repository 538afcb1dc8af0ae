/// Which network interface serves a bind address, for publishing and browsing DNS-SD on that interface only.
///
/// Layer 2. `getifaddrs` walks the interface list; the list is freed before returning.
import Glibc

/// Interface lookups for DNS-SD interface indexes.
public enum NetworkInterfaces {
  /// The DNS-SD interface index for a server bound to `bindAddress`: 0 (every interface) for a wildcard address
  /// (`0.0.0.0`, `::`), the loopback interface for `127.0.0.0/8` and `::1`, otherwise the interface carrying that
  /// address. Nil when no interface carries it.
  public static func index(servingBindAddress bindAddress: String) -> UInt32? {
    if bindAddress == "0.0.0.0" || bindAddress == "::" { return 0 }
    let loopback = bindAddress.hasPrefix("127.") || bindAddress == "::1"
    var v4 = in_addr()
    var v6 = in6_addr()
    let isV4 = inet_pton(AF_INET, bindAddress, &v4) == 1
    let isV6 = !isV4 && inet_pton(AF_INET6, bindAddress, &v6) == 1
    guard isV4 || isV6 else { return nil }

    var list: UnsafeMutablePointer<ifaddrs>?
    guard getifaddrs(&list) == 0 else { return nil }
    defer { freeifaddrs(list) }
    var entry = list
    while let current = entry {
      defer { entry = current.pointee.ifa_next }
      let flags = current.pointee.ifa_flags
      if loopback {
        if flags & UInt32(IFF_LOOPBACK) != 0 { return if_nametoindex(current.pointee.ifa_name) }
        continue
      }
      guard let address = current.pointee.ifa_addr else { continue }
      if isV4 && Int32(address.pointee.sa_family) == AF_INET {
        let matches = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
          $0.pointee.sin_addr.s_addr == v4.s_addr
        }
        if matches { return if_nametoindex(current.pointee.ifa_name) }
      } else if isV6 && Int32(address.pointee.sa_family) == AF_INET6 {
        let matches = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { candidate in
          withUnsafeBytes(of: candidate.pointee.sin6_addr) { lhs in withUnsafeBytes(of: v6) { lhs.elementsEqual($0) } }
        }
        if matches { return if_nametoindex(current.pointee.ifa_name) }
      }
    }
    return nil
  }
}
