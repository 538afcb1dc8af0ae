import Discovery
import Logging
import Testing

@testable import Gateway

struct ConfigurationTests {
  func configuration(_ arguments: [String], _ environment: [String: String] = [:]) throws -> NodeConfiguration {
    guard case .run(let configuration) = try NodeConfiguration.parse(arguments: arguments, environment: environment)
    else {
      Issue.record("expected a run command")
      return NodeConfiguration()
    }
    return configuration
  }

  @Test func defaultsMatchTheDesign() throws {
    let configuration = try configuration([])
    #expect(configuration.port == 8080)
    #expect(configuration.bindAddress == "0.0.0.0")
    #expect(configuration.dataDirectory == "./.meshgate")
    #expect(configuration.logLevel == .info)
    #expect(configuration.maxBodyBytes == 1 << 20)
    #expect(configuration.eventRetention == 10_000)
    #expect(configuration.discovery == .auto)
  }

  @Test func discoveryModesParseAndBadOnesNameEveryMode() throws {
    for mode in NodeConfiguration.Discovery.allCases {
      #expect(try configuration(["--discovery", mode.rawValue]).discovery == mode)
    }
    #expect(try configuration([], ["MESHGATE_DISCOVERY": "dnssd"]).discovery == .dnssd)
    let error = #expect(throws: ConfigurationError.self) { try configuration(["--discovery", "bonjour"]) }
    #expect(error?.message == "--discovery must be auto, dnssd, beacon, static or off (got \"bonjour\")")
    #expect(NodeConfiguration.helpText.contains("default auto"))
  }

  @Test func webSocketPingIntervalHasAFlagAVariableAndBounds() throws {
    #expect(try configuration([]).webSocketPingSeconds == 300)
    #expect(try configuration(["--ws-ping-interval", "20"]).webSocketPingSeconds == 20)
    #expect(try configuration([], ["MESHGATE_WS_PING_INTERVAL": "0"]).webSocketPingSeconds == 0)
    let error = #expect(throws: ConfigurationError.self) { try configuration(["--ws-ping-interval", "70000"]) }
    #expect(error?.message.contains("from 0 (never) to 65525") == true)
    #expect(NodeConfiguration.helpText.contains("MESHGATE_WS_PING_INTERVAL, default 300"))
  }

  @Test func flagsOverrideEnvironment() throws {
    let configuration = try configuration(
      ["--port", "9000", "--name=alpha"],
      ["MESHGATE_PORT": "7000", "MESHGATE_BIND": "127.0.0.1", "MESHGATE_NAME": "env"])
    #expect(configuration.port == 9000)
    #expect(configuration.bindAddress == "127.0.0.1")
    #expect(configuration.name == "alpha")
  }

  /// "A flag wins over its variable" holds for list settings and for bad variables too: --peer and --allowed-hosts
  /// replace their variable's list (they were added to it, so MESHGATE_ALLOWED_HOSTS='*' kept the Host check off
  /// whatever the flag said), and a variable whose flag is given is not read at all (a bad one stopped the node).
  @Test func aFlagReplacesItsVariableWholly() throws {
    let configuration = try configuration(
      ["--peer", "10.0.0.9:8080", "--allowed-hosts", "meshgate.lan", "--port", "0", "--max-peers", "5"],
      [
        "MESHGATE_PEERS": "10.0.0.1:1,10.0.0.2:2", "MESHGATE_ALLOWED_HOSTS": "*", "MESHGATE_PORT": "abc",
        "MESHGATE_MAX_PEERS": "0",
      ])
    #expect(configuration.seeds.map(\.description) == ["10.0.0.9:8080"])
    #expect(configuration.allowedHosts == ["meshgate.lan"])
    #expect(configuration.port == 0)
    #expect(configuration.limits.maxPeers == 5)
    // A variable without its flag still counts, and a bad one still stops the node.
    #expect(try self.configuration([], ["MESHGATE_PEERS": "10.0.0.1:1"]).seeds.map(\.description) == ["10.0.0.1:1"])
    #expect(throws: ConfigurationError.self) {
      _ = try NodeConfiguration.parse(arguments: ["--port", "0"], environment: ["MESHGATE_MAX_PEERS": "0"])
    }
    // --help and --version answer whatever the environment holds.
    #expect(try NodeConfiguration.parse(arguments: ["--help"], environment: ["MESHGATE_PORT": "x"]) == .help)
  }

  @Test func environmentAloneConfigures() throws {
    let configuration = try configuration(
      [], ["MESHGATE_DATA_DIR": "/tmp/x", "MESHGATE_LOG_LEVEL": "debug", "MESHGATE_EVENT_RETENTION": "50"])
    #expect(configuration.dataDirectory == "/tmp/x")
    #expect(configuration.logLevel == .debug)
    #expect(configuration.eventRetention == 50)
  }

  @Test func helpAndVersion() throws {
    #expect(try NodeConfiguration.parse(arguments: ["--help"], environment: [:]) == .help)
    #expect(try NodeConfiguration.parse(arguments: ["-h"], environment: [:]) == .help)
    #expect(try NodeConfiguration.parse(arguments: ["--version"], environment: [:]) == .version)
  }

  @Test(arguments: [
    (["--port", "70000"], "--port must be a port number"),
    (["--port", "abc"], "--port must be a port number"),
    (["--bind", "localhost"], "--bind must be an IPv4 or IPv6 address"),
    (["--log-level", "loud"], "--log-level must be one of"),
    (["--frobnicate"], "unknown option"),
    (["--port"], "--port needs a value"),
    (["--name", ""], "--name must be 1–63 UTF-8 bytes"),
    (["--max-body-bytes", "10"], "--max-body-bytes must be a byte count"),
  ])
  func badFlagsAreExplained(arguments: [String], expected: String) {
    #expect {
      _ = try NodeConfiguration.parse(arguments: arguments, environment: [:])
    } throws: { error in
      (error as? ConfigurationError)?.message.contains(expected) == true
    }
  }

  @Test func badEnvironmentNamesTheVariable() {
    #expect {
      _ = try NodeConfiguration.parse(arguments: [], environment: ["MESHGATE_PORT": "x"])
    } throws: { error in
      (error as? ConfigurationError)?.message.hasPrefix("MESHGATE_PORT must be") == true
    }
  }
}

