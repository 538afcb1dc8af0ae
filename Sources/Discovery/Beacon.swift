/// LAN discovery beacon: nodes announce themselves over UDP multicast and hear each other, with no daemon.
///
/// Module `Discovery` (node runtime, layer 4). Every node sends one small datagram to the beacon group (default
/// `239.255.77.77:8089`) at start and then every `interval`, and listens on the same group and port. Several
/// nodes on one host can all listen because the socket sets `SO_REUSEADDR` and `SO_REUSEPORT`, and they hear
/// each other because `IP_MULTICAST_LOOP` is on. Announcements stay on the local link (`IP_MULTICAST_TTL` 1).
/// The beacon only reports what it hears; the caller dedupes, tracks liveness from the repeats and links up.
///
/// The datagram format and its codec are in BeaconDatagram.swift.
///
/// Threading: each beacon has a private serial dispatch queue that runs the socket's read source, the
/// announcement timer and every `onDiscovery` call. The socket is opened in `init` (so setup errors surface
/// there) and closed exactly once: by `stop()` when the beacon never started, otherwise on the queue after both
/// sources are cancelled, so no handler can use a closed (or reused) descriptor.
import Dispatch
import Glibc
import Logging
import Synchronization

/// Where and how often a ``Beacon`` announces and listens.
public struct BeaconConfiguration: Sendable, Equatable {
  /// IPv4 multicast group (224.0.0.0/4) the beacon sends to and joins.
  public var group = "239.255.77.77"
  /// UDP port of the group; every node of a mesh uses the same one.
  public var port: UInt16 = 8089
  /// Time between announcements (one is also sent at once on `start()`); at least 10 ms.
  public var interval: Duration = .seconds(1)
  /// IPv4 address of the interface to join and send on; nil means the kernel's default (the route to the group).
  public var interfaceAddress: String? = nil
  /// Multicast hop limit; 1 keeps announcements on the local link, 0 on this host.
  public var ttl: UInt8 = 1
}

/// Why a ``Beacon`` could not be set up. The node logs ``message`` and falls back to static discovery.
public struct BeaconError: Error, Equatable, CustomStringConvertible {
  /// The kind of failure.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    private enum Base: String {
      case invalidConfiguration, invalidAnnouncement, socketSetupFailed, multicastJoinFailed
    }
    private let base: Base

    /// A configuration value is out of range (group, interface address, port, interval).
    public static let invalidConfiguration = Code(base: .invalidConfiguration)
    /// The announcement cannot be encoded (empty or oversized id or name, control characters, port 0).
    public static let invalidAnnouncement = Code(base: .invalidAnnouncement)
    /// `socket`, `setsockopt` or `bind` failed.
    public static let socketSetupFailed = Code(base: .socketSetupFailed)
    /// The kernel refused to join the multicast group (often: no interface routes multicast).
    public static let multicastJoinFailed = Code(base: .multicastJoinFailed)

    public var description: String { base.rawValue }
  }

  /// The kind of failure.
  public var code: Code
  /// One line for the log, naming what failed, why, and the fallback.
  public var message: String
  /// The `errno` of the failing system call, if one failed.
  public var systemError: Int32?

  public var description: String { message }
}

/// Announces this node on the LAN and reports other nodes' announcements.
///
/// `start()` sends one announcement at once and then one every `interval`; `onDiscovery` is called on the
/// beacon's private queue for every valid announcement from another node (repeats included). `stop()` is
/// idempotent and safe from any thread, including from inside `onDiscovery`; once it returns (when called
/// outside `onDiscovery`) nothing more is sent and `onDiscovery` is not called again. A stopped beacon does not
/// restart: make a new one.
public final class Beacon: Sendable {
  /// Where and how often this beacon announces.
  public let configuration: BeaconConfiguration
  /// What this beacon announces.
  public let announcement: BeaconAnnouncement

  private enum State {
    case idle
    case running(read: any DispatchSourceRead, timer: any DispatchSourceTimer)
    case stopped
  }

  private enum StopOutcome {
    case neverStarted, wasRunning, alreadyStopped
  }

  private let core: Core
  private let queue: DispatchQueue
  private let queueKey = DispatchSpecificKey<Bool>()
  private let state = Mutex<State>(.idle)
  private static let logger = Logger(component: "beacon")

