/// Looking up a node's name before dialling it, off the service thread.
///
/// Layer 4 (node runtime). libwebsockets resolves a client connection's host name with the blocking `getaddrinfo`
/// on the thread that calls it, which for a node is the service thread: every request, WebSocket and link waited for
/// each lookup, seconds at a time when the DNS server is slow or unreachable, and again at every redial. So a seed or
/// gossiped address given by name is looked up here on a worker thread, and the node dials the addresses it found,
/// the next one when a connection to one cannot be made.
import Glibc

enum NodeNames {
  /// Whether `host` is an IPv4 or IPv6 address literal (IPv6 with or without brackets): dialled without a lookup.
  static func isAddressLiteral(_ host: String) -> Bool {
    let bare = unbracketed(host)
    var v4 = in_addr()
    var v6 = in6_addr()
    return inet_pton(AF_INET, bare, &v4) == 1 || inet_pton(AF_INET6, bare, &v6) == 1
  }

  /// The addresses `host` resolves to for a TCP connection, as numeric strings: IPv4 first (a node listens on
  /// `0.0.0.0` by default, and `localhost` often names `::1` first), each once, otherwise in the resolver's order; or
  /// why it does not resolve. Blocks for as long as the system's resolver takes: call it off the service thread.
  static func resolve(_ host: String) -> Result<[String], NodeNameError> {
    var hints = addrinfo()
    hints.ai_family = AF_UNSPEC
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    var list: UnsafeMutablePointer<addrinfo>?
    let status = getaddrinfo(unbracketed(host), nil, &hints, &list)
    guard status == 0 else {
      return .failure(NodeNameError(host: host, reason: String(cString: gai_strerror(status))))
    }
    defer { freeaddrinfo(list) }
    var v4: [String] = []
    var v6: [String] = []
    var next = list
    while let entry = next {
      next = entry.pointee.ai_next
      var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
      guard
        getnameinfo(
          entry.pointee.ai_addr, entry.pointee.ai_addrlen, &buffer, socklen_t(buffer.count), nil, 0, NI_NUMERICHOST)
          == 0
      else { continue }
      let address = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
      if entry.pointee.ai_family == AF_INET {
        if !v4.contains(address) { v4.append(address) }
      } else if !v6.contains(address) {
        v6.append(address)
      }
    }
    let addresses = v4 + v6
    guard !addresses.isEmpty else { return .failure(NodeNameError(host: host, reason: "no usable address")) }
    return .success(addresses)
  }

  static func unbracketed(_ host: String) -> String {
    host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
  }
}

/// A node's name that did not resolve.
struct NodeNameError: Error, CustomStringConvertible {
  let host: String
  let reason: String

  var description: String { "the name \(host) does not resolve (\(reason)); check the address or the DNS server" }
}
