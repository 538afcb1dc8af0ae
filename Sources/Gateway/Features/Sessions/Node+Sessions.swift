/// Sessions, data and named events: REST handlers over ``SessionBook`` and the events they produce.
///
/// Layer 6 (surface) and 4 (runtime wiring). The state machine decides (strategies, capacity, late accepts);
/// this file validates input, turns ``SessionBook/Failure`` into the JSON error shape, sends frames and writes
/// `invitation.*`, `session.*` events to the peers' logs.
import Foundation
import LWS
import MeshCore

extension Node {
  /// Default and largest `maxPeers` (MultipeerConnectivity allows 8; we allow more, configurable per session).
  static let defaultMaxPeers: UInt16 = 64
  static let largestMaxPeers: UInt16 = 1024
  static let maxDataBytes = 1 << 20
  /// Bytes of a sender's lane on a mesh link above which its unreliable data is dropped (and counted).
  static let unreliableQueueLimit = 1 << 20
  /// How long a reliable send waits for room in its sender's lane before it is refused with 503.
  static let maxSendWaitMillis: UInt64 = 10_000

  // MARK: - Carrying out effects

  /// Queues a session or invitation frame for node `nodeID` on its link `connection` (``MeshEffect/sendToNode``).
  func sendSessionFrame(_ message: MeshMessage, to nodeID: String, on connection: LinkManager.ConnectionID) {
    guard let socket = mesh.socketByConnection[connection] else { return }
    switch message {
    case .sessionData(_, let from, _, 0, _):
      // Unreliable data never queues without bound: past the limit it is dropped (and counted).
      let producer = "peer:" + from
      if let scheduler = mesh.schedulers[socket],
        scheduler.queuedBytes(of: producer) > Self.unreliableQueueLimit || !scheduler.hasRoom(for: producer)
      {
        mesh.unreliableDropped += 1
        return
      }
      sendMessage(message, on: connection)
    case .sessionData(_, _, _, SessionBook.unsequenced, let payload),
      .sessionEvent(_, _, _, SessionBook.unsequenced, _, let payload):
      // Numbered when it goes on the wire (meshNextFrame). Room was checked before the send was accepted.
      enqueue(.reliable(message, nodeID: nodeID), bytes: payload.count + 256, lane: Self.lane(of: message), on: socket)
    default:
      sendMessage(message, on: connection)
    }
  }

  func sessionEvent(_ event: SessionBook.Event, for peerID: String) -> (peerID: String, type: String, data: JSONValue) {
    switch event {
    case .invitationReceived(let invitation):
      return (peerID, "invitation.received", ["invitation": invitationJSON(invitation)])
    case .invitationEnded(let invitation):
      return (peerID, "invitation.\(invitation.state.rawValue)", ["invitation": invitationJSON(invitation)])
    case .memberState(let sessionID, let member):
      return (
        peerID, "session.peer.state",
        ["sessionId": .string(sessionID), "peer": memberRefJSON(member), "state": .string(member.state.rawValue)]
      )
    case .data(let sessionID, let from, let payload, let reliable):
      var data: JSONObject = [
        "sessionId": .string(sessionID), "from": peerJSONByID(from), "mode": reliable ? "reliable" : "unreliable",
        "bytes": .int(Int64(payload.count)), "dataBase64": .string(Data(payload).base64EncodedString()),
      ]
      if let text = String(validating: payload, as: UTF8.self) { data["text"] = .string(text) }
      return (peerID, "session.data", .object(data))
    case .namedEvent(let sessionID, let from, let name, let object):
      return (
        peerID, "session.event",
        [
          "sessionId": .string(sessionID), "from": peerJSONByID(from), "event": .string(name),
          "object": (try? JSONValue.parse(object)) ?? .null,
        ]
      )
    case .sendFailed(let sessionID, let undelivered, let reason):
      return (
        peerID, "session.send.failed",
        [
          "sessionId": .string(sessionID), "undelivered": .array(undelivered.map { .string($0) }),
          "reason": .string(reason),
        ]
      )
    }
  }

  // MARK: - JSON views

  func memberRefJSON(_ member: SessionMember) -> JSONValue {
    ["id": .string(member.peerID), "displayName": .string(member.displayName), "nodeId": .string(member.nodeID)]
  }

