public import MeshCore

// Chat on the simulated mesh: each node's ``MeshNode`` runs its chat book, and this file carries out the chat effects
// as the gateway's chat feature does (``MeshEffect/chatStore(_:)`` into a durable per-node store that survives a
// crash, sends only over links chat may use, `chat.*` events into the peers' logs, settled joins), so chat runs under
// loss, delay, partitions and node death. A simulated store write never fails, and it is durable at once: a batch's
// sends and events follow it in the same step.

extension Simulation {
  // MARK: - Commands (the chat REST routes)

  /// `POST /chats`: `peerID` hosts room `roomID`, advertised nearby (the simulation remembers its name and host, as a
  /// `jobmanager-chat` advertisement would tell joiners).
  public func hostChat(_ roomID: String, name: String, by peerID: String) {
    let node = liveHome(peerID)
    let host = chatRef(peerID, on: node)
    chatAdverts[roomID] = (name, host)
    interpret(nodes[node].mesh.hostChat(roomID, name: name, by: host, now: stamp()), on: node)
  }

  /// `POST /chats/{id}/join`. The join settles when the host's roster comes back (``chatJoin(_:peerID:)``).
  public func joinChat(_ roomID: String, peerID: String) throws(MeshFailure) {
    let node = liveHome(peerID)
    let advert = chatAdverts[roomID]
    let effects = try nodes[node].mesh.joinChat(
      roomID, peer: chatRef(peerID, on: node), name: advert?.name, host: advert?.host, now: stamp())
    interpret(effects, on: node)
  }

  /// `POST /chats/{id}/leave`.
  public func leaveChat(_ roomID: String, peerID: String) throws(MeshFailure) {
    let node = liveHome(peerID)
    interpret(try nodes[node].mesh.leaveChat(roomID, peerID: peerID), on: node)
  }

  /// `POST /chats/{id}/messages`: returns the message as acknowledged (`201`; `seq` nil until the host orders it).
  @discardableResult
  public func postChat(_ roomID: String, from peerID: String, body: String) throws(MeshFailure) -> ChatMessage {
    let node = liveHome(peerID)
    let id = "m\(nextChatMessageNumber)"
    let posted = try nodes[node].mesh.postChat(roomID, id: id, from: peerID, body: body, sentAt: stamp())
    nextChatMessageNumber += 1
    interpret(posted.effects, on: node)
    acknowledged[roomID, default: []].append(posted.message)
    return posted.message
  }

  // MARK: - What peers and nodes hold

  /// Whether `peerID`'s last join of `roomID` completed (`true`), cannot (`false`) or has not settled (nil).
  public func chatJoin(_ roomID: String, peerID: String) -> Bool? { chatJoins[roomID + "/" + peerID] }

  /// The `chat.*` events `peerID` was told about `roomID`, in order.
  public func chatEvents(of peerID: String, room roomID: String) -> [ChatBook.Event] {
    events(of: peerID).compactMap {
      if case .chat(roomID, let event) = $0.kind { return event }
      return nil
    }
  }

  /// The messages `peerID` was told (`chat.message`) in `roomID`, in the order told.
  public func chatMessagesTold(to peerID: String, room roomID: String) -> [ChatMessage] {
    chatEvents(of: peerID, room: roomID).compactMap {
      if case .message(let message) = $0 { return message }
      return nil
    }
  }

  /// Node `node`'s stored history of `roomID` in the host's order (ordered messages only).
  public func chatHistory(on node: Int, room roomID: String) -> [ChatMessage] {
    nodes[node].chatStore.ordered(roomID, after: 0)
  }

  /// Node `node`'s own messages in `roomID` that the host has not ordered yet.
  public func pendingChat(on node: Int, room roomID: String) -> [ChatMessage] {
    nodes[node].chatStore.pending(roomID)
  }

  /// The room as node `node` knows it.
  public func chatRoom(_ roomID: String, on node: Int) -> ChatRoom? { nodes[node].mesh.chat.rooms[roomID] }

  /// Every message acknowledged to a poster in `roomID` (as answered, `seq` nil on member nodes).
  public func acknowledgedChat(_ roomID: String) -> [ChatMessage] { acknowledged[roomID] ?? [] }

  /// Where `roomID` breaks the chat guarantees for `members` (peers that stayed in the room), one line per problem;
  /// empty when it holds. The host node's stored history is the truth; it must hold every acknowledged message
  /// exactly once. Each member must have been told every message of that history exactly once, in the host's order
  /// (from the first one it was told: a member that joined late gets the messages from the roster on), with
  /// `seq` 1, 2, 3 … as the host gave them; and its node's copy of the history must be the host's.
  public func chatProblems(_ roomID: String, members: [String]) -> [String] {
    guard let hostNode = chatAdverts[roomID].flatMap({ index(of: $0.host.nodeID) }) else {
      return ["\(roomID): no such room"]
    }
    var problems: [String] = []
    let history = chatHistory(on: hostNode, room: roomID)
    if history.map(\.seq) != (0..<history.count).map({ UInt64($0 + 1) }) {
      problems.append("\(roomID): the host's seqs are not 1…\(history.count): \(history.map(\.seq))")
    }
    let ordered = history.map(\.id)
    if Set(ordered).count != ordered.count { problems.append("\(roomID): the host ordered a message twice") }
    for message in acknowledgedChat(roomID) where !ordered.contains(message.id) {
      problems.append("\(roomID): acknowledged message \(message.id) was never ordered")
    }
    for peerID in members {
      let told = chatMessagesTold(to: peerID, room: roomID)
      let ids = told.map(\.id)
      if Set(ids).count != ids.count { problems.append("\(roomID): \(peerID) was told a message twice: \(ids)") }
      if let first = ids.first, let start = ordered.firstIndex(of: first) {
        if ids != Array(ordered[start...]) {
          problems.append("\(roomID): \(peerID) was told \(ids), the host ordered \(Array(ordered[start...]))")
        }
      } else if !ordered.isEmpty {
        problems.append("\(roomID): \(peerID) was told none of the \(ordered.count) messages")
      }
      if told.map(\.seq) != told.map({ message in history.first { $0.id == message.id }?.seq }) {
        problems.append("\(roomID): \(peerID) was told seqs \(told.map(\.seq)) unlike the host's")
      }
      let node = home(peerID)
      if node != hostNode && chatHistory(on: node, room: roomID).map(\.id) != ordered {
        problems.append("\(roomID): node \(node)'s history differs from the host's")
      }
    }
    return problems
  }