struct SecurityConfigurationTests {
  func configuration(_ arguments: [String], _ environment: [String: String] = [:]) throws -> NodeConfiguration {
    guard case .run(let configuration) = try NodeConfiguration.parse(arguments: arguments, environment: environment)
    else {
      Issue.record("expected a run command")
      return NodeConfiguration()
    }
    return configuration
  }

  @Test func defaultsAreTLSWithoutSecretOrHTTPS() throws {
    let configuration = try configuration([])
    #expect(configuration.meshTLS)
    #expect(configuration.meshSecret == nil)
    #expect(configuration.tlsCertificatePath == nil && configuration.tlsKeyPath == nil)
  }

  @Test func flagsAndEnvironmentSetThem() throws {
    let flags = try configuration([
      "--mesh-tls", "off", "--mesh-secret", "a-long-secret", "--tls-cert", "/c.pem", "--tls-key=/k.pem",
    ])
    #expect(!flags.meshTLS)
    #expect(flags.meshSecret == "a-long-secret")
    #expect(flags.tlsCertificatePath == "/c.pem" && flags.tlsKeyPath == "/k.pem")
    let environment = try configuration(
      [],
      [
        "MESHGATE_MESH_TLS": "off", "MESHGATE_MESH_SECRET": "from-the-env", "MESHGATE_TLS_CERT": "/e.pem",
        "MESHGATE_TLS_KEY": "/e.key",
      ])
    #expect(!environment.meshTLS)
    #expect(environment.meshSecret == "from-the-env")
    #expect(environment.tlsCertificatePath == "/e.pem" && environment.tlsKeyPath == "/e.key")
    #expect(try configuration(["--mesh-tls", "on"], ["MESHGATE_MESH_TLS": "off"]).meshTLS)
  }

  @Test(arguments: [
    (["--mesh-tls", "yes"], "--mesh-tls must be on or off"),
    (["--mesh-secret", "short"], "--mesh-secret must be 8 to 1024 bytes"),
    (["--tls-cert", "/c.pem"], "--tls-cert and --tls-key go together"),
    (["--tls-key", "/k.pem"], "--tls-cert and --tls-key go together"),
    (["--tls-cert", ""], "--tls-cert must be the path of a PEM file"),
  ])
  func badValuesAreExplained(_ arguments: [String], _ message: String) {
    let error = #expect(throws: ConfigurationError.self) {
      try NodeConfiguration.parse(arguments: arguments, environment: [:])
    }
    #expect(error?.message.hasPrefix(message) == true, "\(error?.message ?? "")")
  }

  @Test func anEnvironmentSecretIsCheckedToo() {
    let error = #expect(throws: ConfigurationError.self) {
      try NodeConfiguration.parse(arguments: [], environment: ["MESHGATE_MESH_SECRET": "x"])
    }
    #expect(error?.message.hasPrefix("MESHGATE_MESH_SECRET must be 8 to 1024 bytes") == true)
  }
}