  func peerJSONByID(_ peerID: String) -> JSONValue {
    if let peer = mesh.directory.peer(peerID) { return peer.json }
    return ["id": .string(peerID)]
  }

  func sessionJSON(_ session: SessionDescription) -> JSONValue {
    [
      "id": .string(session.sessionID), "strategy": .string(session.strategy.rawValue),
      "encryption": .string(session.encryption.rawValue), "maxPeers": .int(Int64(session.maxPeers)),
      "hostNodeId": .string(session.hostNodeID), "creatorPeerId": .string(session.creatorPeerID),
      "members": .array(
        session.members.map { member in
          [
            "id": .string(member.peerID), "displayName": .string(member.displayName),
            "nodeId": .string(member.nodeID), "state": .string(member.state.rawValue),
          ]
        }),
    ]
  }

  func invitationJSON(_ invitation: SessionBook.Invitation) -> JSONValue {
    let offer = invitation.offer
    let toName =
      invitation.toDisplayName.isEmpty
      ? (peers[offer.toPeerID]?.displayName ?? mesh.directory.peer(offer.toPeerID)?.displayName ?? "")
      : invitation.toDisplayName
    let remaining = Double(invitation.expiresAt) - Double(Self.monotonicMillis())
    var object: JSONObject = [
      "id": .string(offer.invitationID), "state": .string(invitation.state.rawValue),
      "session": [
        "id": .string(offer.session.sessionID), "strategy": .string(offer.session.strategy.rawValue),
        "encryption": .string(offer.session.encryption.rawValue),
      ],
      "from": [
        "id": .string(offer.fromPeerID), "displayName": .string(offer.fromDisplayName),
        "nodeId": .string(invitation.fromNodeID),
      ],
      "to": ["id": .string(offer.toPeerID), "displayName": .string(toName), "nodeId": .string(invitation.toNodeID)],
      "verificationCode": .string(offer.verificationCode),
      "timeoutSeconds": .double(Double(offer.timeoutMillis) / 1000),
      "expiresAt": .string(Timestamp.format(Date().addingTimeInterval(remaining / 1000))),
    ]
    object["context"] = String(validating: offer.context, as: UTF8.self).map { .string($0) } ?? .null
    return .object(object)
  }

  func failure(_ failure: MeshFailure) -> APIError {
    APIError(status: failure.status, code: failure.code, message: failure.message)
  }

  func member(for peer: StoredPeer) -> SessionMember {
    SessionMember(peerID: peer.id, displayName: peer.displayName, nodeID: nodeID, state: .connected)
  }

  // MARK: - Sessions

  func createSession(_ context: RequestContext) throws -> HTTPResponse {
    let body = try RequestBody(context.request, allowEmpty: true)
    try body.allowOnly(["encryption", "strategy", "maxPeers"])
    let encryption = try body.optionalEnum("encryption", SessionEncryption.self) ?? .optional
    let strategy = try body.optionalEnum("strategy", SessionStrategy.self) ?? .cluster
    var maxPeers = Self.defaultMaxPeers
    if let value = body.object["maxPeers"], value != .null {
      guard let number = value.intValue, (2...Int64(Self.largestMaxPeers)).contains(number) else {
        throw APIError.badRequest(
          "maxPeers must be an integer from 2 to \(Self.largestMaxPeers), not \(value.serializedString())")
      }
      maxPeers = UInt16(number)
    }
    if strategy == .pointToPoint { maxPeers = 2 }
    let peer = context.authenticatedPeer
    let session = mesh.node.createSession(
      RecordID.make(), creator: member(for: peer), strategy: strategy, encryption: encryption,
      maxPeers: maxPeers)
    return .json(["session": sessionJSON(session)], status: 201)
  }

  func listSessions(_ context: RequestContext) throws -> HTTPResponse {
    let page = try Page(
      mesh.sessions.sessions(of: context.authenticatedPeer.id), id: \.sessionID, query: context.request.head.query)
    return .json(["sessions": .array(page.items.map(sessionJSON)), "nextCursor": page.nextCursorJSON])
  }

  func ownSession(_ context: RequestContext) throws(APIError) -> SessionDescription {
    let id = context.parameters["sessionId"] ?? ""
    guard let session = mesh.sessions.sessions[id],
      session.members.contains(where: { $0.peerID == context.authenticatedPeer.id })
    else {
      throw APIError.notFound("no session \(id) with this peer as a member; see GET /api/v1/sessions")
    }
    return session
  }

