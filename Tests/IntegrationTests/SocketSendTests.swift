import Foundation
import MeshgateTestSupport
import Testing

/// The browser WebSocket's `{"op":"send"}` takes `text` or `dataBase64` (docs/api.md, "Live events over WebSocket"): a
/// message with both is refused, not sent as its `text` with `dataBase64` quietly dropped.
@Suite(.timeLimit(.minutes(2))) struct SocketSendTests {
  @Test func aSendWithBothTextAndDataBase64IsRefused() async throws {
    try await withSessionSocket { socket, _, sessionID in
      try socket.send(
        text: try jsonText(["op": "send", "session": sessionID, "text": "a", "dataBase64": "Yg=="]))
      let reply = try socket.receiveJSONObject()
      #expect(reply["type"] as? String == "error", "\(reply)")
      let data = reply["data"] as? [String: Any]
      #expect(data?["code"] as? String == "invalid_request", "\(reply)")
      #expect((data?["message"] as? String)?.contains("text or dataBase64, not both") == true, "\(reply)")
      // Either one alone is sent.
      try socket.send(text: try jsonText(["op": "send", "session": sessionID, "text": "a"]))
      #expect(try socket.receiveJSONObject()["type"] as? String == "sent")
    }
  }

  /// The `sent` reply's `data` is what `POST /api/v1/sessions/{id}/data` answers with its `202`.
  @Test func theSentReplyCarriesWhatTheRESTRouteAnswers() async throws {
    try await withSessionSocket { socket, alice, sessionID in
      try socket.send(text: try jsonText(["op": "send", "session": sessionID, "text": "abc"]))
      let reply = try socket.receiveJSONObject()
      #expect(reply["type"] as? String == "sent", "\(reply)")
      let data = try #require(reply["data"] as? [String: Any], "\(reply)")
      #expect(data["accepted"] as? Int == 0, "\(reply)")
      #expect((data["undelivered"] as? [Any])?.isEmpty == true, "\(reply)")
      #expect(data["bytes"] as? Int == 3, "\(reply)")
      let rest = try alice.sendData(sessionID, "abc")
      #expect(rest.status == 202, "\(rest)")
      let answer = try rest.jsonObject()
      #expect(Set(answer.keys) == Set(data.keys), "\(answer) against \(data)")
      #expect(answer["accepted"] as? Int == 0 && answer["bytes"] as? Int == 3, "\(answer)")
    }
  }

  /// Alice on a fresh node, alone in a session she created, with her events WebSocket open.
  private func withSessionSocket(
    _ body: (_ socket: WebSocketClient, _ alice: MeshPeer, _ sessionID: String) throws -> Void
  ) async throws {
    try await withNode { node in
      let alice = try node.meshPeer("alice")
      let sessionID = try #require(try alice.createSession(strategy: "cluster")["id"] as? String)
      let (socket, _) = try node.openEvents(alice.peer)
      defer { socket.close() }
      try body(socket, alice, sessionID)
    }
  }
}
