/// Chat rooms on the mesh: the sans-I/O state machine of one node (layer 3).
///
/// A room is hosted by a peer; the host's **node** is the room's authority for as long as the room lives (also
/// after the host peer left): it orders every message (`seq` 1, 2, 3, …), stores the whole history and keeps the
/// roster. Every other node with peers in the room is a *member node*: it keeps a copy of the history, the
/// roster, and the set of its own peers in the room (``ChatRoom/localMembers``).
///
/// Nothing is lost and nothing is shown twice, across link losses and restarts, by three rules:
/// - A member node tells the host the complete set of its peers in the room and the last `seq` it holds
///   (``ChatWire/sync(roomID:members:after:)``) whenever it links to the host's node and whenever that set
///   changes. The host answers with every message after that `seq`, then the roster. Joins, leaves and re-joins
///   are that one idempotent message.
/// - A member node's own messages stay *pending* (stored, shown, without `seq`) until they come back ordered; on
///   every link to the host they are posted again, in order. The host drops a post whose per-sender number
///   (`senderSeq`) it has already ordered, so a repeat is never ordered twice.
/// - A member node accepts ordered messages only in sequence (`seq == lastSeq + 1`); a gap makes it sync again.
///   The host sends no live messages to a member node that has not synced since the link came up.
///
/// Every change to persist comes out as a directive *before* the sends that depend on it; the runtime carries
/// them out in order, so nothing is sent that a crash could make the host forget. The room ends when no member
/// remains (the host too has left).
public struct ChatBook: Sendable {
  /// What the node's peers are told (as `chat.*` events).
  public enum Event: Sendable, Hashable {
    case message(ChatMessage)
    case memberJoined(Directory.PeerRef)
    case memberLeft(Directory.PeerRef)
    case ended
  }

  /// What the runtime must do, in order.
  public enum Directive: Sendable, Hashable {
    /// Send a chat frame to a linked node.
    case send(ChatWire, toNode: String)
    /// Persist the room (name, host, roster, this node's members, last seq, ended).
    case saveRoom(ChatRoom)
    /// Persist messages (insert, or set the `seq` of a pending one with the same id).
    case saveMessages(roomID: String, [ChatMessage])
    /// Read the stored messages after `after` and send them to the node as ``ChatWire/messages(roomID:_:)``
    /// frames, in order, before anything that follows this directive.
    case sendHistory(roomID: String, toNode: String, after: UInt64)
    /// Tell a local peer about the room.
    case notify(peerID: String, roomID: String, Event)
    /// A local peer's join completed (`joined`) or cannot (`refused`: the room ended or is unknown).
    case joinSettled(roomID: String, peerID: String, joined: Bool)
  }

  public let nodeID: String
  public private(set) var rooms: [String: ChatRoom] = [:]
  /// Per room and sender: the last `senderSeq` ordered (host) or handed out (member node, own peers).
  public private(set) var senderSeqs: [String: [String: UInt64]] = [:]
  /// Member node: own peers' messages the host has not ordered yet, per room, in the order they were posted.
  public private(set) var pending: [String: [ChatMessage]] = [:]
  /// Host: member nodes that must sync before they get live messages, per room.
  var stale: [String: Set<String>] = [:]
  /// Member node: rooms with a sync in flight (gaps do not trigger another until the roster comes back).
  var syncing: Set<String> = []
  /// Member node: peers that left a room from this node, told `ended` if their leave ends it.
  var leavers: [String: Set<String>] = [:]
  /// Nodes linked over a link chat may use (the runtime decides which; rooms need encrypted links).
  public private(set) var linked: Set<String> = []
  /// Chat frames, or parts of them, refused by reason: `not_agreed` (a roster naming a peer of this node that did not
  /// join), `not_host` (a roster moving the room to another node).
  public private(set) var refusals: [String: Int] = [:]

  public init(nodeID: String) {
    self.nodeID = nodeID
  }