  /// Validates the configuration and announcement, opens the socket, binds the group port and joins the group.
  ///
  /// Nothing is sent or received until ``start()``.
  public init(
    configuration: BeaconConfiguration, announcement: BeaconAnnouncement,
    onDiscovery: @escaping @Sendable (DiscoveredNode) -> Void
  ) throws(BeaconError) {
    if let problem = BeaconDatagram.problem(with: announcement) {
      throw BeaconError(code: .invalidAnnouncement, message: "invalid beacon announcement: \(problem)")
    }
    let socket = try BeaconSocket.open(configuration)
    self.configuration = configuration
    self.announcement = announcement
    self.queue = DispatchQueue(label: "meshgate.beacon.\(configuration.port)")
    self.core = Core(
      fd: socket.fd, destination: socket.destination, datagram: BeaconDatagram.encode(announcement),
      nodeID: announcement.nodeID, onDiscovery: onDiscovery)
    queue.setSpecific(key: queueKey, value: true)
  }

  deinit {
    stop()
  }

  /// Sends the first announcement and starts listening and announcing every `interval`. Idempotent.
  public func start() {
    let interval = BeaconSocket.dispatchInterval(configuration.interval)
    let started = state.withLock { state -> Bool in
      guard case .idle = state else { return false }
      let core = self.core
      let read = DispatchSource.makeReadSource(fileDescriptor: core.fd, queue: queue)
      read.setEventHandler { core.receive() }
      read.setCancelHandler { core.sourceCancelled() }
      let timer = DispatchSource.makeTimerSource(queue: queue)
      timer.schedule(deadline: .now(), repeating: interval, leeway: .milliseconds(5))
      timer.setEventHandler { core.announce() }
      timer.setCancelHandler { core.sourceCancelled() }
      // Activated under the lock so that a racing stop() always finds active sources to cancel;
      // activate() only hands the sources to the queue and never blocks.
      read.activate()
      timer.activate()
      state = .running(read: read, timer: timer)
      return true
    }
    guard started else { return }
    Self.logger.info(
      "Beacon started.",
      [
        "beacon.group": configuration.group, "beacon.port": configuration.port,
        "beacon.interface": configuration.interfaceAddress ?? "default", "node.id": announcement.nodeID,
      ])
  }

  /// Stops announcing and listening and closes the socket. Idempotent; safe from any thread.
  ///
  /// Waits only for an `onDiscovery` call already in progress on another thread to return.
  public func stop() {
    core.stopped.store(true, ordering: .releasing)
    let previous = state.withLock { state -> StopOutcome in
      defer { state = .stopped }
      switch state {
      case .idle:
        return .neverStarted
      case .running(let read, let timer):
        // Cancelling only marks the sources; their cancel handlers close the socket later, on the queue.
        read.cancel()
        timer.cancel()
        return .wasRunning
      case .stopped:
        return .alreadyStopped
      }
    }
    switch previous {
    case .alreadyStopped:
      return
    case .neverStarted:
      core.closeSocket()
      return
    case .wasRunning:
      // Let a handler already running on the queue finish, unless that handler is the one calling stop().
      if DispatchQueue.getSpecific(key: queueKey) != true {
        queue.sync {}
      }
    }
    Self.logger.info("Beacon stopped.", ["beacon.port": configuration.port, "node.id": announcement.nodeID])
  }
}

extension Beacon {
  /// The socket and what its handlers need; shared with the dispatch sources' handlers, never with `Beacon`.
  fileprivate final class Core: Sendable {
    let fd: Int32
    let destination: sockaddr_in
    let datagram: [UInt8]
    let nodeID: String
    let onDiscovery: @Sendable (DiscoveredNode) -> Void
    let stopped = Atomic<Bool>(false)
    /// Dispatch sources still to be cancelled before the socket may close.
    private let liveSources = Atomic<Int>(2)
    private let closed = Atomic<Bool>(false)
    private let logger = Logger(component: "beacon")

    init(
      fd: Int32, destination: sockaddr_in, datagram: [UInt8], nodeID: String,
      onDiscovery: @escaping @Sendable (DiscoveredNode) -> Void
    ) {
      self.fd = fd
      self.destination = destination
      self.datagram = datagram
      self.nodeID = nodeID
      self.onDiscovery = onDiscovery
    }

    /// Called by each source's cancel handler; the last one closes the socket.
    func sourceCancelled() {
      if liveSources.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
        closeSocket()
      }
    }

