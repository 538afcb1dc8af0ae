import MeshCore
import Testing

/// ``ChatBook`` on several in-process nodes: a tiny harness carries `send` directives between books (or drops them
/// while a link is down), keeps each node's "store" from `saveRoom`/`saveMessages`, serves `sendHistory` from it,
/// and can crash a node (losing everything not saved) and restart it from its store.
@Suite struct ChatBookTests {
  struct FakeNode {
    var book: ChatBook
    var rooms: [String: ChatRoom] = [:]
    var messages: [String: [String: ChatMessage]] = [:]
    var events: [String: [(String, ChatBook.Event)]] = [:]
    var settled: [String: Bool] = [:]

    func ordered(_ roomID: String) -> [ChatMessage] {
      (messages[roomID] ?? [:]).values.filter { $0.seq != nil }.sorted { $0.seq! < $1.seq! }
    }
    func pending(_ roomID: String) -> [ChatMessage] {
      (messages[roomID] ?? [:]).values.filter { $0.seq == nil }.sorted { $0.senderSeq < $1.senderSeq }
    }
  }

  struct Harness {
    var nodes: [String: FakeNode] = [:]
    var links: Set<[String]> = []
    var inFlight: [(from: String, to: String, wire: ChatWire)] = []

    init(_ ids: [String]) {
      for id in ids { nodes[id] = FakeNode(book: ChatBook(nodeID: id)) }
    }

    func peer(_ name: String, on node: String) -> Directory.PeerRef {
      Directory.PeerRef(peerID: name, displayName: name.uppercased(), nodeID: node)
    }

    func isLinked(_ a: String, _ b: String) -> Bool { links.contains([a, b].sorted()) }

    mutating func link(_ a: String, _ b: String) {
      links.insert([a, b].sorted())
      apply(nodes[a]!.book.nodeLinked(b), on: a)
      apply(nodes[b]!.book.nodeLinked(a), on: b)
    }

    mutating func unlink(_ a: String, _ b: String) {
      links.remove([a, b].sorted())
      inFlight.removeAll { ($0.from == a && $0.to == b) || ($0.from == b && $0.to == a) }
      nodes[a]!.book.nodeUnlinked(b)
      nodes[b]!.book.nodeUnlinked(a)
    }

    /// kill -9 and restart from the store; links to it drop and come back.
    mutating func crashAndRestart(_ id: String) {
      let others = nodes.keys.filter { isLinked(id, $0) }
      for other in others { unlink(id, other) }
      let old = nodes[id]!
      var book = ChatBook(nodeID: id)
      var pending: [String: [ChatMessage]] = [:]
      var senderSeqs: [String: [String: UInt64]] = [:]
      for (roomID, messages) in old.messages {
        pending[roomID] = old.pending(roomID)
        for message in messages.values {
          senderSeqs[roomID, default: [:]][message.from.peerID] = max(
            senderSeqs[roomID]?[message.from.peerID] ?? 0, message.senderSeq)
        }
      }
      book.restore(rooms: Array(old.rooms.values), pending: pending, senderSeqs: senderSeqs)
      nodes[id] = FakeNode(book: book, rooms: old.rooms, messages: old.messages)
      for other in others { link(id, other) }
    }

    mutating func apply(_ directives: [ChatBook.Directive], on id: String) {
      for directive in directives {
        switch directive {
        case .send(let wire, let to):
          if isLinked(id, to) { inFlight.append((id, to, wire)) }
        case .saveRoom(let room):
          nodes[id]!.rooms[room.id] = room
        case .saveMessages(let roomID, let messages):
          for message in messages {
            if let existing = nodes[id]!.messages[roomID]?[message.id], message.seq == nil {
              _ = existing
              continue
            }
            nodes[id]!.messages[roomID, default: [:]][message.id] = message
          }
        case .sendHistory(let roomID, let to, let after):
          let history = nodes[id]!.ordered(roomID).filter { $0.seq! > after }
          if isLinked(id, to) && !history.isEmpty { inFlight.append((id, to, .messages(roomID: roomID, history))) }
        case .notify(let peerID, _, let event):
          nodes[id]!.events[peerID, default: []].append((peerID, event))
        case .joinSettled(let roomID, let peerID, let joined):
          nodes[id]!.settled[roomID + "/" + peerID] = joined
        }
      }
    }