  /// Restores what the store holds after a restart. Every member node of a hosted room is stale until it syncs.
  public mutating func restore(
    rooms: [ChatRoom], pending: [String: [ChatMessage]], senderSeqs: [String: [String: UInt64]]
  ) {
    for room in rooms {
      self.rooms[room.id] = room
      if isHost(room) {
        stale[room.id] = Set(room.members.map(\.nodeID)).subtracting([nodeID])
      }
    }
    self.pending = pending
    self.senderSeqs = senderSeqs
  }

  func isHost(_ room: ChatRoom) -> Bool { room.host.nodeID == nodeID }

  /// The rooms a local peer is in, or hosts while the room lives.
  public func rooms(of peerID: String) -> [ChatRoom] {
    rooms.values.filter { room in
      room.localMembers.contains { $0.peerID == peerID } || (room.host.peerID == peerID && !room.ended)
    }
  }

  public func isMember(_ peerID: String, of roomID: String) -> Bool {
    rooms[roomID]?.localMembers.contains { $0.peerID == peerID } ?? false
  }

  // MARK: - Local requests

  /// A local peer hosts a new room.
  public mutating func host(_ roomID: String, name: String, by host: Directory.PeerRef, now: String) -> [Directive] {
    let room = ChatRoom(
      id: roomID, name: name, host: host, members: [host], localMembers: [host], lastSeq: 0, ended: false,
      createdAt: now)
    rooms[roomID] = room
    return [.saveRoom(room), .notify(peerID: host.peerID, roomID: roomID, .memberJoined(host))]
  }

  /// A local peer joins a room: hosted here, or on a linked node (`name` and `host` come from the room's
  /// advertisement when this node has never seen the room). Completes with ``Directive/joinSettled``.
  public mutating func join(
    _ roomID: String, peer: Directory.PeerRef, name: String?, host: Directory.PeerRef?, now: String
  ) throws(MeshFailure) -> [Directive] {
    var room: ChatRoom
    if let known = rooms[roomID] {
      room = known
    } else if let name, let host {
      room = ChatRoom(
        id: roomID, name: name, host: host, members: [], localMembers: [], lastSeq: 0, ended: false, createdAt: now)
    } else {
      throw .chatNotFound(roomID: roomID)
    }
    guard !room.ended else { throw .chatEnded(roomID: roomID) }
    if room.localMembers.contains(where: { $0.peerID == peer.peerID }) {
      let confirmed = room.members.contains { $0.peerID == peer.peerID }
      return confirmed ? [.joinSettled(roomID: roomID, peerID: peer.peerID, joined: true)] : []
    }
    if isHost(room) {
      room.localMembers.append(peer)
      room.members.append(peer)
      rooms[roomID] = room
      var directives: [Directive] = [.saveRoom(room)]
      for member in room.localMembers {
        directives.append(.notify(peerID: member.peerID, roomID: roomID, .memberJoined(peer)))
      }
      fanOutRoster(room, into: &directives)
      directives.append(.joinSettled(roomID: roomID, peerID: peer.peerID, joined: true))
      return directives
    }
    guard linked.contains(room.host.nodeID) else {
      throw .chatHostUnreachable(roomID: room.id, hostName: room.host.displayName)
    }
    room.localMembers.append(peer)
    rooms[roomID] = room
    syncing.insert(roomID)
    return [
      .saveRoom(room),
      .send(.sync(roomID: roomID, members: room.localMembers, after: room.lastSeq), toNode: room.host.nodeID),
    ]
  }

  /// A local peer leaves a room. On the host's node the last leave ends the room.
  public mutating func leave(_ roomID: String, peerID: String) throws(MeshFailure) -> [Directive] {
    guard var room = rooms[roomID] else { throw .chatNotFound(roomID: roomID) }
    guard let leaver = room.localMembers.first(where: { $0.peerID == peerID }) else {
      throw .notChatMember(roomID: roomID)
    }
    room.localMembers.removeAll { $0.peerID == peerID }
    room.members.removeAll { $0.peerID == peerID }
    var directives: [Directive] = []
    if isHost(room) {
      room.ended = room.members.isEmpty
      rooms[roomID] = room
      directives.append(.saveRoom(room))
      for member in room.localMembers {
        directives.append(.notify(peerID: member.peerID, roomID: roomID, .memberLeft(leaver)))
      }
      if room.ended { directives.append(.notify(peerID: peerID, roomID: roomID, .ended)) }
      fanOutRoster(room, into: &directives)
      return directives
    }
    rooms[roomID] = room
    leavers[roomID, default: []].insert(peerID)
    directives.append(.saveRoom(room))
    for member in room.localMembers {
      directives.append(.notify(peerID: member.peerID, roomID: roomID, .memberLeft(leaver)))
    }
    if linked.contains(room.host.nodeID) {
      directives.append(
        .send(.sync(roomID: roomID, members: room.localMembers, after: room.lastSeq), toNode: room.host.nodeID))
    }
    return directives
  }

