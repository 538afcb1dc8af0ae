/// What happens when the process runs out of file descriptors while lws accepts connections.
///
/// lws 4.1.6 reacts to `accept()` failing with `EMFILE`/`ENFILE` by logging the errno and returning to its poll loop;
/// the listening socket is still readable, so it spins at 100 % CPU, logging a line per attempt, and no client is
/// answered. The connection cap (``ServerConfiguration/maxConnections``) keeps a node below its descriptor limit; this
/// is the fallback for when something else used the descriptors up. It is libuv's "EMFILE trick": the log hook
/// (``LWSLogBridge``) sees lws's `accept: errno 24` line and calls ``acceptFailed()``, which gives up one reserved
/// descriptor, accepts and closes every pending connection on each registered listening socket (each client sees its
/// connection closed, and may retry), and takes the reserve back. The listener is then quiet until the next client,
/// so the loop cannot spin, and the node stays up.
///
/// Thread safety: the registry and the reserve descriptor are guarded by a Mutex; `accept`/`close` on a listening
/// socket from another server's service thread is safe at the kernel level (lws then simply finds nothing to accept).
import Glibc
import Synchronization

enum AcceptGuard {
  private struct State: ~Copyable {
    var sockets: [Int32] = []
    var reserve: Int32 = -1
  }
  private static let state = Mutex(State())
  private static let failureCount = Atomic<Int>(0)

  /// Failed accepts for want of descriptors since the process started.
  static var failures: Int { failureCount.load(ordering: .relaxed) }

  /// Finds the socket listening on `port`, registers it and returns it (-1 if not found).
  static func register(port: Int) -> Int32 {
    let socket = listeningSocket(port: port)
    state.withLock { state in
      if socket >= 0 { state.sockets.append(socket) }
      if state.reserve < 0 { state.reserve = open("/dev/null", O_RDONLY | O_CLOEXEC) }
    }
    return socket
  }

  /// Forgets a listening socket (before its context closes it).
  static func unregister(_ socket: Int32) {
    guard socket >= 0 else { return }
    state.withLock { $0.sockets.removeAll { $0 == socket } }
  }

  /// lws could not accept for want of descriptors: close what is pending with the help of the reserve descriptor.
  static func acceptFailed() {
    failureCount.add(1, ordering: .relaxed)
    state.withLock { state in
      if state.reserve >= 0 {
        close(state.reserve)
        state.reserve = -1
      }
      for socket in state.sockets {
        // At most a backlog's worth; poll first so a blocking socket can never block this thread.
        for _ in 0..<4096 {
          var ready = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
          guard poll(&ready, 1, 0) > 0 else { break }
          let connection = accept(socket, nil, nil)
          if connection < 0 { break }
          close(connection)
        }
      }
      state.reserve = open("/dev/null", O_RDONLY | O_CLOEXEC)
    }
  }

  /// The descriptor of the socket this process listens on at TCP `port`, found through `/proc/self/fd`.
  private static func listeningSocket(port: Int) -> Int32 {
    guard let directory = opendir("/proc/self/fd") else { return -1 }
    defer { closedir(directory) }
    var found: Int32 = -1
    while let entry = readdir(directory) {
      let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
        String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
      }
      guard let descriptor = Int32(name) else { continue }
      var listening: Int32 = 0
      var length = socklen_t(MemoryLayout<Int32>.size)
      guard getsockopt(descriptor, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) == 0, listening == 1 else {
        continue
      }
      var address = sockaddr_storage()
      var addressLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
      let named = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &addressLength) }
      }
      guard named == 0 else { continue }
      let boundPort: UInt16 =
        switch Int32(address.ss_family) {
        case AF_INET: withUnsafeBytes(of: address) { UInt16(bigEndian: $0.load(fromByteOffset: 2, as: UInt16.self)) }
        case AF_INET6: withUnsafeBytes(of: address) { UInt16(bigEndian: $0.load(fromByteOffset: 2, as: UInt16.self)) }
        default: 0
        }
      if Int(boundPort) == port {
        found = descriptor
        break
      }
    }
    return found
  }
}
