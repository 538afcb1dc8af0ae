import Foundation
import MeshgateTestSupport
import Testing

/// The peer table cannot be filled for good without a token (docs/security.md, "Limits"): creation is limited per
/// network prefix as well as per address, peers nobody uses expire, and the admin can list and delete peers.
@Suite(.timeLimit(.minutes(3)))
struct PeerLifetimeTests {
  /// `POST /api/v1/peers` from `source` (an address on the loopback network).
  static func createPeer(port: Int, from source: String, name: String) throws -> HTTPResponse {
    try HTTPClient.request(
      port: port, method: "POST", path: "/api/v1/peers",
      headers: [("Host", "127.0.0.1:\(port)"), ("Content-Type", "application/json")],
      body: Array(#"{"displayName":"\#(name)"}"#.utf8), sourceAddress: source)
  }

  /// 40 addresses of one /24, one peer each, at 2 per second per address: the network's budget (4 times the
  /// address's) runs out, and the refusal names the network.
  @Test func peerCreationIsLimitedPerNetworkPrefix() async throws {
    try await withNode(arguments: ["--peer-create-rate", "2"]) { node in
      let port = node.port
      let answers = try await onDedicatedThread {
        try (10..<50).map { try Self.createPeer(port: port, from: "127.0.0.\($0)", name: "p\($0)") }
      }
      let refused = answers.filter { $0.status == 429 }
      #expect(answers.filter { $0.status == 201 }.count >= 16, "\(answers.first.map(String.init(describing:)) ?? "")")
      #expect(refused.count >= 10, "only \(refused.count) of 40 creations from one /24 were refused")
      let message = ((try? refused.first?.jsonObject()["error"]) as? [String: Any])?["message"] as? String ?? ""
      #expect(message.contains("127.0.0.0/24"), "\(message)")
      #expect(refused.allSatisfy { $0.header("retry-after") != nil })
    }
  }

  /// A peer whose token is never used expires (also across a restart); a used one stays; the admin sees and deletes
  /// peers.
  @Test func unusedPeersExpireAndTheAdminListsAndDeletesPeers() async throws {
    try await withNode(arguments: ["--peer-unused-expiry", "3"]) { node in
      let admin = try node.adminToken()
      let unused = try node.createPeer("unused")
      let used = try node.createPeer("used")
      #expect(try HTTPClient.get(port: node.port, path: "/api/v1/peers/me", token: used.token).status == 200)

      let list = try HTTPClient.get(port: node.port, path: "/api/v1/admin/peers", token: admin)
      #expect(list.status == 200, "\(list)")
      let listed = try #require(try list.jsonObject()["peers"] as? [[String: Any]])
      #expect(Set(listed.compactMap { $0["id"] as? String }) == [unused.id, used.id])
      #expect(listed.first { $0["id"] as? String == unused.id }?["lastUsedAt"] is NSNull)
      #expect(listed.first { $0["id"] as? String == used.id }?["lastUsedAt"] is String)
      #expect(try HTTPClient.get(port: node.port, path: "/api/v1/admin/peers", token: used.token).status == 403)

      // Watched through the admin list: asking with the peer's own token would be a use.
      try await eventuallyAsync(timeout: .seconds(30), message: "the unused peer expired") {
        let page = try HTTPClient.get(port: node.port, path: "/api/v1/admin/peers", token: admin).jsonObject()
        return !((page["peers"] as? [[String: Any]]) ?? []).contains { $0["id"] as? String == unused.id }
      }
      #expect(try HTTPClient.get(port: node.port, path: "/api/v1/peers/me", token: unused.token).status == 401)
      #expect(try node.metric("meshgate_peers_expired_total") == 1)
      // The used peer outlives the expiry, also after a restart (its use was stored).
      try node.restart()
      try await Task.sleep(for: .seconds(4))
      #expect(try HTTPClient.get(port: node.port, path: "/api/v1/peers/me", token: used.token).status == 200)

      let deleted = try HTTPClient.delete(port: node.port, path: "/api/v1/admin/peers/\(used.id)", token: admin)
      #expect(deleted.status == 204, "\(deleted)")
      #expect(try HTTPClient.get(port: node.port, path: "/api/v1/peers/me", token: used.token).status == 401)
      #expect(
        try HTTPClient.delete(port: node.port, path: "/api/v1/admin/peers/\(used.id)", token: admin).status == 404)
    }
  }
}
