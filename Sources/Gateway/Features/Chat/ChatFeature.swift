/// The chat app: REST handlers, storage and events, and the queue that carries out the mesh core's chat effects, all
/// in ``ChatFeature``.
///
/// Layer 5 (apps) over the mesh. A room is hosted by a peer and advertised on `jobmanager-chat` with one
/// discovery-info pair `r.<roomId>` = room name per live room that peer hosts and is still in; its traffic only
/// crosses links chat may use (rooms are `encryption: required`). The ordering and resync machine is part of the
/// mesh core (``MeshNode``'s chat book: links, chat frames and the checks on them, deleted peers); its batches come
/// here as chat effects (``MeshEffect/chatStore(_:)`` opening each batch, then its sends, history, events and settled
/// joins), from the interpreter or from the REST commands. Batches run one at a time, in order, on the node actor
/// (``SerialWork``): store writes first, in one transaction, then sends and events, so a message is
/// durable before a 2xx or a send says it exists. See ``ChatBook`` for the protocol.
import Crypto
import Foundation
import LWS
import Logging
import MeshCore

/// The chat feature: the REST commands and the queue the mesh core's chat effects go through (the book itself is
/// ``MeshNode/chat``); owned by the node actor and only touched on its executor. Links and deleted peers reach the
/// book through the mesh core; its effects reach this feature through the ``NodeFeature/meshEffect(_:node:)`` hook.
final class ChatFeature: NodeFeature {
  /// Chat batches (a ``MeshEffect/chatStore(_:)`` and the chat effects after it) waiting for their turn;
  /// `continuation` resumes a request once its batch is done.
  /// Carried out one at a time (``perform(_:node:)``).
  private let work: SerialWork<FIFO<Batch>>
  typealias Batch = (effects: [MeshEffect], continuation: CheckedContinuation<Void, any Error>?)
  /// Join requests waiting for the host's roster, by room id and peer id.
  private var joinWaiters: [String: [CheckedContinuation<Bool?, Never>]] = [:]

  init() {
    work = SerialWork(FIFO()) { batch, node in await node.features.chat.perform(batch, node: node) }
  }

  // MARK: - Hooks

  /// A chat effect from the mesh core: a ``MeshEffect/chatStore(_:)`` opens a batch in the queue, and the chat effects
  /// after it join that batch (the interpreter hands them over in one synchronous run, so the batch is still waiting).
  func meshEffect(_ effect: MeshEffect, node: isolated Node) {
    switch effect {
    case .chatStore:
      work.enqueue(node: node) { $0.append(([effect], nil)) }
    case .chatSend, .chatHistory, .chatEvent, .chatJoinSettled:
      work.enqueue(node: node) { queue in
        if !queue.updateLast({ $0.effects.append(effect) }) { queue.append(([effect], nil)) }
      }
    default:
      return
    }
  }

  /// A deleted peer's join requests stop waiting for the host's roster (the chat book forgets the peer itself).
  func peerRemoved(_ peerID: String, node: isolated Node) {
    for key in joinWaiters.keys where key.hasSuffix("/" + peerID) { settleJoin(key, joined: nil) }
  }

  // MARK: - REST

  func peerRef(_ peer: StoredPeer, node: isolated Node) -> Directory.PeerRef {
    Directory.PeerRef(peerID: peer.id, displayName: peer.displayName, nodeID: node.nodeID)
  }

  static func roomJSON(_ room: ChatRoom, for peerID: String) -> JSONValue {
    [
      "id": .string(room.id), "name": .string(room.name), "host": room.host.json,
      "joined": .bool(room.members.contains { $0.peerID == peerID }), "ended": .bool(room.ended),
      "memberCount": .int(Int64(room.members.count)), "createdAt": .string(room.createdAt),
    ]
  }

