import Foundation
import Logging

/// Tells systemd about the node's state, for a unit with `Type=notify` (sd_notify(3), without libsystemd).
///
/// systemd passes the path of a unix datagram socket in `NOTIFY_SOCKET` (a leading `@` names an abstract socket);
/// a state is one datagram of `KEY=value` lines. Without the variable (not started by systemd) nothing is sent.
enum SystemdNotify {
  /// Sends `state` (e.g. `READY=1`) to `NOTIFY_SOCKET` if it is set; returns whether a datagram was sent.
  @discardableResult
  static func send(_ state: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
    guard let path = environment["NOTIFY_SOCKET"], path.hasPrefix("/") || path.hasPrefix("@") else { return false }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    var pathBytes = Array(path.utf8)
    if pathBytes.first == UInt8(ascii: "@") { pathBytes[0] = 0 }
    let capacity = MemoryLayout.size(ofValue: address.sun_path)
    guard pathBytes.count < capacity else {
      Logger(component: "node").warning("NOTIFY_SOCKET is too long; systemd is not told the node is ready.")
      return false
    }
    withUnsafeMutableBytes(of: &address.sun_path) { buffer in
      for (index, byte) in pathBytes.enumerated() { buffer[index] = byte }
    }
    let length = socklen_t(MemoryLayout<sa_family_t>.size + pathBytes.count)
    let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    let bytes = Array(state.utf8)
    let sent = withUnsafePointer(to: &address) { pointer in
      pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
        bytes.withUnsafeBytes { buffer in
          sendto(fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL), socketAddress, length)
        }
      }
    }
    if sent != bytes.count {
      Logger(component: "node").warning(
        "Could not tell systemd the node's state.", ["state": state, "error": String(cString: strerror(errno))])
      return false
    }
    return true
  }
}
