/// Sessions, data and named events: the session routes' commands over ``SessionBook`` (held by the node's
/// ``MeshNode``), the backpressure on sends, and the words of the `session.*` and `invitation.*` events.
///
/// Layer 6 (surface) and 4 (runtime wiring). The state machine decides (strategies, capacity, late accepts);
/// this feature validates input, turns ``MeshFailure`` into the JSON error shape, holds sends until their links and
/// the event queue have room, and says what the events local peers are told look like. It reaches the session book
/// through what the node exposes for mesh input (`node.mesh.node`, `node.interpret`); the shell reaches it through
/// ``NodeFeature``'s hooks (ticks, room freed for sends, event wording, the `send` op of the event socket, metrics).
import Foundation
import LWS
import MeshCore

/// A send held until its sender's lane has room on every link it crosses and the event queue has room for it.
struct HeldSend {
  let producer: String
  let sessionID: String
  let peerID: String
  let targets: [String]?
  let payload: [UInt8]
  let name: String?
  let reliable: Bool
  let deadline: UInt64
  let continuation: CheckedContinuation<JSONValue, any Error>
}

/// The sessions feature: the session routes' commands and the sends held for room, with the state they need. Owned
/// by the node actor and only touched on its executor; the sessions themselves are in the mesh core's session book.
final class SessionsFeature: NodeFeature {
  /// Default and largest `maxPeers` (MultipeerConnectivity allows 8; we allow more, configurable per session).
  static let defaultMaxPeers: UInt16 = 64
  static let largestMaxPeers: UInt16 = 1024
  static let maxDataBytes = 1 << 20
  /// How long a reliable send waits for room in its sender's lane before it is refused with 503.
  static let maxSendWaitMillis: UInt64 = 10_000

  /// Reliable sends waiting for room in their sender's lane, oldest first
  /// (``deliverWhenRoom(_:from:to:payload:name:reliable:node:)``).
  var heldSends: [HeldSend] = []
  /// Local peers' leaves waiting for the peer's data queued on the links to go out first
  /// (``leaveAfterQueuedData(_:peerID:node:)``).
  var heldLeaves: [(sessionID: String, peerID: String)] = []
  /// Reliable sends answered 503 because their link had no room within ``maxSendWaitMillis``.
  var sendsRefused = 0
  /// Local session sends answered 503 because the node's event queue had no room for them within
  /// ``maxSendWaitMillis``.
  var localSendsRefused = 0

  // MARK: - Hooks

  /// Held sends go when there is room, or are refused past their deadline.
  func tick(node: isolated Node) {
    admitHeldSends(node: node)
  }

  /// Bulk room on a mesh link (or a link gone): held sends and the leaves waiting behind queued data go on.
  func linkRoomFreed(node: isolated Node) {
    admitHeldSends(node: node)
    releaseHeldLeaves(node: node)
  }

  /// The event queue drained: local senders held at its bounds go on (in order, up to the bounds again).
  func eventQueueRoomFreed(node: isolated Node) {
    admitHeldSends(node: node)
  }

  /// A deleted peer's memberships are gone with it: so are its held leaves.
  func peerRemoved(_ peerID: String, node: isolated Node) {
    heldLeaves.removeAll { $0.peerID == peerID }
  }

  func eventSocketOp(
    _ op: String, _ object: JSONObject, subscriber: Subscriber, socket: WebSocketID, node: isolated Node
  ) -> EventSocketAnswer? {
    guard op == "send" else { return nil }
    return socketSend(object, subscriber: subscriber, socket: socket, node: node).map { .reply($0) } ?? .later
  }

  func metricsLines(into lines: inout [String], node: isolated Node) {
    let samples: [MetricSample] = [
      ("meshgate_sessions", "gauge", "Sessions with a member on this node.", node.mesh.node.sessions.sessions.count),
      (
        "meshgate_unreliable_dropped_total", "counter",
        "Unreliable session messages dropped because their sender's lane on a mesh link was full.",
        node.links.unreliableDropped
      ),
      (
        "meshgate_mesh_sends_refused_total", "counter",
        "Reliable session sends answered 503 link_busy: no room on their mesh link within 10 s.", sendsRefused
      ),
      (
        "meshgate_event_queue_sends_refused_total", "counter",
        "Local session sends answered 503 event_queue_full: no room in the event queue within 10 s.",
        localSendsRefused
      ),
      (
        "meshgate_mesh_sends_waiting", "gauge",
        "Session sends waiting for room on a mesh link or in the event queue.", heldSends.count
      ),
    ]
    for sample in samples { lines.appendSample(sample) }
  }

