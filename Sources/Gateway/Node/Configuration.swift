/// Node configuration from command-line flags and `MESHGATE_*` environment variables.
///
/// Layer 6 (surface). Flags win over the environment, the environment over defaults. Every problem is a
/// ``ConfigurationError`` whose text names the flag, what was wrong and how to fix it; the executable prints
/// it on one line and exits with status 2.
public import Discovery
import Foundation
public import Logging

/// Everything a node needs to start.
public struct NodeConfiguration: Sendable, Equatable {
  /// TCP port for HTTP, WebSocket and (later) mesh links; 0 picks a free port.
  public var port = 8080
  /// Address to bind.
  public var bindAddress = "0.0.0.0"
  /// Directory for the SQLite store and files.
  public var dataDirectory = "./.meshgate"
  /// Human-readable node name.
  public var name: String = ProcessInfo.processInfo.hostName
  /// Minimum log level.
  public var logLevel: LogLevel = .info
  /// Directory of the dashboard's static files; nil means "find it" (see ``resolvePublicDirectory()``).
  public var publicDirectory: String?
  /// Largest accepted request body in bytes.
  public var maxBodyBytes = 1 << 20
  /// Events kept per peer in the durable event log.
  public var eventRetention = 10_000
  /// Largest resource transfer accepted (sent or received), in bytes.
  public var maxTransferBytes = 8 << 30
  /// Free disk space a node keeps when it stores files: an incoming file, or an upload it spools, that would leave
  /// less (counting the bytes still to come of transfers it already accepted) is refused with 507.
  public var minFreeBytes = 64 << 20
  /// Bytes per second each outgoing transfer may send (0 = unlimited).
  public var transferRate = 0
  /// Whether an incoming file from another node waits for the recipient's Accept or Decline (`ask`) or is accepted
  /// at once (`auto`, the default). Changeable at run time with `PATCH /api/v1/node/settings`.
  public var fileConsent = FileConsent.auto
  /// How long an incoming file waits for the recipient's answer before it fails, in seconds.
  public var fileConsentTimeout = 300
  /// Seconds an accepted incoming file may go without a byte (its link up or not) before it fails and the disk space
  /// it reserved is released (`--transfer-idle-timeout`).
  public var transferIdleTimeoutSeconds = 300
  /// Seconds after which a peer whose token was never used since it was created is deleted (0 = never).
  public var peerUnusedExpirySeconds = 3600
  /// Seconds after which a peer whose token has not been used is deleted (0 = never; default 90 days).
  public var peerIdleExpirySeconds = 7_776_000
  /// Static mesh seeds (`--peer HOST:PORT`, repeatable), dialled at start and re-dialled after every loss.
  public var seeds: [MeshAddress] = []
  /// How nodes find each other.
  public var discovery: Discovery = .auto
  /// The beacon's multicast group.
  public var beaconGroup = "239.255.77.77"
  /// The beacon's UDP port.
  public var beaconPort: UInt16 = 8089
  /// Whether this node dials its mesh links over TLS (`wss`) with its node certificate (`--mesh-tls on|off`).
  public var meshTLS = true
  /// The shared mesh secret (`--mesh-secret`); nodes without the same one cannot link. Nil: none.
  public var meshSecret: String?
  /// A PEM certificate and key to serve the dashboard and API over HTTPS (`--tls-cert`, `--tls-key`).
  public var tlsCertificatePath: String?
  public var tlsKeyPath: String?
  /// Request and WebSocket limits (Limits.swift).
  public var limits = Limits()
  /// Extra names the node answers to in `Host` and accepts in `Origin` (`--allowed-hosts`, HostPolicy.swift).
  public var allowedHosts: [String] = []
  /// Connections served at once (`--max-connections`); nil derives it from the open-file limit
  /// (``NodeRuntime/connectionLimit(requested:fileLimit:)``).
  public var maxConnections: Int?
  /// Seconds a request body may go without a byte before the connection is closed (`--body-timeout`).
  public var bodyTimeoutSeconds = 10
  /// Bytes a request body must deliver in every 10 s window once it has started (`--min-body-rate`; 0 = no minimum):
  /// a slower body is answered 408 and its connection closed.
  public var minBodyRate = 4096
  /// Seconds a WebSocket may go without answering a PING before the node sends one; a client that has not answered
  /// 10 s later is disconnected. 0: never (libwebsockets' validity policy on the vhost).
  public var webSocketPingSeconds = 300