    func closeSocket() {
      guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
      _ = Glibc.close(fd)
    }

    /// Sends one announcement to the group. Runs on the beacon queue.
    func announce() {
      guard !stopped.load(ordering: .acquiring) else { return }
      var destination = self.destination
      let sent = datagram.withUnsafeBytes { bytes in
        withUnsafePointer(to: &destination) { address in
          address.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            sendto(
              fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL), $0, socklen_t(MemoryLayout<sockaddr_in>.size))
          }
        }
      }
      if sent < 0 {
        let code = errno
        logger.debug(
          "Beacon announcement not sent.", ["beacon.error": String(cString: strerror(code)), "node.id": nodeID])
      }
    }

    /// Reads every queued datagram and reports valid foreign announcements. Runs on the beacon queue.
    func receive() {
      let capacity = 2048
      withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { buffer in
        // Bounded so a flood cannot starve the timer on the same queue; the read source fires again.
        for _ in 0..<64 {
          guard !stopped.load(ordering: .acquiring) else { return }
          var source = sockaddr_in()
          var sourceLength = socklen_t(MemoryLayout<sockaddr_in>.size)
          let length = withUnsafeMutablePointer(to: &source) { address in
            address.withMemoryRebound(to: sockaddr.self, capacity: 1) {
              // MSG_TRUNC makes recvfrom return the real length of a datagram larger than the buffer.
              recvfrom(fd, buffer.baseAddress, capacity, Int32(MSG_TRUNC), $0, &sourceLength)
            }
          }
          if length < 0 {
            let code = errno
            if code == EINTR { continue }
            if code != EAGAIN && code != EWOULDBLOCK {
              logger.debug("Beacon receive failed.", ["beacon.error": String(cString: strerror(code))])
            }
            return
          }
          handle(
            datagram: UnsafeBufferPointer(rebasing: buffer[..<min(length, capacity)]), length: length, from: source)
        }
      }
    }

    private func handle(datagram: UnsafeBufferPointer<UInt8>, length: Int, from source: sockaddr_in) {
      let host = BeaconSocket.text(of: source.sin_addr)
      guard length <= datagram.count else {
        logger.debug("Ignored an oversized beacon datagram.", ["beacon.source": host, "beacon.bytes": length])
        return
      }
      let announcement: BeaconAnnouncement
      do {
        announcement = try BeaconDatagram.decode(datagram)
      } catch {
        logger.debug(
          "Ignored a malformed beacon datagram.",
          ["beacon.source": host, "beacon.bytes": length, "beacon.reason": error.reason])
        return
      }
      guard announcement.nodeID != nodeID else { return }
      logger.trace("Heard a beacon announcement.", ["beacon.source": host, "peer.node.id": announcement.nodeID])
      onDiscovery(
        DiscoveredNode(
          nodeID: announcement.nodeID, name: announcement.name, host: host, httpPort: announcement.httpPort,
          protocolVersion: announcement.protocolVersion))
    }
  }
}

