/// Entry points for the libFuzzer harness in `Fuzz/` (`make fuzz`): each feeds arbitrary bytes through one decoder
/// the network reaches, and traps (a finding) only when an invariant breaks: a decoded value that does not survive
/// encode → decode unchanged. Errors are the expected outcome for garbage; crashes, hangs and leaks are findings.
///
/// Layer 6. Public only so that the separate fuzz package can call into the internal request decoders; nothing
/// in the node calls these.
import LWS
import MeshCore

/// Fuzzable decoders.
public enum FuzzTargets {
  /// `MeshFrameCodec.decode`, then encode → decode must give the same message.
  public static func meshFrame(_ bytes: [UInt8]) {
    guard let message = try? MeshFrameCodec.decode(bytes) else { return }
    let again = try? MeshFrameCodec.decode(MeshFrameCodec.encode(message))
    precondition(again == message, "mesh frame did not survive encode/decode: \(message)")
  }

  /// `ChatWire.decode`, then encoded → decode must give the same frame.
  public static func chatWire(_ bytes: [UInt8]) {
    guard let wire = try? ChatWire.decode(bytes) else { return }
    let again = try? ChatWire.decode(wire.encoded())
    precondition(again == wire, "chat frame did not survive encode/decode: \(wire)")
  }

  /// `JSONValue.parse`, serialization round trip, then every request-body reader the REST handlers and the
  /// browser WebSocket use, on the same object.
  public static func requestBody(_ bytes: [UInt8]) {
    if let value = try? JSONValue.parse(bytes) {
      // Numbers may change form (2e1 parses as a double and prints as 20, which parses as an integer), so the
      // invariant is on the text: what the node prints must parse back to something that prints the same.
      let text = value.serialized()
      let again = try? JSONValue.parse(text)
      precondition(
        again?.serialized() == text, "JSON did not survive serialize/parse: \(value.serializedString())")
    }
    let head = HTTPRequestHead(
      method: .post, path: "/api/v1/peers",
      headers: HTTPHeaders([("content-type", "application/json")]), remoteAddress: "fuzz")
    let request = HTTPRequest(id: RequestID(0), head: head, body: bytes)
    guard let body = try? RequestBody(request, allowEmpty: true) else { return }
    _ = try? body.allowOnly(["displayName", "discoveryInfo", "to", "session", "context", "timeoutSeconds"])
    if let name = try? body.requiredString("displayName") { _ = try? Validate.displayName(name) }
    if let info = try? body.optionalStringMap("discoveryInfo") { _ = try? Validate.discoveryInfo(info) }
    _ = try? body.timeoutSeconds()
    _ = try? body.optionalString("context")
    _ = try? body.optionalStringArray("to")
    _ = try? body.optionalEnum("strategy", SessionStrategy.self)
    _ = try? body.optionalEnum("encryption", SessionEncryption.self)
    if let type = try? body.requiredString("serviceType") { _ = try? Validate.serviceType(type) }
    if let name = try? body.requiredString("name") { _ = try? JobRules.name(name) }
    if let notes = try? body.requiredString("notes") { _ = try? JobRules.notes(notes) }
    if let date = try? body.requiredString("dueDate") { _ = try? JobRules.dueDate(date) }
    if let payment = body.object["payment"] { _ = try? JobRules.payment(payment) }
    if let text = try? body.requiredString("body") { _ = try? ChatRules.body(text) }
    if let id = try? body.requiredString("id") { _ = try? ChatRules.messageID(id) }
    if let name = try? body.requiredString("roomName") { _ = try? ChatRules.roomName(name) }
    _ = try? EventHub.parseCursor(try? body.requiredString("since"), name: "since")
  }

  /// Seed inputs per target (`mesh-frame`, `chat-wire`, `request-body`): one valid input of every kind, so the
  /// fuzzer starts from real frames and bodies instead of discovering the formats byte by byte.
  public static func seeds() -> [String: [[UInt8]]] {
    let member = SessionMember(peerID: "p1", displayName: "Alice", nodeID: "n1", state: .connected)
    let session = SessionDescription(
      sessionID: "s1", hostNodeID: "n1", creatorPeerID: "p1", strategy: .cluster, encryption: .optional, maxPeers: 8,
      revision: 3, members: [member])
    let offer = InvitationOffer(
      invitationID: "i1", session: session, fromPeerID: "p1", fromDisplayName: "Alice", toPeerID: "p2",
      context: Array("Fix the sink".utf8), timeoutMillis: 30_000, verificationCode: "123456")
    let announcement = PeerAnnouncement(
      peerID: "p1", displayName: "Alice", advertising: ["jobmanager-jobs": ["skills": "plumbing"]])
    let messages: [MeshMessage] = [
      .hello(NodeHello(nodeID: "n1", name: "node-a", softwareVersion: "0.1.0", port: 8080)),
      .heartbeat(sequence: 7, sentAtMillis: 123_456), .heartbeatAck(sequence: 7, sentAtMillis: 123_456),
      .peerSnapshot([announcement]), .peerUpdated(announcement), .peerRemoved(peerID: "p1"),
      .nodeDirectory([NodeAddress(nodeID: "n2", host: "127.0.0.1", port: 8081)]), .goodbye(reason: "shutdown"),
      .invite(offer), .inviteAnswer(invitationID: "i1", outcome: .accepted),
      .inviteClosed(invitationID: "i1", outcome: .canceled), .sessionJoin(sessionID: "s1", member: member),
      .sessionLeave(sessionID: "s1", peerID: "p1"), .sessionState(session),
      .sessionData(sessionID: "s1", fromPeerID: "p1", toPeerIDs: ["p2"], sequence: 1, payload: Array("hi".utf8)),
      .sessionEvent(
        sessionID: "s1", fromPeerID: "p1", toPeerIDs: ["p2"], sequence: 2, name: "cursor", object: Array("{}".utf8)),
      .dataAck(sequence: 2),
    ]
    let peer = Directory.PeerRef(peerID: "p1", displayName: "Alice", nodeID: "n1")
    let message = ChatMessage(
      id: "m-000001", from: peer, senderSeq: 1, body: "hello", sentAt: "2026-01-01T00:00:00Z", seq: 4)
    let wires: [ChatWire] = [
      .sync(roomID: "r1", members: [peer], after: 3), .post(roomID: "r1", message),
      .messages(roomID: "r1", [message]),
      .roster(roomID: "r1", name: "Lobby", host: peer, members: [peer], ended: false), .unknownRoom(roomID: "r1"),
    ]
    let bodies = [
      #"{"displayName":"alice","discoveryInfo":{"room":"lab"}}"#,
      #"{"to":"p2","session":"s1","context":"Fix the sink","timeoutSeconds":60}"#,
      #"{"strategy":"pointToPoint","encryption":"required","maxPeers":2}"#,
      #"{"name":"Fix the sink","dueDate":"2027-03-31","payment":"120.00","notes":"Kitchen"}"#,
      #"{"body":"Who has the wrench?","id":"bob-0001-wrench"}"#, #"{"serviceType":"ar-demo","since":"12"}"#,
      #"{"op":"send","session":"s1","mode":"reliable","text":"hi","to":["p2"]}"#, #"[1,2.5e3,-0,true,null,"\u00e9"]"#,
    ]
    return [
      "mesh-frame": messages.map(MeshFrameCodec.encode), "chat-wire": wires.map { $0.encoded() },
      "request-body": bodies.map { Array($0.utf8) },
    ]
  }
}
