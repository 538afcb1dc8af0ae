/// Chat ordering inside the ``MeshNode``: the host-side ordering and member resync machine (``ChatBook``) hears of
/// links and local peers from the node's own inputs, and its frames arrive through the node's frame routing.
///
/// - **Links chat may use.** Rooms are `encryption: required`: the book is told of a link only when it runs over
///   TLS (the link manager's transport). A link coming up syncs the rooms that node hosts and posts this node's
///   pending messages again; a replaced link does that again; a link going down makes the host stop live messages
///   to that node until it syncs.
/// - **Frames.** A `chat` frame from a node whose link chat may use is decoded, its ids are checked (``WireIDs``,
///   `invalid_id`), and a member node must speak for its own peers (the members of its `sync`, the sender of its
///   `post`; `not_own_peer`) before the book sees it. Refusals come back as ``MeshEffect/frameRefused(_:)``; a frame
///   that does not decode as ``MeshEffect/chatFrameMalformed(nodeID:detail:)``; a frame on a link chat may not use is
///   dropped.
/// - **Local peers.** A deleted local peer leaves every room it is in.
///
/// The book's batches leave as ordinary effects: each opens with ``MeshEffect/chatStore(_:)`` (its writes, persisted in
/// one transaction before anything after it), then its ``MeshEffect/chatSend(_:toNode:)``,
/// ``MeshEffect/chatHistory(roomID:toNode:after:)``, ``MeshEffect/chatEvent(peerID:roomID:_:)`` and
/// ``MeshEffect/chatJoinSettled(roomID:peerID:joined:)`` in the book's order. The REST commands
/// (``hostChat(_:name:by:now:)`` …) return their batch's effects for the runtime to carry out and wait on, and fail
/// with ``MeshFailure``.
extension MeshNode {
  // MARK: - Chat commands

  /// `POST /chats`: a local peer hosts a new room.
  public mutating func hostChat(_ roomID: String, name: String, by host: Directory.PeerRef, now: String)
    -> [MeshEffect]
  {
    var effects: [MeshEffect] = []
    absorb(chat.host(roomID, name: name, by: host, now: now), into: &effects)
    return effects
  }

  /// `POST /chats/{id}/join`: a local peer joins a room hosted here or on a linked node (``ChatBook/join``).
  public mutating func joinChat(
    _ roomID: String, peer: Directory.PeerRef, name: String?, host: Directory.PeerRef?, now: String
  ) throws(MeshFailure) -> [MeshEffect] {
    var effects: [MeshEffect] = []
    absorb(try chat.join(roomID, peer: peer, name: name, host: host, now: now), into: &effects)
    return effects
  }

  /// `POST /chats/{id}/leave`.
  public mutating func leaveChat(_ roomID: String, peerID: String) throws(MeshFailure) -> [MeshEffect] {
    var effects: [MeshEffect] = []
    absorb(try chat.leave(roomID, peerID: peerID), into: &effects)
    return effects
  }

  /// `POST /chats/{id}/messages`: a local member posts; returns the message as stored and the batch's effects.
  public mutating func postChat(_ roomID: String, id: String, from peerID: String, body: String, sentAt: String)
    throws(MeshFailure) -> (message: ChatMessage, effects: [MeshEffect])
  {
    let posted = try chat.post(roomID, id: id, from: peerID, body: body, sentAt: sentAt)
    var effects: [MeshEffect] = []
    absorb(posted.directives, into: &effects)
    return (posted.message, effects)
  }

  // MARK: - Chat queries

  /// Room `roomID` as this node knows it (hosted here, or a copy on a member node).
  public func chatRoom(_ roomID: String) -> ChatRoom? { chat.rooms[roomID] }

  /// Every room this node knows, in no particular order.
  public var chatRooms: Dictionary<String, ChatRoom>.Values { chat.rooms.values }

  /// The rooms local peer `peerID` is in, or hosts while the room lives.
  public func chatRooms(of peerID: String) -> [ChatRoom] { chat.rooms(of: peerID) }

  /// Whether local peer `peerID` is in room `roomID`.
  public func isChatMember(_ peerID: String, of roomID: String) -> Bool { chat.isMember(peerID, of: roomID) }