  func getSession(_ context: RequestContext) throws -> HTTPResponse {
    .json(["session": sessionJSON(try ownSession(context))])
  }

  func leaveSession(_ context: RequestContext) throws -> HTTPResponse {
    let session = try ownSession(context)
    do {
      try leaveAfterQueuedData(session.sessionID, peerID: context.authenticatedPeer.id)
    } catch {
      throw failure(error)
    }
    return .noContent
  }

  /// Leaves a session for a local peer once the peer's data already queued on the links has gone out.
  ///
  /// A leave travels as control frames (`sessionLeave` to the host, the host's new `sessionState`), and control
  /// frames pass queued bulk data on a link; a receiver that learns of the leave first drops the data as coming from a
  /// peer that is no longer a member. So while the peer has frames in its lane on any link, the leave waits (the
  /// session is left as soon as they are written, or the link is gone). Throws what leaving would throw, at once.
  func leaveAfterQueuedData(_ sessionID: String, peerID: String) throws(MeshFailure) {
    guard hasQueuedData(from: peerID) else {
      interpret(try mesh.node.leave(sessionID, peerID: peerID))
      return
    }
    // The same checks as leaving now, so the caller hears of a bad request at once.
    guard let session = mesh.sessions.sessions[sessionID], session.members.contains(where: { $0.peerID == peerID })
    else {
      interpret(try mesh.node.leave(sessionID, peerID: peerID))
      return
    }
    // One held leave per member, however often it asks (the list stays bounded by the memberships).
    if !mesh.heldLeaves.contains(where: { $0.sessionID == sessionID && $0.peerID == peerID }) {
      mesh.heldLeaves.append((sessionID, peerID))
    }
  }

  /// Whether local peer `peerID` has data in its lane on any link.
  func hasQueuedData(from peerID: String) -> Bool {
    let lane = "peer:" + peerID
    return mesh.schedulers.values.contains { $0.queuedBytes(of: lane) > 0 }
  }

  /// Leaves held by ``leaveAfterQueuedData(_:peerID:)`` whose peer has nothing queued any more.
  func releaseHeldLeaves() {
    guard !mesh.heldLeaves.isEmpty else { return }
    var waiting: [(sessionID: String, peerID: String)] = []
    for leave in mesh.heldLeaves {
      if hasQueuedData(from: leave.peerID) {
        waiting.append(leave)
      } else {
        interpret((try? mesh.node.leave(leave.sessionID, peerID: leave.peerID)) ?? [])
      }
    }
    mesh.heldLeaves = waiting
  }

  func sendData(_ context: RequestContext) async throws -> HTTPResponse {
    let session = try ownSession(context)
    let query = context.request.head.query
    let mode = query["mode"] ?? "reliable"
    guard mode == "reliable" || mode == "unreliable" else {
      throw APIError.badRequest("mode must be reliable or unreliable, not \(mode.debugDescription)")
    }
    let targets = query["to"].map { $0.split(separator: ",").map(String.init).filter { !$0.isEmpty } }
    return .json(
      try await deliverWhenRoom(
        session.sessionID, from: context.authenticatedPeer.id, to: targets, payload: context.request.body, name: nil,
        reliable: mode == "reliable"),
      status: 202)
  }

  // MARK: - Backpressure on sends

  /// Why a send must wait before it goes.
  enum SendBlock {
    /// The mesh link to this node has no room in the sender's lane.
    case link(String)
    /// The node's event queue is over its high-water mark (``PublishQueue/highWater``), or was and is not yet back
    /// under its low-water mark.
    case eventQueue
    /// The sender's own events waiting in the event queue exceed ``PublishQueue/senderHighWater``.
    case senderEvents
  }