  /// A local member posts a message. The caller makes `id` and `sentAt`; the book numbers it for its sender.
  /// Returns the message as stored (ordered already on the host's node, pending elsewhere).
  public mutating func post(
    _ roomID: String, id: String, from peerID: String, body: String, sentAt: String
  ) throws(MeshFailure) -> (message: ChatMessage, directives: [Directive]) {
    guard let room = rooms[roomID] else { throw .chatNotFound(roomID: roomID) }
    guard !room.ended else { throw .chatEnded(roomID: roomID) }
    guard let sender = room.localMembers.first(where: { $0.peerID == peerID }) else {
      throw .notChatMember(roomID: roomID)
    }
    let senderSeq = (senderSeqs[roomID]?[peerID] ?? 0) + 1
    senderSeqs[roomID, default: [:]][peerID] = senderSeq
    let message = ChatMessage(id: id, from: sender, senderSeq: senderSeq, body: body, sentAt: sentAt)
    var directives: [Directive] = []
    if isHost(room) {
      return (order(message, in: roomID, into: &directives), directives)
    }
    pending[roomID, default: []].append(message)
    directives.append(.saveMessages(roomID: roomID, [message]))
    if linked.contains(room.host.nodeID) {
      directives.append(.send(.post(roomID: roomID, message), toNode: room.host.nodeID))
    }
    return (message, directives)
  }

  // MARK: - Host side

  /// Gives `message` the room's next seq, persists it, tells the local members and sends it to every member
  /// node that is linked and synced.
  mutating func order(_ message: ChatMessage, in roomID: String, into directives: inout [Directive]) -> ChatMessage {
    guard var room = rooms[roomID] else { return message }
    room.lastSeq += 1
    rooms[roomID] = room
    var ordered = message
    ordered.seq = room.lastSeq
    directives.append(.saveMessages(roomID: roomID, [ordered]))
    directives.append(.saveRoom(room))
    for member in room.localMembers {
      directives.append(.notify(peerID: member.peerID, roomID: roomID, .message(ordered)))
    }
    for node in liveMemberNodes(room) {
      directives.append(.send(.messages(roomID: roomID, [ordered]), toNode: node))
    }
    return ordered
  }

  /// Member nodes (not this one) that are linked and have synced since.
  func liveMemberNodes(_ room: ChatRoom) -> [String] {
    let stale = self.stale[room.id] ?? []
    var nodes: [String] = []
    for member in room.members where member.nodeID != nodeID && !nodes.contains(member.nodeID) {
      if linked.contains(member.nodeID) && !stale.contains(member.nodeID) { nodes.append(member.nodeID) }
    }
    return nodes
  }

  func roster(_ room: ChatRoom) -> ChatWire {
    .roster(roomID: room.id, name: room.name, host: room.host, members: room.members, ended: room.ended)
  }

  mutating func fanOutRoster(_ room: ChatRoom, into directives: inout [Directive], also extra: String? = nil) {
    var nodes = liveMemberNodes(room)
    if let extra, extra != nodeID, !nodes.contains(extra) { nodes.append(extra) }
    for node in nodes { directives.append(.send(roster(room), toNode: node)) }
  }

