import Crypto
import MeshCore
import MeshSimulator
import Testing

// Transfers and streams across simulated meshes, each node's runtime carrying out its payload book's effects with
// in-memory files: under loss, delay, partitions and node deaths, every finished transfer holds exactly the sent
// bytes, a transfer cut by a partition resumes from what the receiver stored, nothing finishes twice, and credit
// never lets more than the window be in flight. Deterministic by seed.

// MARK: - Helpers

/// A linked mesh of `nodes` nodes with one peer `p<i>` per node.
private func linkedMesh(nodes: Int, seed: UInt64, network: NetworkModel = NetworkModel()) -> Simulation {
  let simulation = Simulation(seed: seed, nodeCount: nodes, network: network)
  for node in 0..<nodes { simulation.addPeer(node: node, peerID: "p\(node)", name: "Peer \(node)") }
  simulation.runUntilQuiet(maxTime: 10_000)
  for node in 0..<nodes { precondition(simulation.linkedNodes(of: node).count == nodes - 1, "mesh did not link") }
  return simulation
}

/// `count` bytes derived from `seed`.
private func content(_ count: Int, seed: UInt64) -> [UInt8] {
  var state = seed | 1
  return (0..<count).map { _ in
    state ^= state << 13
    state ^= state >> 7
    state ^= state << 17
    return UInt8(truncatingIfNeeded: state)
  }
}

/// Whether transfer `id` from node `from` to node `to` finished on both sides.
private func finished(_ simulation: Simulation, _ id: String, from: Int, to: Int) -> Bool {
  simulation.transfer(id, on: from, outgoing: true)?.finishes ?? 0 > 0
    && simulation.transfer(id, on: to, outgoing: false)?.finishes ?? 0 > 0
}

/// What must hold for every transfer, finished or not: exact bytes when finished, finished once per side, the
/// window respected, and the receiver's file a prefix of what was sent.
private func problems(_ simulation: Simulation, _ id: String, from: Int, to: Int, sent: [UInt8]) -> [String] {
  var problems: [String] = []
  guard let sender = simulation.transfer(id, on: from, outgoing: true) else { return ["\(id): no sender"] }
  if sender.finishes > 1 { problems.append("\(id): the sender finished \(sender.finishes) times") }
  if sender.maxInFlight > Simulation.transferWindow {
    problems.append("\(id): \(sender.maxInFlight) bytes in flight, over the window")
  }
  guard let receiver = simulation.transfer(id, on: to, outgoing: false) else {
    if sender.finishes > 0 { problems.append("\(id): finished without a receiver") }
    return problems
  }
  if receiver.finishes > 1 { problems.append("\(id): the receiver finished \(receiver.finishes) times") }
  if !sent.starts(with: receiver.content) {
    problems.append("\(id): the receiver's file is not a prefix of the upload")
  }
  if receiver.finishes > 0 {
    if receiver.content != sent { problems.append("\(id): finished with other bytes") }
    if receiver.sha256 != Crypto.sha256(sent) { problems.append("\(id): finished with another digest") }
  }
  if sender.finishes > 0 && receiver.finishes == 0 { problems.append("\(id): the sender finished alone") }
  return problems
}

/// Where transfer `id` is on both sides, for a failure message.
private func describe(_ simulation: Simulation, _ id: String, from: Int, to: Int) -> String {
  let sender = simulation.transfer(id, on: from, outgoing: true)
  let receiver = simulation.transfer(id, on: to, outgoing: false)
  return
    "\(id) to node \(to): sender finishes \(sender?.finishes ?? -1) failure \(sender?.failure ?? "-") resumes "
    + "\(sender?.resumedFrom ?? []); receiver \(receiver?.content.count ?? -1) bytes, finishes \(receiver?.finishes ?? -1)"
    + " failure \(receiver?.failure ?? "-"), linked \(simulation.linkedNodes(of: from))"
}

// MARK: - Tests

@Suite struct PayloadSimulationTests {
  @Test(arguments: [1, 2, 3, 4, 5] as [UInt64])
  func aTransferArrivesByteIdenticalUnderLossAndDelay(seed: UInt64) throws {
    var network = NetworkModel()
    network.minDelay = 1
    network.maxDelay = 20
    network.crashDetection = .reset
    let simulation = linkedMesh(nodes: 2, seed: seed, network: network)
    simulation.network.loss = 0.01
    let bytes = content(48 * 1024 + 17, seed: seed)
    let id = try #require(simulation.sendFile(bytes, from: "p0", to: "p1"))
    let done = simulation.run(until: { finished(simulation, id, from: 0, to: 1) }, maxTime: 300_000)
    #expect(done != nil, "seed \(seed): the transfer did not finish")
    #expect(problems(simulation, id, from: 0, to: 1, sent: bytes) == [])
    simulation.run(for: 5_000)
    #expect(problems(simulation, id, from: 0, to: 1, sent: bytes) == [], "seed \(seed): after finishing")
  }