  /// Delivers session data (or a named event) once there is room for it: in its sender's lane on every link it
  /// crosses (reliable sends only; unreliable data is dropped on a full link instead), and in the node's event queue
  /// for the events it gives local peers (every send). At once when there is room, else after the sends ahead of it
  /// went out, in the order the sender's sends arrived. A send that finds no room within ``maxSendWaitMillis`` is
  /// refused with `503 link_busy` or `503 event_queue_full` and `Retry-After`, and nothing is sent.
  func deliverWhenRoom(
    _ sessionID: String, from peerID: String, to targets: [String]?, payload: [UInt8], name: String?,
    reliable: Bool = true
  ) async throws -> JSONValue {
    guard payload.count <= Self.maxDataBytes else {
      throw APIError(status: 413, code: "payload_too_large", message: "session data is limited to 1 MiB per message")
    }
    if mustWait(sessionID, from: peerID, to: targets, reliable: reliable) == nil {
      return try deliver(sessionID, from: peerID, to: targets, payload: payload, reliable: reliable, name: name)
    }
    return try await withCheckedThrowingContinuation { continuation in
      mesh.heldSends.append(
        HeldSend(
          producer: "peer:" + peerID, sessionID: sessionID, peerID: peerID, targets: targets, payload: payload,
          name: name, reliable: reliable, deadline: Self.monotonicMillis() + Self.maxSendWaitMillis,
          continuation: continuation))
    }
  }

  /// What keeps `peerID`'s send from going now (nil: it may go now). A send waits as well while an earlier send of
  /// the same peer waits, so a peer's sends keep their order.
  func mustWait(
    _ sessionID: String, from peerID: String, to targets: [String]?, reliable: Bool = true, ignoringHeld: Bool = false
  ) -> SendBlock? {
    let producer = "peer:" + peerID
    if !ignoringHeld, let held = mesh.heldSends.first(where: { $0.producer == producer }) {
      return mustWait(held.sessionID, from: peerID, to: held.targets, reliable: held.reliable, ignoringHeld: true)
        ?? .senderEvents
    }
    // Local senders are held at the event queue's bounds (what they send to local peers waits there for the store).
    if events.localSendsPaused { return .eventQueue }
    if events.queuedBytes(of: peerID) > PublishQueue<CheckedContinuation<Void, any Error>>.senderHighWater {
      return .senderEvents
    }
    // Without links nothing can be full; unreliable data is dropped on a full link rather than held.
    guard reliable, !mesh.schedulers.isEmpty, let session = mesh.sessions.sessions[sessionID] else { return nil }
    var checked: Set<String> = []
    // Members hosted here need no link (most of a session's members, often): skipped before any hashing.
    for member in session.members
    where member.state == .connected && member.nodeID != nodeID && member.peerID != peerID {
      guard targets?.contains(member.peerID) ?? true, checked.insert(member.nodeID).inserted else { continue }
      if let scheduler = scheduler(toNode: member.nodeID), !scheduler.hasRoom(for: producer) {
        return .link(member.nodeID)
      }
    }
    return nil
  }

  /// Lets held sends go, oldest first, as far as there is room; refuses those past their deadline.
  func admitHeldSends() {
    guard !mesh.heldSends.isEmpty else { return }
    let now = Self.monotonicMillis()
    var blocked: Set<String> = []
    var index = 0
    while index < mesh.heldSends.count {
      let held = mesh.heldSends[index]
      guard !blocked.contains(held.producer) else {
        index += 1
        continue
      }
      if let block = mustWait(
        held.sessionID, from: held.peerID, to: held.targets, reliable: held.reliable, ignoringHeld: true)
      {
        blocked.insert(held.producer)
        guard now >= held.deadline else {
          index += 1
          continue
        }
        mesh.heldSends.remove(at: index)
        switch block {
        case .link(let busy):
          mesh.sendsRefused += 1
          held.continuation.resume(throwing: Self.linkBusy(busy))
        case .eventQueue, .senderEvents:
          mesh.localSendsRefused += 1
          held.continuation.resume(throwing: Self.eventQueueFull(block))
        }
        continue
      }
      mesh.heldSends.remove(at: index)
      held.continuation.resume(
        with: Result {
          try deliver(
            held.sessionID, from: held.peerID, to: held.targets, payload: held.payload, reliable: held.reliable,
            name: held.name)
        })
    }
  }

  static func linkBusy(_ node: String) -> APIError {
    APIError(
      status: 503, code: "link_busy",
      message:
        "the mesh link to node \(node) had no room for this peer's data for \(maxSendWaitMillis / 1000) s (the other "
        + "node takes it in more slowly than this peer sends); nothing was sent, send it again after Retry-After",
      headers: [("retry-after", "1")])
  }

