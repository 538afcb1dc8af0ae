import Foundation
import MeshgateTestSupport
import Testing

@Suite(.timeLimit(.minutes(3)))
struct EventTests {
  /// Renames `peer` (which appends a `peer.updated` event to its log) and returns the new name.
  @discardableResult
  func rename(_ node: NodeProcess, _ peer: TestPeer, to name: String) throws -> String {
    let response = try HTTPClient.patch(
      port: node.port, path: "/api/v1/peers/me", json: #"{"displayName":\#(jsonString(name))}"#, token: peer.token)
    guard response.status == 200 else {
      throw TestSupportError.unexpectedMessage("rename answered \(response.status): \(response.text)")
    }
    return name
  }

  @Test func webSocketSaysHelloThenPushesThePeersEvents() async throws {
    try await withNode(name: "events") { node in
      let peer = try node.createPeer("watcher")
      let (socket, hello) = try node.openEvents(peer)
      defer { socket.close() }
      let data = try #require(hello["data"] as? [String: Any])
      #expect((data["peer"] as? [String: Any])?["id"] as? String == peer.id)
      #expect((data["node"] as? [String: Any])?["name"] as? String == "events")
      #expect(data["cursor"] as? String == "0")

      try rename(node, peer, to: "watcher 2")
      let event = try socket.receiveJSONObject()
      #expect(event["type"] as? String == "peer.updated")
      #expect(event["id"] as? String != nil)
      #expect((event["at"] as? String)?.hasSuffix("Z") == true)
      let payload = try #require((event["data"] as? [String: Any])?["peer"] as? [String: Any])
      #expect(payload["displayName"] as? String == "watcher 2")

      // Another peer's events never reach this socket.
      let other = try node.createPeer("other")
      try rename(node, other, to: "other 2")
      try socket.send(text: #"{"op":"ping"}"#)
      let pong = try socket.receiveJSONObject()
      #expect(pong["type"] as? String == "pong")
    }
  }

  @Test func webSocketReplaysWhatWasMissedAfterSince() async throws {
    try await withNode { node in
      let peer = try node.createPeer("resumer")
      for index in 1...5 { try rename(node, peer, to: "name \(index)") }
      let page = try HTTPClient.get(port: node.port, path: "/api/v1/events?since=0", token: peer.token).jsonObject()
      let events = try #require(page["events"] as? [[String: Any]])
      #expect(events.count == 5)
      let ids = events.compactMap { $0["id"] as? String }
      #expect(ids.compactMap { Int($0) } == ids.compactMap { Int($0) }.sorted())

      let (socket, hello) = try node.openEvents(peer, since: ids[1])
      defer { socket.close() }
      #expect((hello["data"] as? [String: Any])?["cursor"] as? String == ids[4])
      var replayed: [String] = []
      for _ in 0..<3 { replayed.append(try socket.receiveJSONObject()["id"] as? String ?? "") }
      #expect(replayed == Array(ids[2...4]))
      // Then live, with nothing repeated.
      try rename(node, peer, to: "name 6")
      let live = try socket.receiveJSONObject()
      #expect(Int(live["id"] as? String ?? "") ?? 0 > Int(ids[4])!)
    }
  }

  @Test func eventLogPagesWithLimitAndCursor() async throws {
    try await withNode { node in
      let peer = try node.createPeer("pager")
      for index in 1...7 { try rename(node, peer, to: "n\(index)") }
      var cursor = "0"
      var seen: [String] = []
      while true {
        let page = try HTTPClient.get(
          port: node.port, path: "/api/v1/events?limit=3&cursor=\(cursor)", token: peer.token
        ).jsonObject()
        let events = try #require(page["events"] as? [[String: Any]])
        if events.isEmpty { break }
        seen += events.compactMap { $0["id"] as? String }
        cursor = try #require(page["nextCursor"] as? String)
      }
      #expect(seen.count == 7)
      let bad = try HTTPClient.get(port: node.port, path: "/api/v1/events?since=abc", token: peer.token)
      #expect(bad.status == 400)
      #expect(errorMessage(bad)?.contains("since") == true)
      let badLimit = try HTTPClient.get(port: node.port, path: "/api/v1/events?limit=0", token: peer.token)
      #expect(badLimit.status == 400)
    }
  }

  @Test func serverSentEventsReplayAndStreamLive() async throws {
    try await withNode { node in
      let peer = try node.createPeer("sse")
      try rename(node, peer, to: "sse 1")
      let stream = try HTTPStreamReader(port: node.port, path: "/api/v1/events/stream?since=0&token=\(peer.token)")
      defer { stream.close() }
      #expect(stream.status == 200)
      #expect(stream.header("content-type") == "text/event-stream")
      let hello = try #require(try stream.nextEvent())
      #expect(hello.event == "hello")
      let replayed = try #require(try stream.nextEvent())
      #expect(replayed.event == "peer.updated")
      let firstID = try #require(replayed.id)
      try rename(node, peer, to: "sse 2")
      let live = try #require(try stream.nextEvent())
      #expect(live.event == "peer.updated")
      #expect(Int(live.id ?? "") ?? 0 > Int(firstID)!)
      #expect(try live.jsonObject()["type"] as? String == "peer.updated")

      // Last-Event-ID resumes after the given event.
      let resumed = try HTTPStreamReader(
        port: node.port, path: "/api/v1/events/stream", token: peer.token, headers: [("Last-Event-ID", firstID)])
      defer { resumed.close() }
      _ = try resumed.nextEvent()
      #expect(try resumed.nextEvent()?.id == live.id)
    }
  }

  @Test func webSocketRefusesBadTokensAndPaths() async throws {
    try await withNode { node in
      for (path, status) in [
        ("/api/v1/ws", 401), ("/api/v1/ws?token=mgt_nope", 401), ("/elsewhere", 404),
      ] {
        #expect {
          _ = try WebSocketClient(port: node.port, path: path)
        } throws: { error in
          (error as? TestSupportError)?.httpStatusCode == status
        }
      }
      let peer = try node.createPeer("p")
      #expect {
        _ = try WebSocketClient(port: node.port, path: "/api/v1/ws?token=\(peer.token)&since=x")
      } throws: { error in
        (error as? TestSupportError)?.httpStatusCode == 400
      }
      let header = try WebSocketClient(
        port: node.port, path: "/api/v1/ws", headers: [("Authorization", "Bearer \(peer.token)")])
      defer { header.close() }
      #expect(try header.receiveJSONObject()["type"] as? String == "hello")
    }
  }

