import Foundation
import LWS
import MeshCore
import Testing

@testable import Gateway

/// Display names and chat room names are limited to 63 characters (Unicode scalars), not 63 UTF-8 bytes, through the
/// node's own request dispatch: 63 four-byte emoji pass, 64 characters fail, and a name of spaces only gets a 400
/// that says so.
@Suite(.timeLimit(.minutes(1)))
struct NameRulesTests {
  static let emoji63 = String(repeating: "🦊", count: 63)

  /// The `error` object of an answer.
  func error(_ response: HTTPResponse) -> (code: String?, message: String?) {
    let error = response.object?["error"]?.objectValue
    return (error?["code"]?.stringValue, error?["message"]?.stringValue)
  }

  @Test func aDisplayNameHolds63CharactersOfAnyWidth() async throws {
    try await InProcessNode.with { node in
      let created = try await node.request(.post, "/api/v1/peers", json: ["displayName": .string(Self.emoji63)])
      #expect(created.status == 201, "\(String(decoding: created.body, as: UTF8.self))")
      #expect(created.object?["peer"]?.objectValue?["displayName"]?.stringValue == Self.emoji63)
      let cjk = String(repeating: "名", count: 63)
      #expect(try await node.request(.post, "/api/v1/peers", json: ["displayName": .string(cjk)]).status == 201)

      let long = try await node.request(.post, "/api/v1/peers", json: ["displayName": .string(Self.emoji63 + "🦊")])
      #expect(long.status == 400)
      #expect(error(long).code == "validation_failed")
      #expect(
        error(long).message?.hasPrefix("displayName must be at most 63 characters (got 64;") == true, "\(error(long))")

      let spaces = try await node.request(.post, "/api/v1/peers", json: ["displayName": "   "])
      #expect(spaces.status == 400)
      #expect(
        error(spaces).message == "displayName must not be only spaces: give at least one letter, digit or symbol",
        "\(error(spaces))")
      let empty = try await node.request(.post, "/api/v1/peers", json: ["displayName": ""])
      #expect(error(empty).message == "displayName must not be empty: give a name of 1–63 characters")

      // Renaming follows the same rule.
      let peer = try await node.createPeer("alice")
      let renamed = try await node.call(
        .patch, "/api/v1/peers/me", json: ["displayName": .string(Self.emoji63)], as: peer)
      #expect(renamed.status == 200)
      let blank = try await node.call(.patch, "/api/v1/peers/me", json: ["displayName": "\u{3000} "], as: peer)
      #expect(blank.status == 400 && error(blank).message?.contains("must not be only spaces") == true)
    }
  }

  @Test func aChatRoomNameHolds63CharactersOfAnyWidth() async throws {
    try await InProcessNode.with { node in
      let host = try await node.createPeer("host")
      let created = try await node.call(.post, "/api/v1/chats", json: ["name": .string(Self.emoji63)], as: host)
      #expect(created.status == 201, "\(String(decoding: created.body, as: UTF8.self))")
      #expect(created.object?["chat"]?.objectValue?["name"]?.stringValue == Self.emoji63)

      let long = try await node.call(.post, "/api/v1/chats", json: ["name": .string(Self.emoji63 + "a")], as: host)
      #expect(long.status == 400)
      #expect(error(long).message?.hasPrefix("name must be at most 63 characters (got 64;") == true, "\(error(long))")
      let spaces = try await node.call(.post, "/api/v1/chats", json: ["name": "  "], as: host)
      #expect(spaces.status == 400)
      #expect(
        error(spaces).message == "name must not be only spaces: give at least one letter, digit or symbol",
        "\(error(spaces))")
    }
  }
}