  static func eventQueueFull(_ block: SendBlock) -> APIError {
    let bound =
      if case .senderEvents = block {
        "this peer's events waiting to be written to its recipients' event logs were over "
          + "\(PublishQueue<CheckedContinuation<Void, any Error>>.senderHighWater >> 20) MiB"
      } else {
        "the node's events waiting to be written to peers' event logs were over "
          + "\(PublishQueue<CheckedContinuation<Void, any Error>>.highWater >> 20) MiB"
      }
    return APIError(
      status: 503, code: "event_queue_full",
      message:
        "\(bound) for \(maxSendWaitMillis / 1000) s (this peer sends faster than the node's disk takes the events in); "
        + "nothing was sent, send it again after Retry-After and send more slowly",
      headers: [("retry-after", "1")])
  }

  /// Sends session data (or a named event) now. Returns what a sender is told: `{accepted, undelivered, bytes}`, the
  /// body of the REST route's `202` and the `data` of the WebSocket's `sent` reply.
  func deliver(
    _ sessionID: String, from peerID: String, to targets: [String]?, payload: [UInt8], reliable: Bool, name: String?
  ) throws -> JSONValue {
    guard payload.count <= Self.maxDataBytes else {
      throw APIError(status: 413, code: "payload_too_large", message: "session data is limited to 1 MiB per message")
    }
    let result: (effects: [MeshEffect], undelivered: [String])
    do {
      result = try mesh.node.send(
        sessionID, from: peerID, to: targets, payload: payload, reliable: reliable, namedEvent: name)
    } catch {
      throw failure(error)
    }
    // What this send publishes for local peers is counted as this peer's in the event queue.
    events.producer = peerID
    interpret(result.effects)
    events.producer = nil
    let recipients = MeshNode.addressed(by: result.effects).count
    return [
      "accepted": .int(Int64(recipients)), "undelivered": .array(result.undelivered.map { .string($0) }),
      "bytes": .int(Int64(payload.count)),
    ]
  }

  func sendNamedEvent(_ context: RequestContext) async throws -> HTTPResponse {
    let session = try ownSession(context)
    let body = try RequestBody(context.request)
    try body.allowOnly(["event", "object", "to"])
    let name = try body.requiredString("event")
    guard !name.isEmpty, name.utf8.count <= 256 else {
      throw APIError.badRequest("event must be a name of 1–256 UTF-8 bytes")
    }
    let object = body.object["object"] ?? .null
    let targets = try body.optionalStringArray("to")
    return .json(
      try await deliverWhenRoom(
        session.sessionID, from: context.authenticatedPeer.id, to: targets, payload: object.serialized(), name: name),
      status: 202)
  }

  /// `{"op":"send","session":id,"to":[ids]?,"mode":"reliable|unreliable"?,"text":"…" | "dataBase64":"…"}` over the
  /// browser WebSocket: the same as `POST /api/v1/sessions/{id}/data`, with the same backpressure. A reliable send
  /// that must wait for room pauses reading the socket (later messages wait their turn) until it is sent, or refused
  /// with a `link_busy` error after the same wait as the REST route; the socket stays open either way.
  func socketSend(_ object: JSONObject, subscriber: Subscriber, socket: WebSocketID) -> JSONValue? {
    let peerID = subscriber.peerID
    let request: SocketSendRequest
    do {
      request = try parseSocketSend(object, peerID: peerID)
    } catch let error as APIError {
      return Self.socketError(error.code, error.message)
    } catch {
      return Self.socketError("internal_error", "the node could not send: \(error)")
    }
    guard mustWait(request.sessionID, from: peerID, to: request.targets, reliable: request.reliable) != nil else {
      return Self.sentReply {
        try deliver(
          request.sessionID, from: peerID, to: request.targets, payload: request.payload, reliable: request.reliable,
          name: nil)
      }
    }
    subscriber.holding = true
    server.setReceiveFlow(socket, enabled: false)
    Task {
      var reply: JSONValue
      do {
        let sent = try await deliverWhenRoom(
          request.sessionID, from: peerID, to: request.targets, payload: request.payload, name: nil,
          reliable: request.reliable)
        reply = Self.sentReply { sent }
      } catch {
        reply = Self.sentReply { throw error }
      }
      guard events.isCurrent(subscriber) else { return }
      events.sendFrame(reply, to: subscriber, writeNow: true, node: self)
      subscriber.holding = false
      server.setReceiveFlow(socket, enabled: true)
      while !subscriber.holding, events.isCurrent(subscriber), !subscriber.backlog.isEmpty {
        webSocketReceived(socket, subscriber.backlog.removeFirst())
      }
    }
    return nil
  }