  static func messageJSON(_ message: ChatMessage, roomID: String) -> JSONValue {
    [
      "id": .string(message.id), "chatId": .string(roomID), "from": message.from.json, "body": .string(message.body),
      "at": .string(message.sentAt), "seq": message.seq.map { .int(Int64($0)) } ?? .null,
    ]
  }

  func create(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let body = try RequestBody(context.request)
    try body.allowOnly(["name"])
    let name = try ChatRules.roomName(try body.requiredString("name"))
    let peer = context.authenticatedPeer
    let roomID = try Crypto.hex(Crypto.randomBytes(8))
    var info = hostedRoomsInfo(peer.id, node: node)
    info[ChatRules.roomKeyPrefix + roomID] = name
    do {
      info = try Validate.discoveryInfo(info)
    } catch {
      throw APIError(
        status: 409, code: "too_many_rooms",
        message: "the rooms this peer hosts no longer fit in its jobmanager-chat discovery info (\(error.rule)); "
          + "leave a room or use a shorter name")
    }
    guard node.peers[peer.id] != nil else { throw APIError.invalidToken }
    let effects = node.mesh.node.hostChat(roomID, name: name, by: peerRef(peer, node: node), now: Timestamp.now())
    try await run(effects, node: node)
    try await advertiseRooms(of: peer.id, node: node)
    guard let room = node.mesh.node.chatRoom(roomID) else { throw APIError.invalidToken }
    return .json(
      ["chat": Self.roomJSON(room, for: peer.id)], status: 201, headers: [("location", "/api/v1/chats/\(roomID)")])
  }

  func list(_ context: RequestContext, node: isolated Node) -> HTTPResponse {
    let peerID = context.authenticatedPeer.id
    let rooms = node.mesh.node.chatRooms(of: peerID).sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
    return .json(["chats": .array(rooms.map { Self.roomJSON($0, for: peerID) })])
  }

  /// Rooms advertised nearby (every live room another peer hosts), from the directory.
  func nearby(_ context: RequestContext, node: isolated Node) -> HTTPResponse {
    let peerID = context.authenticatedPeer.id
    var entries: [(name: String, id: String, json: JSONValue)] = []
    for advertiser in node.mesh.node.directory.advertisers(of: ChatRules.serviceType, excluding: peerID) {
      for (key, name) in advertiser.discoveryInfo where key.hasPrefix(ChatRules.roomKeyPrefix) {
        let id = String(key.dropFirst(ChatRules.roomKeyPrefix.count))
        guard !id.isEmpty else { continue }
        let room = node.mesh.node.chatRoom(id)
        var json: JSONObject = [
          "id": .string(id), "name": .string(name), "host": advertiser.peer.json,
          "joined": .bool(room?.members.contains { $0.peerID == peerID } ?? false), "ended": false,
        ]
        json["memberCount"] = room.map { .int(Int64($0.members.count)) } ?? .null
        entries.append((name, id, .object(json)))
      }
    }
    entries.sort { ($0.name, $0.id) < ($1.name, $1.id) }
    return .json(["chats": .array(entries.map(\.json))])
  }

  /// A room this peer may see: one it is in or hosts, or one advertised nearby.
  func visibleRoom(_ context: RequestContext, node: isolated Node) throws(APIError) -> ChatRoom {
    let id = context.parameters["chatId"] ?? ""
    guard let room = node.mesh.node.chatRoom(id),
      room.localMembers.contains(where: { $0.peerID == context.authenticatedPeer.id })
        || room.host.peerID == context.authenticatedPeer.id || advertisedRoom(id, node: node) != nil
    else {
      throw .notFound("no chat room \(id) for this peer; see GET /api/v1/chats and GET /api/v1/chats/nearby")
    }
    return room
  }

  func get(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    let room = try visibleRoom(context, node: node)
    let members: [JSONValue] = room.members.map { member in
      ["peer": member.json, "role": member.peerID == room.host.peerID ? "host" : "member"]
    }
    return .json(["chat": Self.roomJSON(room, for: context.authenticatedPeer.id), "members": .array(members)])
  }

