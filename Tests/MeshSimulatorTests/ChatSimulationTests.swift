import MeshCore
import MeshSimulator
import Testing

// Chat rooms across simulated meshes under loss, delay, partitions and node death: every acknowledged message is
// ordered once by the host's node and told exactly once, in the host's order, to every member that stays; a resend
// after a lost link is never ordered twice; a dead host's room takes posts as pending, refuses joins
// (`host_unreachable`) and delivers everything when the host's node is back (docs/mesh-protocol.md, section 6).

// MARK: - Helpers

/// A network whose links run over TLS (chat rooms are `encryption: required`), with `loss` and delays up to
/// `maxDelay` ms.
private func tlsNetwork(loss: Double = 0, maxDelay: UInt64 = 5) -> NetworkModel {
  var network = NetworkModel()
  network.tls = true
  network.loss = loss
  network.maxDelay = maxDelay
  return network
}

/// `nodes` linked nodes with one peer `p<i>` each; `p0` hosts room `r1` and every other peer joins it.
private func chatMesh(nodes: Int, seed: UInt64, network: NetworkModel = tlsNetwork()) throws -> Simulation {
  let simulation = Simulation(seed: seed, nodeCount: nodes, network: network)
  for node in 0..<nodes { simulation.addPeer(node: node, peerID: "p\(node)", name: "Peer \(node)") }
  #expect(
    simulation.run(
      until: { (0..<nodes).allSatisfy { simulation.linkedNodes(of: $0).count == nodes - 1 } }, maxTime: 20_000)
      != nil, "the mesh links")
  simulation.hostChat("r1", name: "Lobby", by: "p0")
  for node in 1..<nodes { try join(simulation, "p\(node)") }
  return simulation
}

/// `peerID` joins `r1`; returns once the host's roster confirmed it (retrying while the host is unreachable, as a
/// client told `503` does).
private func join(_ simulation: Simulation, _ peerID: String, room: String = "r1") throws {
  let settled = simulation.run(
    until: {
      if simulation.chatJoin(room, peerID: peerID) == true { return true }
      if simulation.chatRoom(room, on: simulation.home(of: peerID)!)?.localMembers.contains(where: {
        $0.peerID == peerID
      }) != true {
        _ = try? simulation.joinChat(room, peerID: peerID)
      }
      return false
    }, maxTime: simulation.now + 30_000)
  #expect(settled != nil, "\(peerID) joined \(room)")
}

/// Runs until the host holds every acknowledged message, no node has pending messages, and every one of `members`
/// was told the whole history; returns whether it got there.
@discardableResult
private func settle(_ simulation: Simulation, members: [String], room: String = "r1", maxTime: UInt64 = 120_000)
  -> Bool
{
  simulation.run(
    until: {
      let history = simulation.chatHistory(on: 0, room: room)
      guard history.count == simulation.acknowledgedChat(room).count else { return false }
      for node in 0..<simulation.nodeCount where !simulation.pendingChat(on: node, room: room).isEmpty { return false }
      return members.allSatisfy { simulation.chatMessagesTold(to: $0, room: room).last?.id == history.last?.id }
    }, maxTime: simulation.now + maxTime, checkEvery: 50) != nil
}

/// Posts `count` messages from each of `senders` in turns, running `gap` ms between turns.
private func chatter(_ simulation: Simulation, _ senders: [String], count: Int, gap: UInt64 = 15) throws {
  for round in 0..<count {
    for sender in senders { try simulation.postChat("r1", from: sender, body: "\(sender) #\(round)") }
    simulation.run(for: gap)
  }
}

// MARK: - Tests