  /// Discovery modes (module `Discovery`).
  public typealias Discovery = DiscoveryMode

  public init() {}

  /// The version string reported by `--version` and `GET /api/v1/node`.
  public static let version = "0.1.0"

  /// The text of `meshgate --help`.
  public static let helpText = """
    meshgate \(version) — a LAN peer gateway: MultipeerConnectivity / Nearby Connections for browsers and curl.

    Usage: meshgate [options]

    Options (each also settable as an environment variable):
      --port N              TCP port for HTTP, WebSocket and mesh links; 0 picks a free one
                            (MESHGATE_PORT, default 8080)
      --bind ADDRESS        IP address to listen on (MESHGATE_BIND, default 0.0.0.0)
      --data-dir DIR        where the SQLite store and files live (MESHGATE_DATA_DIR, default ./.meshgate)
      --name NAME           this node's name, shown to other nodes (MESHGATE_NAME, default the host name)
      --log-level LEVEL     trace, debug, info, notice, warning or error (MESHGATE_LOG_LEVEL, default info)
      --public-dir DIR      the dashboard's static files (MESHGATE_PUBLIC_DIR, default ./Public,
                            then /usr/share/meshgate/Public, then next to the binary)
      --max-body-bytes N    largest request body accepted (MESHGATE_MAX_BODY_BYTES, default 1048576)
      --event-retention N   events kept per peer (MESHGATE_EVENT_RETENTION, default 10000)
      --max-transfer-bytes N  largest file sent or received (MESHGATE_MAX_TRANSFER_BYTES, default 8589934592)
      --min-free-bytes N    free disk space kept when storing files, counting accepted transfers; 507 beyond
                            (MESHGATE_MIN_FREE_BYTES, default 67108864)
      --transfer-rate N     bytes per second per outgoing transfer, 0 for unlimited (MESHGATE_TRANSFER_RATE, default 0)
      --file-consent MODE   auto (accept incoming files at once) or ask (each waits for the recipient's Accept or
                            Decline) (MESHGATE_FILE_CONSENT, default auto)
      --file-consent-timeout S  seconds an incoming file waits for the answer, 1–86400
                            (MESHGATE_FILE_CONSENT_TIMEOUT, default 300)
      --transfer-idle-timeout S  seconds an accepted incoming file may go without a byte (link up or
                            down) before it fails and its reserved disk space is released, 1–86400
                            (MESHGATE_TRANSFER_IDLE_TIMEOUT, default 300)
      --peer HOST:PORT      a node to link with; repeat for several (MESHGATE_PEERS, comma-separated)
      --discovery MODE      auto (DNS-SD if avahi-daemon is reachable, else the beacon), dnssd
                            (DNS-SD through avahi-daemon), beacon (UDP multicast), static (seeds
                            only) or off; seeds are always dialled (MESHGATE_DISCOVERY, default auto)
      --beacon-group ADDR   multicast group of the beacon (MESHGATE_BEACON_GROUP, default 239.255.77.77)
      --beacon-port N       UDP port of the beacon (MESHGATE_BEACON_PORT, default 8089)
      --mesh-tls on|off     dial mesh links over TLS with this node's certificate (MESHGATE_MESH_TLS,
                            default on); off dials plaintext, and encryption-required sessions
                            then cannot reach other nodes
      --mesh-secret SECRET  only link with nodes that know SECRET (8–1024 bytes; proven by
                            challenge-response, never sent) (MESHGATE_MESH_SECRET, default none)
      --tls-cert FILE       PEM certificate to serve the dashboard and API over HTTPS on the same
                            port; plain HTTP API requests are then refused (MESHGATE_TLS_CERT)
      --tls-key FILE        the PEM private key of --tls-cert (MESHGATE_TLS_KEY)
      --rate-limit N        requests per second per peer token, bursts of 2N; 0 = off
                            (MESHGATE_RATE_LIMIT, default 20000)
      --ws-rate-limit N     messages per second a browser WebSocket may send, bursts of 2N; 0 = off
                            (MESHGATE_WS_RATE_LIMIT, default 5000)
      --ws-max-message-bytes N  largest message a browser WebSocket may send
                            (MESHGATE_WS_MAX_MESSAGE_BYTES, default 2097152)
      --peer-create-rate N  peers one client address may create per second, bursts of 2N; 0 = off
                            (MESHGATE_PEER_CREATE_RATE, default 10); a /24 or /64 network may
                            create 4N per second
      --peer-unused-expiry S  delete a peer whose token was never used within S seconds of its
                            creation; 0 = never (MESHGATE_PEER_UNUSED_EXPIRY, default 3600)
      --peer-idle-expiry S  delete a peer whose token was not used for S seconds; 0 = never
                            (MESHGATE_PEER_IDLE_EXPIRY, default 7776000, 90 days)
      --max-peers N         most peers this node hosts, 1–50000; linked nodes accept at most 4096
                            from one node (MESHGATE_MAX_PEERS, default 4096)
      --allowed-hosts LIST  more names the node answers to in Host and Origin, comma-separated;
                            *.example.com allows subdomains, * turns the check off
                            (MESHGATE_ALLOWED_HOSTS; IP addresses, localhost and this host's
                            name are always allowed)
      --max-connections N   connections served at once; more are answered 503 or closed
                            (MESHGATE_MAX_CONNECTIONS, default the open-file limit less a reserve
                            of a quarter, at most 512, for the store, files and mesh links)
      --body-timeout SECONDS  close a connection whose request body sends nothing for this long
                            (MESHGATE_BODY_TIMEOUT, default 10)
      --min-body-rate N     bytes a request body must deliver in every 10 s; a slower one is answered
                            408 and closed; 0 = no minimum (MESHGATE_MIN_BODY_RATE, default 4096)
      --ws-ping-interval S  seconds before an idle WebSocket is sent a PING; one that has not answered
                            10 s later is closed; 0 = never (MESHGATE_WS_PING_INTERVAL, default 300)
      -h, --help            show this help
      --version             print the version

    When ready, meshgate prints one line on standard output:
      meshgate ready url=http://127.0.0.1:8080/ port=8080 node.id=<uuid> data.dir=<path>
    Logs go to standard error as key=value lines.
    """

