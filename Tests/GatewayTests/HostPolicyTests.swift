import MeshCore
import Testing

@testable import Gateway

/// `Host` and `Origin` rules (DNS rebinding and cross-site protection) and the flags behind them and the peer limits.
struct HostPolicyTests {
  static func policy(allowed: [String] = [], bind: String = "0.0.0.0", name: String = "lab") -> HostPolicy {
    var configuration = NodeConfiguration()
    configuration.allowedHosts = allowed
    configuration.bindAddress = bind
    configuration.name = name
    return HostPolicy(
      configuration: configuration, hostName: "Pi4.home.arpa", interfaceAddresses: ["127.0.0.1", "192.168.1.20", "::1"])
  }

  @Test func hostAcceptsAddressesLoopbackNamesAndTheMachinesNames() {
    let policy = Self.policy(allowed: ["node-a", "*.example.org", ".corp.lan"])
    for host in [
      "127.0.0.1", "127.0.0.1:8080", "10.0.0.9:1", "[::1]:8080", "[fe80::1]", "localhost", "LOCALHOST:80",
      "tab.localhost", "pi4.home.arpa", "pi4.home.arpa.", "pi4", "pi4.local:8080", "pi4.home.arpa.local", "lab",
      "lab.local", "node-a:8080", "a.example.org", "corp.lan", "x.corp.lan",
    ] {
      #expect(policy.allowsHost(host), "\(host)")
    }
    for host in [
      "evil.example", "example.org", "node-a.evil", "localhost.evil", "pi4.evil", "", " ", "a b", "::1",
      "[::1", "[nothost]:80", "host:port", "host:80:80", "127.0.0.1.nip.io",
    ] {
      #expect(!policy.allowsHost(host), "\(host)")
    }
    #expect(policy.allowsHost(nil))
    #expect(Self.policy(allowed: ["*"]).allowsHost("anything.example"))
  }

  @Test func originMustBeTheAddressedHostOrTheNodesOwn() {
    let policy = Self.policy(allowed: ["node-a"])
    #expect(policy.allowsOrigin("http://192.168.1.20:8080", requestHost: "192.168.1.20:8080"))
    // Docker: the host's address is no address of the container, but it is the one the page was loaded from.
    #expect(policy.allowsOrigin("http://203.0.113.7:8081", requestHost: "203.0.113.7:8081"))
    #expect(policy.allowsOrigin("http://localhost:3000", requestHost: "127.0.0.1:8080"))
    #expect(policy.allowsOrigin("http://[::1]:3000", requestHost: nil))
    #expect(policy.allowsOrigin("https://node-a", requestHost: "127.0.0.1"))
    #expect(policy.allowsOrigin("http://pi4.local:8080", requestHost: "127.0.0.1"))
    #expect(policy.allowsOrigin("http://192.168.1.20", requestHost: "localhost"))
    for origin in [
      "http://evil.example", "null", "", "http://203.0.113.7", "http://127.0.0.1.evil.example",
      "http://user@127.0.0.1", "http://127.0.0.1/path", "127.0.0.1",
    ] {
      #expect(!policy.allowsOrigin(origin, requestHost: "127.0.0.1:8080"), "\(origin)")
    }
    #expect(Self.policy(allowed: ["*"]).allowsOrigin("http://evil.example", requestHost: "x"))
    #expect(Self.policy(allowed: ["[fe80::2]", "10.1.1.1"]).allowsOrigin("http://[fe80::2]:80", requestHost: "x"))
    #expect(Self.policy(allowed: ["[fe80::2]", "10.1.1.1"]).allowsOrigin("http://10.1.1.1", requestHost: "x"))
  }

  @Test func flagsParseAndRejectBadValues() throws {
    guard
      case .run(let configuration) = try NodeConfiguration.parse(
        arguments: ["--allowed-hosts", "node-a, *.lan,192.168.1.9,[::1]", "--max-peers", "20", "--peer-create-rate=0"],
        environment: ["MESHGATE_ALLOWED_HOSTS": "env-name", "MESHGATE_MAX_PEERS": "5"])
    else {
      Issue.record("expected a run command")
      return
    }
    // The flag replaces its variable's list ("a flag wins over its variable").
    #expect(configuration.allowedHosts == ["node-a", "*.lan", "192.168.1.9", "[::1]"])
    #expect(configuration.limits.maxPeers == 20)
    #expect(configuration.limits.peerCreationsPerSecond == 0)
    for bad in [
      ["--allowed-hosts", "node-a:8080"], ["--allowed-hosts", "http://x"], ["--max-peers", "0"],
      ["--max-peers", "50001"], ["--peer-create-rate", "-1"],
    ] {
      #expect(throws: ConfigurationError.self, "\(bad)") {
        try NodeConfiguration.parse(arguments: bad, environment: [:])
      }
    }
    let defaults = Limits()
    #expect(defaults.peerCreationsPerSecond == 10 && defaults.maxPeers == 4096)
    #expect(
      NodeConfiguration.helpText.contains("--allowed-hosts") && NodeConfiguration.helpText.contains("--max-peers"))
  }

  @Test func openAPIDocumentsTheNewRefusals() throws {
    let document = Router.standard.openAPIDocument(version: "test")
    func responses(_ path: String, _ method: String) -> [String] {
      document.objectValue?["paths"]?.objectValue?[path]?.objectValue?[method]?.objectValue?["responses"]?.objectValue?
        .keys ?? []
    }
    let createPeer = responses("/api/v1/peers", "post")
    for status in ["201", "400", "403", "409", "415", "421", "429"] {
      #expect(createPeer.contains(status), "POST /api/v1/peers lacks \(status): \(createPeer)")
    }
    #expect(responses("/api/v1/ws", "get").contains("403"))
    #expect(responses("/api/v1/node", "get").contains("421"))
    #expect(!responses("/api/v1/node", "get").contains("403"))
    let settings =
      document.objectValue?["paths"]?.objectValue?["/api/v1/node/settings"]?.objectValue?["patch"]?
      .serializedString() ?? ""
    #expect(settings.contains("peerCreationsPerSecond") && settings.contains("maxPeers"))
  }
}
