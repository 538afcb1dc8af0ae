/// Starting and stopping a node: data directory, store, server, service thread, signals.
///
/// Layer 4 (node runtime). The lws service loop runs on its own thread (never the main thread, which keeps
/// Dispatch's main queue and signal sources free). SIGINT/SIGTERM start a graceful shutdown: WebSockets get a
/// 1001 close frame, streams end, then the loop stops and the store closes.
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
  var beacon: Beacon?

  init(server: Server, node: Node, bridge: ServerBridge, configuration: NodeConfiguration) {
    self.server = server
    self.node = node
    self.bridge = bridge
    self.configuration = configuration
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

    let server: Server
    do {
      server = try Server(
        configuration: ServerConfiguration(
          bindAddress: configuration.bindAddress, port: configuration.port,
          maxWebSocketMessageBytes: max(configuration.maxBodyBytes, 16 << 20), subprotocols: [meshSubprotocol]))
    } catch {
      throw StartupError(message: error.description)
    }
    let node = Node(
      server: server, store: store, configuration: configuration, nodeID: nodeID, peers: peers, services: services,
      staticFiles: staticFiles)
    let bridge = ServerBridge(node: node, maxBodyBytes: configuration.maxBodyBytes)
    server.delegate = bridge
    let runtime = NodeRuntime(server: server, node: node, bridge: bridge, configuration: configuration)
    logger.notice(
      "Node started.",
      [
        "node.id": nodeID, "node.name": configuration.name, "http.bind": configuration.bindAddress,
        "http.port": server.port, "data.dir": dataURL.path, "peers": peers.count, "version": NodeConfiguration.version,
      ])
    let host =
      configuration.bindAddress == "0.0.0.0"
      ? "127.0.0.1"
      : configuration.bindAddress.contains(":")
        ? "[\(configuration.bindAddress == "::" ? "::1" : configuration.bindAddress)]" : configuration.bindAddress
    // Written straight to fd 1 (not through stdio's buffer): scripts and tests wait for this line on a pipe.
    let ready =
      "meshgate ready url=http://\(host):\(server.port)/ port=\(server.port) node.id=\(nodeID) data.dir=\(dataURL.path)\n"
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
    beacon = startBeacon()
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
    beacon?.stop()
    logger.notice("Node stopped.")
    return 0
  }

  /// Starts the multicast beacon when discovery is `beacon`. A node bound to loopback announces on loopback
  /// (where its address is reachable); a host without a multicast route falls back to loopback, then to static
  /// discovery, with one log line saying so.
  func startBeacon() -> Beacon? {
    guard configuration.discovery == .beacon else { return nil }
    let server = self.server
    let node = self.node
    let announcement = BeaconAnnouncement(
      nodeID: node.nodeID, name: configuration.name, httpPort: UInt16(server.port), protocolVersion: meshProtocolVersion
    )
    let loopbackOnly = configuration.bindAddress.hasPrefix("127.") || configuration.bindAddress == "::1"
    var interfaces: [String?] = loopbackOnly ? ["127.0.0.1"] : [nil, "127.0.0.1"]
    var lastError: BeaconError?
    while !interfaces.isEmpty {
      let interface = interfaces.removeFirst()
      let beaconConfiguration = BeaconConfiguration(
        group: configuration.beaconGroup, port: configuration.beaconPort, interfaceAddress: interface)
      do {
        let beacon = try Beacon(configuration: beaconConfiguration, announcement: announcement) { discovered in
          server.execute {
            node.assumeIsolated {
              $0.discovered(nodeID: discovered.nodeID, host: discovered.host, port: discovered.httpPort)
            }
          }
        }
        beacon.start()
        if interface != nil && !loopbackOnly {
          logger.notice(
            "No multicast route on the default interface; the beacon only reaches nodes on this host.",
            ["beacon.group": configuration.beaconGroup, "beacon.port": configuration.beaconPort])
        }
        logger.info(
          "Beacon discovery on.",
          [
            "beacon.group": configuration.beaconGroup, "beacon.port": configuration.beaconPort,
            "beacon.interface": interface ?? "default",
          ])
        return beacon
      } catch {
        lastError = error
      }
    }
    logger.warning(
      "Beacon discovery unavailable; only static seeds (--peer, POST /api/v1/mesh/nodes) will be linked.",
      ["error": lastError?.description ?? "unknown"])
    return nil
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
