import Foundation
import MeshgateTestSupport
import Testing

@Suite(.timeLimit(.minutes(3)))
struct NodeAPITests {
  @Test func nodeHealthAndOpenAPI() async throws {
    try await withNode(name: "alpha") { node in
      let info = try HTTPClient.get(port: node.port, path: "/api/v1/node")
      #expect(info.status == 200)
      let object = try info.jsonObject()
      #expect(object["id"] as? String == node.nodeID)
      #expect(object["name"] as? String == "alpha")
      #expect(object["peerCount"] as? Int == 0)
      #expect((object["uptimeSeconds"] as? Double ?? -1) >= 0)
      #expect(object["version"] is String)

      let health = try HTTPClient.get(port: node.port, path: "/healthz")
      #expect(health.status == 200)
      #expect(try health.jsonObject()["status"] as? String == "ok")

      let spec = try HTTPClient.get(port: node.port, path: "/api/v1/openapi.json")
      #expect(spec.status == 200)
      let document = try spec.jsonObject()
      #expect(document["openapi"] as? String == "3.1.0")
      let paths = try #require(document["paths"] as? [String: Any])
      for path in ["/healthz", "/metrics", "/api/v1/node", "/api/v1/peers", "/api/v1/peers/me", "/api/v1/events"] {
        #expect(paths[path] != nil, "openapi.json lacks \(path)")
      }
      // Every documented GET that needs no path parameter answers something other than 404/405.
      for (path, item) in paths {
        guard let methods = item as? [String: Any], methods["get"] != nil, !path.contains("{") else { continue }
        let response = try HTTPClient.get(port: node.port, path: path)
        #expect(response.status != 404 && response.status != 405, "GET \(path) answered \(response.status)")
      }
    }
  }

