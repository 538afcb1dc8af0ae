/// Which `Host` and `Origin` values the node answers: the defence against DNS rebinding and cross-site requests.
///
/// Layer 6 (surface). A page on another site can make a browser send requests to the node in two ways. By *DNS
/// rebinding* it points its own name at the node's address, so the browser treats the node as that site and lets the
/// page read the answers: the request then carries the attacker's name in `Host`. By a *cross-site request* it sends
/// a "simple" request (a form post, a `fetch` without custom headers, a WebSocket) that needs no CORS preflight: the
/// request then carries the attacker's site in `Origin`.
///
/// So the node answers only requests whose `Host` names it:
/// - any IP address literal (`192.168.1.20`, `[::1]`): a rebinding attack needs a name it controls, and an address is
///   what a browser sends when the node is reached by address, also through Docker's port mapping, whose host
///   address is no address of the container;
/// - `localhost` and `*.localhost` (browsers resolve these to loopback themselves);
/// - the machine's host name and `<hostname>.local` (mDNS), and the node's `--name` when it is a valid host name;
/// - every name in `--allowed-hosts` (`MESHGATE_ALLOWED_HOSTS`, comma-separated; `*.example.com` or `.example.com`
///   also allows subdomains, `*` turns the check off, e.g. behind a reverse proxy that checks `Host` itself).
///
/// Requests without a `Host` (HTTP/1.0 tools) come from no browser and are answered. Mesh links (`/mesh`) dial by
/// any seed name, so their `Host` is not checked; a browser cannot pass as a node because it always sends `Origin`.
///
/// `Origin` (sent by browsers on WebSocket upgrades and on requests that change state) must name the node as well,
/// more strictly: the same host as the request's `Host` (the dashboard served by this node), a loopback name or
/// address, the bind address, one of the machine's interface addresses, or a name above. Any other IP address is
/// *not* enough for an origin: a page served from some address on the LAN is another site.
import Foundation
import LWS
import MeshCore

/// The names and addresses this node answers to.
struct HostPolicy: Sendable {
  /// Exact host names (lowercased, no trailing dot).
  let names: Set<String>
  /// Allowed name suffixes (`.example.com` from `*.example.com` or `.example.com`).
  let suffixes: [String]
  /// The node's own IP addresses (bind address and interface addresses), normalized by `inet_pton`/`inet_ntop`.
  let addresses: Set<String>
  /// `--allowed-hosts '*'`: no check at all.
  let allowsAll: Bool

  /// The policy of a node with `configuration` on a machine called `hostName` with `interfaceAddresses`.
  init(configuration: NodeConfiguration, hostName: String, interfaceAddresses: [String]) {
    var names: Set<String> = []
    var suffixes: [String] = []
    var allowsAll = false
    for name in [hostName, configuration.name] {
      let name = Self.normalizedName(name)
      guard Self.isHostName(name) else { continue }
      names.insert(name)
      guard !name.hasSuffix(".local") else { continue }
      names.insert(name + ".local")
      // `pi4.home.arpa`: its first label is the short name people type, and the one Avahi announces as `pi4.local`.
      if let dot = name.firstIndex(of: ".") {
        names.insert(String(name[..<dot]))
        names.insert(name[..<dot] + ".local")
      }
    }
    for entry in configuration.allowedHosts {
      let entry = Self.normalizedName(entry)
      if entry == "*" {
        allowsAll = true
      } else if entry.hasPrefix("*.") {
        suffixes.append(String(entry.dropFirst()))
      } else if entry.hasPrefix(".") {
        suffixes.append(entry)
        names.insert(String(entry.dropFirst()))
      } else if let address = Self.normalizedAddress(entry.trimmingCharacters(in: ["[", "]"])) {
        names.insert(address)
      } else {
        names.insert(entry)
      }
    }
    var addresses: Set<String> = []
    for address in interfaceAddresses + [configuration.bindAddress] {
      if let address = Self.normalizedAddress(address) { addresses.insert(address) }
    }
    self.names = names
    self.suffixes = suffixes
    self.addresses = addresses
    self.allowsAll = allowsAll
  }

  /// The policy of this machine: its host name and interface addresses.
  static func current(_ configuration: NodeConfiguration) -> HostPolicy {
    HostPolicy(
      configuration: configuration, hostName: ProcessInfo.processInfo.hostName,
      interfaceAddresses: interfaceAddresses())
  }

  // MARK: - Checks

  /// Whether a request with this `Host` header may be answered (nil: no header, not a browser).
  func allowsHost(_ header: String?) -> Bool {
    guard !allowsAll, let header else { return true }
    guard let host = Self.hostPart(of: header) else { return false }
    if Self.normalizedAddress(host) != nil { return true }
    return isOwnName(host)
  }

  /// Whether a browser page at `origin` may open a WebSocket or change state on a request addressed to `host`.
  func allowsOrigin(_ origin: String, requestHost: String?) -> Bool {
    if allowsAll { return true }
    guard let originHost = Self.originHost(origin) else { return false }
    if let requestHost, let addressed = Self.hostPart(of: requestHost), addressed == originHost { return true }
    if let address = Self.normalizedAddress(originHost) {
      return addresses.contains(address) || Self.isLoopback(address) || names.contains(address)
    }
    return isOwnName(originHost)
  }

  /// A name (not an address) the node answers to.
  func isOwnName(_ host: String) -> Bool {
    if host == "localhost" || host.hasSuffix(".localhost") { return true }
    if names.contains(host) { return true }
    return suffixes.contains { host.hasSuffix($0) && host.count > $0.count }
  }