  @Test(arguments: [11, 12, 13] as [UInt64])
  func aPartitionedTransferResumesFromWhatWasStored(seed: UInt64) throws {
    let simulation = linkedMesh(nodes: 2, seed: seed)
    let bytes = content(64 * 1024, seed: seed)
    let id = try #require(simulation.sendFile(bytes, from: "p0", to: "p1"))
    // Cut the link once part of the file is stored at the receiver.
    _ = simulation.run(
      until: { (simulation.transfer(id, on: 1, outgoing: false)?.content.count ?? 0) >= 16 * 1024 }, maxTime: 10_000)
    simulation.partition([[0], [1]])
    simulation.run(for: 8_000)
    let stored = try #require(simulation.transfer(id, on: 1, outgoing: false)).content.count
    #expect(stored > 0 && stored < bytes.count)
    #expect(!finished(simulation, id, from: 0, to: 1))
    simulation.heal()
    let done = simulation.run(until: { finished(simulation, id, from: 0, to: 1) }, maxTime: 60_000)
    #expect(done != nil, "seed \(seed): the transfer did not finish after the heal")
    let sender = try #require(simulation.transfer(id, on: 0, outgoing: true))
    // The first resume continued where the receiver's stored file ended, not from zero.
    #expect(sender.resumedFrom.first == UInt64(stored), "seed \(seed): resumed from \(sender.resumedFrom)")
    #expect(problems(simulation, id, from: 0, to: 1, sent: bytes) == [])
  }

  @Test(arguments: [21, 22, 23] as [UInt64])
  func aReceiverThatDiesMidTransferResumesFromItsFile(seed: UInt64) throws {
    var network = NetworkModel()
    network.crashDetection = .reset
    let simulation = linkedMesh(nodes: 3, seed: seed, network: network)
    let bytes = content(64 * 1024 + 5, seed: seed)
    let id = try #require(simulation.sendFile(bytes, from: "p0", to: "p1"))
    _ = simulation.run(
      until: { (simulation.transfer(id, on: 1, outgoing: false)?.content.count ?? 0) >= 20 * 1024 }, maxTime: 10_000)
    simulation.crash(1)
    simulation.run(for: 2_000)
    let stored = try #require(simulation.transfer(id, on: 1, outgoing: false)).content.count
    simulation.restart(1)
    let done = simulation.run(until: { finished(simulation, id, from: 0, to: 1) }, maxTime: 60_000)
    #expect(done != nil, "seed \(seed): the transfer did not finish after the receiver came back")
    let sender = try #require(simulation.transfer(id, on: 0, outgoing: true))
    #expect(sender.resumedFrom.first == UInt64(stored), "seed \(seed): resumed from \(sender.resumedFrom)")
    #expect(problems(simulation, id, from: 0, to: 1, sent: bytes) == [])
  }

  @Test(arguments: [31, 32, 33] as [UInt64])
  func aSenderThatDiesMidTransferOffersAgainFromItsSpool(seed: UInt64) throws {
    var network = NetworkModel()
    network.crashDetection = .reset
    let simulation = linkedMesh(nodes: 2, seed: seed, network: network)
    let bytes = content(64 * 1024, seed: seed)
    let id = try #require(simulation.sendFile(bytes, from: "p0", to: "p1"))
    _ = simulation.run(
      until: { (simulation.transfer(id, on: 1, outgoing: false)?.content.count ?? 0) >= 8 * 1024 }, maxTime: 10_000)
    simulation.crash(0)
    simulation.run(for: 2_000)
    let stored = try #require(simulation.transfer(id, on: 1, outgoing: false)).content.count
    simulation.restart(0)
    let done = simulation.run(until: { finished(simulation, id, from: 0, to: 1) }, maxTime: 60_000)
    #expect(done != nil, "seed \(seed): the transfer did not finish after the sender came back")
    let sender = try #require(simulation.transfer(id, on: 0, outgoing: true))
    // A restored sender's first accept is a resume too: from the receiver's file.
    #expect(sender.resumedFrom.first == UInt64(stored), "seed \(seed): resumed from \(sender.resumedFrom)")
    #expect(problems(simulation, id, from: 0, to: 1, sent: bytes) == [])
  }

