import Testing

@testable import MeshCore

// MARK: - Helpers

/// Two or more ``MeshNode``s joined by ordered in-memory connections: effects that send become frames in one FIFO
/// queue, delivered as ``MeshInput/frameReceived(_:on:now:)`` on the other end. Every node's effects are kept, in
/// order, per step.
private struct Harness {
  var nodes: [String: MeshNode] = [:]
  var now: UInt64 = 1000
  /// Each connection end → the other end.
  var wires: [End: End] = [:]
  var queue: [(to: End, message: MeshMessage)] = []
  /// Effects of every step, per node.
  var steps: [String: [[MeshEffect]]] = [:]
  var nextInbound: LinkManager.ConnectionID = 1

  struct End: Hashable {
    var node: String
    var id: LinkManager.ConnectionID
  }

  init(_ names: [String], checksWireIDs: Bool = false) {
    for name in names {
      let links = LinkManager(local: NodeHello(nodeID: name, name: "node " + name, softwareVersion: "test", port: 1))
      nodes[name] = MeshNode(
        links: links, directory: Directory(nodeID: name), sessions: SessionBook(nodeID: name),
        checksWireIDs: checksWireIDs)
    }
  }

  /// Every effect of `node` since the start, flattened.
  func effects(of node: String) -> [MeshEffect] { (steps[node] ?? []).flatMap { $0 } }

  @discardableResult
  mutating func feed(_ node: String, _ input: MeshInput) -> [MeshEffect] {
    let effects = nodes[node]!.handle(input)
    carry(effects, from: node)
    return effects
  }

  mutating func carry(_ effects: [MeshEffect], from node: String) {
    steps[node, default: []].append(effects)
    for effect in effects {
      switch effect {
      case .send(let message, let id):
        post(message, from: End(node: node, id: id))
      case .broadcast(let message, let ids):
        for id in ids { post(message, from: End(node: node, id: id)) }
      case .sendToNode(let message, _, let id?):
        post(message, from: End(node: node, id: id))
      case .chatSend(let wire, let to):
        // What the node's chat queue sends once the batch's writes are done.
        if let id = nodes[node]!.links.connection(of: to) {
          post(.chat(payload: wire.encoded()), from: End(node: node, id: id))
        }
      default:
        break
      }
    }
  }

  mutating func post(_ message: MeshMessage, from end: End) {
    guard let other = wires[end] else { return }
    queue.append((other, message))
  }

  /// `dialler` connects to `listener` and both say hello; frames are delivered until the queue is empty.
  mutating func link(_ dialler: String, _ listener: String, tls: Bool = false) {
    func transport(_ local: String, _ remote: String) -> LinkManager.Transport {
      guard tls else { return .plaintext }
      return LinkManager.Transport(
        encrypted: true, localFingerprint: "cert-" + local, remoteFingerprint: "cert-" + remote, challenge: [])
    }
    let dial = feed(dialler, .seedAdded(host: listener, port: 1, now: now))
    guard case .connect(let outbound, _, _)? = dial.first else {
      Issue.record("no dial: \(dial)")
      return
    }
    let inbound = nextInbound
    nextInbound += 1
    wires[End(node: dialler, id: outbound)] = End(node: listener, id: inbound)
    wires[End(node: listener, id: inbound)] = End(node: dialler, id: outbound)
    feed(listener, .inboundOpened(inbound, remoteHost: dialler, transport: transport(listener, dialler), now: now))
    feed(dialler, .outboundOpened(outbound, transport: transport(dialler, listener), now: now))
    deliverAll()
  }

  mutating func deliverAll() {
    while !queue.isEmpty {
      let (to, message) = queue.removeFirst()
      feed(to.node, .frameReceived(message, on: to.id, now: now))
    }
  }

  /// The step of `node` whose effects contain a `linkUp`.
  func linkUpStep(of node: String) -> [MeshEffect]? {
    steps[node]?.first { $0.contains { if case .linkUp = $0 { true } else { false } } }
  }
}

private func member(_ peerID: String, _ nodeID: String, _ state: MemberState = .connected) -> SessionMember {
  SessionMember(peerID: peerID, displayName: peerID.uppercased(), nodeID: nodeID, state: state)
}