  /// The host and name of a room someone nearby advertises.
  func advertisedRoom(_ roomID: String, node: isolated Node) -> (host: Directory.PeerRef, name: String)? {
    for advertiser in node.mesh.node.directory.advertisers(of: ChatRules.serviceType, excluding: "") {
      if let name = advertiser.discoveryInfo[ChatRules.roomKeyPrefix + roomID] { return (advertiser.peer, name) }
    }
    return nil
  }

  func join(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    _ = try RequestBody(context.request, allowEmpty: true)
    let roomID = context.parameters["chatId"] ?? ""
    let peer = context.authenticatedPeer
    let advertised = advertisedRoom(roomID, node: node)
    // The host as this node knows the room, else as it is advertised.
    if let host = node.mesh.node.chatRoom(roomID)?.host ?? advertised?.host, host.nodeID != node.nodeID,
      !linkUsable(host.nodeID, node: node), node.mesh.node.links.linkedNodeIDs.contains(host.nodeID)
    {
      throw Self.encryptionUnavailable(host)
    }
    let effects: [MeshEffect]
    do {
      effects = try node.mesh.node.joinChat(
        roomID, peer: peerRef(peer, node: node), name: advertised?.name, host: advertised?.host,
        now: Timestamp.now())
    } catch {
      throw APIError(error)
    }
    let key = roomID + "/" + peer.id
    let joined: Bool? = await withCheckedContinuation { continuation in
      joinWaiters[key, default: []].append(continuation)
      Task {
        try? await node.features.chat.run(effects, node: node)
        try? await Task.sleep(for: ChatRules.joinWait)
        node.features.chat.settleJoin(key, joined: nil)
      }
    }
    guard let room = node.mesh.node.chatRoom(roomID) else { throw APIError.notFound("no chat room \(roomID)") }
    switch joined {
    case true?:
      if room.host.peerID == peer.id { try await advertiseRooms(of: peer.id, node: node) }
      return .json(["chat": Self.roomJSON(room, for: peer.id)])
    case false?:
      throw APIError(MeshFailure.chatEnded(roomID: roomID))
    case nil:
      return .json(
        [
          "chat": Self.roomJSON(room, for: peer.id),
          "message": "the host's node has not answered yet; chat.member.joined follows when it does",
        ], status: 202)
    }
  }

  static func encryptionUnavailable(_ host: Directory.PeerRef) -> APIError {
    APIError(
      status: 409, code: "encryption_unavailable",
      message: "chat rooms are encryption: required, but the link to the node of \(host.displayName) is not "
        + "encrypted; link the nodes over TLS (see docs/security.md)")
  }

  func settleJoin(_ key: String, joined: Bool?) {
    for continuation in joinWaiters.removeValue(forKey: key) ?? [] { continuation.resume(returning: joined) }
  }

  func leave(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    _ = try RequestBody(context.request, allowEmpty: true)
    let roomID = context.parameters["chatId"] ?? ""
    let peer = context.authenticatedPeer
    let effects: [MeshEffect]
    do {
      effects = try node.mesh.node.leaveChat(roomID, peerID: peer.id)
    } catch {
      throw APIError(error)
    }
    try await run(effects, node: node)
    if node.mesh.node.chatRoom(roomID)?.host.peerID == peer.id { try await advertiseRooms(of: peer.id, node: node) }
    guard let room = node.mesh.node.chatRoom(roomID) else { throw APIError.notFound("no chat room \(roomID)") }
    return .json(["chat": Self.roomJSON(room, for: peer.id)])
  }

