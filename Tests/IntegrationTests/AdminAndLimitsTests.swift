import Foundation
import MeshgateTestSupport
import Testing

/// The admin token (printed once, stored hashed, guarding node settings) and the limits: per-token request rate
/// (429 + Retry-After), browser WebSocket message rate and size, and the event log's retention, each with its metric.
@Suite(.timeLimit(.minutes(2)))
struct AdminAndLimitsTests {
  static func settings(_ node: NodeProcess, token: String?, patch: String? = nil) throws -> HTTPResponse {
    if let patch {
      return try HTTPClient.patch(port: node.port, path: "/api/v1/node/settings", json: patch, token: token ?? "")
    }
    return try HTTPClient.get(port: node.port, path: "/api/v1/node/settings", token: token)
  }

  @Test func adminTokenIsPrintedOnceStoredHashedAndGuardsSettings() async throws {
    try await withNode { node in
      let admin = try node.adminToken()
      #expect(admin.hasPrefix("mga_") && admin.count > 40)
      let peer = try node.createPeer("ordinary")

      let none = try Self.settings(node, token: nil)
      #expect(none.status == 401 && errorCode(none) == "admin_token_required", "\(none)")
      let asPeer = try Self.settings(node, token: peer.token)
      #expect(asPeer.status == 403 && errorCode(asPeer) == "admin_token_required", "\(asPeer)")
      #expect(errorMessage(asPeer)?.contains("admin-token") == true)
      // The same refusal guards pin removal, so it does not speak of settings alone.
      #expect(errorMessage(asPeer)?.contains("removing pins need the admin token") == true, "\(asPeer)")
      let wrong = try Self.settings(node, token: admin + "x")
      #expect(wrong.status == 401 && errorCode(wrong) == "invalid_admin_token", "\(wrong)")
      let patchAsPeer = try Self.settings(node, token: peer.token, patch: #"{"requestsPerSecond":1}"#)
      #expect(patchAsPeer.status == 403)
      // The admin token is no peer token.
      #expect(try HTTPClient.get(port: node.port, path: "/api/v1/peers/me", token: admin).status == 401)

      let current = try Self.settings(node, token: admin)
      #expect(current.status == 200, "\(current)")
      let values = try #require(try current.jsonObject()["settings"] as? [String: Any])
      #expect(values["requestsPerSecond"] as? Int == 20_000)
      #expect(values["eventRetention"] as? Int == 10_000)
      let bad = try Self.settings(node, token: admin, patch: #"{"requestsPerSecond":-1}"#)
      #expect(bad.status == 400)
      let unknown = try Self.settings(node, token: admin, patch: #"{"color":"red"}"#)
      #expect(unknown.status == 400)
      #expect(try node.metric("meshgate_admin_denied_total").map { $0 >= 4 } == true)

      // Stored hashed: the clear token is nowhere in the data directory.
      let files = try FileManager.default.contentsOfDirectory(atPath: node.dataDirectory)
      for file in files {
        let data = try Data(contentsOf: URL(fileURLWithPath: node.dataDirectory + "/" + file))
        #expect(data.range(of: Data(admin.utf8)) == nil, "the admin token in clear in \(file)")
      }
      // Printed once: a restart prints no new token, and the first one still works.
      try node.restart()
      let printed = node.stdoutText().split(separator: "\n").filter { $0.hasPrefix("meshgate admin-token=") }
      #expect(printed.count == 1, "\(printed)")
      #expect(try Self.settings(node, token: admin).status == 200)
    }
  }

  @Test func requestRateLimitAnswers429WithRetryAfterPerToken() async throws {
    try await withNode { node in
      let admin = try node.adminToken()
      let busy = try node.createPeer("busy")
      let calm = try node.createPeer("calm")
      let patched = try Self.settings(node, token: admin, patch: #"{"requestsPerSecond":5}"#)
      #expect(patched.status == 200, "\(patched)")
      var statuses: [Int] = []
      var limited: HTTPResponse?
      for _ in 0..<40 {
        let response = try HTTPClient.get(port: node.port, path: "/api/v1/peers/me", token: busy.token)
        statuses.append(response.status)
        if response.status == 429 { limited = response }
      }
      // A burst of twice the rate passes; the rest of 40 back-to-back requests cannot all fit.
      #expect(statuses.filter { $0 == 200 }.count >= 10, "\(statuses)")
      let refused = try #require(limited, "no 429 among \(statuses)")
      #expect(errorCode(refused) == "rate_limited")
      #expect(Int(refused.header("retry-after") ?? "") ?? 0 >= 1)
      // Another token has its own budget.
      #expect(try HTTPClient.get(port: node.port, path: "/api/v1/peers/me", token: calm.token).status == 200)
      #expect(try node.metric("meshgate_rate_limited_requests_total").map { $0 >= 1 } == true)
      // Unauthenticated routes (health, metrics) are not rate limited per token.
      #expect(try HTTPClient.get(port: node.port, path: "/healthz").status == 200)
      // After Retry-After the token works again.
      try await Task.sleep(for: .seconds(Int(refused.header("retry-after") ?? "1") ?? 1))
      #expect(try HTTPClient.get(port: node.port, path: "/api/v1/peers/me", token: busy.token).status == 200)
    }
  }

  @Test func webSocketMessageRateAndSizeAreCapped() async throws {
    try await withNode { node in
      let admin = try node.adminToken()
      let peer = try node.createPeer("chatty")
      let patched = try Self.settings(
        node, token: admin, patch: #"{"webSocketMessagesPerSecond":5,"webSocketMaxMessageBytes":1024}"#)
      #expect(patched.status == 200, "\(patched)")
      let (socket, _) = try node.openEvents(peer)
      defer { socket.abort() }
      for _ in 0..<40 { try socket.send(text: #"{"op":"ping"}"#) }
      var codes: [String] = []
      for _ in 0..<40 {
        let reply = try socket.receiveJSONObject()
        codes.append(
          (reply["type"] as? String == "pong") ? "pong" : (reply["data"] as? [String: Any])?["code"] as? String ?? "?")
      }
      #expect(codes.filter { $0 == "pong" }.count >= 10, "\(codes)")
      #expect(codes.contains("rate_limited"), "\(codes)")
      #expect(try node.metric("meshgate_websocket_messages_rate_limited_total").map { $0 >= 1 } == true)

      let (big, _) = try node.openEvents(peer)
      defer { big.abort() }
      try big.send(text: #"{"op":"ping","pad":""# + String(repeating: "x", count: 2000) + #""}"#)
      let reply = try big.receiveJSONObject()
      #expect((reply["data"] as? [String: Any])?["code"] as? String == "message_too_large", "\(reply)")
      let next = try big.receive(timeout: .seconds(5))
      guard case .close(let code, _)? = next else {
        Issue.record("the socket stayed open after an oversized message: \(String(describing: next))")
        return
      }
      #expect(code == 1009)
      #expect(try node.metric("meshgate_websocket_messages_too_large_total") == 1)
    }
  }

  @Test func eventLogNeverHoldsMoreThanItsRetention() async throws {
    try await withNode(arguments: ["--event-retention", "10"]) { node in
      let peer = try node.createPeer("busy")
      for index in 1...60 {
        let response = try HTTPClient.patch(
          port: node.port, path: "/api/v1/peers/me", json: #"{"displayName":"n\#(index)"}"#, token: peer.token)
        #expect(response.status == 200)
      }
      let page = try HTTPClient.get(port: node.port, path: "/api/v1/events?since=0&limit=1000", token: peer.token)
        .jsonObject()
      let events = try #require(page["events"] as? [[String: Any]])
      #expect(events.count == 10)
      #expect(page["truncated"] as? Bool == true)
      #expect(try node.metric("meshgate_events_trimmed_total") == 50)
      // Retention is a node setting an admin can change at run time.
      let admin = try node.adminToken()
      #expect(try Self.settings(node, token: admin, patch: #"{"eventRetention":20}"#).status == 200)
      for index in 1...30 {
        _ = try HTTPClient.patch(
          port: node.port, path: "/api/v1/peers/me", json: #"{"displayName":"m\#(index)"}"#, token: peer.token)
      }
      let after = try HTTPClient.get(port: node.port, path: "/api/v1/events?since=0&limit=1000", token: peer.token)
        .jsonObject()
      #expect((after["events"] as? [[String: Any]])?.count == 20)
    }
  }
}