@Suite struct ChatSimulationTests {
  @Test func aQuietMeshDeliversEveryMessageOnceInHostOrder() throws {
    let simulation = try chatMesh(nodes: 3, seed: 1)
    try chatter(simulation, ["p0", "p1", "p2"], count: 5)
    #expect(settle(simulation, members: ["p0", "p1", "p2"]))
    #expect(simulation.chatHistory(on: 0, room: "r1").count == 15)
    #expect(simulation.chatProblems("r1", members: ["p0", "p1", "p2"]) == [])
    for peer in ["p0", "p1", "p2"] { #expect(simulation.chatMessagesTold(to: peer, room: "r1").count == 15) }
  }

  @Test(arguments: [UInt64(1), 2, 3, 4])
  func lossAndDelayLoseNothingAndDuplicateNothing(seed: UInt64) throws {
    // Each lost frame resets its connection: links drop and come back, member nodes sync and post their pending
    // messages again, and the host drops the repeats by sender sequence.
    let simulation = try chatMesh(nodes: 3, seed: seed, network: tlsNetwork(loss: 0.05, maxDelay: 40))
    let resetsBefore = simulation.stats.connectionResets
    try chatter(simulation, ["p0", "p1", "p2"], count: 12)
    #expect(settle(simulation, members: ["p0", "p1", "p2"]))
    #expect(simulation.stats.connectionResets > resetsBefore, "the loss reset links while messages flowed")
    #expect(simulation.chatHistory(on: 0, room: "r1").count == 36)
    #expect(simulation.chatProblems("r1", members: ["p0", "p1", "p2"]) == [])
  }

  @Test func aResendAfterALostLinkIsNotOrderedTwice() throws {
    let simulation = try chatMesh(nodes: 2, seed: 7)
    // p1's post reaches the host and is ordered, but the ordered message never comes back: the nodes are cut apart
    // at that moment and the link goes down. p1's node still holds the post as pending and posts it again when the
    // link returns; the host must not order it a second time.
    try simulation.postChat("r1", from: "p1", body: "once")
    let ordered = simulation.run(
      until: { simulation.chatHistory(on: 0, room: "r1").count == 1 }, maxTime: simulation.now + 1_000, checkEvery: 1)
    #expect(ordered != nil)
    simulation.partition([[0], [1]])
    simulation.run(for: 5_000)
    #expect(simulation.linkedNodes(of: 1).isEmpty)
    #expect(simulation.pendingChat(on: 1, room: "r1").map(\.body) == ["once"])
    simulation.heal()
    #expect(settle(simulation, members: ["p0", "p1"]))
    #expect(simulation.chatHistory(on: 0, room: "r1").map(\.body) == ["once"])
    #expect(simulation.chatProblems("r1", members: ["p0", "p1"]) == [])
  }

  @Test func aPartitionHoldsPostsAsPendingAndDeliversThemOnceWhenItHeals() throws {
    let simulation = try chatMesh(nodes: 3, seed: 11)
    try chatter(simulation, ["p0", "p1", "p2"], count: 2)
    simulation.partition([[0], [1, 2]])
    simulation.run(for: 5_000)
    try chatter(simulation, ["p0", "p1", "p2"], count: 4)
    // Acknowledged on their own nodes, not ordered yet: the host is on the other side.
    #expect(simulation.pendingChat(on: 1, room: "r1").count == 4)
    #expect(simulation.pendingChat(on: 2, room: "r1").count == 4)
    simulation.heal()
    #expect(settle(simulation, members: ["p0", "p1", "p2"]))
    #expect(simulation.chatHistory(on: 0, room: "r1").count == 18)
    #expect(simulation.chatProblems("r1", members: ["p0", "p1", "p2"]) == [])
  }

  @Test func aMemberNodeThatDiesAndRestartsMissesNothingAndRepeatsNothing() throws {
    let simulation = try chatMesh(nodes: 3, seed: 5, network: tlsNetwork(maxDelay: 20))
    try chatter(simulation, ["p0", "p1", "p2"], count: 3)
    // Node 2 dies with posts in flight; the others go on talking.
    try simulation.postChat("r1", from: "p2", body: "in flight")
    simulation.run(for: 2)
    simulation.crash(2)
    try chatter(simulation, ["p0", "p1"], count: 3)
    simulation.run(for: 5_000)
    simulation.restart(2)
    try chatter(simulation, ["p0", "p1", "p2"], count: 2)
    #expect(settle(simulation, members: ["p0", "p1", "p2"]))
    #expect(simulation.chatProblems("r1", members: ["p0", "p1", "p2"]) == [])
    // p2 was told every message once over both lives of its node.
    #expect(simulation.chatMessagesTold(to: "p2", room: "r1").count == simulation.chatHistory(on: 0, room: "r1").count)
  }

  @Test func aDeadHostsRoomTakesPostsAsPendingRefusesJoinsAndCatchesUpWhenTheHostIsBack() throws {
    let simulation = try chatMesh(nodes: 3, seed: 3)
    try chatter(simulation, ["p0", "p1", "p2"], count: 2)
    #expect(settle(simulation, members: ["p0", "p1", "p2"]))
    simulation.crash(0)
    simulation.run(for: 5_000)
    // Posts are acknowledged on the member nodes and stay pending (`seq: null`).
    let pending = try simulation.postChat("r1", from: "p1", body: "while the host is away")
    #expect(pending.seq == nil)
    #expect(simulation.pendingChat(on: 1, room: "r1").map(\.id) == [pending.id])
    // A new peer cannot join: the node that orders the room is not there.
    simulation.addPeer(node: 2, peerID: "p3", name: "Peer 3")
    let refused = #expect(throws: MeshFailure.self) { try simulation.joinChat("r1", peerID: "p3") }
    #expect(refused == .chatHostUnreachable(roomID: "r1", hostName: "Peer 0"))
    // The host's node comes back from its store: the pending post is ordered once, after the history, and everyone
    // (the host peer too) is told it; the new peer can join now and gets the whole history.
    simulation.restart(0)
    #expect(settle(simulation, members: ["p0", "p1", "p2"]))
    #expect(simulation.chatHistory(on: 0, room: "r1").last?.id == pending.id)
    try join(simulation, "p3")
    #expect(
      simulation.run(until: { simulation.chatHistory(on: 2, room: "r1").count == 7 }, maxTime: simulation.now + 5_000)
        != nil)
    #expect(simulation.chatProblems("r1", members: ["p0", "p1", "p2"]) == [])
  }