  /// The `session.*` or `invitation.*` event local peer `peerID` is told for `event`.
  func sessionEventJSON(
    _ event: SessionBook.Event, for peerID: String, node: isolated Node
  ) -> (type: String, data: JSONValue)? {
    switch event {
    case .invitationReceived(let invitation):
      return ("invitation.received", ["invitation": invitation.json(node: node)])
    case .invitationEnded(let invitation):
      return ("invitation.\(invitation.state.rawValue)", ["invitation": invitation.json(node: node)])
    case .memberState(let sessionID, let member):
      return (
        "session.peer.state",
        ["sessionId": .string(sessionID), "peer": member.refJSON, "state": .string(member.state.rawValue)]
      )
    case .data(let sessionID, let from, let payload, let reliable):
      var data: JSONObject = [
        "sessionId": .string(sessionID), "from": peerJSON(from, node: node),
        "mode": reliable ? "reliable" : "unreliable",
        "bytes": .int(Int64(payload.count)), "dataBase64": .string(Data(payload).base64EncodedString()),
      ]
      if let text = String(validating: payload, as: UTF8.self) { data["text"] = .string(text) }
      return ("session.data", .object(data))
    case .namedEvent(let sessionID, let from, let name, let object):
      return (
        "session.event",
        [
          "sessionId": .string(sessionID), "from": peerJSON(from, node: node), "event": .string(name),
          "object": (try? JSONValue.parse(object)) ?? .null,
        ]
      )
    case .sendFailed(let sessionID, let undelivered, let reason):
      return (
        "session.send.failed",
        [
          "sessionId": .string(sessionID), "undelivered": .array(undelivered.map { .string($0) }),
          "reason": .string(reason),
        ]
      )
    }
  }

  /// A peer known to the directory as `{"id","displayName","nodeId"}`, else `{"id"}`.
  func peerJSON(_ peerID: String, node: isolated Node) -> JSONValue {
    if let peer = node.mesh.node.directory.peer(peerID) { return peer.json }
    return ["id": .string(peerID)]
  }

  // MARK: - Sessions

  func createSession(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
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
    let session = node.mesh.node.createSession(
      RecordID.make(), creator: SessionMember(hosting: peer, nodeID: node.nodeID), strategy: strategy,
      encryption: encryption,
      maxPeers: maxPeers)
    return .json(["session": session.json], status: 201)
  }

  func listSessions(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    let page = try Page(
      node.mesh.node.sessions.sessions(of: context.authenticatedPeer.id), id: \.sessionID,
      query: context.request.head.query)
    return .json(["sessions": .array(page.items.map(\.json)), "nextCursor": page.nextCursorJSON])
  }

  func ownSession(_ context: RequestContext, node: isolated Node) throws(APIError) -> SessionDescription {
    let id = context.parameters["sessionId"] ?? ""
    guard let session = node.mesh.node.sessions.sessions[id],
      session.members.contains(where: { $0.peerID == context.authenticatedPeer.id })
    else {
      throw APIError.notFound("no session \(id) with this peer as a member; see GET /api/v1/sessions")
    }
    return session
  }

  func getSession(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    .json(["session": try ownSession(context, node: node).json])
  }

  func leaveSession(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    let session = try ownSession(context, node: node)
    do {
      try leaveAfterQueuedData(session.sessionID, peerID: context.authenticatedPeer.id, node: node)
    } catch {
      throw APIError(error)
    }
    return .noContent
  }

  /// Leaves a session for a local peer once the peer's data already queued on the links has gone out.
  ///
  /// A leave travels as control frames (`sessionLeave` to the host, the host's new `sessionState`), and control
  /// frames pass queued bulk data on a link; a receiver that learns of the leave first drops the data as coming from a
  /// peer that is no longer a member. So while the peer has frames in its lane on any link, the leave waits (the
  /// session is left as soon as they are written, or the link is gone). Throws what leaving would throw, at once.
  func leaveAfterQueuedData(_ sessionID: String, peerID: String, node: isolated Node) throws(MeshFailure) {
    guard hasQueuedData(from: peerID, node: node) else {
      node.interpret(try node.mesh.node.leave(sessionID, peerID: peerID))
      return
    }
    // The same checks as leaving now, so the caller hears of a bad request at once.
    guard let session = node.mesh.node.sessions.sessions[sessionID],
      session.members.contains(where: { $0.peerID == peerID })
    else {
      node.interpret(try node.mesh.node.leave(sessionID, peerID: peerID))
      return
    }
    // One held leave per member, however often it asks (the list stays bounded by the memberships).
    if !heldLeaves.contains(where: { $0.sessionID == sessionID && $0.peerID == peerID }) {
      heldLeaves.append((sessionID, peerID))
    }
  }

  /// Whether local peer `peerID` has data in its lane on any link.
  func hasQueuedData(from peerID: String, node: isolated Node) -> Bool {
    let lane = "peer:" + peerID
    return node.links.holdsBulk(of: lane)
  }