    /// Delivers frames (through the wire encoding, to check it too) until none is in flight.
    mutating func run(limit: Int = 100_000) {
      var steps = 0
      while !inFlight.isEmpty && steps < limit {
        let (from, to, wire) = inFlight.removeFirst()
        let decoded = try! ChatWire.decode(wire.encoded())
        precondition(decoded == wire, "wire round trip changed \(wire)")
        apply(nodes[to]!.book.received(decoded, from: from), on: to)
        steps += 1
      }
    }

    mutating func host(_ roomID: String, _ name: String, by peer: Directory.PeerRef) {
      apply(nodes[peer.nodeID]!.book.host(roomID, name: name, by: peer, now: "t0"), on: peer.nodeID)
    }

    mutating func join(_ roomID: String, _ peer: Directory.PeerRef, host: Directory.PeerRef) throws {
      let directives = try nodes[peer.nodeID]!.book.join(roomID, peer: peer, name: "Room", host: host, now: "t1")
      apply(directives, on: peer.nodeID)
      run()
    }

    @discardableResult
    mutating func post(_ roomID: String, _ peer: Directory.PeerRef, _ body: String) throws -> ChatMessage {
      let result = try nodes[peer.nodeID]!.book.post(
        roomID, id: "\(peer.peerID)-\(body)", from: peer.peerID, body: body, sentAt: "t")
      apply(result.directives, on: peer.nodeID)
      return result.message
    }

    func bodies(_ roomID: String, on node: String) -> [String] {
      nodes[node]!.ordered(roomID).map(\.body)
    }
  }

  @Test func joinPostAndFanOutAcrossNodes() throws {
    var mesh = Harness(["A", "B", "C"])
    mesh.link("A", "B")
    mesh.link("A", "C")
    mesh.link("B", "C")
    let hostPeer = mesh.peer("hana", on: "A")
    let bob = mesh.peer("bob", on: "B")
    let cleo = mesh.peer("cleo", on: "C")
    mesh.host("r1", "Lobby", by: hostPeer)
    try mesh.join("r1", bob, host: hostPeer)
    try mesh.join("r1", cleo, host: hostPeer)
    #expect(mesh.nodes["B"]!.settled["r1/bob"] == true)
    #expect(mesh.nodes["C"]!.book.rooms["r1"]!.members.map(\.peerID) == ["hana", "bob", "cleo"])

    let local = try mesh.post("r1", hostPeer, "one")
    #expect(local.seq == 1, "the host orders its own peers' messages at once")
    let remote = try mesh.post("r1", bob, "two")
    #expect(remote.seq == nil, "a member node's message is pending until the host orders it")
    try mesh.post("r1", cleo, "three")
    mesh.run()
    for node in ["A", "B", "C"] {
      #expect(mesh.bodies("r1", on: node) == ["one", "two", "three"], "node \(node)")
      #expect(mesh.nodes[node]!.book.pending["r1", default: []].isEmpty)
    }
    // Every member was told every message once, in the host's order.
    let told = mesh.nodes["B"]!.events["bob"]!.compactMap { event -> String? in
      if case .message(let message) = event.1 { return message.body }
      return nil
    }
    #expect(told == ["one", "two", "three"])
  }

  @Test func joinerGetsWholeHistoryAndRejoinDoesNotRepeatIt() throws {
    var mesh = Harness(["A", "B"])
    mesh.link("A", "B")
    let hostPeer = mesh.peer("hana", on: "A")
    let bob = mesh.peer("bob", on: "B")
    mesh.host("r1", "Lobby", by: hostPeer)
    for index in 1...5 { try mesh.post("r1", hostPeer, "m\(index)") }
    try mesh.join("r1", bob, host: hostPeer)
    #expect(mesh.bodies("r1", on: "B") == ["m1", "m2", "m3", "m4", "m5"])
    mesh.apply(try mesh.nodes["B"]!.book.leave("r1", peerID: "bob"), on: "B")
    mesh.run()
    #expect(mesh.nodes["A"]!.book.rooms["r1"]!.members.map(\.peerID) == ["hana"])
    try mesh.post("r1", hostPeer, "m6")
    mesh.run()
    try mesh.join("r1", bob, host: hostPeer)
    #expect(mesh.bodies("r1", on: "B") == ["m1", "m2", "m3", "m4", "m5", "m6"])
    let messageEvents = mesh.nodes["B"]!.events["bob"]!.filter {
      if case .message = $0.1 { return true } else { return false }
    }
    #expect(messageEvents.count == 6, "history after a rejoin sends only what the node lacks")
  }