  @Test(arguments: [41, 42, 43] as [UInt64])
  func aGroupSendReachesEveryNodeThroughLossAPartitionAndADeath(seed: UInt64) throws {
    var network = NetworkModel()
    network.maxDelay = 15
    network.crashDetection = .reset
    let simulation = linkedMesh(nodes: 4, seed: seed, network: network)
    simulation.network.loss = 0.005
    let bytes = content(40 * 1024 + 3, seed: seed)
    let ids = simulation.sendFileToGroup(bytes, from: "p0", to: ["p1", "p2", "p3"])
    #expect(ids.count == 3)
    simulation.run(for: 40)
    simulation.partition([[0, 1, 3], [2]])
    simulation.run(for: 300)
    simulation.crash(3)
    simulation.run(for: 6_000)
    simulation.heal()
    simulation.restart(3)
    var recipients = [(1, ids["p1"]!), (2, ids["p2"]!), (3, ids["p3"]!)]
    var done: UInt64?
    for _ in 0..<5 where done == nil {
      done = simulation.run(
        until: { recipients.allSatisfy { finished(simulation, $0.1, from: 0, to: $0.0) } }, maxTime: 60_000)
      // An offer whose receiving node went away before it answered fails; the client sends that copy again.
      for (index, (node, id)) in recipients.enumerated()
      where simulation.transfer(id, on: 0, outgoing: true)?.failure == Simulation.unansweredOffer {
        if let again = simulation.sendFile(bytes, from: "p0", to: "p\(node)") { recipients[index] = (node, again) }
      }
    }
    #expect(
      done != nil,
      "seed \(seed): not every copy finished: \(recipients.map { describe(simulation, $0.1, from: 0, to: $0.0) })")
    for (node, id) in recipients {
      #expect(problems(simulation, id, from: 0, to: node, sent: bytes) == [], "seed \(seed), node \(node)")
    }
  }

  @Test(arguments: [51, 52, 53] as [UInt64])
  func aStreamArrivesInOrderWithinItsWindow(seed: UInt64) throws {
    var network = NetworkModel()
    network.maxDelay = 25
    let simulation = linkedMesh(nodes: 2, seed: seed, network: network)
    let bytes = content(20 * 1024 + 9, seed: seed)
    let id = try #require(simulation.sendStream(bytes, from: "p0", to: "p1"))
    let done = simulation.run(until: { simulation.stream(id)?.ended == true }, maxTime: 60_000)
    #expect(done != nil)
    let stream = try #require(simulation.stream(id))
    #expect(stream.received == bytes)
    #expect(stream.failure == nil)
    #expect(stream.maxInFlight <= Simulation.streamWindow && stream.maxInFlight > 0)
  }

  @Test(arguments: [61, 62, 63, 64] as [UInt64])
  func aStreamCutByLossFailsWithAReasonAndNeverDeliversOtherBytes(seed: UInt64) throws {
    var network = NetworkModel()
    network.maxDelay = 10
    network.crashDetection = .reset
    let simulation = linkedMesh(nodes: 2, seed: seed, network: network)
    simulation.network.loss = 0.05
    let bytes = content(32 * 1024, seed: seed)
    let id = try #require(simulation.sendStream(bytes, from: "p0", to: "p1"))
    _ = simulation.run(
      until: { simulation.stream(id)?.ended == true || simulation.stream(id)?.failure != nil }, maxTime: 60_000)
    let stream = try #require(simulation.stream(id))
    #expect(stream.ended || stream.failure != nil)
    #expect(bytes.starts(with: stream.received))
    if stream.ended { #expect(stream.received == bytes) }
    #expect(stream.maxInFlight <= Simulation.streamWindow)
  }

  @Test func theSameSeedRunsTheSameTransfers() {
    func run() -> [UInt64] {
      var network = NetworkModel()
      network.crashDetection = .reset
      let simulation = linkedMesh(nodes: 3, seed: 77, network: network)
      simulation.network.loss = 0.01
      let bytes = content(30_000, seed: 77)
      let ids = simulation.sendFileToGroup(bytes, from: "p0", to: ["p1", "p2"])
      simulation.run(for: 100)
      simulation.crash(2)
      simulation.run(for: 1_000)
      simulation.restart(2)
      simulation.run(for: 30_000)
      return [ids["p1"]!, ids["p2"]!].flatMap {
        (simulation.transfer($0, on: 0, outgoing: true)?.resumedFrom ?? []) + [simulation.now]
      }
    }
    #expect(run() == run())
  }
}
