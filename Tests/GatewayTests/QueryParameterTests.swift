import Foundation
import LWS
import MeshCore
import Testing

@testable import Gateway

/// Query parameters are checked against the rule each route documents for them, once, before any handler runs: an
/// integer that is empty or not an integer, out of range, or a value outside an enum is `400` with a message that names
/// the parameter and its rule.
@Suite(.timeLimit(.minutes(1)))
struct QueryParameterTests {
  @Test func anEmptyOrNonIntegerAfterIsRefusedNamingTheParameter() async throws {
    try await InProcessNode.with { node in
      let alice = try await node.createPeerWithToken("alice")
      let created = try await node.request(.post, "/api/v1/chats", json: ["name": "room"], token: alice.token)
      #expect(created.status == 201)
      let id = try #require(created.object?["chat"]?.objectValue?["id"]?.stringValue)
      let path = "/api/v1/chats/\(id)/messages"
      for bad in ["", "x", "-1", "1.5", "+1", " 1"] {
        let answer = try await node.request(.get, path, query: [("after", bad)], token: alice.token)
        #expect(answer.status == 400, "after=\(bad.debugDescription)")
        let message = answer.object?["error"]?.objectValue?["message"]?.stringValue ?? ""
        #expect(message.contains("after must be an integer"), "after=\(bad.debugDescription): \(message)")
      }
      #expect(try await node.request(.get, path, query: [("after", "0")], token: alice.token).status == 200)
      #expect(try await node.request(.get, path, query: [("after", "7")], token: alice.token).status == 200)
    }
  }

  /// Every integer, enum or numeric-cursor query parameter of every route refuses an empty value, a word and a
  /// fraction; and a second, bad occurrence of a parameter is refused too.
  @Test func everyCheckedQueryParameterOfEveryRouteRefusesMalformedValues() async throws {
    try await InProcessNode.with { node in
      let alice = try await node.createPeerWithToken("alice")
      let admin = try #require(node.adminToken)
      var checked = 0
      for route in Router.standard.routes where !route.isWebSocket {
        let path = route.pattern.split(separator: "/").map { $0.hasPrefix("{") ? "unknown0" : String($0) }
          .joined(separator: "/")
        let token: String? = route.admin ? admin : route.authenticated ? alice.token : nil
        for parameter in route.queryParameters where parameter.rule != .text {
          let bad = parameter.rule == .numericCursor ? ["x", "1.5", "-1"] : ["", "x", "1.5"]
          for value in bad {
            let answer = try await node.request(
              route.method, "/" + path, query: [(parameter.name, value)], token: token)
            let message = answer.object?["error"]?.objectValue?["message"]?.stringValue ?? ""
            #expect(
              answer.status == 400 && message.hasPrefix("\(parameter.name) must be"),
              "\(route.operationID) \(parameter.name)=\(value.debugDescription): \(answer.status) \(message)")
          }
          let repeated = try await node.request(
            route.method, "/" + path, query: [(parameter.name, parameter.validExample), (parameter.name, "x")],
            token: token)
          #expect(repeated.status == 400, "\(route.operationID) with a second, bad \(parameter.name)")
          checked += 1
        }
      }
      #expect(checked >= 10, "the routes document their integer and enum query parameters")
    }
  }

  /// A parameter the document marks required is refused when missing (its handler says what to send), and every
  /// other one may be left out.
  @Test func aRequiredQueryParameterIsRefusedWhenMissing() async throws {
    try await InProcessNode.with { node in
      let alice = try await node.createPeerWithToken("alice")
      let session = try await node.request(.post, "/api/v1/sessions", json: [:], token: alice.token)
      let id = try #require(session.object?["session"]?.objectValue?["id"]?.stringValue)
      var required = 0
      for route in Router.standard.routes where route.pattern.hasPrefix("/api/v1/sessions/{sessionId}") {
        let path = route.pattern.replacingOccurrences(of: "{sessionId}", with: id)
        let all = route.queryParameters.filter(\.required)
        for missing in all {
          let query = all.filter { $0.name != missing.name }.map { ($0.name, $0.validExample) }
          let answer = try await node.request(route.method, path, query: query, token: alice.token)
          let message = answer.object?["error"]?.objectValue?["message"]?.stringValue ?? ""
          #expect(answer.status == 400 && message.hasPrefix("\(missing.name) is required"), "\(route.operationID)")
          required += 1
        }
      }
      #expect(required == 2, "sendResource's to and name")
    }
  }

  @Test func theDocumentedSchemaFollowsTheRule() {
    #expect(QueryParameter.limit(max: 500).schema == ["type": "integer", "minimum": 1, "maximum": 500])
    #expect(QueryParameter("after", "", .integer(minimum: 0)).schema == ["type": "integer", "minimum": 0])
    #expect(QueryParameter("mode", "", .oneOf(["a", "b"])).schema == ["type": "string", "enum": ["a", "b"]])
    #expect(QueryParameter("since", "", .numericCursor).schema == Schemas.cursorQuery)
    #expect(QueryParameter("to", "").schema == ["type": "string"])
  }
}

extension QueryParameter {
  /// A value the rule accepts.
  var validExample: String {
    switch rule {
    case .text, .numericCursor: "1"
    case .integer(let minimum, _): String(minimum)
    case .oneOf(let values): values[0]
    }
  }
}