  /// Every flag that takes a value, with its environment variable (`-h`/`--help` and `--version` take none).
  /// `--help`, docs/configuration.md and the man page list each one; `ConfigurationDocsTests` keeps them equal.
  public static let settings: [(flag: String, env: String)] = [
    ("--port", "MESHGATE_PORT"), ("--bind", "MESHGATE_BIND"), ("--data-dir", "MESHGATE_DATA_DIR"),
    ("--name", "MESHGATE_NAME"), ("--log-level", "MESHGATE_LOG_LEVEL"), ("--public-dir", "MESHGATE_PUBLIC_DIR"),
    ("--max-body-bytes", "MESHGATE_MAX_BODY_BYTES"), ("--event-retention", "MESHGATE_EVENT_RETENTION"),
    ("--peer", "MESHGATE_PEERS"), ("--discovery", "MESHGATE_DISCOVERY"), ("--beacon-group", "MESHGATE_BEACON_GROUP"),
    ("--beacon-port", "MESHGATE_BEACON_PORT"), ("--mesh-tls", "MESHGATE_MESH_TLS"),
    ("--mesh-secret", "MESHGATE_MESH_SECRET"), ("--tls-cert", "MESHGATE_TLS_CERT"), ("--tls-key", "MESHGATE_TLS_KEY"),
    ("--max-transfer-bytes", "MESHGATE_MAX_TRANSFER_BYTES"),
    ("--min-free-bytes", "MESHGATE_MIN_FREE_BYTES"), ("--transfer-rate", "MESHGATE_TRANSFER_RATE"),
    ("--file-consent", "MESHGATE_FILE_CONSENT"), ("--file-consent-timeout", "MESHGATE_FILE_CONSENT_TIMEOUT"),
    ("--transfer-idle-timeout", "MESHGATE_TRANSFER_IDLE_TIMEOUT"),
    ("--rate-limit", "MESHGATE_RATE_LIMIT"), ("--ws-rate-limit", "MESHGATE_WS_RATE_LIMIT"),
    ("--ws-max-message-bytes", "MESHGATE_WS_MAX_MESSAGE_BYTES"),
    ("--peer-create-rate", "MESHGATE_PEER_CREATE_RATE"), ("--max-peers", "MESHGATE_MAX_PEERS"),
    ("--peer-unused-expiry", "MESHGATE_PEER_UNUSED_EXPIRY"), ("--peer-idle-expiry", "MESHGATE_PEER_IDLE_EXPIRY"),
    ("--allowed-hosts", "MESHGATE_ALLOWED_HOSTS"),
    ("--max-connections", "MESHGATE_MAX_CONNECTIONS"), ("--body-timeout", "MESHGATE_BODY_TIMEOUT"),
    ("--min-body-rate", "MESHGATE_MIN_BODY_RATE"),
    ("--ws-ping-interval", "MESHGATE_WS_PING_INTERVAL"),
  ]