  @Test func peersThatLeaveAreToldNothingMoreAndTheOthersEverything() throws {
    let simulation = try chatMesh(nodes: 3, seed: 9, network: tlsNetwork(loss: 0.01, maxDelay: 20))
    simulation.addPeer(node: 1, peerID: "p1b", name: "Peer 1b")
    try join(simulation, "p1b")
    try chatter(simulation, ["p0", "p1", "p2"], count: 3)
    try simulation.leaveChat("r1", peerID: "p1b")
    let toldBeforeLeaving = simulation.chatMessagesTold(to: "p1b", room: "r1").count
    try chatter(simulation, ["p0", "p1", "p2"], count: 3)
    #expect(settle(simulation, members: ["p0", "p1", "p2"]))
    #expect(simulation.chatMessagesTold(to: "p1b", room: "r1").count == toldBeforeLeaving)
    #expect(simulation.chatRoom("r1", on: 0)?.members.map(\.peerID) == ["p0", "p1", "p2"])
    #expect(simulation.chatProblems("r1", members: ["p0", "p1", "p2"]) == [])
  }

  @Test func chatUnderChurnIsDeterministic() throws {
    func run() throws -> [[String]] {
      let simulation = try chatMesh(nodes: 3, seed: 42, network: tlsNetwork(loss: 0.02, maxDelay: 30))
      try chatter(simulation, ["p0", "p1", "p2"], count: 4)
      simulation.crash(1)
      simulation.run(for: 1_000)
      simulation.restart(1)
      settle(simulation, members: ["p0", "p1", "p2"])
      return ["p0", "p1", "p2"].map { simulation.chatMessagesTold(to: $0, room: "r1").map(\.id) }
    }
    #expect(try run() == run())
  }
}
