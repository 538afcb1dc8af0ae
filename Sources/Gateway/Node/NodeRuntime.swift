/// Starting and stopping a node: data directory, store, server, service thread, signals.
///
/// Layer 4 (node runtime). The lws service loop runs on its own thread (never the main thread, which keeps
/// Dispatch's main queue and signal sources free). SIGINT/SIGTERM start a graceful shutdown: WebSockets get a
/// 1001 close frame, streams end, then the loop stops and the store closes.
import DNSSD
import Dispatch
import Foundation
import LWS
import Logging
import MeshCore
import Synchronization

/// The `meshgate` command.
public enum MeshgateCommand {
  /// Runs the command line; returns the process exit status.
  public static func main(arguments: [String], environment: [String: String]) async -> Int32 {
    DNSSDClient.silenceCompatibilityWarning()
    let command: NodeConfiguration.Command
    do {
      command = try NodeConfiguration.parse(arguments: arguments, environment: environment)
    } catch {
      printError(error.message)
      return 2
    }
    switch command {
    case .help:
      print(NodeConfiguration.helpText)
      return 0
    case .version:
      print("meshgate \(NodeConfiguration.version)")
      return 0
    case .run(let configuration):
      LogConfiguration.level = configuration.logLevel
      do {
        let runtime = try await NodeRuntime.start(configuration)
        return await runtime.runUntilStopped()
      } catch let error as StartupError {
        printError(error.message)
        return 2
      } catch {
        printError("\(error)")
        return 2
      }
    }
  }

  static func printError(_ message: String) {
    StandardErrorSink().write("meshgate: error: \(message)")
  }
}

/// A start-up failure with the one line to show.
struct StartupError: Error {
  let message: String
}

/// A started node.
/// Write end of the pipe the SIGINT/SIGTERM handler writes to. Set once by `runUntilStopped` before the handler is
/// installed and only read afterwards (by the handler), so no two threads ever race on it.
nonisolated(unsafe) private var shutdownSignalPipe: Int32 = -1

/// The SIGINT/SIGTERM handler: only `write(2)`, which is async-signal-safe.
private func onShutdownSignal(_ number: Int32) {
  var byte = UInt8(truncatingIfNeeded: number)
  _ = write(shutdownSignalPipe, &byte, 1)
}

final class NodeRuntime {
  let server: Server
  let node: Node
  let bridge: ServerBridge
  let configuration: NodeConfiguration
  let logger = Logger(component: "node")
  let discovery: RuntimeDiscovery
  /// This process's hold on the data directory (nil on a file system without locks), kept for the node's life.
  let dataDirectoryLock: DataDirectoryLock?
  /// The `meshgate ready …` line, written when the node handles signals (set by `start`).
  var readyLine = ""

  init(
    server: Server, node: Node, bridge: ServerBridge, configuration: NodeConfiguration,
    dataDirectoryLock: DataDirectoryLock?
  ) {
    self.server = server
    self.node = node
    self.bridge = bridge
    self.configuration = configuration
    self.dataDirectoryLock = dataDirectoryLock
    self.discovery = RuntimeDiscovery(configuration: configuration, server: server, node: node)
  }