  /// Leaves held by ``leaveAfterQueuedData(_:peerID:node:)`` whose peer has nothing queued any more.
  func releaseHeldLeaves(node: isolated Node) {
    guard !heldLeaves.isEmpty else { return }
    var waiting: [(sessionID: String, peerID: String)] = []
    for leave in heldLeaves {
      if hasQueuedData(from: leave.peerID, node: node) {
        waiting.append(leave)
      } else {
        node.interpret((try? node.mesh.node.leave(leave.sessionID, peerID: leave.peerID)) ?? [])
      }
    }
    heldLeaves = waiting
  }

  func sendData(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let session = try ownSession(context, node: node)
    let query = context.request.head.query
    let mode = query["mode"] ?? "reliable"
    guard mode == "reliable" || mode == "unreliable" else {
      throw APIError.badRequest("mode must be reliable or unreliable, not \(mode.debugDescription)")
    }
    let targets = query["to"].map { $0.split(separator: ",").map(String.init).filter { !$0.isEmpty } }
    return .json(
      try await deliverWhenRoom(
        session.sessionID, from: context.authenticatedPeer.id, to: targets, payload: context.request.body, name: nil,
        reliable: mode == "reliable", node: node),
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
    reliable: Bool = true, node: isolated Node
  ) async throws -> JSONValue {
    guard payload.count <= Self.maxDataBytes else {
      throw APIError(status: 413, code: "payload_too_large", message: "session data is limited to 1 MiB per message")
    }
    if mustWait(sessionID, from: peerID, to: targets, reliable: reliable, node: node) == nil {
      return try deliver(
        sessionID, from: peerID, to: targets, payload: payload, reliable: reliable, name: name, node: node)
    }
    return try await withCheckedThrowingContinuation { continuation in
      heldSends.append(
        HeldSend(
          producer: "peer:" + peerID, sessionID: sessionID, peerID: peerID, targets: targets, payload: payload,
          name: name, reliable: reliable, deadline: Node.monotonicMillis() + Self.maxSendWaitMillis,
          continuation: continuation))
    }
  }

  /// What keeps `peerID`'s send from going now (nil: it may go now). A send waits as well while an earlier send of
  /// the same peer waits, so a peer's sends keep their order.
  func mustWait(
    _ sessionID: String, from peerID: String, to targets: [String]?, reliable: Bool = true, ignoringHeld: Bool = false,
    node: isolated Node
  ) -> SendBlock? {
    let producer = "peer:" + peerID
    if !ignoringHeld, let held = heldSends.first(where: { $0.producer == producer }) {
      return mustWait(
        held.sessionID, from: peerID, to: held.targets, reliable: held.reliable, ignoringHeld: true, node: node)
        ?? .senderEvents
    }
    // Local senders are held at the event queue's bounds (what they send to local peers waits there for the store).
    if node.events.localSendsPaused { return .eventQueue }
    if node.events.queuedBytes(of: peerID) > PublishQueue<CheckedContinuation<Void, any Error>>.senderHighWater {
      return .senderEvents
    }
    // Without links nothing can be full; unreliable data is dropped on a full link rather than held.
    guard reliable, !node.links.schedulers.isEmpty, let session = node.mesh.node.sessions.sessions[sessionID] else {
      return nil
    }
    var checked: Set<String> = []
    // Members hosted here need no link (most of a session's members, often): skipped before any hashing.
    for member in session.members
    where member.state == .connected && member.nodeID != node.nodeID && member.peerID != peerID {
      guard targets?.contains(member.peerID) ?? true, checked.insert(member.nodeID).inserted else { continue }
      if let scheduler = node.links.scheduler(toNode: member.nodeID, node: node), !scheduler.hasRoom(for: producer) {
        return .link(member.nodeID)
      }
    }
    return nil
  }

  /// Lets held sends go, oldest first, as far as there is room; refuses those past their deadline.
  func admitHeldSends(node: isolated Node) {
    guard !heldSends.isEmpty else { return }
    let now = Node.monotonicMillis()
    var blocked: Set<String> = []
    var index = 0
    while index < heldSends.count {
      let held = heldSends[index]
      guard !blocked.contains(held.producer) else {
        index += 1
        continue
      }
      if let block = mustWait(
        held.sessionID, from: held.peerID, to: held.targets, reliable: held.reliable, ignoringHeld: true, node: node)
      {
        blocked.insert(held.producer)
        guard now >= held.deadline else {
          index += 1
          continue
        }
        heldSends.remove(at: index)
        switch block {
        case .link(let busy):
          sendsRefused += 1
          held.continuation.resume(throwing: Self.linkBusy(busy))
        case .eventQueue, .senderEvents:
          localSendsRefused += 1
          held.continuation.resume(throwing: Self.eventQueueFull(block))
        }
        continue
      }
      heldSends.remove(at: index)
      held.continuation.resume(
        with: Result {
          try deliver(
            held.sessionID, from: held.peerID, to: held.targets, payload: held.payload, reliable: held.reliable,
            name: held.name, node: node)
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
    _ sessionID: String, from peerID: String, to targets: [String]?, payload: [UInt8], reliable: Bool, name: String?,
    node: isolated Node
  ) throws -> JSONValue {
    guard payload.count <= Self.maxDataBytes else {
      throw APIError(status: 413, code: "payload_too_large", message: "session data is limited to 1 MiB per message")
    }
    let result: (effects: [MeshEffect], undelivered: [String])
    do {
      result = try node.mesh.node.send(
        sessionID, from: peerID, to: targets, payload: payload, reliable: reliable, namedEvent: name)
    } catch {
      throw APIError(error)
    }
    // What this send publishes for local peers is counted as this peer's in the event queue.
    node.events.producer = peerID
    node.interpret(result.effects)
    node.events.producer = nil
    let recipients = MeshNode.addressed(by: result.effects).count
    return [
      "accepted": .int(Int64(recipients)), "undelivered": .array(result.undelivered.map { .string($0) }),
      "bytes": .int(Int64(payload.count)),
    ]
  }

  func sendNamedEvent(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let session = try ownSession(context, node: node)
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
        session.sessionID, from: context.authenticatedPeer.id, to: targets, payload: object.serialized(), name: name,
        node: node),
      status: 202)
  }

  /// `{"op":"send","session":id,"to":[ids]?,"mode":"reliable|unreliable"?,"text":"…" | "dataBase64":"…"}` over the
  /// browser WebSocket: the same as `POST /api/v1/sessions/{id}/data`, with the same backpressure. A reliable send
  /// that must wait for room pauses reading the socket (later messages wait their turn) until it is sent, or refused
  /// with a `link_busy` error after the same wait as the REST route; the socket stays open either way.
  func socketSend(_ object: JSONObject, subscriber: Subscriber, socket: WebSocketID, node: isolated Node) -> JSONValue?
  {
    let peerID = subscriber.peerID
    let request: SocketSendRequest
    do {
      request = try parseSocketSend(object, peerID: peerID, node: node)
    } catch let error as APIError {
      return EventHub.socketError(error.code, error.message)
    } catch {
      return EventHub.socketError("internal_error", "the node could not send: \(error)")
    }
    guard mustWait(request.sessionID, from: peerID, to: request.targets, reliable: request.reliable, node: node) != nil
    else {
      return Self.sentReply {
        try deliver(
          request.sessionID, from: peerID, to: request.targets, payload: request.payload, reliable: request.reliable,
          name: nil, node: node)
      }
    }
    subscriber.holding = true
    node.server.setReceiveFlow(socket, enabled: false)
    Task {
      var reply: JSONValue
      do {
        let sent = try await deliverWhenRoom(
          request.sessionID, from: peerID, to: request.targets, payload: request.payload, name: nil,
          reliable: request.reliable, node: node)
        reply = Self.sentReply { sent }
      } catch {
        reply = Self.sentReply { throw error }
      }
      guard node.events.isCurrent(subscriber) else { return }
      node.events.sendFrame(reply, to: subscriber, writeNow: true, node: node)
      subscriber.holding = false
      node.server.setReceiveFlow(socket, enabled: true)
      while !subscriber.holding, node.events.isCurrent(subscriber), !subscriber.backlog.isEmpty {
        node.webSocketReceived(socket, subscriber.backlog.removeFirst())
      }
    }
    return nil
  }

  /// The WebSocket reply to a send: `{"type":"sent","data":{…}}` like the REST answer, or an error message.
  static func sentReply(_ send: () throws -> JSONValue) -> JSONValue {
    do {
      return ["type": "sent", "data": try send()]
    } catch let error as APIError {
      var reply = EventHub.socketError(error.code, error.message)
      if error.status == 503, case .object(var object) = reply, case .object(var data)? = object["data"] {
        data["retryAfterSeconds"] = 1
        object["data"] = .object(data)
        reply = .object(object)
      }
      return reply
    } catch {
      return EventHub.socketError("internal_error", "the node could not send: \(error)")
    }
  }

  struct SocketSendRequest {
    let sessionID: String
    let targets: [String]?
    let payload: [UInt8]
    let reliable: Bool
  }

  static let socketSendFields: Set<String> = ["op", "session", "to", "mode", "text", "dataBase64"]

  func parseSocketSend(_ object: JSONObject, peerID: String, node: isolated Node) throws -> SocketSendRequest {
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
    guard let session = node.mesh.node.sessions.sessions[sessionID],
      session.members.contains(where: { $0.peerID == peerID })
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

@available(*, unavailable) extension SessionsFeature: Sendable {}