  mutating func receivedSync(
    _ roomID: String, members: [Directory.PeerRef], after: UInt64, from node: String
  ) -> [Directive] {
    guard var room = rooms[roomID], isHost(room) else { return [.send(.unknownRoom(roomID: roomID), toNode: node)] }
    if room.ended { return [.send(roster(room), toNode: node)] }
    let theirs = members.filter { $0.nodeID == node }
    let left = room.members.filter { $0.nodeID == node && !theirs.contains($0) }
    let joined = theirs.filter { !room.members.contains($0) }
    room.members.removeAll { $0.nodeID == node && !theirs.contains($0) }
    room.members += joined
    room.ended = room.members.isEmpty
    rooms[roomID] = room
    var directives: [Directive] = []
    if !left.isEmpty || !joined.isEmpty { directives.append(.saveRoom(room)) }
    for member in room.localMembers {
      for peer in joined { directives.append(.notify(peerID: member.peerID, roomID: roomID, .memberJoined(peer))) }
      for peer in left { directives.append(.notify(peerID: member.peerID, roomID: roomID, .memberLeft(peer))) }
    }
    if !theirs.isEmpty {
      directives.append(.sendHistory(roomID: roomID, toNode: node, after: after))
      stale[roomID]?.remove(node)
    }
    fanOutRoster(room, into: &directives, also: node)
    return directives
  }

  mutating func receivedPost(_ roomID: String, _ message: ChatMessage, from node: String) -> [Directive] {
    guard let room = rooms[roomID], isHost(room), !room.ended, message.from.nodeID == node,
      room.members.contains(where: { $0.peerID == message.from.peerID }),
      message.body.utf8.count <= ChatWire.maxBodyBytes
    else { return [] }
    let last = senderSeqs[roomID]?[message.from.peerID] ?? 0
    guard message.senderSeq > last else { return [] }
    senderSeqs[roomID, default: [:]][message.from.peerID] = message.senderSeq
    var directives: [Directive] = []
    var incoming = message
    incoming.seq = nil
    _ = order(incoming, in: roomID, into: &directives)
    return directives
  }

  // MARK: - Member side

  mutating func receivedMessages(_ roomID: String, _ messages: [ChatMessage], from node: String) -> [Directive] {
    guard var room = rooms[roomID], room.host.nodeID == node, !isHost(room) else { return [] }
    var accepted: [ChatMessage] = []
    var gap = false
    for message in messages {
      guard let seq = message.seq else { continue }
      if seq <= room.lastSeq { continue }
      guard seq == room.lastSeq + 1 else {
        gap = true
        break
      }
      room.lastSeq = seq
      accepted.append(message)
      pending[roomID]?.removeAll { $0.id == message.id }
    }
    rooms[roomID] = room
    var directives: [Directive] = []
    if !accepted.isEmpty {
      directives.append(.saveMessages(roomID: roomID, accepted))
      directives.append(.saveRoom(room))
      for member in room.localMembers {
        for message in accepted {
          directives.append(.notify(peerID: member.peerID, roomID: roomID, .message(message)))
        }
      }
    }
    if gap && !syncing.contains(roomID) && linked.contains(node) {
      syncing.insert(roomID)
      directives.append(.send(.sync(roomID: roomID, members: room.localMembers, after: room.lastSeq), toNode: node))
    }
    return directives
  }

  mutating func receivedRoster(
    _ roomID: String, name: String, host: Directory.PeerRef, members: [Directory.PeerRef], ended: Bool,
    from node: String
  ) -> [Directive] {
    guard var room = rooms[roomID], room.host.nodeID == node, !isHost(room) else { return [] }
    // The host's node may not hand the room to another node, nor list a peer of this node that did not join here.
    guard host.nodeID == node else {
      refusals["not_host", default: 0] += 1
      return []
    }
    var members = members
    let before = members.count
    members.removeAll { member in
      member.nodeID == nodeID && !room.localMembers.contains { $0.peerID == member.peerID }
    }
    if members.count != before { refusals["not_agreed", default: 0] += 1 }
    syncing.remove(roomID)
    let joined = members.filter { !room.members.contains($0) }
    let left = room.members.filter { !members.contains($0) }
    let wasEnded = room.ended
    room.name = name
    room.host = host
    room.members = members
    room.ended = ended
    rooms[roomID] = room
    var directives: [Directive] = [.saveRoom(room)]
    if ended && !wasEnded {
      for peerID in (leavers.removeValue(forKey: roomID) ?? []).sorted()
      where !room.localMembers.contains(where: { $0.peerID == peerID }) {
        directives.append(.notify(peerID: peerID, roomID: roomID, .ended))
      }
    }
    for member in room.localMembers {
      // A member's own departure was told when it left; a local peer's arrival is told to everyone local.
      for peer in joined { directives.append(.notify(peerID: member.peerID, roomID: roomID, .memberJoined(peer))) }
      for peer in left where peer.nodeID != nodeID {
        directives.append(.notify(peerID: member.peerID, roomID: roomID, .memberLeft(peer)))
      }
      if ended && !wasEnded { directives.append(.notify(peerID: member.peerID, roomID: roomID, .ended)) }
      let confirmed = members.contains { $0.peerID == member.peerID }
      if confirmed || ended {
        directives.append(.joinSettled(roomID: roomID, peerID: member.peerID, joined: confirmed))
      }
    }
    return directives
  }

