import LWS
import MeshCore
import Testing

@testable import Gateway

/// `GET /api/v1/node` names the addresses a phone on the LAN can open the dashboard by.
@Suite(.timeLimit(.minutes(1)))
struct NodeInfoTests {
  @Test func lanAddressesAreTheInterfacesAPhoneCanReach() {
    let interfaces = ["127.0.0.1", "192.168.1.20", "10.0.0.7", "169.254.3.4", "::1", "fe80::1%eth0", "2001:db8::5"]
    #expect(
      HostPolicy.lanAddresses(bind: "0.0.0.0", interfaces: interfaces) == ["10.0.0.7", "192.168.1.20", "2001:db8::5"])
    #expect(HostPolicy.lanAddresses(bind: "::", interfaces: interfaces).count == 3)
    #expect(HostPolicy.lanAddresses(bind: "192.168.1.20", interfaces: interfaces) == ["192.168.1.20"])
    #expect(HostPolicy.lanAddresses(bind: "127.0.0.1", interfaces: interfaces).isEmpty, "loopback only: none")
  }

  @Test func theNodeRouteListsThemAndALoopbackNodeListsNone() async throws {
    try await InProcessNode.with { node in
      let answer = try await node.request(.get, "/api/v1/node")
      #expect(answer.status == 200)
      guard case .array(let addresses) = answer.object?["lanAddresses"] else {
        Issue.record("no lanAddresses in \(String(decoding: answer.body, as: UTF8.self))")
        return
      }
      #expect(addresses.isEmpty, "the in-process node is bound to 127.0.0.1")
    }
  }
}