  func postMessage(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let body = try RequestBody(context.request)
    try body.allowOnly(["body", "id"])
    let text = try ChatRules.body(try body.requiredString("body"))
    let roomID = context.parameters["chatId"] ?? ""
    let peer = context.authenticatedPeer
    guard node.mesh.node.isChatMember(peer.id, of: roomID) else {
      throw APIError(
        node.mesh.node.chatRoom(roomID) == nil
          ? MeshFailure.chatNotFound(roomID: roomID) : .notChatMember(roomID: roomID))
    }
    var id = RecordID.make()
    if body.object["id"] != nil {
      id = try ChatRules.messageID(try body.requiredString("id"))
      // A retry of a message this node already took: answer with it, never store it twice.
      if let existing = try await node.store.chatMessage(roomID: roomID, id: id) {
        guard existing.from.peerID == peer.id, existing.body == text else {
          throw APIError(
            status: 409, code: "id_in_use", message: "message id \(id) is already used by another message in this room")
        }
        return .json(["message": Self.messageJSON(existing, roomID: roomID)])
      }
    }
    let posted: (message: ChatMessage, effects: [MeshEffect])
    do {
      posted = try node.mesh.node.postChat(roomID, id: id, from: peer.id, body: text, sentAt: Timestamp.now())
    } catch {
      throw APIError(error)
    }
    try await run(posted.effects, node: node)
    return .json(
      ["message": Self.messageJSON(posted.message, roomID: roomID)], status: 201,
      headers: [("location", "/api/v1/chats/\(roomID)/messages?after=\((posted.message.seq ?? 1) - 1)&limit=1")])
  }

  /// Messages in the host's order (`?after=<seq>&limit=`), then this node's own messages the host has not ordered
  /// yet (`seq: null`, on the last page).
  func listMessages(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let roomID = context.parameters["chatId"] ?? ""
    let peerID = context.authenticatedPeer.id
    guard node.mesh.node.isChatMember(peerID, of: roomID) else {
      throw APIError(
        node.mesh.node.chatRoom(roomID) == nil
          ? MeshFailure.chatNotFound(roomID: roomID) : .notChatMember(roomID: roomID))
    }
    let query = context.request.head.query
    let limit = try query.limit(maximum: 1000)
    var after: UInt64 = 0
    if let text = query["after"] ?? query["cursor"], !text.isEmpty {
      guard let value = UInt64(text) else {
        throw APIError.badRequest("after must be a message seq (a non-negative integer), got \(text.debugDescription)")
      }
      after = value
    }
    let ordered = try await node.store.chatMessages(roomID: roomID, after: after, limit: limit)
    var items = ordered.map { Self.messageJSON($0, roomID: roomID) }
    var next: JSONValue = .null
    if ordered.count == limit, let last = ordered.last?.seq {
      next = .string(String(last))
    } else {
      let pending = try await node.store.pendingChatMessages(roomID: roomID)
      items += pending.prefix(limit - ordered.count).map { Self.messageJSON($0, roomID: roomID) }
    }
    return .json(["messages": .array(items), "nextCursor": next])
  }

  // MARK: - Advertising the rooms a peer hosts

  /// `r.<id>` = name for every live room the peer hosts and is still in.
  func hostedRoomsInfo(_ peerID: String, node: isolated Node) -> [String: String] {
    var info: [String: String] = [:]
    for room in node.mesh.node.chatRooms
    where room.host.peerID == peerID && !room.ended && room.localMembers.contains(where: { $0.peerID == peerID }) {
      info[ChatRules.roomKeyPrefix + room.id] = room.name
    }
    return info
  }