  /// What the command line asks for.
  public enum Command: Equatable, Sendable {
    case run(NodeConfiguration)
    case help
    case version
  }

  /// Parses flags (without the program name) over the environment.
  public static func parse(
    arguments: [String], environment: [String: String]
  ) throws(ConfigurationError) -> Command {
    var configuration = NodeConfiguration()
    let settings = Self.settings
    // The flags first: a setting given as a flag ignores its variable entirely (a list flag such as --peer replaces
    // the variable's list, and a bad variable does not stop a node whose flag says otherwise).
    var flags: [(flag: String, value: String)] = []
    var iterator = arguments.makeIterator()
    while let argument = iterator.next() {
      switch argument {
      case "-h", "--help": return .help
      case "--version": return .version
      default:
        var flag = argument
        var value: String?
        if let equals = argument.firstIndex(of: "="), argument.hasPrefix("--") {
          flag = String(argument[..<equals])
          value = String(argument[argument.index(after: equals)...])
        }
        guard settings.contains(where: { $0.flag == flag }) else {
          throw ConfigurationError("unknown option \(argument.debugDescription); run meshgate --help for the options")
        }
        guard let given = value ?? iterator.next() else {
          throw ConfigurationError("\(flag) needs a value; run meshgate --help for the options")
        }
        flags.append((flag, given))
      }
    }
    for setting in settings where !flags.contains(where: { $0.flag == setting.flag }) {
      if let value = environment[setting.env] {
        try configuration.apply(flag: setting.flag, value: value, source: setting.env)
      }
    }
    for (flag, value) in flags {
      try configuration.apply(flag: flag, value: value, source: flag)
    }
    if (configuration.tlsCertificatePath == nil) != (configuration.tlsKeyPath == nil) {
      throw ConfigurationError(
        "--tls-cert and --tls-key go together: give both (a PEM certificate and its key) or neither")
    }
    return .run(configuration)
  }