  /// Starts a node served by libwebsockets: checks the port, loads the node's parts (``NodeParts``), binds the
  /// server and builds the node on it. The service loop runs later, in ``runUntilStopped()``.
  static func start(_ configuration: NodeConfiguration) async throws -> NodeRuntime {
    // Nothing is created (data dir, store, certificate) before the port is known to be free and the TLS files given
    // are known to be usable.
    if let problem = PortProbe.problem(address: configuration.bindAddress, port: configuration.port) {
      throw StartupError(message: problem)
    }
    _ = try NodeIdentity.userCertificate(configuration)
    let fileLimit = FileLimit.raiseToHardLimit()
    let logger = Logger(component: "node")
    let parts = try await NodeParts.load(configuration, logger: logger)
    let connections = Self.connectionLimit(requested: configuration.maxConnections, fileLimit: fileLimit.soft)
    if let requested = configuration.maxConnections, requested > connections.served {
      logger.warning(
        "--max-connections is more than the open-file limit allows; lowered.",
        [
          "connections.requested": requested, "connections.max": connections.served, "files.limit": fileLimit.soft,
        ])
    }
    let server: Server
    do {
      server = try Server(
        configuration: ServerConfiguration(
          bindAddress: configuration.bindAddress, port: configuration.port,
          maxWebSocketMessageBytes: max(configuration.maxBodyBytes, 16 << 20), subprotocols: [meshSubprotocol],
          tls: parts.tls, maxConnections: connections.served, overflowConnections: connections.overflow,
          alwaysServedPaths: ["/healthz"], bodyIdleTimeoutSeconds: configuration.bodyTimeoutSeconds,
          webSocketPingSeconds: configuration.webSocketPingSeconds, minBodyBytesPerWindow: configuration.minBodyRate))
    } catch {
      throw StartupError(message: error.description)
    }
    let node = parts.makeNode(server: server)
    let bridge = ServerBridge(node: node)
    server.delegate = bridge
    let runtime = NodeRuntime(
      server: server, node: node, bridge: bridge, configuration: configuration,
      dataDirectoryLock: parts.dataDirectoryLock)
    let (nodeID, peers, security, dataURL) = (parts.nodeID, parts.peers, parts.security, parts.dataURL)
    logger.notice(
      "Node started.",
      [
        "node.id": nodeID, "node.name": configuration.name, "http.bind": configuration.bindAddress,
        "http.port": server.port, "data.dir": dataURL.path, "peers": peers.count, "version": NodeConfiguration.version,
        "tls.fingerprint": security.fingerprint, "mesh.tls": configuration.meshTLS ? "on" : "off",
        "mesh.secret": security.secret == nil ? "none" : "set", "https": security.servesHTTPS,
        "connections.max": connections.served, "files.limit": fileLimit.soft,
      ])
    let host =
      configuration.bindAddress == "0.0.0.0"
      ? "127.0.0.1"
      : configuration.bindAddress.contains(":")
        ? "[\(configuration.bindAddress == "::" ? "::1" : configuration.bindAddress)]" : configuration.bindAddress
    // The admin token exists in clear only now, on the first start; only its hash is kept (Admin.swift). It is
    // stored here, after the last step that can fail, so a start that exits 2 leaves none behind and the next start
    // that succeeds creates and prints one.
    if let token = parts.newAdminToken {
      try await parts.saveNewAdminToken()
      let line =
        "meshgate admin-token=\(token) (shown once; it guards node settings, POST /api/v1/mesh/nodes and pin removal)\n"
      FileHandle.standardOutput.write(Data(line.utf8))
      logger.notice("Admin token created; it was printed once on standard output.")
    }
    // Printed by `runUntilStopped` once SIGINT and SIGTERM are handled: a script that signals the node as soon as
    // it reads this line must get a graceful stop, not a lost or fatal signal.
    runtime.readyLine =
      "meshgate ready url=\(security.servesHTTPS ? "https" : "http")://\(host):\(server.port)/ port=\(server.port) node.id=\(nodeID) data.dir=\(dataURL.path)\n"
    return runtime
  }