/// Nodes A and B linked, with peers a1 on A and b1 on B; a1 creates session "s" and invites `invitee` (said to be
/// on B) as invitation "i1", and every frame is delivered.
private func invited(_ invitee: String) throws -> Harness {
  var mesh = Harness(["A", "B"])
  mesh.feed("A", .localPeerAdded(peerID: "a1", displayName: "A1"))
  mesh.feed("B", .localPeerAdded(peerID: "b1", displayName: "B1"))
  mesh.link("A", "B")
  let session = mesh.nodes["A"]!.createSession(
    "s", creator: member("a1", "A"), strategy: .cluster, encryption: .optional, maxPeers: 8)
  let (_, inviting) = try mesh.nodes["A"]!.invite(
    "i1", from: "a1", to: member(invitee, "B", .connecting), sessionID: session.sessionID, context: [],
    timeoutMillis: 30_000, now: mesh.now)
  mesh.carry(inviting, from: "A")
  mesh.deliverAll()
  return mesh
}

private func refusals(in effects: [MeshEffect]) -> [FrameRefusal] {
  effects.compactMap { if case .frameRefused(let refusal) = $0 { refusal } else { nil } }
}

private func sessionEvents(in effects: [MeshEffect]) -> [(String, SessionBook.Event)] {
  effects.flatMap { effect -> [(String, SessionBook.Event)] in
    switch effect {
    case .sessionEvent(let peerID, let event): [(peerID, event)]
    case .sessionEvents(let peerIDs, let event): peerIDs.map { ($0, event) }
    default: []
    }
  }
}

// MARK: - Tests

@Suite struct MeshNodeTests {
  @Test func linkUpTellsTheDirectoryAndTheSessionsBeforeItIsReported() throws {
    var mesh = Harness(["A", "B"])
    mesh.feed("A", .localPeerAdded(peerID: "a1", displayName: "A1"))
    mesh.link("A", "B")
    let step = try #require(mesh.linkUpStep(of: "A"))
    // The directory's snapshot goes out on the new link, then the link is reported, last.
    let snapshot = step.firstIndex {
      if case .send(.peerSnapshot(let peers), _) = $0 { peers.map(\.peerID) == ["a1"] } else { false }
    }
    let up = step.firstIndex { if case .linkUp(let hello, _) = $0 { hello.nodeID == "B" } else { false } }
    #expect(snapshot != nil)
    #expect(up == step.count - 1)
    #expect(snapshot! < up!)
    // Both machines know the link: B holds A's peer, the session book has the link's security.
    #expect(mesh.nodes["B"]!.directory.peer("a1")?.nodeID == "A")
    #expect(mesh.nodes["A"]!.sessions.linkSecurity["B"] == .plaintext)
    #expect(mesh.nodes["A"]!.links.linkedNodeIDs == ["B"])
  }