/// POSIX socket setup for the beacon. All `setsockopt` work lives here.
private enum BeaconSocket {
  static func open(_ configuration: BeaconConfiguration) throws(BeaconError) -> (fd: Int32, destination: sockaddr_in) {
    let group = configuration.group
    let port = configuration.port
    guard let groupAddress = address(group) else {
      throw invalid("beacon group \"\(group)\" is not an IPv4 address")
    }
    guard UInt32(bigEndian: groupAddress.s_addr) >> 28 == 0xE else {
      throw invalid("beacon group \(group) is not an IPv4 multicast address (224.0.0.0/4)")
    }
    var interface = in_addr(s_addr: INADDR_ANY)
    if let text = configuration.interfaceAddress {
      guard let parsed = address(text) else {
        throw invalid("beacon interface address \"\(text)\" is not an IPv4 address")
      }
      interface = parsed
    }
    guard port != 0 else { throw invalid("beacon port must be 1...65535") }
    guard configuration.interval >= .milliseconds(10) else {
      throw invalid("beacon interval must be at least 10 ms (is \(configuration.interval))")
    }

    let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue | SOCK_CLOEXEC.rawValue | SOCK_NONBLOCK.rawValue), 0)
    guard fd >= 0 else {
      throw failure(.socketSetupFailed, "cannot open a UDP socket for the discovery beacon", errno)
    }
    var destination = sockaddr_in()
    destination.sin_family = sa_family_t(AF_INET)
    destination.sin_port = port.bigEndian
    destination.sin_addr = groupAddress
    let on: Int32 = 1
    var joinTarget = "multicast group \(group) on port \(port)"
    if let text = configuration.interfaceAddress { joinTarget += " (interface \(text))" }
    do throws(BeaconError) {
      try option(fd, SOL_SOCKET, SO_REUSEADDR, on, "cannot set SO_REUSEADDR on the beacon socket")
      try option(fd, SOL_SOCKET, SO_REUSEPORT, on, "cannot set SO_REUSEPORT on the beacon socket")
      // Bound to the group address (not INADDR_ANY) so the socket gets only this group's datagrams on the port.
      var bound = destination
      let bindResult = withUnsafePointer(to: &bound) { address in
        address.withMemoryRebound(to: sockaddr.self, capacity: 1) {
          bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
      }
      guard bindResult == 0 else {
        throw failure(.socketSetupFailed, "cannot bind UDP port \(port) for \(joinTarget)", errno)
      }
      let membership = ip_mreq(imr_multiaddr: groupAddress, imr_interface: interface)
      try option(
        fd, Int32(IPPROTO_IP), IP_ADD_MEMBERSHIP, membership, "cannot join \(joinTarget)", code: .multicastJoinFailed,
        hint: configuration.interfaceAddress == nil ? "no interface routes \(group)" : nil)
      if configuration.interfaceAddress != nil {
        try option(
          fd, Int32(IPPROTO_IP), IP_MULTICAST_IF, interface, "cannot send to \(joinTarget)", code: .multicastJoinFailed)
      }
      try option(fd, Int32(IPPROTO_IP), IP_MULTICAST_LOOP, on, "cannot enable multicast loopback for \(joinTarget)")
      try option(
        fd, Int32(IPPROTO_IP), IP_MULTICAST_TTL, Int32(configuration.ttl),
        "cannot set the multicast TTL for \(joinTarget)")
    } catch {
      _ = close(fd)
      throw error
    }
    return (fd, destination)
  }

  /// The beacon's announcement interval for a dispatch timer.
  static func dispatchInterval(_ duration: Duration) -> DispatchTimeInterval {
    let (seconds, attoseconds) = duration.components
    let (nanos, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
    guard !overflow else { return .never }
    return .nanoseconds(Int(clamping: nanos.addingReportingOverflow(attoseconds / 1_000_000_000).partialValue))
  }

  /// Dotted-quad text for an address.
  static func text(of address: in_addr) -> String {
    var address = address
    var buffer = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
    guard inet_ntop(AF_INET, &address, &buffer, socklen_t(buffer.count)) != nil else { return "?" }
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }

  private static func address(_ text: String) -> in_addr? {
    var address = in_addr()
    return inet_pton(AF_INET, text, &address) == 1 ? address : nil
  }

  private static func option<Value: BitwiseCopyable>(
    _ fd: Int32, _ level: Int32, _ name: Int32, _ value: Value, _ what: String,
    code: BeaconError.Code = .socketSetupFailed, hint: String? = nil
  ) throws(BeaconError) {
    let result = withUnsafeBytes(of: value) { setsockopt(fd, level, name, $0.baseAddress, socklen_t($0.count)) }
    guard result == 0 else {
      let number = errno
      throw failure(code, what, number, hint: number == ENODEV ? hint : nil)
    }
  }

  private static func invalid(_ message: String) -> BeaconError {
    BeaconError(code: .invalidConfiguration, message: message)
  }

  private static func failure(_ code: BeaconError.Code, _ what: String, _ number: Int32, hint: String? = nil)
    -> BeaconError
  {
    let reason = String(cString: strerror(number)) + (hint.map { " (\($0))" } ?? "")
    return BeaconError(
      code: code, message: "\(what): \(reason); use --discovery static", systemError: number)
  }
}
