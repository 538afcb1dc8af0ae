import Foundation
import MeshgateTestSupport
import Testing

/// The limits a client can hit are the same in the code, the OpenAPI document and the API guide's "Limits and
/// statuses" table (docs/api.md): every list's `limit` cap is enforced exactly where OpenAPI puts it and the guide
/// says so, and `maxPeers` is 2–1024 with 64 by default in all three.
@Suite(.timeLimit(.minutes(2)))
struct DocumentedLimitsTests {
  static let apiGuide = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().appendingPathComponent("docs/api.md")

  /// The API guide's "Limits and statuses" table rows.
  static func limitRows() throws -> [String] {
    let text = try String(contentsOf: apiGuide, encoding: .utf8)
    let section = try #require(
      text.range(of: "## Limits and statuses"), "docs/api.md has no Limits and statuses section")
    let rest = text[section.upperBound...]
    let end = rest.range(of: "\n## ")?.lowerBound ?? rest.endIndex
    return rest[..<end].split(separator: "\n").filter { $0.hasPrefix("| ") }.map(String.init)
  }

  @Test func everyListsLimitCapIsEnforcedAsOpenAPIAndTheAPIGuideSay() async throws {
    try await withNode(name: "limits") { node in
      let peer = try node.createPeer("counter")
      let admin = try node.adminToken()
      let chat = try HTTPClient.post(
        port: node.port, path: "/api/v1/chats", json: #"{"name":"Caps"}"#, token: peer.token)
      let chatID = try #require((try chat.jsonObject()["chat"] as? [String: Any])?["id"] as? String, "\(chat)")

      let document = try HTTPClient.get(port: node.port, path: "/api/v1/openapi.json").jsonObject()
      let paths = try #require(document["paths"] as? [String: [String: Any]])
      let rows = try Self.limitRows()
      var checked: [String] = []
      for (pattern, item) in paths.sorted(by: { $0.key < $1.key }) {
        guard let get = item["get"] as? [String: Any], let parameters = get["parameters"] as? [[String: Any]],
          let limit = parameters.first(where: { $0["name"] as? String == "limit" }),
          let schema = limit["schema"] as? [String: Any], let maximum = schema["maximum"] as? Int
        else { continue }
        #expect(schema["minimum"] as? Int == 1, "\(pattern)")
        let path = pattern.replacingOccurrences(of: "{chatId}", with: chatID)
          .replacingOccurrences(of: "{serviceType}", with: "jobmanager-jobs")
        #expect(!path.contains("{"), "a list route with a path parameter this test does not fill: \(pattern)")
        let separator = path.contains("?") ? "&" : "?"
        let token = pattern.hasPrefix("/api/v1/admin/") ? admin : peer.token
        for value in [1, maximum] {
          let response = try HTTPClient.get(
            port: node.port, path: "\(path)\(separator)limit=\(value)", token: token)
          #expect(response.status == 200, "\(pattern) limit=\(value): \(response)")
        }
        for value in [0, maximum + 1] {
          let response = try HTTPClient.get(
            port: node.port, path: "\(path)\(separator)limit=\(value)", token: token)
          #expect(response.status == 400, "\(pattern) limit=\(value): \(response)")
          #expect(errorMessage(response)?.contains("from 1 to \(maximum)") == true, "\(pattern): \(response)")
        }
        // The API guide's table has this route in a `limit` row that gives the same cap and the default 100.
        let row = rows.first { $0.hasPrefix("| `limit` on") && $0.contains("`GET \(pattern)`") }
        #expect(
          row?.contains("1–\(maximum), default 100") == true, "docs/api.md limit row for \(pattern): \(row ?? "none")")
        checked.append(pattern)
      }
      // Every paged list: events, chat messages, sessions, invitations, jobs, transfers, service peers, presence,
      // and the admin's peers.
      #expect(checked.count == 9, "\(checked)")
    }
  }

  @Test func maxPeersIsTwoTo1024WithADefaultOf64Everywhere() async throws {
    try await withNode(name: "max-peers") { node in
      let peer = try node.createPeer("host")
      func create(_ body: String) throws -> HTTPResponse {
        try HTTPClient.post(port: node.port, path: "/api/v1/sessions", json: body, token: peer.token)
      }
      func maxPeers(_ response: HTTPResponse) throws -> Int? {
        (try response.jsonObject()["session"] as? [String: Any])?["maxPeers"] as? Int
      }
      #expect(try maxPeers(create("{}")) == 64)
      #expect(try maxPeers(create(#"{"maxPeers":2}"#)) == 2)
      #expect(try maxPeers(create(#"{"maxPeers":1024}"#)) == 1024)
      #expect(try maxPeers(create(#"{"strategy":"pointToPoint","maxPeers":9}"#)) == 2)
      for bad in [1, 1025] {
        let response = try create(#"{"maxPeers":\#(bad)}"#)
        #expect(response.status == 400 && errorMessage(response)?.contains("from 2 to 1024") == true, "\(response)")
      }
      let document = try HTTPClient.get(port: node.port, path: "/api/v1/openapi.json").text
      let openAPI = try #require(try JSONSerialization.jsonObject(with: Data(document.utf8)) as? [String: Any])
      let paths = try #require(openAPI["paths"] as? [String: [String: Any]])
      let post = try #require(paths["/api/v1/sessions"]?["post"] as? [String: Any])
      let content = (post["requestBody"] as? [String: Any])?["content"] as? [String: Any]
      let schema = (content?["application/json"] as? [String: Any])?["schema"] as? [String: Any]
      let property = (schema?["properties"] as? [String: Any])?["maxPeers"] as? [String: Any]
      #expect(property?["minimum"] as? Int == 2 && property?["maximum"] as? Int == 1024, "\(property ?? [:])")
      #expect(property?["default"] as? Int == 64)
      let row = try Self.limitRows().first { $0.contains("`maxPeers`") }
      #expect(row?.contains("2–1024, default 64") == true, "docs/api.md: \(row ?? "none")")
    }
  }
}
