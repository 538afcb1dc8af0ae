import Foundation
import MeshCore
import MeshgateTestSupport
import Testing

/// Garbage and truncated frames sent to a live node on `/mesh` (subprotocol meshgate-node.v1) and on the browser
/// WebSocket `/api/v1/ws` never crash it: it closes the bad link or answers an error, keeps serving, and real links
/// and sessions keep working. Random inputs come from a generator seeded per run (the seed is in the failure text).
@Suite(.timeLimit(.minutes(3)))
struct GarbageInputTests {
  /// A small deterministic generator (SplitMix64), so a failing run can be repeated from its seed.
  struct Random: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
      state &+= 0x9E37_79B9_7F4A_7C15
      var z = state
      z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
      z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
      return z ^ (z >> 31)
    }
    mutating func bytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255, using: &self) } }
  }

  /// Valid frames of every kind, to truncate and corrupt.
  static let validFrames: [[UInt8]] = {
    let member = SessionMember(peerID: "p1", displayName: "Mallory", nodeID: "fake-node", state: .connected)
    let session = SessionDescription(
      sessionID: "s1", hostNodeID: "fake-node", creatorPeerID: "p1", strategy: .cluster, encryption: .optional,
      maxPeers: 8, revision: 1, members: [member])
    let messages: [MeshMessage] = [
      .hello(NodeHello(nodeID: "fake-node", name: "fake", softwareVersion: "0.1.0", port: 1)),
      .heartbeat(sequence: 1, sentAtMillis: 2), .peerSnapshot([PeerAnnouncement(peerID: "p1", displayName: "M")]),
      .sessionState(session),
      .sessionData(sessionID: "s1", fromPeerID: "p1", toPeerIDs: ["x"], sequence: 1, payload: Array("hi".utf8)),
      .chat(payload: Array(#"{"op":"post","room":"r","message":{}}"#.utf8)), .goodbye(reason: "bye"),
    ]
    return messages.map(MeshFrameCodec.encode)
  }()

  static func healthy(_ node: NodeProcess) throws -> Bool {
    try HTTPClient.get(port: node.port, path: "/healthz", timeout: .seconds(5)).status == 200
  }

  /// Reads whatever the node sends for a moment; a close or a reset is fine, a hang of the node is not.
  static func drain(_ socket: WebSocketClient) {
    for _ in 0..<3 {
      guard let message = try? socket.receive(timeout: .milliseconds(100)) else { return }
      if case .close = message { return }
    }
  }

  @Test func garbageOnMeshLinksNeverCrashesANodeAndRealLinksKeepWorking() async throws {
    let seed = UInt64.random(in: 1...UInt64.max)
    var random = Random(state: seed)
    try await withNodes(count: 2, seeds: .allEarlier, linked: true) { nodes in
      let alice = try nodes[0].meshPeer("alice")
      let bob = try nodes[1].meshPeer("bob")
      let session = try alice.createSession()
      let sessionID = try #require(session["id"] as? String)
      try await inviteAndAccept(alice, bob, sessionID: sessionID)
      let target = nodes[0]
      let badBefore = try target.metric("meshgate_mesh_bad_frames_total") ?? 0
      var sent = 0
      for round in 0..<120 {
        let socket: WebSocketClient
        do {
          socket = try WebSocketClient(port: target.port, path: "/mesh", subprotocols: ["meshgate-node.v1"])
        } catch {
          Issue.record("seed \(seed) round \(round): the /mesh upgrade failed: \(error)")
          break
        }
        defer { socket.abort() }
        let frame = Self.validFrames[round % Self.validFrames.count]
        switch round % 6 {
        case 0: try? socket.send(binary: random.bytes(Int.random(in: 0...512, using: &random)))
        case 1: try? socket.send(binary: Array(frame.prefix(Int.random(in: 0..<frame.count, using: &random))))
        case 2:
          var corrupt = frame
          for _ in 0..<3 {
            corrupt[Int.random(in: 0..<corrupt.count, using: &random)] ^= UInt8.random(in: 1...255, using: &random)
          }
          try? socket.send(binary: corrupt)
        case 3:
          // A valid hello, then a truncated or garbage frame on the linked connection.
          try? socket.send(binary: Self.validFrames[0])
          try? socket.send(binary: Array(frame.dropLast(1)))
        case 4: try? socket.send(text: String(decoding: random.bytes(64), as: UTF8.self))
        default:
          // A WebSocket frame header promising more bytes than ever come, then the connection drops.
          try? socket.sendRaw([0x82, 0x7E, 0x40, 0x00] + random.bytes(10))
        }
        sent += 1
        Self.drain(socket)
        if round % 20 == 19 {
          #expect(try Self.healthy(target), "seed \(seed): node unhealthy after round \(round)")
        }
      }
      #expect(sent == 120)
      #expect(target.isRunning, "seed \(seed): the node died; stderr:\n\(target.logTail(lines: 30))")
      #expect(try Self.healthy(target))
      #expect((try target.metric("meshgate_mesh_bad_frames_total") ?? 0) > badBefore)
      // The real link still carries the session.
      try await awaitLinks(nodes)
      #expect(try alice.sendData(sessionID, "still here").status == 202)
      try await bob.awaitEvent("session.data") { $0.text == "still here" }
    }
  }

  @Test func garbageOnBrowserSocketsNeverCrashesANode() async throws {
    let seed = UInt64.random(in: 1...UInt64.max)
    var random = Random(state: seed)
    try await withNode { node in
      let peer = try node.createPeer("fuzzy")
      for round in 0..<150 {
        let (socket, _) = try node.openEvents(peer)
        defer { socket.abort() }
        switch round % 6 {
        case 0:
          try? socket.send(text: String(decoding: random.bytes(Int.random(in: 0...300, using: &random)), as: UTF8.self))
        case 1: try? socket.send(binary: random.bytes(Int.random(in: 0...300, using: &random)))
        case 2:
          let valid = #"{"op":"send","session":"s","mode":"reliable","text":"hello","to":["a","b"]}"#
          try? socket.send(text: String(valid.prefix(Int.random(in: 0..<valid.count, using: &random))))
        case 3: try? socket.send(text: String(repeating: "[", count: 5000))
        case 4:
          // Invalid UTF-8 in a text frame, then an unfinished fragmented message.
          try? socket.sendFrame(opcode: .text, payload: [0xC3, 0x28, 0xFF])
          try? socket.sendFrame(opcode: .text, payload: Array("{\"op\":".utf8), fin: false)
        default: try? socket.sendRaw([0x81, 0xFF] + random.bytes(6))
        }
        Self.drain(socket)
        if round % 25 == 24 { #expect(try Self.healthy(node), "seed \(seed): unhealthy after round \(round)") }
      }
      #expect(node.isRunning, "seed \(seed): the node died; stderr:\n\(node.logTail(lines: 30))")
      // The node still answers pings on a fresh socket.
      let (socket, _) = try node.openEvents(peer)
      defer { socket.abort() }
      try socket.send(text: #"{"op":"ping"}"#)
      #expect(try socket.receiveJSONObject()["type"] as? String == "pong")
    }
  }

  /// Found by schemathesis: a request pipelined behind a POST body on one keep-alive connection made lws 4.1.6
  /// re-run LWS_CALLBACK_HTTP_BODY_COMPLETION on every service pass, so the service thread spun and the node stopped
  /// answering everyone. The server now closes such a connection after a few repeated completions.
  @Test func pipelinedRequestsBehindABodyKeepTheNodeServing() async throws {
    try await withNode { node in
      let one = #"POST /api/v1/chats HTTP/1.1\#r\#nHost: x\#r\#nContent-Length: 13\#r\#n\#r\#n{"name": "0"}"#
      for _ in 0..<3 {
        _ = try HTTPClient.raw(port: node.port, bytes: Array((one + one + one).utf8), timeout: .seconds(2))
        #expect(try Self.healthy(node))
      }
      let peer = try node.createPeer("after")
      #expect(try HTTPClient.get(port: node.port, path: "/api/v1/peers/me", token: peer.token).status == 200)
    }
  }
}