  /// Runs the service loop on its own thread until a signal stops it; returns the exit status.
  func runUntilStopped() async -> Int32 {
    signal(SIGPIPE, SIG_IGN)
    let server = self.server
    let logger = self.logger
    // SIGINT/SIGTERM: a handler writes the signal number into a pipe; a read source on the pipe starts the shutdown.
    // Installing the handler is synchronous and a byte waits in the pipe until the source reads it, so a signal sent
    // the moment the ready line appears is never lost (an ignored signal, or a dispatch signal source that is not
    // registered yet, would lose it).
    var pipeEnds: [Int32] = [-1, -1]
    guard pipe(&pipeEnds) == 0 else {
      logger.error("Cannot create the signal pipe.", ["error": String(cString: strerror(errno))])
      return 1
    }
    for end in pipeEnds { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
    shutdownSignalPipe = pipeEnds[1]
    signal(SIGINT, onShutdownSignal)
    signal(SIGTERM, onShutdownSignal)
    let readEnd = pipeEnds[0]
    let signals = DispatchSource.makeReadSource(fileDescriptor: readEnd, queue: .global())
    // `@Sendable` keeps the closure from inheriting main-actor isolation (it runs on a global queue).
    signals.setEventHandler { @Sendable in
      var number: UInt8 = 0
      guard read(readEnd, &number, 1) == 1 else { return }
      logger.notice("Shutting down.", ["signal": Int32(number) == SIGINT ? "SIGINT" : "SIGTERM"])
      SystemdNotify.send("STOPPING=1")
      server.shutdown(grace: .seconds(2))
    }
    signals.resume()
    // Written straight to fd 1 (not through stdio's buffer): scripts and tests wait for this line on a pipe.
    FileHandle.standardOutput.write(Data(readyLine.utf8))
    // Under systemd with Type=notify: the listener is up and signals are handled, as for the ready line.
    SystemdNotify.send("READY=1\nSTATUS=Serving on port \(server.port)\nMAINPID=\(getpid())")
    let node = self.node
    discovery.start()
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
      let thread = Thread {
        server.execute { node.assumeIsolated { $0.start() } }
        server.run()
        continuation.resume()
      }
      thread.name = "lws-service"
      thread.start()
    }
    signals.cancel()
    discovery.stop()
    // Events still staged are in the event ring, which the next start would read back; SQLite gets them now.
    do {
      try await node.store.eventLog.flushStagedEvents()
    } catch {
      logger.warning(
        "Staged events were not written to the store; the next start writes them from the event ring.",
        ["error": String(describing: error)])
    }
    logger.notice("Node stopped.")
    return 0
  }

  /// Connections served at once and the overflow answered 503, within `fileLimit` open files: a reserve of a quarter
  /// of the limit (at most 512, at least 16) stays free for the store, transfer files, mesh links and the runtime.
  static func connectionLimit(requested: Int?, fileLimit: Int) -> (served: Int, overflow: Int) {
    let reserve = min(512, max(16, fileLimit / 4))
    let ceiling = max(16, fileLimit - reserve)
    let overflow = min(64, max(4, ceiling / 16))
    let served = max(8, min(requested ?? Int.max, ceiling - overflow))
    return (served, overflow)
  }

  static func reason(_ error: any Error) -> String {
    let nsError = error as NSError
    if let underlying = nsError.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
      return String(cString: strerror(Int32(underlying.code)))
    }
    if nsError.domain == NSPOSIXErrorDomain { return String(cString: strerror(Int32(nsError.code))) }
    return nsError.localizedDescription
  }
}

/// Everything a node is built from except the server it runs on: the prepared data directory, the opened store and
/// what it holds (node id, peers, services, chat rooms, admin token, pins), the dashboard and the TLS identity.
///
/// ``NodeRuntime/start(_:)`` builds a node from these on the lws ``Server``; in-process tests build one on an
/// in-memory ``ServerPort`` with the same wiring, without binding a port.
struct NodeParts {
  let configuration: NodeConfiguration
  let dataURL: URL
  /// This process's hold on the data directory (nil on a file system without locks): whoever runs the node keeps it
  /// for the node's life.
  let dataDirectoryLock: DataDirectoryLock?
  let store: NodeStore
  let nodeID: String
  let peers: [StoredPeer]
  let services: [NodeStore.StoredService]
  let chatState: NodeStore.ChatState
  let adminTokenHash: String
  /// The admin token in clear, on the first start only (to be shown once); not stored until
  /// ``saveNewAdminToken()``.
  let newAdminToken: String?
  /// The certificate and key the server presents, when mesh links or HTTPS use TLS.
  let tls: TLSConfiguration?
  let security: NodeSecurity
  let staticFiles: StaticFiles
  /// The event ring's file in the data directory, and its size.
  static let eventRingFileName = "events.ring"
  static let eventRingBytes = 4 << 20