  // MARK: - Wiring

  /// Whether chat traffic may use the link to `nodeID` (rooms are `encryption: required`).
  public func chatLinkUsable(_ nodeID: String) -> Bool { linkSecurity(of: nodeID).encrypted }

  mutating func chatNodeLinked(_ nodeID: String, into effects: inout [MeshEffect]) {
    guard chatLinkUsable(nodeID) else { return }
    absorb(chat.nodeLinked(nodeID), into: &effects)
  }

  mutating func chatNodeUnlinked(_ nodeID: String) {
    chat.nodeUnlinked(nodeID)
  }

  /// A deleted local peer leaves every room it is in, one batch per room.
  mutating func chatPeerRemoved(_ peerID: String, into effects: inout [MeshEffect]) {
    for room in chat.rooms(of: peerID) where room.localMembers.contains(where: { $0.peerID == peerID }) {
      if let directives = try? chat.leave(room.id, peerID: peerID) { absorb(directives, into: &effects) }
    }
  }

  /// A `chat` frame from linked node `nodeID`, admitted by the node's frame guard.
  mutating func chatReceived(_ payload: [UInt8], from nodeID: String, into effects: inout [MeshEffect]) {
    guard chatLinkUsable(nodeID), chat.linked.contains(nodeID) else { return }
    let wire: ChatWire
    do {
      wire = try ChatWire.decode(payload)
    } catch {
      effects.append(.chatFrameMalformed(nodeID: nodeID, detail: error.description))
      return
    }
    if let refusal = chatRefusal(of: wire, payload: payload, from: nodeID) {
      effects.append(.frameRefused(refusal))
      return
    }
    absorb(chat.received(wire, from: nodeID), into: &effects)
  }

  /// Why a decoded chat frame from `nodeID` must not reach the book: malformed ids (with ``checksWireIDs``), or a member node speaking for
  /// peers that are not its own (the members of its `sync` and the sender of its `post` must be its peers in this
  /// node's directory, never a peer of this node).
  func chatRefusal(of wire: ChatWire, payload: [UInt8], from nodeID: String) -> FrameRefusal? {
    if checksWireIDs, let problem = WireIDs.check(wire) {
      return FrameRefusal(
        reason: "invalid_id", detail: problem.description, nodeID: nodeID, message: .chat(payload: payload),
        answer: nil)
    }
    let claimed: [Directory.PeerRef]
    switch wire {
    case .sync(_, let members, _): claimed = members.filter { $0.nodeID == nodeID }
    case .post(_, let message): claimed = [message.from]
    default: return nil
    }
    for peer in claimed where directory.peer(peer.peerID)?.nodeID != nodeID {
      return FrameRefusal(
        reason: "not_own_peer", detail: "a chat frame speaks for \(peer.peerID), not a peer of the sending node",
        nodeID: nodeID, message: .chat(payload: payload), answer: nil)
    }
    return nil
  }

  /// One batch of the book's directives as effects: ``MeshEffect/chatStore(_:)`` with its writes first, then the rest
  /// in the book's order.
  func absorb(_ directives: [ChatBook.Directive], into effects: inout [MeshEffect]) {
    guard !directives.isEmpty else { return }
    var writes: [ChatWrite] = []
    for directive in directives {
      switch directive {
      case .saveRoom(let room): writes.append(.room(room))
      case .saveMessages(let roomID, let messages): writes.append(.messages(roomID: roomID, messages))
      default: break
      }
    }
    effects.append(.chatStore(writes))
    for directive in directives {
      switch directive {
      case .send(let wire, let nodeID): effects.append(.chatSend(wire, toNode: nodeID))
      case .sendHistory(let roomID, let nodeID, let after):
        effects.append(.chatHistory(roomID: roomID, toNode: nodeID, after: after))
      case .notify(let peerID, let roomID, let event):
        effects.append(.chatEvent(peerID: peerID, roomID: roomID, event))
      case .joinSettled(let roomID, let peerID, let joined):
        effects.append(.chatJoinSettled(roomID: roomID, peerID: peerID, joined: joined))
      case .saveRoom, .saveMessages:
        break
      }
    }
  }
}