  /// The WebSocket reply to a send: `{"type":"sent","data":{…}}` like the REST answer, or an error message.
  static func sentReply(_ send: () throws -> JSONValue) -> JSONValue {
    do {
      return ["type": "sent", "data": try send()]
    } catch let error as APIError {
      var reply = socketError(error.code, error.message)
      if error.status == 503, case .object(var object) = reply, case .object(var data)? = object["data"] {
        data["retryAfterSeconds"] = 1
        object["data"] = .object(data)
        reply = .object(object)
      }
      return reply
    } catch {
      return socketError("internal_error", "the node could not send: \(error)")
    }
  }

  struct SocketSendRequest {
    let sessionID: String
    let targets: [String]?
    let payload: [UInt8]
    let reliable: Bool
  }

  static let socketSendFields: Set<String> = ["op", "session", "to", "mode", "text", "dataBase64"]

  func parseSocketSend(_ object: JSONObject, peerID: String) throws -> SocketSendRequest {
    let body = RequestBody(object: object)
    try body.allowOnly(Self.socketSendFields)
    let sessionID = try body.requiredString("session")
    let mode = try body.optionalString("mode") ?? "reliable"
    guard mode == "reliable" || mode == "unreliable" else {
      throw APIError.badRequest("mode must be reliable or unreliable, not \(mode.debugDescription)")
    }
    let payload: [UInt8]
    let text = try body.optionalString("text")
    let encoded = try body.optionalString("dataBase64")
    guard text == nil || encoded == nil else { throw APIError.badRequest("send text or dataBase64, not both") }
    if let text {
      payload = Array(text.utf8)
    } else if let encoded {
      guard let data = Data(base64Encoded: encoded) else {
        throw APIError.badRequest("dataBase64 is not valid base64")
      }
      payload = [UInt8](data)
    } else {
      throw APIError.badRequest("send needs text or dataBase64")
    }
    guard let session = mesh.sessions.sessions[sessionID], session.members.contains(where: { $0.peerID == peerID })
    else {
      throw APIError.notFound("no session \(sessionID) with this peer as a member")
    }
    guard payload.count <= Self.maxDataBytes else {
      throw APIError(status: 413, code: "payload_too_large", message: "session data is limited to 1 MiB per message")
    }
    return SocketSendRequest(
      sessionID: sessionID, targets: try body.optionalStringArray("to"), payload: payload,
      reliable: mode == "reliable")
  }
}

extension RequestBody {
  /// `timeoutSeconds`: an integer within DESIGN.md's invitation range, or the default when absent.
  func timeoutSeconds() throws(APIError) -> Int {
    guard let value = object["timeoutSeconds"], value != .null else { return Validate.defaultTimeoutSeconds }
    guard let number = value.intValue else {
      throw .badRequest("timeoutSeconds must be an integer, not \(value.typeDescription)")
    }
    do {
      return try Validate.timeoutSeconds(Int(number))
    } catch {
      throw error.apiError
    }
  }

  func optionalString(_ key: String) throws(APIError) -> String? {
    guard let value = object[key], value != .null else { return nil }
    guard case .string(let string) = value else {
      throw .badRequest("\(key) must be a string, not \(value.typeDescription)")
    }
    return string
  }

  func optionalStringArray(_ key: String) throws(APIError) -> [String]? {
    guard let value = object[key], value != .null else { return nil }
    guard case .array(let items) = value else {
      throw .badRequest("\(key) must be an array of peer ids, not \(value.typeDescription)")
    }
    var strings: [String] = []
    for item in items {
      guard case .string(let string) = item else {
        throw .badRequest("\(key) must contain only strings, not \(item.typeDescription)")
      }
      strings.append(string)
    }
    return strings
  }

  func optionalEnum<T: RawRepresentable & CaseIterable>(_ key: String, _ type: T.Type) throws(APIError) -> T?
  where T.RawValue == String {
    guard let text = try optionalString(key) else { return nil }
    guard let value = T(rawValue: text) else {
      throw .badRequest(
        "\(key) must be one of \(T.allCases.map(\.rawValue).joined(separator: ", ")), not \(text.debugDescription)")
    }
    return value
  }
}