  /// Prepares and locks the data directory, opens the store, loads what it holds, reads the dashboard and sets up the
  /// TLS identity. Throws a ``StartupError`` naming what failed.
  static func load(_ configuration: NodeConfiguration, logger: Logger) async throws -> NodeParts {
    let dataURL = URL(fileURLWithPath: configuration.dataDirectory).standardizedFileURL
    if let problem = DataDirectory.prepare(dataURL.path) {
      throw StartupError(message: problem)
    }
    // One process per data directory: a second node on it would share the first one's identity and database.
    let dataDirectoryLock = try DataDirectory.lock(dataURL.path)
    if dataDirectoryLock == nil {
      logger.warning(
        "The data directory's file system has no file locks; nothing keeps a second node off it.",
        ["data.dir": dataURL.path])
    }
    let store: NodeStore
    do {
      store = try NodeStore(
        path: dataURL.appendingPathComponent("meshgate.sqlite").path, retention: configuration.eventRetention)
    } catch {
      throw StartupError(message: "cannot open the store in \(dataURL.path): \(error)")
    }
    let eventRing: EventRing
    do {
      let ringPath = dataURL.appendingPathComponent(eventRingFileName).path
      eventRing = try EventRing(path: ringPath, capacity: eventRingBytes)
      let opened = try await store.eventLog.open(
        ring: eventRing, mostRecords: EventRing.mostRecords(capacity: eventRingBytes))
      if eventRing.dropped.count > 0 {
        logger.warning(
          "The event ring held records past a damaged one; they were not written to the event log. Peers' logs lack "
            + "those events (their clients may have seen them); new event ids continue above every id the ring may "
            + "have held. If this happens again, check the disk (dmesg, smartctl).",
          [
            "file": ringPath, "records.dropped": eventRing.dropped.count,
            "records.newest": eventRing.dropped.newest,
          ])
      }
      if let jumpedAbove = opened.jumpedAbove, eventRing.dropped.count == 0 {
        logger.warning(
          "The event ring was missing or empty although the event log holds events: events delivered just before the "
            + "node stopped that the store had not written are lost from the peers' logs; new event ids continue "
            + "above every id that may have been handed out.",
          ["file": ringPath, "ids.above": jumpedAbove])
      }
      if opened.unreadable > 0 {
        logger.warning(
          "Records in the event ring that hold no event this version can read were skipped.",
          ["records": opened.unreadable])
      }
      if opened.recovered > 0 {
        logger.notice(
          "Events the node had delivered before it stopped were written to the store from the event ring.",
          ["events": opened.recovered, "ring.records": opened.records])
      }
    } catch {
      throw StartupError(message: "cannot open the event log in \(dataURL.path): \(error)")
    }
    let nodeID = try await store.nodeID()
    let peers = try await store.allPeers()
    let services = try await store.allServices()
    let chatState = try await store.chatState()
    let admin = try await store.adminToken()
    let pins = try await store.allPins()

    var staticFiles = StaticFiles()
    if let directory = configuration.resolvePublicDirectory() {
      do {
        staticFiles = try StaticFiles(directory: directory)
      } catch {
        throw StartupError(message: "cannot read the dashboard in \(directory): \(error)")
      }
      logger.debug("Dashboard loaded.", ["public.dir": directory, "files": staticFiles.files.count])
    } else {
      logger.warning("No dashboard found; serving the API only. Set --public-dir to the Public folder.")
    }
    let (tls, security) = try NodeIdentity.setUp(
      configuration, dataDirectory: dataURL, nodeID: nodeID, pins: pins, logger: logger)
    return NodeParts(
      configuration: configuration, dataURL: dataURL, dataDirectoryLock: dataDirectoryLock, store: store,
      nodeID: nodeID, peers: peers, services: services,
      chatState: chatState, adminTokenHash: admin.hash, newAdminToken: admin.newToken, tls: tls, security: security,
      staticFiles: staticFiles)
  }