  @Test func roomEndsWhenHostHasLeftAndNobodyRemains() throws {
    var mesh = Harness(["A", "B"])
    mesh.link("A", "B")
    let hostPeer = mesh.peer("hana", on: "A")
    let bob = mesh.peer("bob", on: "B")
    mesh.host("r1", "Lobby", by: hostPeer)
    try mesh.join("r1", bob, host: hostPeer)
    mesh.apply(try mesh.nodes["A"]!.book.leave("r1", peerID: "hana"), on: "A")
    mesh.run()
    #expect(mesh.nodes["A"]!.book.rooms["r1"]!.ended == false, "the host left but bob remains")
    try mesh.post("r1", bob, "still here")
    mesh.run()
    #expect(mesh.bodies("r1", on: "A") == ["still here"], "the host's node still orders messages")
    mesh.apply(try mesh.nodes["B"]!.book.leave("r1", peerID: "bob"), on: "B")
    mesh.run()
    #expect(mesh.nodes["A"]!.book.rooms["r1"]!.ended)
    #expect(mesh.nodes["B"]!.book.rooms["r1"]!.ended)
    #expect(mesh.nodes["B"]!.events["bob"]!.last!.1 == .ended, "the last leaver is told the room ended")
    #expect(throws: MeshFailure.chatEnded(roomID: "r1")) {
      _ = try mesh.nodes["B"]!.book.join("r1", peer: bob, name: nil, host: nil, now: "t")
    }
  }

  @Test func refusals() throws {
    var mesh = Harness(["A", "B"])
    let hostPeer = mesh.peer("hana", on: "A")
    let bob = mesh.peer("bob", on: "B")
    mesh.host("r1", "Lobby", by: hostPeer)
    #expect(throws: MeshFailure.chatNotFound(roomID: "nope")) {
      _ = try mesh.nodes["B"]!.book.join("nope", peer: bob, name: nil, host: nil, now: "t")
    }
    #expect(throws: MeshFailure.chatHostUnreachable(roomID: "r1", hostName: hostPeer.displayName)) {
      _ = try mesh.nodes["B"]!.book.join("r1", peer: bob, name: "Lobby", host: hostPeer, now: "t")
    }
    #expect(throws: MeshFailure.notChatMember(roomID: "r1")) {
      _ = try mesh.nodes["A"]!.book.post("r1", id: "x", from: "stranger", body: "hi", sentAt: "t")
    }
    // A room the host's node does not know ends on the asking node.
    mesh.link("A", "B")
    mesh.apply(try mesh.nodes["B"]!.book.join("ghost", peer: bob, name: "Ghost", host: hostPeer, now: "t"), on: "B")
    mesh.run()
    #expect(mesh.nodes["B"]!.settled["ghost/bob"] == false)
    #expect(mesh.nodes["B"]!.book.rooms["ghost"]!.ended)
  }

  @Test func messagesPostedWhileUnlinkedArriveOnceInOrderAfterRelink() throws {
    var mesh = Harness(["A", "B", "C"])
    mesh.link("A", "B")
    mesh.link("A", "C")
    let hostPeer = mesh.peer("hana", on: "A")
    let bob = mesh.peer("bob", on: "B")
    let cleo = mesh.peer("cleo", on: "C")
    mesh.host("r1", "Lobby", by: hostPeer)
    try mesh.join("r1", bob, host: hostPeer)
    try mesh.join("r1", cleo, host: hostPeer)
    try mesh.post("r1", bob, "b1")
    mesh.run()
    mesh.unlink("A", "B")
    try mesh.post("r1", bob, "b2")
    try mesh.post("r1", bob, "b3")
    try mesh.post("r1", cleo, "c1")
    try mesh.post("r1", hostPeer, "h1")
    mesh.run()
    #expect(mesh.bodies("r1", on: "B") == ["b1"])
    #expect(mesh.nodes["B"]!.book.pending["r1"]!.map(\.body) == ["b2", "b3"])
    mesh.link("A", "B")
    mesh.run()
    for node in ["A", "B", "C"] {
      #expect(mesh.bodies("r1", on: node) == ["b1", "h1", "c1", "b2", "b3"], "node \(node)")
    }
  }

  @Test func repostsAfterALostAnswerAreNotOrderedTwice() throws {
    var mesh = Harness(["A", "B"])
    mesh.link("A", "B")
    let hostPeer = mesh.peer("hana", on: "A")
    let bob = mesh.peer("bob", on: "B")
    mesh.host("r1", "Lobby", by: hostPeer)
    try mesh.join("r1", bob, host: hostPeer)
    try mesh.post("r1", bob, "b1")
    // The host orders b1, but the link drops before B hears back.
    let post = mesh.inFlight.removeFirst()
    mesh.apply(mesh.nodes["A"]!.book.received(post.wire, from: "B"), on: "A")
    mesh.unlink("A", "B")
    #expect(mesh.nodes["B"]!.book.pending["r1"]!.count == 1)
    mesh.link("A", "B")  // B posts b1 again; A drops the repeat and sends the history instead.
    mesh.run()
    #expect(mesh.bodies("r1", on: "A") == ["b1"])
    #expect(mesh.bodies("r1", on: "B") == ["b1"])
    #expect(mesh.nodes["B"]!.book.pending["r1", default: []].isEmpty)
  }

  @Test func crashesOfMemberAndHostNodesLoseNothingStored() throws {
    var mesh = Harness(["A", "B", "C"])
    mesh.link("A", "B")
    mesh.link("A", "C")
    mesh.link("B", "C")
    let hostPeer = mesh.peer("hana", on: "A")
    let bob = mesh.peer("bob", on: "B")
    let cleo = mesh.peer("cleo", on: "C")
    mesh.host("r1", "Lobby", by: hostPeer)
    try mesh.join("r1", bob, host: hostPeer)
    try mesh.join("r1", cleo, host: hostPeer)
    var expected: [String: [String]] = [:]
    for round in 0..<20 {
      for sender in [hostPeer, bob, cleo] {
        let body = "\(sender.peerID)\(round)"
        try mesh.post("r1", sender, body)
        expected[sender.peerID, default: []].append(body)
      }
      // Deliver only some frames before a crash, so that posts and orders are lost in flight.
      for _ in 0..<(round % 4) where !mesh.inFlight.isEmpty {
        let (from, to, wire) = mesh.inFlight.removeFirst()
        mesh.apply(mesh.nodes[to]!.book.received(wire, from: from), on: to)
      }
      if round % 5 == 2 { mesh.crashAndRestart("B") }
      if round % 7 == 3 { mesh.crashAndRestart("A") }
    }
    mesh.run()
    for node in ["A", "B", "C"] {
      let bodies = mesh.bodies("r1", on: node)
      #expect(bodies.count == 60, "node \(node) has \(bodies.count) messages")
      #expect(Set(bodies).count == bodies.count, "node \(node) has a message twice")
      for (sender, sent) in expected {
        #expect(bodies.filter { $0.hasPrefix(sender) } == sent, "node \(node), \(sender)'s order")
      }
      #expect(mesh.nodes[node]!.book.pending["r1", default: []].isEmpty)
    }
  }

  @Test func gapMakesTheMemberNodeSyncAgain() throws {
    var mesh = Harness(["A", "B"])
    mesh.link("A", "B")
    let hostPeer = mesh.peer("hana", on: "A")
    let bob = mesh.peer("bob", on: "B")
    mesh.host("r1", "Lobby", by: hostPeer)
    try mesh.join("r1", bob, host: hostPeer)
    try mesh.post("r1", hostPeer, "m1")
    try mesh.post("r1", hostPeer, "m2")
    // m1's frame is lost (as if on a replaced connection); m2 arrives with a gap.
    mesh.inFlight.removeFirst()
    mesh.run()
    #expect(mesh.bodies("r1", on: "B") == ["m1", "m2"])
  }

  @Test func wireRejectsMalformedFrames() {
    for text in [
      "", "[]", #"{"op":"sync"}"#, #"{"op":"warp","room":"r"}"#, #"{"op":"sync","room":"r","members":[],"after":-1}"#,
      #"{"op":"post","room":"r","message":{"id":"x","from":{"id":"a","displayName":"A","nodeId":"n"},"senderSeq":1,"at":"t"}}"#,
    ] {
      #expect(throws: ChatWire.DecodeError.self, "\(text)") { _ = try ChatWire.decode(Array(text.utf8)) }
    }
    let big = String(repeating: "x", count: ChatWire.maxBodyBytes + 1)
    let message = ChatMessage(
      id: "x", from: Directory.PeerRef(peerID: "a", displayName: "A", nodeID: "n"), senderSeq: 1, body: big,
      sentAt: "t")
    #expect(throws: ChatWire.DecodeError.self) {
      _ = try ChatWire.decode(ChatWire.post(roomID: "r", message).encoded())
    }
  }
}