  // MARK: - The chat feature's part (the runtime)

  /// Carries out one chat effect on node `node` (``MeshRuntime/chat(_:)``).
  func carryOutChat(_ effect: MeshEffect, on node: Int) {
    switch effect {
    case .chatStore(let writes):
      nodes[node].chatStore.apply(writes)
    case .chatSend(let wire, let nodeID):
      sendChat(wire, to: nodeID, from: node)
    case .chatHistory(let roomID, let nodeID, let after):
      // The gateway sends ~1 MiB frames paced by the link's queue; a simulated link has no queue to pace.
      let history = nodes[node].chatStore.ordered(roomID, after: after)
      var start = 0
      while start < history.count {
        let end = min(start + Self.chatHistoryFrame, history.count)
        sendChat(.messages(roomID: roomID, Array(history[start..<end])), to: nodeID, from: node)
        start = end
      }
    case .chatEvent(let peerID, let roomID, let event):
      stats.chatNotifications += 1
      logs[peerID, default: []].append(PeerEvent(time: now, kind: .chat(roomID: roomID, event)))
    case .chatJoinSettled(let roomID, let peerID, let joined):
      chatJoins[roomID + "/" + peerID] = joined
    default:
      break
    }
  }

  /// Messages per simulated history frame.
  static let chatHistoryFrame = 64

  func sendChat(_ wire: ChatWire, to nodeID: String, from node: Int) {
    guard nodes[node].mesh.chatLinkUsable(nodeID), let id = nodes[node].mesh.links.connection(of: nodeID) else {
      return
    }
    send(.chat(payload: wire.encoded()), from: node, on: id)
  }

  /// Node `index`'s chat book as its store restores it at start (empty on a first start), as the real node's.
  func restoredChatBook(_ index: Int) -> ChatBook {
    let store = nodes[index].chatStore
    var book = ChatBook(nodeID: nodes[index].nodeID)
    book.restore(
      rooms: store.roomOrder.compactMap { store.rooms[$0] }, pending: store.allPending, senderSeqs: store.senderSeqs)
    return book
  }

  func chatRef(_ peerID: String, on node: Int) -> Directory.PeerRef {
    Directory.PeerRef(
      peerID: peerID, displayName: nodes[node].durable[peerID]?.displayName ?? peerID, nodeID: nodes[node].nodeID)
  }

  /// A timestamp for what a command stamps (`sentAt`, `createdAt`): the virtual time.
  func stamp() -> String { "t\(now)" }
}

/// A node's durable chat state, kept as the gateway's chat tables keep it: rooms (upserted), and messages per room
/// (inserted once by id; a later write of the same id only sets its `seq`).
struct SimulatedChatStore {
  var rooms: [String: ChatRoom] = [:]
  var roomOrder: [String] = []
  var messages: [String: [ChatMessage]] = [:]

  mutating func apply(_ writes: [ChatWrite]) {
    for write in writes {
      switch write {
      case .room(let room):
        if rooms[room.id] == nil { roomOrder.append(room.id) }
        rooms[room.id] = room
      case .messages(let roomID, let batch):
        for message in batch {
          if let index = messages[roomID]?.firstIndex(where: { $0.id == message.id }) {
            if let seq = message.seq { messages[roomID]![index].seq = seq }
          } else {
            messages[roomID, default: []].append(message)
          }
        }
      }
    }
  }

  func ordered(_ roomID: String, after: UInt64) -> [ChatMessage] {
    (messages[roomID] ?? []).filter { ($0.seq ?? 0) > after }.sorted { $0.seq! < $1.seq! }
  }

  func pending(_ roomID: String) -> [ChatMessage] { (messages[roomID] ?? []).filter { $0.seq == nil } }

  var allPending: [String: [ChatMessage]] {
    var pending: [String: [ChatMessage]] = [:]
    for roomID in roomOrder where !self.pending(roomID).isEmpty { pending[roomID] = self.pending(roomID) }
    return pending
  }

  /// The highest `senderSeq` stored per room and sender.
  var senderSeqs: [String: [String: UInt64]] {
    var seqs: [String: [String: UInt64]] = [:]
    for (roomID, list) in messages {
      for message in list {
        seqs[roomID, default: [:]][message.from.peerID] = max(
          seqs[roomID]?[message.from.peerID] ?? 0, message.senderSeq)
      }
    }
    return seqs
  }
}