  /// Brings the peer's `jobmanager-chat` advertisement in line with the rooms it hosts (other keys it set stay).
  func advertiseRooms(of peerID: String, node: isolated Node) async throws {
    var info = node.mesh.node.directory.advertising(of: peerID)[ChatRules.serviceType] ?? [:]
    let wasAdvertising = node.mesh.node.directory.advertising(of: peerID)[ChatRules.serviceType] != nil
    for key in info.keys where key.hasPrefix(ChatRules.roomKeyPrefix) { info[key] = nil }
    info.merge(hostedRoomsInfo(peerID, node: node)) { _, new in new }
    guard let valid = try? Validate.discoveryInfo(info) else { return }
    if valid.isEmpty && !info.keys.contains(where: { !$0.hasPrefix(ChatRules.roomKeyPrefix) }) {
      guard wasAdvertising else { return }
      try await node.store.removeService(peerID: peerID, kind: "advertise", serviceType: ChatRules.serviceType)
      node.feed(.advertisingStopped(peerID: peerID, serviceType: ChatRules.serviceType))
      return
    }
    try await node.store.setService(
      NodeStore.StoredService(
        peerID: peerID, kind: "advertise", serviceType: ChatRules.serviceType, discoveryInfo: valid))
    guard node.peers[peerID] != nil else { return }
    node.feed(.advertisingStarted(peerID: peerID, serviceType: ChatRules.serviceType, discoveryInfo: valid))
  }

  // MARK: - Mesh

  /// Whether chat traffic may use the link to `nodeID`: rooms are `encryption: required`.
  func linkUsable(_ nodeID: String, node: isolated Node) -> Bool {
    node.mesh.node.chatLinkUsable(nodeID)
  }

  // MARK: - Carrying out chat effects, in order

  /// Carries out a chat command's effects (one batch) through the interpreter, after every batch before them, and
  /// returns when they are done (writes committed).
  func run(_ effects: [MeshEffect], node: isolated Node) async throws {
    guard !effects.isEmpty else { return }
    node.interpret(effects)
    // The interpreter queued the batch just now, synchronously: it is the last one and has not started.
    guard !work.queue.isEmpty else { return }
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
      work.update { _ = $0.updateLast { $0.continuation = continuation } }
    }
  }

  /// One batch's turn.
  func perform(_ batch: Batch, node: isolated Node) async {
    do {
      try await carryOut(batch.effects, node: node)
      batch.continuation?.resume()
    } catch {
      node.logger.error("Chat work failed.", ["error": String(describing: error)])
      batch.continuation?.resume(throwing: error)
    }
  }

  func carryOut(_ effects: [MeshEffect], node: isolated Node) async throws {
    // A room's event told to many local members in a row is one fan-out, built once.
    var events = EventGathering<ChatEventKey>()
    for effect in effects {
      switch effect {
      case .chatStore(let writes):
        // Writes first, in one transaction: nothing after them may be seen before they are durable.
        if !writes.isEmpty { try await node.store.applyChat(writes) }
      case .chatSend(let wire, let to):
        send(wire, to: to, node: node)
      case .chatHistory(let roomID, let to, let after):
        try await sendHistory(roomID, to: to, after: after, node: node)
      case .chatEvent(let peerID, let roomID, let event):
        guard node.peers[peerID] != nil, let room = node.mesh.node.chatRoom(roomID) else { continue }
        events.add(peerID, event: ChatEventKey(roomID: roomID, event: event)) {
          let built = Self.event(event, room: room, peerID: peerID)
          return (built.type, built.data)
        }
      case .chatJoinSettled(let roomID, let peerID, let joined):
        settleJoin(roomID + "/" + peerID, joined: joined)
      default:
        break
      }
    }
    if !events.isEmpty { node.events.publishInBackground(fanOuts: events.take(), node: node) }
  }

  /// A room's event, as the fan-out cache tells one from the next.
  struct ChatEventKey: Equatable {
    let roomID: String
    let event: ChatBook.Event
  }

  static func event(_ event: ChatBook.Event, room: ChatRoom, peerID: String) -> (
    peerID: String, type: String, data: JSONValue
  ) {
    let chatRef: JSONValue = ["id": .string(room.id), "name": .string(room.name)]
    switch event {
    case .message(let message):
      return (peerID, "chat.message", ["chat": chatRef, "message": Self.messageJSON(message, roomID: room.id)])
    case .memberJoined(let peer):
      return (peerID, "chat.member.joined", ["chat": chatRef, "peer": peer.json])
    case .memberLeft(let peer):
      return (peerID, "chat.member.left", ["chat": chatRef, "peer": peer.json])
    case .ended:
      return (peerID, "chat.ended", ["chat": chatRef])
    }
  }

  /// Sends the stored messages after `after` in frames of at most ~1 MiB, waiting while the link's send queue is
  /// over 2 MiB so a long history never overflows it.
  func sendHistory(_ roomID: String, to nodeID: String, after: UInt64, node: isolated Node) async throws {
    var cursor = after
    while true {
      let rows = try await node.store.chatMessages(roomID: roomID, after: cursor, limit: 500)
      guard let last = rows.last?.seq else { return }
      var frame: [ChatMessage] = []
      var bytes = 0
      for message in rows {
        if bytes + message.body.utf8.count > 1 << 20 && !frame.isEmpty {
          guard try await sendWhenRoom(.messages(roomID: roomID, frame), to: nodeID, node: node) else { return }
          frame = []
          bytes = 0
        }
        frame.append(message)
        bytes += message.body.utf8.count + 256
      }
      guard try await sendWhenRoom(.messages(roomID: roomID, frame), to: nodeID, node: node) else { return }
      cursor = last
      if rows.count < 500 { return }
    }
  }

  /// Sends once the link's queue has room; false when the link is gone.
  func sendWhenRoom(_ wire: ChatWire, to nodeID: String, node: isolated Node) async throws -> Bool {
    while true {
      guard let scheduler = node.links.scheduler(toNode: nodeID, node: node) else { return false }
      if scheduler.queuedBytes(of: "chat") <= 2 << 20 { break }
      try await Task.sleep(for: .milliseconds(2))
    }
    send(wire, to: nodeID, node: node)
    return true
  }

  func send(_ wire: ChatWire, to nodeID: String, node: isolated Node) {
    guard linkUsable(nodeID, node: node), let connection = node.mesh.node.links.connection(of: nodeID) else { return }
    // Chat frames are never refused: they queue in the link's chat lane (history is paced by sendWhenRoom).
    node.links.send(.chat(payload: wire.encoded()), on: connection, node: node)
  }
}