  mutating func receivedUnknownRoom(_ roomID: String, from node: String) -> [Directive] {
    guard var room = rooms[roomID], room.host.nodeID == node, !isHost(room), !room.ended else { return [] }
    syncing.remove(roomID)
    room.ended = true
    rooms[roomID] = room
    var directives: [Directive] = [.saveRoom(room)]
    for member in room.localMembers {
      directives.append(.notify(peerID: member.peerID, roomID: roomID, .ended))
      directives.append(.joinSettled(roomID: roomID, peerID: member.peerID, joined: false))
    }
    return directives
  }

  // MARK: - Links

  /// A chat frame arrived from a linked node.
  public mutating func received(_ wire: ChatWire, from node: String) -> [Directive] {
    switch wire {
    case .sync(let roomID, let members, let after): receivedSync(roomID, members: members, after: after, from: node)
    case .post(let roomID, let message): receivedPost(roomID, message, from: node)
    case .messages(let roomID, let messages): receivedMessages(roomID, messages, from: node)
    case .roster(let roomID, let name, let host, let members, let ended):
      receivedRoster(roomID, name: name, host: host, members: members, ended: ended, from: node)
    case .unknownRoom(let roomID): receivedUnknownRoom(roomID, from: node)
    }
  }

  /// A node linked: sync every live room it hosts and post this node's pending messages again, in order.
  public mutating func nodeLinked(_ node: String) -> [Directive] {
    linked.insert(node)
    var directives: [Directive] = []
    for room in rooms.values.sorted(by: { $0.id < $1.id }) where room.host.nodeID == node && !room.ended {
      syncing.insert(room.id)
      directives.append(.send(.sync(roomID: room.id, members: room.localMembers, after: room.lastSeq), toNode: node))
      for message in pending[room.id] ?? [] {
        directives.append(.send(.post(roomID: room.id, message), toNode: node))
      }
    }
    return directives
  }

  /// A node unlinked: the host stops live messages to it until it syncs again.
  public mutating func nodeUnlinked(_ node: String) {
    linked.remove(node)
    for room in rooms.values {
      if isHost(room) {
        if room.members.contains(where: { $0.nodeID == node }) { stale[room.id, default: []].insert(node) }
      } else if room.host.nodeID == node {
        syncing.remove(room.id)
      }
    }
  }
}

/// A chat room as one node knows it.
public struct ChatRoom: Sendable, Hashable {
  public var id: String
  public var name: String
  /// The hosting peer; its node is the room's authority.
  public var host: Directory.PeerRef
  /// The roster in join order: the host's own on its node, the last one it sent elsewhere.
  public var members: [Directory.PeerRef]
  /// This node's peers in the room, as this node tells the host.
  public var localMembers: [Directory.PeerRef]
  /// On the host's node the last seq given; elsewhere the last seq held (all before it are held too).
  public var lastSeq: UInt64
  public var ended: Bool
  public var createdAt: String

  public init(
    id: String, name: String, host: Directory.PeerRef, members: [Directory.PeerRef],
    localMembers: [Directory.PeerRef], lastSeq: UInt64, ended: Bool, createdAt: String
  ) {
    self.id = id
    self.name = name
    self.host = host
    self.members = members
    self.localMembers = localMembers
    self.lastSeq = lastSeq
    self.ended = ended
    self.createdAt = createdAt
  }
}