  mutating func apply(flag: String, value: String, source: String) throws(ConfigurationError) {
    func integer(_ range: ClosedRange<Int>, _ what: String) throws(ConfigurationError) -> Int {
      guard let number = Int(value), range.contains(number) else {
        throw ConfigurationError("\(source) must be \(what) (got \(value.debugDescription))")
      }
      return number
    }
    switch flag {
    case "--port": port = try integer(0...65535, "a port number from 0 to 65535")
    case "--bind":
      guard Self.isIPAddress(value) else {
        throw ConfigurationError(
          "\(source) must be an IPv4 or IPv6 address such as 0.0.0.0 or 127.0.0.1 (got \(value.debugDescription))")
      }
      bindAddress = value
    case "--data-dir":
      guard !value.isEmpty else { throw ConfigurationError("\(source) must not be empty") }
      dataDirectory = value
    case "--name":
      guard !value.isEmpty, value.utf8.count <= 63, !value.unicodeScalars.contains(where: { $0.value < 0x20 }) else {
        throw ConfigurationError("\(source) must be 1–63 UTF-8 bytes without control characters")
      }
      name = value
    case "--log-level":
      guard let level = LogLevel(name: value) else {
        throw ConfigurationError(
          "\(source) must be one of trace, debug, info, notice, warning, error (got \(value.debugDescription))")
      }
      logLevel = level
    case "--public-dir": publicDirectory = value
    case "--max-body-bytes": maxBodyBytes = try integer(1024...(1 << 30), "a byte count from 1024 to 1073741824")
    case "--event-retention": eventRetention = try integer(10...10_000_000, "a count from 10 to 10000000")
    case "--max-transfer-bytes": maxTransferBytes = try integer(0...(1 << 50), "a byte count from 0 to 2^50")
    case "--min-free-bytes": minFreeBytes = try integer(0...(1 << 60), "a byte count from 0 to 2^60")
    case "--transfer-rate": transferRate = try integer(0...(1 << 40), "bytes per second, 0 for unlimited")
    case "--file-consent":
      guard let mode = FileConsent(rawValue: value) else {
        throw ConfigurationError("\(source) must be auto or ask (got \(value.debugDescription))")
      }
      fileConsent = mode
    case "--file-consent-timeout": fileConsentTimeout = try integer(1...86_400, "seconds from 1 to 86400")
    case "--transfer-idle-timeout": transferIdleTimeoutSeconds = try integer(1...86_400, "seconds from 1 to 86400")
    case "--peer-unused-expiry":
      peerUnusedExpirySeconds = try integer(0...(1 << 31), "seconds from 0 (never) to 2147483648")
    case "--peer-idle-expiry":
      peerIdleExpirySeconds = try integer(0...(1 << 31), "seconds from 0 (never) to 2147483648")
    case "--peer":
      for part in value.split(separator: ",") where !part.isEmpty {
        guard let address = MeshAddress(String(part)) else {
          throw ConfigurationError(
            "\(source) must be HOST:PORT, e.g. 192.168.1.20:8080 or [fe80::1]:8080 (got \(String(part).debugDescription))"
          )
        }
        if !seeds.contains(address) { seeds.append(address) }
      }
    case "--discovery":
      guard let mode = Discovery(rawValue: value) else {
        throw ConfigurationError(
          "\(source) must be auto, dnssd, beacon, static or off (got \(value.debugDescription))")
      }
      discovery = mode
    case "--beacon-group":
      var group = in_addr()
      guard inet_pton(AF_INET, value, &group) == 1, (UInt32(bigEndian: group.s_addr) >> 28) == 0xE else {
        throw ConfigurationError(
          "\(source) must be an IPv4 multicast address (224.0.0.0–239.255.255.255) (got \(value.debugDescription))")
      }
      beaconGroup = value
    case "--beacon-port": beaconPort = UInt16(try integer(1...65535, "a UDP port from 1 to 65535"))
    case "--mesh-tls":
      switch value {
      case "on": meshTLS = true
      case "off": meshTLS = false
      default: throw ConfigurationError("\(source) must be on or off (got \(value.debugDescription))")
      }
    case "--mesh-secret":
      guard (8...1024).contains(value.utf8.count) else {
        throw ConfigurationError(
          "\(source) must be 8 to 1024 bytes (got \(value.utf8.count)); use a long random string, the same on every node"
        )
      }
      meshSecret = value
    case "--tls-cert", "--tls-key":
      guard !value.isEmpty else { throw ConfigurationError("\(source) must be the path of a PEM file") }
      if flag == "--tls-cert" { tlsCertificatePath = value } else { tlsKeyPath = value }
    case "--rate-limit": limits.requestsPerSecond = try integer(0...10_000_000, "a rate from 0 (off) to 10000000")
    case "--ws-rate-limit":
      limits.webSocketMessagesPerSecond = try integer(0...10_000_000, "a rate from 0 (off) to 10000000")
    case "--ws-max-message-bytes":
      limits.webSocketMaxMessageBytes = try integer(64...Limits.webSocketHardLimit, "a byte count from 64 to 16777216")
    case "--peer-create-rate":
      limits.peerCreationsPerSecond = try integer(0...1_000_000, "a rate from 0 (off) to 1000000")
    case "--max-peers": limits.maxPeers = try integer(1...Limits.maxPeersHardLimit, "a count from 1 to 50000")
    case "--allowed-hosts":
      for part in value.split(separator: ",") {
        let entry = part.trimmingCharacters(in: .whitespaces)
        guard !entry.isEmpty else { continue }
        let name =
          entry.hasPrefix("*.") ? String(entry.dropFirst(2)) : entry.hasPrefix(".") ? String(entry.dropFirst()) : entry
        guard
          entry == "*" || HostPolicy.isHostName(HostPolicy.normalizedName(name))
            || HostPolicy.normalizedAddress(entry.trimmingCharacters(in: ["[", "]"])) != nil
        else {
          throw ConfigurationError(
            "\(source) takes host names or IP addresses without ports, comma-separated (e.g. node-a,meshgate.lan,"
              + "*.example.com, or * for any), not \(entry.debugDescription)")
        }
        if !allowedHosts.contains(entry) { allowedHosts.append(entry) }
      }
    case "--max-connections": maxConnections = try integer(16...1_000_000, "a count from 16 to 1000000")
    case "--body-timeout": bodyTimeoutSeconds = try integer(1...3600, "seconds from 1 to 3600")
    case "--min-body-rate": minBodyRate = try integer(0...(1 << 30), "bytes per 10 s from 0 (off) to 1073741824")
    case "--ws-ping-interval":
      webSocketPingSeconds = try integer(0...65_525, "a number of seconds from 0 (never) to 65525")
    default: throw ConfigurationError("unknown option \(flag)")
    }
  }