  @Test func deletingThePeerClosesItsSocketsWith4401() async throws {
    try await withNode { node in
      let peer = try node.createPeer("doomed")
      let (socket, _) = try node.openEvents(peer)
      defer { socket.close() }
      #expect(try HTTPClient.delete(port: node.port, path: "/api/v1/peers/me", token: peer.token).status == 204)
      guard case .close(let code, _)? = try socket.receive(timeout: .seconds(5)) else {
        Issue.record("expected a close frame")
        return
      }
      #expect(code == 4401)
    }
  }

  @Test func garbageOnTheSocketIsAnsweredNotFatal() async throws {
    try await withNode { node in
      let peer = try node.createPeer("noisy")
      let (socket, _) = try node.openEvents(peer)
      defer { socket.close() }
      try socket.send(text: "not json")
      #expect((try socket.receiveJSONObject()["data"] as? [String: Any])?["code"] as? String == "malformed_message")
      try socket.send(binary: [0, 1, 2])
      #expect((try socket.receiveJSONObject()["data"] as? [String: Any])?["code"] as? String == "binary_not_supported")
      try socket.send(text: #"{"op":"launch"}"#)
      #expect((try socket.receiveJSONObject()["data"] as? [String: Any])?["code"] as? String == "unknown_op")
      // A frame with reserved bits set is a protocol error: the server drops that connection only.
      try socket.sendRaw(WebSocketClient.encodeFrame(opcode: 0x1, payload: Array("x".utf8), rsv: 0x40))
      let second = try node.openEvents(peer)
      second.socket.close()
      #expect(try HTTPClient.get(port: node.port, path: "/healthz").status == 200)
    }
  }

  @Test func restartKeepsPeersAndEvents() async throws {
    let node = try NodeProcess()
    defer { node.cleanup() }
    try node.start()
    let peer = try node.createPeer("durable")
    try rename(node, peer, to: "durable 2")
    let nodeID = node.nodeID
    // kill -9: nothing acknowledged with 2xx may be lost.
    node.kill9()
    try node.restart()
    #expect(node.nodeID == nodeID)
    let me = try HTTPClient.get(port: node.port, path: "/api/v1/peers/me", token: peer.token)
    #expect(me.status == 200)
    #expect((try me.jsonObject()["peer"] as? [String: Any])?["displayName"] as? String == "durable 2")
    let page = try HTTPClient.get(port: node.port, path: "/api/v1/events", token: peer.token).jsonObject()
    #expect((page["events"] as? [[String: Any]])?.count == 1)
    _ = try node.stop()
    try node.restart()
    #expect(try HTTPClient.get(port: node.port, path: "/api/v1/peers/me", token: peer.token).status == 200)
    _ = try node.stop()
  }

  /// Sessions live in the node's memory (docs/api.md): after a restart the peer is in none, its session routes answer
  /// `404`, and it can create a new one.
  @Test func sessionsEndWhenTheNodeRestarts() async throws {
    let node = try NodeProcess()
    defer { node.cleanup() }
    try node.start()
    let peer = try node.createPeer("host")
    let created = try HTTPClient.post(port: node.port, path: "/api/v1/sessions", json: "{}", token: peer.token)
    let session = try #require((try created.jsonObject()["session"] as? [String: Any])?["id"] as? String)
    try node.restart()
    let sessions = try HTTPClient.get(port: node.port, path: "/api/v1/sessions", token: peer.token).jsonObject()
    #expect((sessions["sessions"] as? [Any])?.isEmpty == true)
    #expect(try HTTPClient.get(port: node.port, path: "/api/v1/sessions/\(session)", token: peer.token).status == 404)
    let data = try HTTPClient.request(
      port: node.port, method: "POST", path: "/api/v1/sessions/\(session)/data",
      headers: [("Authorization", "Bearer \(peer.token)")], body: Array("hi".utf8))
    #expect(data.status == 404)
    #expect(try HTTPClient.post(port: node.port, path: "/api/v1/sessions", json: "{}", token: peer.token).status == 201)
    _ = try node.stop()
  }

  @Test func retentionKeepsTheNewestEventsAndFlagsTruncation() async throws {
    try await withNode(arguments: ["--event-retention", "10"]) { node in
      let peer = try node.createPeer("busy")
      for index in 1...400 { try rename(node, peer, to: "n\(index)") }
      let page = try HTTPClient.get(port: node.port, path: "/api/v1/events?since=0&limit=1000", token: peer.token)
        .jsonObject()
      let events = try #require(page["events"] as? [[String: Any]])
      // The log never holds more than the retention limit.
      #expect(events.count == 10)
      #expect(page["truncated"] as? Bool == true)
      let newest = try #require(events.last?["data"] as? [String: Any])
      #expect((newest["peer"] as? [String: Any])?["displayName"] as? String == "n400")
    }
  }

  @Test func twoHundredConcurrentWebSocketsAllReceiveTheEvent() async throws {
    try await withNode { node in
      let peer = try node.createPeer("crowd")
      var sockets: [WebSocketClient] = []
      defer { sockets.forEach { $0.abort() } }
      for _ in 0..<200 {
        sockets.append(try node.openEvents(peer).socket)
      }
      #expect(try node.metric("meshgate_websocket_connections") == 200)
      try rename(node, peer, to: "crowd 2")
      var received = 0
      for socket in sockets {
        let event = try socket.receiveJSONObject(timeout: .seconds(10))
        if event["type"] as? String == "peer.updated" { received += 1 }
      }
      #expect(received == 200)
    }
  }
}