  @Test func peersAreCreatedReadUpdatedAndDeleted() async throws {
    try await withNode { node in
      let created = try HTTPClient.post(
        port: node.port, path: "/api/v1/peers", json: #"{"displayName":"Zoë 🚀","discoveryInfo":{"room":"lab"}}"#)
      #expect(created.status == 201)
      let body = try created.jsonObject()
      let token = try #require(body["token"] as? String)
      let peer = try #require(body["peer"] as? [String: Any])
      #expect(peer["displayName"] as? String == "Zoë 🚀")
      #expect(peer["nodeId"] as? String == node.nodeID)
      #expect((peer["discoveryInfo"] as? [String: String]) == ["room": "lab"])

      let me = try HTTPClient.get(port: node.port, path: "/api/v1/peers/me", token: token)
      #expect(me.status == 200)
      #expect((try me.jsonObject()["peer"] as? [String: Any])?["id"] as? String == peer["id"] as? String)

      let patched = try HTTPClient.patch(
        port: node.port, path: "/api/v1/peers/me", json: #"{"displayName":"Zoe"}"#, token: token)
      #expect(patched.status == 200)
      #expect((try patched.jsonObject()["peer"] as? [String: Any])?["displayName"] as? String == "Zoe")

      #expect(try node.metric("meshgate_peers") == 1)
      let deleted = try HTTPClient.delete(port: node.port, path: "/api/v1/peers/me", token: token)
      #expect(deleted.status == 204)
      let after = try HTTPClient.get(port: node.port, path: "/api/v1/peers/me", token: token)
      #expect(after.status == 401)
      #expect(errorCode(after) == "invalid_token")
      #expect(try node.metric("meshgate_peers") == 0)
    }
  }

  @Test func badInputIsAnsweredWithTheJSONErrorShape() async throws {
    try await withNode(arguments: ["--max-body-bytes", "4096"]) { node in
      let port = node.port
      func post(_ body: String, contentType: String = "application/json") throws -> HTTPResponse {
        try HTTPClient.request(
          port: port, method: "POST", path: "/api/v1/peers", headers: [("Content-Type", contentType)],
          body: Array(body.utf8))
      }
      let cases: [(HTTPResponse, Int, String, String)] = [
        (try post("{\"displayName\":"), 400, "malformed_json", "not valid JSON"),
        (try post("[1,2]"), 400, "invalid_request", "must be a JSON object"),
        (try post("{\"displayName\":42}"), 400, "invalid_request", "displayName must be a string"),
        (try post("{}"), 400, "invalid_request", "displayName is required"),
        (try post("{\"displayName\":\"\"}"), 400, "validation_failed", "displayName"),
        (
          try post("{\"displayName\":\"\(String(repeating: "é", count: 64))\"}"), 400, "validation_failed",
          "63 characters"
        ),
        (try post("{\"displayName\":\"   \"}"), 400, "validation_failed", "must not be only spaces"),
        (try post("{\"displayName\":\"a\\u0007b\"}"), 400, "validation_failed", "control"),
        (try post("{\"displayName\":\"a\",\"color\":\"red\"}"), 400, "invalid_request", "unknown field \"color\""),
        (try post("{\"displayName\":\"a\",\"discoveryInfo\":{\"k\":1}}"), 400, "invalid_request", "discoveryInfo.k"),
        (
          try post("{\"displayName\":\"a\"}", contentType: "text/plain"), 415, "unsupported_media_type",
          "application/json"
        ),
        (try post(String(repeating: " ", count: 5000)), 413, "payload_too_large", "4096"),
      ]
      for (response, status, code, fragment) in cases {
        #expect(response.status == status, "\(response)")
        #expect(errorCode(response) == code, "\(response.text)")
        #expect(errorMessage(response)?.contains(fragment) == true, "\(response.text) lacks \(fragment)")
        #expect(response.header("content-type") == "application/json")
      }
    }
  }

  @Test func authFailuresAreExplained() async throws {
    try await withNode { node in
      let missing = try HTTPClient.get(port: node.port, path: "/api/v1/peers/me")
      #expect(missing.status == 401)
      #expect(errorCode(missing) == "unauthorized")
      #expect(missing.header("www-authenticate")?.hasPrefix("Bearer") == true)
      let wrong = try HTTPClient.get(port: node.port, path: "/api/v1/peers/me", token: "mgt_forged")
      #expect(wrong.status == 401)
      #expect(errorCode(wrong) == "invalid_token")
      let malformed = try HTTPClient.request(
        port: node.port, method: "GET", path: "/api/v1/peers/me", headers: [("Authorization", "Basic abc")])
      #expect(malformed.status == 401)
      #expect(errorMessage(malformed)?.contains("Bearer <token>") == true)
      // The query token is accepted only where browsers need it (WebSocket, SSE).
      let peer = try node.createPeer("q")
      let viaQuery = try HTTPClient.get(port: node.port, path: "/api/v1/peers/me?token=\(peer.token)")
      #expect(viaQuery.status == 401)
    }
  }

  @Test func unknownRoutesAndWrongMethods() async throws {
    try await withNode { node in
      let unknown = try HTTPClient.get(port: node.port, path: "/api/v1/unicorns")
      #expect(unknown.status == 404)
      #expect(errorCode(unknown) == "not_found")
      let wrong = try HTTPClient.request(port: node.port, method: "PUT", path: "/api/v1/peers/me", body: [])
      #expect(wrong.status == 405)
      #expect(errorCode(wrong) == "method_not_allowed")
      let allow = Set(
        (wrong.header("allow") ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
      #expect(allow == ["GET", "HEAD", "PATCH", "DELETE"])
      let chunked = try HTTPClient.request(
        port: node.port, method: "POST", path: "/api/v1/peers", headers: [("Transfer-Encoding", "chunked")],
        body: HTTPClient.chunkedEncode([Array("{}".utf8)]))
      #expect(chunked.status == 411)
      #expect(errorCode(chunked) == "length_required")
      let metrics = try HTTPClient.get(port: node.port, path: "/metrics").text
      #expect(metrics.contains(#"meshgate_http_requests_total{route="unmatched",method="GET",status="404"} 1"#))
      #expect(metrics.contains(#"meshgate_http_requests_total{route="/api/v1/peers/me",method="PUT",status="405"} 1"#))
      #expect(metrics.contains(#"meshgate_http_requests_total{route="/api/v1/peers",method="POST",status="411"} 1"#))
    }
  }

  @Test func servesTheDashboardWithTypesAndValidators() async throws {
    try await withNode { node in
      let index = try HTTPClient.get(port: node.port, path: "/")
      #expect(index.status == 200)
      #expect(index.header("content-type") == "text/html; charset=utf-8")
      #expect(index.text.contains("<html"))
      let etag = try #require(index.header("etag"))
      #expect(index.header("cache-control") == "no-cache")
      #expect(index.header("content-security-policy")?.contains("default-src 'self'") == true)
      let revalidated = try HTTPClient.request(
        port: node.port, method: "GET", path: "/", headers: [("If-None-Match", etag)])
      #expect(revalidated.status == 304)
      #expect(revalidated.body.isEmpty)
      let script = try HTTPClient.get(port: node.port, path: "/app.js")
      #expect(script.header("content-type") == "text/javascript; charset=utf-8")
      let style = try HTTPClient.get(port: node.port, path: "/style.css")
      #expect(style.header("content-type") == "text/css; charset=utf-8")
      let head = try HTTPClient.request(port: node.port, method: "HEAD", path: "/app.js")
      #expect(head.status == 200)
      #expect(head.header("content-length") == script.header("content-length"))
      let missing = try HTTPClient.get(port: node.port, path: "/nope.html")
      #expect(missing.status == 404)
      let traversal = try HTTPClient.get(port: node.port, path: "/../Package.swift")
      #expect(traversal.status == 404)
    }
  }

  @Test func metricsCountRequestsSocketsAndPeers() async throws {
    try await withNode { node in
      let peer = try node.createPeer("metered")
      let (socket, _) = try node.openEvents(peer)
      defer { socket.close() }
      _ = try HTTPClient.get(port: node.port, path: "/api/v1/peers/me", token: peer.token)
      let response = try HTTPClient.get(port: node.port, path: "/metrics")
      #expect(response.header("content-type")?.hasPrefix("text/plain; version=0.0.4") == true)
      let text = response.text
      #expect(text.contains("# TYPE meshgate_http_requests_total counter"))
      #expect(text.contains(#"meshgate_http_requests_total{route="/api/v1/peers",method="POST",status="201"} 1"#))
      #expect(text.contains(#"meshgate_http_requests_total{route="/api/v1/peers/me",method="GET",status="200"} 1"#))
      #expect(try node.metric("meshgate_websocket_connections") == 1)
      #expect(try node.metric("meshgate_peers") == 1)
    }
  }
}

@Suite(.timeLimit(.minutes(2)))
struct PagingTests {
  @Test func inMemoryListsPageWithLimitAndCursor() async throws {
    try await withNode { node in
      let browser = try node.createPeer("browser")
      var advertisers: [String] = []
      for index in 0..<7 {
        let peer = try node.createPeer("ad\(index)")
        advertisers.append(peer.id)
        let response = try HTTPClient.put(port: node.port, path: "/api/v1/advertising/paging-test", token: peer.token)
        #expect(response.status == 200)
      }
      var seen: [String] = []
      var cursor: String?
      for _ in 0..<10 {
        var path = "/api/v1/services/paging-test/peers?limit=3"
        if let cursor { path += "&cursor=\(cursor)" }
        let page = try HTTPClient.get(port: node.port, path: path, token: browser.token).jsonObject()
        let peers = try #require(page["peers"] as? [[String: Any]])
        #expect(peers.count <= 3)
        seen += peers.compactMap { ($0["peer"] as? [String: Any])?["id"] as? String }
        cursor = page["nextCursor"] as? String
        if cursor == nil { break }
      }
      #expect(seen == advertisers.sorted())
      let bad = try HTTPClient.get(
        port: node.port, path: "/api/v1/services/paging-test/peers?cursor=nobody", token: browser.token)
      #expect(bad.status == 400)
      #expect(errorMessage(bad)?.contains("cursor") == true)
      let badLimit = try HTTPClient.get(port: node.port, path: "/api/v1/sessions?limit=0", token: browser.token)
      #expect(badLimit.status == 400)
    }
  }
}
