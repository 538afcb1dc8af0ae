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
final class NodeRuntime {
  let server: Server
  let node: Node
  let bridge: ServerBridge
  let configuration: NodeConfiguration
  let logger = Logger(component: "node")
  let discovery: RuntimeDiscovery

  init(server: Server, node: Node, bridge: ServerBridge, configuration: NodeConfiguration) {
    self.server = server
    self.node = node
    self.bridge = bridge
    self.configuration = configuration
    self.discovery = RuntimeDiscovery(configuration: configuration, server: server, node: node)
  }

  static func start(_ configuration: NodeConfiguration) async throws -> NodeRuntime {
    let dataURL = URL(fileURLWithPath: configuration.dataDirectory).standardizedFileURL
    do {
      try FileManager.default.createDirectory(at: dataURL, withIntermediateDirectories: true)
      let probe = dataURL.appendingPathComponent(".write-test")
      try Data("ok".utf8).write(to: probe)
      try FileManager.default.removeItem(at: probe)
    } catch {
      throw StartupError(
        message:
          "cannot use data dir \(dataURL.path): \(Self.reason(error)); choose a writable directory with --data-dir")
    }
    let store: NodeStore
    do {
      store = try NodeStore(
        path: dataURL.appendingPathComponent("meshgate.sqlite").path, retention: configuration.eventRetention)
    } catch {
      throw StartupError(message: "cannot open the store in \(dataURL.path): \(error)")
    }
    let nodeID = try await store.nodeID()
    let peers = try await store.allPeers()
    let services = try await store.allServices()
    let chatState = try await store.chatState()
    let admin = try await store.adminToken()
    let pins = try await store.allPins()

    var staticFiles = StaticFiles()
    let logger = Logger(component: "node")
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
    let server: Server
    do {
      server = try Server(
        configuration: ServerConfiguration(
          bindAddress: configuration.bindAddress, port: configuration.port,
          maxWebSocketMessageBytes: max(configuration.maxBodyBytes, 16 << 20), subprotocols: [meshSubprotocol],
          tls: tls, webSocketPingSeconds: configuration.webSocketPingSeconds))
    } catch {
      throw StartupError(message: error.description)
    }
    let node = Node(
      server: server, store: store, configuration: configuration, nodeID: nodeID, peers: peers, services: services,
      chatState: chatState, staticFiles: staticFiles, security: security, adminTokenHash: admin.hash,
      limits: configuration.limits)
    let bridge = ServerBridge(node: node, maxBodyBytes: configuration.maxBodyBytes)
    server.delegate = bridge
    let runtime = NodeRuntime(server: server, node: node, bridge: bridge, configuration: configuration)
    logger.notice(
      "Node started.",
      [
        "node.id": nodeID, "node.name": configuration.name, "http.bind": configuration.bindAddress,
        "http.port": server.port, "data.dir": dataURL.path, "peers": peers.count, "version": NodeConfiguration.version,
        "tls.fingerprint": security.fingerprint, "mesh.tls": configuration.meshTLS ? "on" : "off",
        "mesh.secret": security.secret == nil ? "none" : "set", "https": security.servesHTTPS,
      ])
    let host =
      configuration.bindAddress == "0.0.0.0"
      ? "127.0.0.1"
      : configuration.bindAddress.contains(":")
        ? "[\(configuration.bindAddress == "::" ? "::1" : configuration.bindAddress)]" : configuration.bindAddress
    // The admin token exists in clear only now, on the first start; only its hash is kept (Admin.swift).
    if let token = admin.newToken {
      let line =
        "meshgate admin-token=\(token) (shown once; it guards node settings, POST /api/v1/mesh/nodes and pin removal)\n"
      FileHandle.standardOutput.write(Data(line.utf8))
      logger.notice("Admin token created; it was printed once on standard output.")
    }
    // Written straight to fd 1 (not through stdio's buffer): scripts and tests wait for this line on a pipe.
    let ready =
      "meshgate ready url=\(security.servesHTTPS ? "https" : "http")://\(host):\(server.port)/ port=\(server.port) node.id=\(nodeID) data.dir=\(dataURL.path)\n"
    FileHandle.standardOutput.write(Data(ready.utf8))
    return runtime
  }

  /// Runs the service loop on its own thread until a signal stops it; returns the exit status.
  func runUntilStopped() async -> Int32 {
    signal(SIGINT, SIG_IGN)
    signal(SIGTERM, SIG_IGN)
    signal(SIGPIPE, SIG_IGN)
    let server = self.server
    let logger = self.logger
    let sources = [SIGINT, SIGTERM].map { number in
      let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
      // `@Sendable` keeps the closure from inheriting main-actor isolation (it runs on a global queue).
      source.setEventHandler { @Sendable in
        logger.notice("Shutting down.", ["signal": number == SIGINT ? "SIGINT" : "SIGTERM"])
        server.shutdown(grace: .seconds(2))
      }
      source.resume()
      return source
    }
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
    sources.forEach { $0.cancel() }
    discovery.stop()
    logger.notice("Node stopped.")
    return 0
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
