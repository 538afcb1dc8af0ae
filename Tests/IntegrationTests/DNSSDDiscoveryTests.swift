import Foundation
import MeshgateTestSupport
import Testing

/// DNS-SD discovery through a real avahi-daemon (started by ``AvahiFixture`` when none runs), and the fallback to
/// the beacon when no daemon is reachable.
@Suite(.timeLimit(.minutes(3)))
struct DNSSDDiscoveryTests {
  static let avahiBrowse = "/usr/bin/avahi-browse"

  /// The resolved lines (`=;iface;proto;name;type;domain;host;address;port;txt`) of `avahi-browse -rpt <type>`.
  static func resolved(_ type: String) throws -> [String] {
    let result = try run(avahiBrowse, ["-rpt", type], timeout: .seconds(15))
    return result.output.split(separator: "\n").map(String.init).filter { $0.hasPrefix("=;") }
  }

  /// Whether a resolved line is `node`'s registration (its port and TXT `id`).
  static func line(_ line: String, isFrom node: NodeProcess) -> Bool {
    let fields = line.split(separator: ";", omittingEmptySubsequences: false)
    return fields.count >= 10 && fields[8] == "\(node.port)" && line.contains("\"id=\(node.nodeID)\"")
  }

  @Test func twoNodesFindEachOtherThroughDNSSDAloneAndAvahiBrowseListsThem() async throws {
    try await AvahiFixture.shared.with {
      // No seeds and no beacon: --discovery dnssd runs only DNS-SD while the daemon is reachable. Unique names keep
      // instance names apart from anything else on the daemon, and a mesh secret of their own keeps other nodes the
      // daemon lists (another test run on this machine, like strangers on a LAN) out of their mesh.
      let tag = UUID().uuidString.prefix(6).lowercased()
      try await withNodes(
        count: 2, arguments: ["--discovery", "dnssd", "--mesh-secret", "dnssd-test-\(tag)"],
        names: ["dnssd-a-\(tag)", "dnssd-b-\(tag)"]
      ) { nodes in
        let ready = ContinuousClock.now
        try await awaitLinks(nodes, timeout: .seconds(40))
        let elapsed = ContinuousClock.now - ready
        // About 1 s on an idle machine (Avahi probes a new name for ~750 ms); generous for a loaded one.
        #expect(elapsed <= .seconds(30), "DNS-SD discovery took \(elapsed) to link two nodes")
        for (index, node) in nodes.enumerated() {
          let linked = try node.meshNodes().nodes.filter { $0.state == "linked" }
          #expect(linked.count == 1, "node\(index): \(linked)")
        }
        let sources = try nodes.flatMap { try $0.meshNodes().nodes.compactMap(\.source) }
        #expect(sources.contains("dnssd") && !sources.contains("beacon"), "sources: \(sources)")

        // Standard tools see both nodes, with port and TXT record.
        var lines: [String] = []
        try await eventuallyAsync(timeout: .seconds(20), interval: .milliseconds(200)) {
          lines = try Self.resolved("_meshgate._tcp")
          return nodes.allSatisfy { node in lines.contains { Self.line($0, isFrom: node) } }
        }
        for (index, node) in nodes.enumerated() {
          // Registered by now (a node may link before its own registration is established).
          let log = node.stderrText()
          #expect(log.contains("msg=\"DNS-SD discovery on.\""), "node\(index) did not start DNS-SD:\n\(log)")
          #expect(!log.contains("Beacon discovery on."), "node\(index) started the beacon:\n\(log)")
          let line = lines.first { Self.line($0, isFrom: node) } ?? ""
          #expect(line.contains(";\(node.name ?? "?");_meshgate._tcp;"), "instance name: \(line)")
          #expect(line.contains("\"pv=1\"") && line.contains("\"txtvers=1\""), "TXT record: \(line)")
          let fingerprint = try node.meshNodes().local["fingerprint"] as? String ?? "?"
          #expect(line.contains("\"fp=\(fingerprint)\""), "the node certificate's fingerprint in TXT: \(line)")
        }

        // A peer's advertised service type is registered as _<type>._tcp, and withdrawn when it stops.
        let receiver = try nodes[0].meshPeer("receiver")
        try receiver.advertise("jobmanager-jobs")
        try await eventuallyAsync(timeout: .seconds(20), interval: .milliseconds(200)) {
          try Self.resolved("_jobmanager-jobs._tcp").contains {
            Self.line($0, isFrom: nodes[0]) && $0.contains("\"peers=1\"")
          }
        }
        let all = try run(Self.avahiBrowse, ["-apt"], timeout: .seconds(15)).output
        #expect(
          all.contains(";\(nodes[0].name ?? "?");_jobmanager-jobs._tcp;local"), "avahi-browse -a output:\n\(all)")
        // A second advertiser updates the TXT record; the type is withdrawn only when the last one stops.
        let second = try nodes[0].meshPeer("second-receiver")
        try second.advertise("jobmanager-jobs")
        try await eventuallyAsync(timeout: .seconds(20), interval: .milliseconds(200)) {
          try Self.resolved("_jobmanager-jobs._tcp").contains {
            Self.line($0, isFrom: nodes[0]) && $0.contains("\"peers=2\"")
          }
        }
        try receiver.stopAdvertising("jobmanager-jobs")
        try await eventuallyAsync(timeout: .seconds(20), interval: .milliseconds(200)) {
          try Self.resolved("_jobmanager-jobs._tcp").contains {
            Self.line($0, isFrom: nodes[0]) && $0.contains("\"peers=1\"")
          }
        }
        try second.stopAdvertising("jobmanager-jobs")
        try await eventuallyAsync(timeout: .seconds(20), interval: .milliseconds(200)) {
          try !Self.resolved("_jobmanager-jobs._tcp").contains { Self.line($0, isFrom: nodes[0]) }
        }
      }
    }
  }

  @Test func withoutAReachableDaemonNodesSayItInOneLineAndLinkByBeacon() async throws {
    // A system bus address that does not exist makes the daemon unreachable whether or not one runs here.
    let unreachable = ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/nonexistent/meshgate-test-no-system-bus"]
    // The beacon's random port and group (without its "--discovery beacon") keep parallel tests apart.
    let beacon = Array(isolatedBeaconArguments().drop { $0 != "--beacon-port" })
    try await withNodes(
      count: 2, arguments: beacon, perNodeArguments: { ["--discovery", $0 == 0 ? "dnssd" : "auto"] },
      environment: unreachable
    ) { nodes in
      try await awaitLinks(nodes, timeout: .seconds(40))
      for (index, node) in nodes.enumerated() {
        let lines = node.stderrText().split(separator: "\n").filter { $0.contains("DNS-SD discovery unavailable") }
        #expect(lines.count == 1, "node\(index) must say it once: \(lines)")
        // --discovery dnssd asked for DNS-SD, so not getting it is a warning; auto just reports what it does.
        let level = index == 0 ? "level=warning" : "level=notice"
        #expect(lines.first?.contains(level) == true, "node\(index): \(lines)")
        #expect(lines.first?.contains("Avahi daemon is not reachable") == true, "node\(index): \(lines)")
        #expect(lines.first?.contains("using the beacon instead") == true, "node\(index): \(lines)")
        #expect(node.stderrText().contains("Beacon discovery on."), "node\(index) did not start the beacon")
      }
      let sources = try nodes.flatMap { try $0.meshNodes().nodes.compactMap(\.source) }
      #expect(sources.contains("beacon"), "no link came from the beacon: \(sources)")
    }
  }
}