  /// Stores the new admin token's hash, on the first start only. Call it once nothing else can make the start fail,
  /// just before the token is shown: until then the data directory holds no token, so a failed start loses none.
  func saveNewAdminToken() async throws {
    guard newAdminToken != nil else { return }
    do {
      try await store.saveAdminToken(hash: adminTokenHash)
    } catch {
      throw StartupError(message: "cannot store the admin token in \(dataURL.path): \(error)")
    }
  }

  /// The node, served by (and running on) `server`.
  func makeNode(server: any ServerPort) -> Node {
    Node(
      server: server, store: store, configuration: configuration, nodeID: nodeID, peers: peers, services: services,
      chatState: chatState, staticFiles: staticFiles, security: security, adminTokenHash: adminTokenHash,
      limits: configuration.limits)
  }
}

/// The process's open-file limit (`RLIMIT_NOFILE`).
enum FileLimit {
  /// Raises the soft limit to the hard limit (at most 1,048,576: lws sizes a table by it) and returns both.
  /// Debian shells and systemd units start with a soft limit of 1,024, which a node with a thousand browsers exceeds.
  static func raiseToHardLimit() -> (soft: Int, hard: Int) {
    var limit = rlimit()
    guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return (1024, 1024) }
    let target = min(limit.rlim_max, 1 << 20)
    if limit.rlim_cur < target {
      var raised = limit
      raised.rlim_cur = target
      if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
    }
    return (Int(clamping: limit.rlim_cur), Int(clamping: limit.rlim_max))
  }
}

/// Whether the node's port can be bound, checked before anything is created.
enum PortProbe {
  /// Nil when `address:port` can be bound (port 0 always can); otherwise the one line to print.
  static func problem(address: String, port: Int) -> String? {
    guard port != 0 else { return nil }
    let isV6 = address.contains(":")
    let descriptor = socket(isV6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard descriptor >= 0 else { return nil }
    defer { close(descriptor) }
    // As lws does: SO_REUSEADDR, so a port held only by old connections in TIME_WAIT counts as free.
    var one: Int32 = 1
    _ = setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
    /// Binds to `socketAddress` (a `sockaddr_in` or `sockaddr_in6` whose address `fill` parsed); nil if it did not.
    func bind<Address>(_ socketAddress: Address, fill: (inout Address) -> Bool) -> Int32? {
      var socketAddress = socketAddress
      guard fill(&socketAddress) else { return nil }
      return withUnsafePointer(to: &socketAddress) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
          Glibc.bind(descriptor, $0, socklen_t(MemoryLayout<Address>.size))
        }
      }
    }
    let bound =
      isV6
      ? bind(sockaddr_in6()) {
        $0.sin6_family = sa_family_t(AF_INET6)
        $0.sin6_port = in_port_t(UInt16(port).bigEndian)
        return inet_pton(AF_INET6, address, &$0.sin6_addr) == 1
      }
      : bind(sockaddr_in()) {
        $0.sin_family = sa_family_t(AF_INET)
        $0.sin_port = in_port_t(UInt16(port).bigEndian)
        return inet_pton(AF_INET, address, &$0.sin_addr) == 1
      }
    guard let result = bound else { return nil }
    if result == 0 { return nil }
    let code = errno
    let endpoint = isV6 ? "[\(address)]:\(port)" : "\(address):\(port)"
    let text = String(cString: strerror(code))
    switch code {
    case EADDRINUSE:
      return
        "cannot listen on \(endpoint): the port is in use (\(text)); choose another --port or stop the process using it"
    case EACCES:
      return "cannot listen on \(endpoint): \(text); ports below 1024 need privileges, choose another --port"
    case EADDRNOTAVAIL:
      return "cannot listen on \(endpoint): \(text); --bind must be an address of this machine"
    default:
      return "cannot listen on \(endpoint): \(text); choose another --port or --bind"
    }
  }
}