  @Test func linkDownLosesTheNodesPeersAndMembersThenReportsIt() throws {
    var mesh = Harness(["A", "B"])
    mesh.feed("A", .localPeerAdded(peerID: "a1", displayName: "A1"))
    mesh.feed("B", .localPeerAdded(peerID: "b1", displayName: "B1"))
    mesh.feed("A", .advertisingStarted(peerID: "a1", serviceType: "chat", discoveryInfo: [:]))
    mesh.feed("B", .browsingStarted(peerID: "b1", serviceType: "chat"))
    mesh.link("A", "B")
    #expect(
      mesh.effects(of: "B").contains {
        if case .directoryEvent("b1", .peerFound(let peer, "chat", _)) = $0 { peer.peerID == "a1" } else { false }
      })
    let connection = try #require(mesh.nodes["B"]!.links.connection(of: "A"))
    let effects = mesh.feed("B", .closed(connection, now: mesh.now))
    let lost = effects.firstIndex {
      if case .directoryEvent("b1", .peerLost(let peer, "chat")) = $0 { peer.peerID == "a1" } else { false }
    }
    #expect(lost != nil)
    #expect(effects.last == .linkDown(nodeID: "A"))
    #expect(mesh.nodes["B"]!.directory.peer("a1") == nil)
  }

  @Test func framesGoToTheirStateMachineOrToTheRuntime() throws {
    var mesh = Harness(["A", "B"])
    mesh.feed("A", .localPeerAdded(peerID: "a1", displayName: "A1"))
    mesh.feed("B", .localPeerAdded(peerID: "b1", displayName: "B1"))
    mesh.feed("B", .browsingStarted(peerID: "b1", serviceType: "files"))
    mesh.link("A", "B")
    let onB = try #require(mesh.nodes["B"]!.links.connection(of: "A"))
    // A directory frame: the directory tells B's browser.
    let update = mesh.feed(
      "B",
      .frameReceived(
        .peerUpdated(PeerAnnouncement(peerID: "a1", displayName: "A1", advertising: ["files": [:]])), on: onB,
        now: mesh.now))
    #expect(
      update.contains {
        if case .directoryEvent("b1", .peerFound(let peer, "files", _)) = $0 { peer.peerID == "a1" } else { false }
      })
    // Chat frames go to the chat book (which reads none over a plaintext link); transfer and stream frames go to the
    // payload book: a close of a stream B does not know is dropped there, an offer comes out to be judged.
    let chat = mesh.feed("B", .frameReceived(.chat(payload: [1, 2, 3]), on: onB, now: mesh.now))
    #expect(chat.isEmpty)
    let close = MeshMessage.streamClose(streamID: "s1", reason: "done")
    #expect(mesh.feed("B", .frameReceived(close, on: onB, now: mesh.now)).isEmpty)
    let offer = StreamOffer(
      streamID: "s2", sessionID: "x", fromPeerID: "a1", fromDisplayName: "A1", toPeerID: "b1", name: "s")
    let stream = mesh.feed("B", .frameReceived(.streamOpen(offer), on: onB, now: mesh.now))
    #expect(stream == [.payload(.streamOffered(offer, from: "A"))])
    // Session frames go to the session book (an answer to an unknown invitation changes nothing).
    let answer = mesh.feed(
      "B", .frameReceived(.inviteAnswer(invitationID: "i9", outcome: .accepted), on: onB, now: mesh.now))
    #expect(answer.isEmpty)
  }

  @Test func aSessionWorksAcrossTwoMeshNodes() throws {
    var mesh = try invited("b1")
    #expect(
      sessionEvents(in: mesh.effects(of: "B")).contains {
        if case ("b1", .invitationReceived(let received)) = $0 { received.id == "i1" } else { false }
      })
    let accepting = try mesh.nodes["B"]!.answer("i1", by: "b1", accept: true, now: mesh.now)
    mesh.carry(accepting, from: "B")
    mesh.deliverAll()
    let members = mesh.nodes["A"]!.sessions.sessions["s"]?.members.map { "\($0.peerID):\($0.state.rawValue)" }
    #expect(members == ["a1:connected", "b1:connected"])
    #expect(mesh.nodes["B"]!.sessions.sessions["s"]?.members.count == 2)

    let sent = try mesh.nodes["A"]!.send("s", from: "a1", to: nil, payload: [7], reliable: true)
    #expect(sent.undelivered.isEmpty)
    #expect(MeshNode.addressed(by: sent.effects) == ["b1"])
    mesh.carry(sent.effects, from: "A")
    mesh.deliverAll()
    #expect(
      sessionEvents(in: mesh.effects(of: "B")).contains {
        if case ("b1", .data("s", "a1", [7], true)) = $0 { true } else { false }
      })
  }

  @Test func sessionFailuresSayWhatWentWrong() {
    var mesh = Harness(["A"])
    mesh.feed("A", .localPeerAdded(peerID: "a1", displayName: "A1"))
    let failure = #expect(throws: MeshFailure.self) { _ = try mesh.nodes["A"]!.leave("nope", peerID: "a1") }
    #expect(failure == .notSessionMember(sessionID: "nope"))
  }

  @Test func aFrameSpeakingForAnotherNodesPeerIsRefused() throws {
    var mesh = Harness(["A", "B", "C"])
    mesh.feed("A", .localPeerAdded(peerID: "a1", displayName: "A1"))
    mesh.feed("B", .localPeerAdded(peerID: "b1", displayName: "B1"))
    mesh.feed("C", .localPeerAdded(peerID: "c1", displayName: "C1"))
    mesh.link("A", "B")
    mesh.link("C", "B")
    let fromA = try #require(mesh.nodes["B"]!.links.connection(of: "A"))
    // A sends data as C's peer.
    let spoofed = mesh.feed(
      "B",
      .frameReceived(
        .sessionData(sessionID: "s", fromPeerID: "c1", toPeerIDs: ["b1"], sequence: 0, payload: [1]), on: fromA,
        now: mesh.now))
    let refusal = try #require(refusals(in: spoofed).first)
    #expect(refusal.reason == "not_own_peer")
    #expect(refusal.spoofedSender)
    #expect(refusal.nodeID == "A")
    #expect(sessionEvents(in: spoofed).isEmpty)
    // A claims B's own peer in its directory snapshot.
    let claim = mesh.feed(
      "B",
      .frameReceived(.peerSnapshot([PeerAnnouncement(peerID: "b1", displayName: "B1")]), on: fromA, now: mesh.now))
    #expect(refusals(in: claim).map(\.reason) == ["not_own_peer"])
    #expect(mesh.nodes["B"]!.directory.isLocal("b1"))
  }

  @Test func anInvitationForAPeerHostedElsewhereIsRefused() throws {
    // A invites a peer B does not host, on B's link.
    let mesh = try invited("x1")
    #expect(refusals(in: mesh.effects(of: "B")).map(\.reason) == ["unknown_peer"])
    #expect(mesh.nodes["B"]!.sessions.invitations.isEmpty)
  }

  @Test func malformedIDsAreRefusedBeforeAnythingSeesThem() throws {
    var mesh = Harness(["0f8fad5b-d9cb-469f-a165-70867728950e"], checksWireIDs: true)
    let node = "0f8fad5b-d9cb-469f-a165-70867728950e"
    mesh.feed(node, .inboundOpened(1, remoteHost: "x", transport: .plaintext, now: mesh.now))
    let effects = mesh.feed(
      node,
      .frameReceived(
        .hello(NodeHello(nodeID: "../etc", name: "x", softwareVersion: "1", port: 1)), on: 1, now: mesh.now))
    let refusal = try #require(refusals(in: effects).first)
    #expect(refusal.reason == "invalid_id")
    #expect(refusal.nodeID == nil)
    #expect(refusal.answer == nil)
    #expect(effects.last == .drop(1, reason: "malformed node id"))
    #expect(mesh.nodes[node]!.links.linkedNodeIDs.isEmpty)
  }

  @Test func eachNodeTellsOnlyItsOwnPeersAboutASession() throws {
    var mesh = try invited("b1")
    mesh.carry(try mesh.nodes["B"]!.answer("i1", by: "b1", accept: true, now: mesh.now), from: "B")
    mesh.deliverAll()
    for node in ["A", "B"] {
      let told = Set(sessionEvents(in: mesh.effects(of: node)).map(\.0))
      #expect(told == [node == "A" ? "a1" : "b1"])
    }
  }

  @Test func aDeletedPeerIsToldNothingMore() throws {
    var mesh = Harness(["A"])
    mesh.feed("A", .localPeerAdded(peerID: "a1", displayName: "A1"))
    mesh.feed("A", .localPeerAdded(peerID: "a2", displayName: "A2"))
    let session = mesh.nodes["A"]!.createSession(
      "s", creator: member("a1", "A"), strategy: .cluster, encryption: .optional, maxPeers: 8)
    let (_, inviting) = try mesh.nodes["A"]!.invite(
      "i1", from: "a1", to: member("a2", "A", .connecting), sessionID: session.sessionID, context: [],
      timeoutMillis: 1000, now: mesh.now)
    mesh.carry(inviting, from: "A")
    #expect(sessionEvents(in: mesh.effects(of: "A")).map(\.0) == ["a2"])
    // a2 is deleted; whatever becomes of its invitation, only a1 hears of it.
    let removed = mesh.feed("A", .localPeerRemoved(peerID: "a2", now: mesh.now))
    let expired = mesh.feed("A", .tick(now: mesh.now + 5000))
    #expect(!mesh.nodes["A"]!.directory.isLocal("a2"))
    #expect(Set(sessionEvents(in: removed + expired).map(\.0)) == ["a1"])
  }

  // MARK: - Chat

  @Test func chatRoomsWorkOverTLSLinksThroughTheMeshNode() throws {
    var mesh = chatMesh(tls: true)
    let host = Directory.PeerRef(peerID: "a1", displayName: "A1", nodeID: "A")
    let joiner = Directory.PeerRef(peerID: "b1", displayName: "B1", nodeID: "B")
    _ = mesh.nodes["A"]!.hostChat("room1", name: "Room", by: host, now: "t0")
    let joining = try mesh.nodes["B"]!.joinChat("room1", peer: joiner, name: "Room", host: host, now: "t1")
    mesh.carry(joining, from: "B")
    mesh.deliverAll()
    // The host ordered the join (its roster has b1) and B's join settled when the roster came back.
    #expect(mesh.nodes["A"]!.chat.rooms["room1"]?.members == [host, joiner])
    #expect(mesh.effects(of: "B").contains(.chatJoinSettled(roomID: "room1", peerID: "b1", joined: true)))
    // A post from B is ordered by the host and comes back to B with its seq.
    let posted = try mesh.nodes["B"]!.postChat("room1", id: "message-1", from: "b1", body: "hi", sentAt: "t2")
    mesh.carry(posted.effects, from: "B")
    mesh.deliverAll()
    #expect(mesh.nodes["A"]!.chat.rooms["room1"]?.lastSeq == 1)
    #expect(mesh.nodes["B"]!.chat.rooms["room1"]?.lastSeq == 1)
    #expect(mesh.nodes["B"]!.chat.pending["room1"] ?? [] == [])
    // A deleted local peer leaves its rooms: B tells the host, which drops b1 from the roster.
    mesh.feed("B", .localPeerRemoved(peerID: "b1", now: mesh.now))
    mesh.deliverAll()
    #expect(mesh.nodes["A"]!.chat.rooms["room1"]?.members == [host])
  }

  @Test func chatNeedsAnEncryptedLink() throws {
    var mesh = chatMesh(tls: false)
    let host = Directory.PeerRef(peerID: "a1", displayName: "A1", nodeID: "A")
    let joiner = Directory.PeerRef(peerID: "b1", displayName: "B1", nodeID: "B")
    _ = mesh.nodes["A"]!.hostChat("room1", name: "Room", by: host, now: "t0")
    // The book never heard of the plaintext link: the host is unreachable for chat.
    let failure = #expect(throws: MeshFailure.self) {
      try mesh.nodes["B"]!.joinChat("room1", peer: joiner, name: "Room", host: host, now: "t1")
    }
    #expect(failure == .chatHostUnreachable(roomID: "room1", hostName: "A1"))
    // A chat frame over a plaintext link is dropped unread.
    let sync = ChatWire.sync(roomID: "room1", members: [joiner], after: 0)
    let effects = mesh.feed("A", .frameReceived(.chat(payload: sync.encoded()), on: 1, now: mesh.now))
    #expect(effects.isEmpty)
    #expect(mesh.nodes["A"]!.chat.rooms["room1"]?.members == [host])
  }

  @Test func chatFramesAreCheckedBeforeTheBookSeesThem() throws {
    var mesh = chatMesh(tls: true)
    let host = Directory.PeerRef(peerID: "a1", displayName: "A1", nodeID: "A")
    _ = mesh.nodes["A"]!.hostChat("room1", name: "Room", by: host, now: "t0")
    let fromB = try #require(mesh.nodes["A"]!.links.connection(of: "B"))
    func receive(_ payload: [UInt8]) -> [MeshEffect] {
      mesh.feed("A", .frameReceived(.chat(payload: payload), on: fromB, now: mesh.now))
    }
    // B speaks for A's own peer.
    let spoof = ChatWire.sync(
      roomID: "room1", members: [Directory.PeerRef(peerID: "a1", displayName: "A1", nodeID: "B")], after: 0)
    let spoofed = receive(spoof.encoded())
    #expect(refusals(in: spoofed).map(\.reason) == ["not_own_peer"])
    #expect(!spoofed.contains { if case .chatStore = $0 { true } else { false } })
    // A room id that is a path (ids are checked as the node runtime checks them).
    mesh.nodes["A"]!.checksWireIDs = true
    let badID = receive(ChatWire.sync(roomID: "../x", members: [], after: 0).encoded())
    #expect(refusals(in: badID).map(\.reason) == ["invalid_id"])
    // Not a chat frame at all.
    #expect(
      receive(Array("{".utf8)).contains { if case .chatFrameMalformed(nodeID: "B", _) = $0 { true } else { false } })
    #expect(mesh.nodes["A"]!.chat.rooms["room1"]?.members == [host])
  }
}

/// Nodes A and B, with peers a1 on A and b1 on B, linked over TLS or plaintext.
private func chatMesh(tls: Bool) -> Harness {
  var mesh = Harness(["A", "B"])
  mesh.feed("A", .localPeerAdded(peerID: "a1", displayName: "A1"))
  mesh.feed("B", .localPeerAdded(peerID: "b1", displayName: "B1"))
  mesh.link("B", "A", tls: tls)
  return mesh
}