  static func isIPAddress(_ value: String) -> Bool {
    var v4 = in_addr()
    var v6 = in6_addr()
    return inet_pton(AF_INET, value, &v4) == 1 || inet_pton(AF_INET6, value, &v6) == 1
  }

  /// The running binary's path: `/proc/self/exe`, not `argv[0]`, which is a bare `meshgate` when a shell found the
  /// binary on `PATH` (and then names nothing next to the binary).
  static var executablePath: String {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    guard length > 0 else { return CommandLine.arguments[0] }
    return String(decoding: buffer.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }

  /// The dashboard directory: the configured one, else `./Public`, `share/meshgate/Public` beside the executable's
  /// `bin` directory (where `make install` puts it under any `PREFIX`), `/usr/share/meshgate/Public`, or a `Public`
  /// folder beside or above the executable (for `swift run` and tests). Nil if none exists.
  public func resolvePublicDirectory() -> String? {
    if let publicDirectory { return publicDirectory }
    var directory = URL(fileURLWithPath: Self.executablePath).resolvingSymlinksInPath().deletingLastPathComponent()
    let installed = directory.deletingLastPathComponent().appendingPathComponent("share/meshgate/Public").path
    var candidates = ["./Public", installed, "/usr/share/meshgate/Public"]
    for _ in 0..<5 {
      candidates.append(directory.appendingPathComponent("Public").path)
      directory = directory.deletingLastPathComponent()
    }
    return candidates.first { path in
      var isDirectory: ObjCBool = false
      return FileManager.default.fileExists(atPath: path + "/index.html", isDirectory: &isDirectory)
        && !isDirectory.boolValue
    }
  }
}

/// A node address `HOST:PORT` (IPv6 hosts in brackets).
public struct MeshAddress: Sendable, Hashable, CustomStringConvertible {
  /// The host name or IP address (without brackets).
  public var host: String
  /// The TCP port.
  public var port: UInt16

  /// Parses `host:port` or `[v6]:port`; nil when malformed.
  public init?(_ text: String) {
    let trimmed = text.trimmingCharacters(in: .whitespaces)
    let hostPart: Substring
    let portPart: Substring
    if trimmed.hasPrefix("[") {
      guard let close = trimmed.firstIndex(of: "]"), trimmed[trimmed.index(after: close)...].hasPrefix(":") else {
        return nil
      }
      hostPart = trimmed[trimmed.index(after: trimmed.startIndex)..<close]
      portPart = trimmed[trimmed.index(close, offsetBy: 2)...]
    } else {
      guard let colon = trimmed.lastIndex(of: ":") else { return nil }
      hostPart = trimmed[..<colon]
      portPart = trimmed[trimmed.index(after: colon)...]
    }
    guard !hostPart.isEmpty, !hostPart.contains(" "), !hostPart.contains("/"), let port = UInt16(portPart), port > 0
    else { return nil }
    self.host = String(hostPart)
    self.port = port
  }

  public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// A configuration problem, phrased for the person starting the node.
public struct ConfigurationError: Error, Equatable, CustomStringConvertible {
  /// The one-line message.
  public let message: String

  public init(_ message: String) { self.message = message }

  public var description: String { message }
}

/// Whether incoming files wait for the recipient's consent (`--file-consent`).
public enum FileConsent: String, Sendable, CaseIterable {
  /// Accepted at once (MultipeerConnectivity-style), the default.
  case auto
  /// Each file from another node waits for the recipient's Accept or Decline; senders on the recipient's
  /// always-accept list are accepted at once.
  case ask
}