@available(*, unavailable) extension ChatFeature: Sendable {}

/// The chat app's service type and its discovery-info key prefix.
enum ChatRules {
  static let serviceType = "jobmanager-chat"
  static let roomKeyPrefix = "r."
  /// How long `POST /chats/{id}/join` waits for the host before answering 202.
  static let joinWait: Duration = .seconds(10)

  /// A room name rule: the display name's (1–63 characters counted as Unicode scalars, no control characters, not
  /// only spaces).
  static func roomName(_ name: String) throws(APIError) -> String {
    do {
      return try Validate.displayName(name)
    } catch {
      throw .badRequest(
        error.description.replacingOccurrences(of: "displayName", with: "name"), code: "validation_failed")
    }
  }

  static func body(_ body: String) throws(APIError) -> String {
    let bytes = body.utf8.count
    guard (1...ChatWire.maxBodyBytes).contains(bytes) else {
      throw .badRequest("body must be 1–\(ChatWire.maxBodyBytes) UTF-8 bytes (got \(bytes))", code: "validation_failed")
    }
    return body
  }

  /// A client-chosen message id (for safe retries): 8–64 characters of `A-Z a-z 0-9 - _`.
  static func messageID(_ id: String) throws(APIError) -> String {
    guard (8...64).contains(id.utf8.count),
      id.utf8.allSatisfy({
        $0 == 0x2D || $0 == 0x5F || (0x30...0x39).contains($0) || (0x41...0x5A).contains($0)
          || (0x61...0x7A).contains($0)
      })
    else {
      throw .badRequest(
        "id must be 8–64 characters of A-Z, a-z, 0-9, '-' and '_' (a UUID works); it makes retries safe",
        code: "validation_failed")
    }
    return id
  }
}