/// Creating and checking the data directory with plain system calls, so a failure names the path, the errno text
/// and a fix.
enum DataDirectory {
  /// Creates `path` (and its parents) and proves it writable. Nil when it is usable; otherwise the one line to print.
  static func prepare(_ path: String) -> String? {
    var prefix = path.hasPrefix("/") ? "" : "."
    for component in path.split(separator: "/") {
      prefix += "/" + component
      if mkdir(prefix, 0o700) == 0 { continue }
      let code = errno
      var status = stat()
      if code == EEXIST, stat(prefix, &status) == 0, status.st_mode & S_IFMT == S_IFDIR { continue }
      let text = code == EEXIST ? String(cString: strerror(ENOTDIR)) : String(cString: strerror(code))
      // Creating a directory needs write access to the one it goes in, not to itself (it does not exist yet).
      let parent = URL(fileURLWithPath: prefix).deletingLastPathComponent().path
      return "cannot use data dir \(path): creating \(prefix) failed: \(text); \(fix(code, parent))"
    }
    let probe = path + "/.write-test"
    let descriptor = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard descriptor >= 0 else {
      let code = errno
      return "cannot use data dir \(path): creating a file in it failed: \(String(cString: strerror(code))); "
        + fix(code, path)
    }
    close(descriptor)
    unlink(probe)
    return nil
  }

  /// The file a running node keeps locked in its data directory, with its process id in it.
  static let lockFileName = "meshgate.lock"

  /// Takes `path` for this process: an exclusive `flock` on its ``lockFileName``, which then holds this process's id.
  /// Throws the one line to print when another process holds it. Nil (no lock, nothing thrown) on a file system
  /// without file locks.
  static func lock(_ path: String) throws(StartupError) -> DataDirectoryLock? {
    let lockPath = path + "/" + lockFileName
    let descriptor = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    guard descriptor >= 0 else {
      let code = errno
      throw StartupError(
        message: "cannot use data dir \(path): opening \(lockPath) failed: \(String(cString: strerror(code))); "
          + fix(code, path))
    }
    while flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
      let code = errno
      if code == EINTR { continue }
      defer { close(descriptor) }
      guard code == EWOULDBLOCK else { return nil }
      // The holder writes its id right after it takes the lock: a start racing it may find the file still empty.
      var bytes = [UInt8](repeating: 0, count: 32)
      let count = pread(descriptor, &bytes, bytes.count, 0)
      let holder = Int32(String(decoding: bytes.prefix(max(0, count)), as: UTF8.self).trimmingWhitespace())
      throw StartupError(
        message: "cannot use data dir \(path): another meshgate\(holder.map { " (pid \($0))" } ?? "") is using it; "
          + "stop it or choose another --data-dir")
    }
    let text = Array("\(getpid())\n".utf8)
    if ftruncate(descriptor, 0) == 0 { _ = pwrite(descriptor, text, text.count, 0) }
    return DataDirectoryLock(descriptor: descriptor)
  }

  private static func fix(_ code: Int32, _ path: String) -> String {
    switch code {
    case EACCES, EPERM: "give this user write access to \(path) (chown/chmod) or choose another --data-dir"
    case EROFS: "the file system is read-only; choose a --data-dir on a writable one"
    case ENOSPC, EDQUOT: "the disk is full; free space or choose another --data-dir"
    default: "choose a writable directory with --data-dir"
    }
  }
}

/// A process's hold on its data directory (``DataDirectory/lock(_:)``): the open, `flock`ed lock file. The kernel
/// drops the lock when the descriptor closes, which also happens when the process dies (a `kill -9` leaves nothing
/// stale behind).
final class DataDirectoryLock {
  let descriptor: Int32

  init(descriptor: Int32) {
    self.descriptor = descriptor
  }

  deinit {
    close(descriptor)
  }
}