  // MARK: - Parsing

  /// The host of a `Host` header (`name`, `name:port`, `[v6]:port`), lowercased without a trailing dot; nil when
  /// malformed.
  static func hostPart(of header: String) -> String? {
    let text = trimmed(header).lowercased()
    guard !text.isEmpty, text.utf8.count <= 255 else { return nil }
    if text.hasPrefix("[") {
      guard let close = text.firstIndex(of: "]") else { return nil }
      let rest = text[text.index(after: close)...]
      guard rest.isEmpty || (rest.hasPrefix(":") && rest.dropFirst().allSatisfy(\.isNumber)) else { return nil }
      let inner = String(text[text.index(after: text.startIndex)..<close])
      return normalizedAddress(inner) == nil ? nil : inner
    }
    var host = Substring(text)
    if let colon = text.lastIndex(of: ":") {
      guard text.firstIndex(of: ":") == colon, text[text.index(after: colon)...].allSatisfy(\.isNumber) else {
        return nil
      }
      host = text[..<colon]
    }
    let name = normalizedName(String(host))
    return name.isEmpty ? nil : name
  }

  /// The host of an `Origin` header (`scheme://host[:port]`); nil for `null` and anything malformed.
  static func originHost(_ origin: String) -> String? {
    let text = origin.trimmingCharacters(in: .whitespaces)
    guard let separator = text.range(of: "://") else { return nil }
    let authority = text[separator.upperBound...]
    guard !authority.isEmpty, !authority.contains("/"), !authority.contains("@") else { return nil }
    return hostPart(of: String(authority))
  }

  static func normalizedName(_ name: String) -> String {
    var name = trimmed(name).lowercased()
    if name.hasSuffix(".") { name.removeLast() }
    return name
  }

  /// `text` without surrounding whitespace. Every request's `Host` comes here and almost never has any: that case
  /// skips Foundation's `trimmingCharacters`, whose bridging cost ~4 % of the node's CPU per request.
  static func trimmed(_ text: String) -> String {
    guard text.first?.isWhitespace == true || text.last?.isWhitespace == true else { return text }
    return text.trimmingCharacters(in: .whitespaces)
  }

  /// Letters, digits, hyphens and dots, as in a DNS name.
  static func isHostName(_ name: String) -> Bool {
    !name.isEmpty && name.utf8.count <= 253
      && name.utf8.allSatisfy { $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".") || isAlphanumeric($0) }
  }

  static func isAlphanumeric(_ byte: UInt8) -> Bool {
    (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
  }

  /// The canonical text of an IPv4 or IPv6 address (zone ids dropped), or nil if `text` is no address.
  static func normalizedAddress(_ text: String) -> String? {
    let bare = text.split(separator: "%", maxSplits: 1).first.map(String.init) ?? text
    var v4 = in_addr()
    if inet_pton(AF_INET, bare, &v4) == 1 { return format(family: AF_INET, &v4) }
    var v6 = in6_addr()
    if inet_pton(AF_INET6, bare, &v6) == 1 { return format(family: AF_INET6, &v6) }
    return nil
  }

  static func format<Address>(family: Int32, _ address: inout Address) -> String? {
    var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
    let written = withUnsafeBytes(of: &address) { bytes in
      inet_ntop(family, bytes.baseAddress, &buffer, socklen_t(buffer.count)) != nil
    }
    guard written else { return nil }
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }

  /// The addresses another device on the LAN can reach a node bound to `bind` by: for a wildcard bind (`0.0.0.0`,
  /// `::`) the interfaces' IPv4 addresses, then their global IPv6 ones; for a single address that address; none for
  /// loopback or link-local (a phone cannot use them). Sorted, without duplicates.
  static func lanAddresses(bind: String, interfaces: [String]) -> [String] {
    let candidates = bind == "0.0.0.0" || bind == "::" || bind.isEmpty ? interfaces : [bind]
    var v4: Set<String> = []
    var v6: Set<String> = []
    for address in candidates {
      guard let normalized = normalizedAddress(address), !isLoopback(normalized) else { continue }
      if normalized.contains(":") {
        let lower = normalized.lowercased()
        guard !lower.hasPrefix("fe8"), !lower.hasPrefix("fe9"), !lower.hasPrefix("fea"), !lower.hasPrefix("feb"),
          lower != "::"
        else { continue }
        v6.insert(normalized)
      } else if !normalized.hasPrefix("169.254."), normalized != "0.0.0.0" {
        v4.insert(normalized)
      }
    }
    return v4.sorted() + v6.sorted()
  }

  static func isLoopback(_ address: String) -> Bool {
    address.hasPrefix("127.") || address == "::1"
  }

  /// The IPv4 and IPv6 addresses of the machine's interfaces.
  static func interfaceAddresses() -> [String] {
    var list: UnsafeMutablePointer<ifaddrs>?
    guard getifaddrs(&list) == 0, let first = list else { return [] }
    defer { freeifaddrs(list) }
    var addresses: [String] = []
    var cursor: UnsafeMutablePointer<ifaddrs>? = first
    while let entry = cursor {
      defer { cursor = entry.pointee.ifa_next }
      guard let socketAddress = entry.pointee.ifa_addr else { continue }
      switch Int32(socketAddress.pointee.sa_family) {
      case AF_INET:
        var address = socketAddress.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
        if let text = format(family: AF_INET, &address) { addresses.append(text) }
      case AF_INET6:
        var address = socketAddress.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
        if let text = format(family: AF_INET6, &address) { addresses.append(text) }
      default: break
      }
    }
    return addresses
  }
}
