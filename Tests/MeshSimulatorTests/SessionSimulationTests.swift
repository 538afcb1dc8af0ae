import MeshCore
import MeshSimulator
import Testing

// Sessions, invitations and data across simulated meshes: replicas converge on the host's description, peers'
// `session.peer.state` events match it, invitations end alike on both sides, and reliable data is delivered once and
// in order or its sender is told.

// MARK: - Helpers

/// A linked mesh of `nodes` nodes with one peer `p<i>` per node (plus `extraPeers` more per node, `p<i>x<j>`), after
/// every node has linked to every other and learnt every peer.
private func linkedMesh(
  nodes: Int, seed: UInt64, extraPeers: Int = 0, network: NetworkModel = NetworkModel()
) -> Simulation {
  let simulation = Simulation(seed: seed, nodeCount: nodes, network: network)
  for node in 0..<nodes {
    simulation.addPeer(node: node, peerID: "p\(node)", name: "Peer \(node)")
    for extra in 0..<extraPeers { simulation.addPeer(node: node, peerID: "p\(node)x\(extra)", name: "Extra \(extra)") }
  }
  simulation.runUntilQuiet(maxTime: 10_000)
  for node in 0..<nodes { precondition(simulation.linkedNodes(of: node).count == nodes - 1, "mesh did not link") }
  return simulation
}

/// Creates a session hosted by `host`, invites `members` and has each accept; returns the session id.
private func session(
  _ simulation: Simulation, host: String, members: [String], strategy: SessionStrategy = .cluster
) throws -> String {
  let session = simulation.createSession(creator: host, strategy: strategy)
  let invitations = try members.map { try simulation.invite(from: host, to: $0, session: session) }
  simulation.run(for: 50)
  for (member, invitation) in zip(members, invitations) { try simulation.accept(invitation, by: member) }
  simulation.run(for: 200)
  return session
}

/// The peer ids of `sessionID`'s members on `node` in state `state`, sorted.
private func members(_ simulation: Simulation, _ sessionID: String, on node: Int, _ state: MemberState = .connected)
  -> [String]
{
  (simulation.session(sessionID, on: node)?.members ?? []).filter { $0.state == state }.map(\.peerID).sorted()
}

/// The time of the first `session.peer.state` event telling `peerID` that `member` is `state`, at or after `since`.
private func firstStateTime(
  _ simulation: Simulation, _ peerID: String, about member: String, _ state: MemberState, since: UInt64
) -> UInt64? {
  simulation.sessionEvents(of: peerID).first {
    guard $0.time >= since, case .memberState(_, let changed) = $0.event else { return false }
    return changed.peerID == member && changed.state == state
  }?.time
}

/// The invitation events `peerID` was told, as `received i1` / `accepted i1` lines.
private func invitationLog(_ simulation: Simulation, _ peerID: String) -> [String] {
  simulation.sessionEvents(of: peerID).compactMap {
    switch $0.event {
    case .invitationReceived(let invitation): "received \(invitation.id)"
    case .invitationEnded(let invitation): "\(invitation.state.rawValue) \(invitation.id)"
    default: nil
    }
  }
}

/// One numbered reliable message: `sender#number`, and whom it was addressed to.
private struct SentMessage {
  var sender: String
  var number: Int
  var time: UInt64
  var addressed: Set<String>
}

/// Sends `sender#number` reliably to every connected member (no `to`), as a client would; a refused send is
/// recorded as addressed to nobody.
private func sendNumbered(
  _ simulation: Simulation, _ sessionID: String, from sender: String, number: Int, into log: inout [SentMessage]
) {
  let outcome = try? simulation.send(
    session: sessionID, from: sender, payload: Array("\(sender)#\(number)".utf8), reliable: true)
  log.append(
    SentMessage(sender: sender, number: number, time: simulation.now, addressed: Set(outcome?.addressed ?? [])))
}

/// What `receiver` got from `sender` in `sessionID`, and where the reliable-delivery guarantee was broken.
private struct DeliveryReport {
  var addressed = 0
  var delivered = 0
  var failures = 0
  var problems: [String] = []
}

/// Checks the guarantee of reliable data (DESIGN.md): each message `sender` addressed to `receiver` was delivered
/// exactly once and in order, or the sender was told in a `session.send.failed` naming `receiver`. Failure events do
/// not name the message, but every one stands for one frame (or one refused send), so each undelivered message
/// needs its own failure event at or after the time it was sent.
private func checkDelivery(
  _ simulation: Simulation, _ sessionID: String, from sender: String, to receiver: String, sent: [SentMessage]
) -> DeliveryReport {
  var report = DeliveryReport()
  let messages = sent.filter { $0.sender == sender && $0.addressed.contains(receiver) }
  report.addressed = messages.count
  var delivered: [Int] = []
  for entry in simulation.sessionEvents(of: receiver) {
    guard case .data(sessionID, sender, let payload, let reliable) = entry.event else { continue }
    let parts = String(decoding: payload, as: UTF8.self).split(separator: "#")
    guard reliable, parts.count == 2, let number = Int(parts[1]) else {
      report.problems.append("\(receiver) got unexpected data \(payload)")
      continue
    }
    if let last = delivered.last, number <= last {
      report.problems.append("\(receiver) got \(sender)#\(number) after #\(last) (duplicate or out of order)")
    }
    if !messages.contains(where: { $0.number == number }) {
      report.problems.append("\(receiver) got \(sender)#\(number), which was not addressed to it")
    }
    delivered.append(number)
  }
  report.delivered = Set(delivered).count
  let failureTimes = simulation.sessionEvents(of: sender).compactMap { entry -> UInt64? in
    guard case .sendFailed(sessionID, let undelivered, _) = entry.event, undelivered.contains(receiver) else {
      return nil
    }
    return entry.time
  }
  report.failures = failureTimes.count
  let got = Set(delivered)
  var next = 0
  for message in messages where !got.contains(message.number) {
    while next < failureTimes.count && failureTimes[next] < message.time { next += 1 }
    guard next < failureTimes.count else {
      report.problems.append(
        "\(sender)#\(message.number) (sent at \(message.time)) never reached \(receiver) and no failure names it")
      continue
    }
    next += 1
  }
  return report
}

// MARK: - Invitations and membership

@Suite(.timeLimit(.minutes(1))) struct SessionMembershipTests {
  /// One host peer invites one peer on every other node; all accept. Every node with a member holds the host's
  /// description, everyone is connected, and every peer's `session.peer.state` events say so.
  @Test func tenNodesAllAcceptAndEveryReplicaConverges() throws {
    let simulation = linkedMesh(nodes: 10, seed: 3)
    let sessionID = simulation.createSession(creator: "p0")
    var invitations: [String: String] = [:]
    for node in 1..<10 {
      invitations["p\(node)"] = try simulation.invite(from: "p0", to: "p\(node)", session: sessionID)
    }
    simulation.run(for: 30)
    // The invitees answer at different times, so joins and descriptions race each other.
    var random = SplitMix64(seed: 17)
    for node in (1..<10).shuffled(using: &random) {
      simulation.run(for: random.next() % 5)
      try simulation.accept(invitations["p\(node)"]!, by: "p\(node)")
    }
    simulation.run(for: 1000)

    let everyone = (0..<10).map { "p\($0)" }.sorted()
    let truth = try #require(simulation.session(sessionID, on: 0))
    #expect(truth.members.map(\.peerID).sorted() == everyone)
    #expect(truth.members.allSatisfy { $0.state == .connected })
    #expect(truth.revision == 10)  // created, then one revision per join
    for node in 1..<10 { #expect(simulation.session(sessionID, on: node) == truth, "node \(node)") }
    #expect(simulation.sessionProblems(sessionID) == [])
    for peer in everyone {
      let believed = simulation.memberBeliefs(of: peer)[sessionID] ?? [:]
      for other in everyone where other != peer { #expect(believed[other] == .connected, "\(peer) about \(other)") }
    }
    // Both sides of every invitation ended accepted, showing the same verification code.
    for node in 1..<10 {
      let id = invitations["p\(node)"]!
      let inviterSide = simulation.invitation(id, on: 0)
      let inviteeSide = simulation.invitation(id, on: node)
      #expect(inviterSide?.state == .accepted)
      #expect(inviteeSide?.state == .accepted)
      #expect(inviterSide?.offer.verificationCode == inviteeSide?.offer.verificationCode)
      #expect(invitationLog(simulation, "p\(node)") == ["received \(id)", "accepted \(id)"])
    }
    #expect(invitationLog(simulation, "p0").count == 9)
    #expect(simulation.invitationProblems() == [])
  }

  /// Members that are not on the host node invite; the joins go through the host, and every replica follows.
  @Test func membersOnOtherNodesInviteThroughTheHost() throws {
    let simulation = linkedMesh(nodes: 5, seed: 4)
    let sessionID = try session(simulation, host: "p0", members: ["p1", "p2"])
    let first = try simulation.invite(from: "p1", to: "p3", session: sessionID)
    let second = try simulation.invite(from: "p2", to: "p4", session: sessionID)
    simulation.run(for: 50)
    try simulation.accept(first, by: "p3")
    try simulation.accept(second, by: "p4")
    simulation.run(for: 500)
    for node in 0..<5 { #expect(members(simulation, sessionID, on: node) == ["p0", "p1", "p2", "p3", "p4"]) }
    #expect(simulation.session(sessionID, on: 0)?.revision == 5)
    #expect(simulation.sessionProblems(sessionID) == [])
    #expect(simulation.invitation(first, on: 1)?.state == .accepted)
    #expect(simulation.invitation(second, on: 4)?.state == .accepted)
    #expect(simulation.invitationProblems() == [])
  }

  /// Regression (found here, fixed in 66c4e21): a peer that joined on a node that already held the session (the
  /// host node, or a replica with another local member) was told only about itself, never about the members
  /// already there, while a peer joining on a node without a replica was told about everyone.
  @Test func aJoinerIsToldAboutEveryMemberWhereverItLives() throws {
    let simulation = linkedMesh(nodes: 3, seed: 4, extraPeers: 1)
    let sessionID = try session(simulation, host: "p0", members: ["p1", "p2"])
    let onHost = try simulation.invite(from: "p2", to: "p0x0", session: sessionID)
    let onReplica = try simulation.invite(from: "p0", to: "p1x0", session: sessionID)
    simulation.run(for: 50)
    try simulation.accept(onHost, by: "p0x0")
    try simulation.accept(onReplica, by: "p1x0")
    simulation.run(for: 500)
    let everyone = ["p0", "p0x0", "p1", "p1x0", "p2"]
    for node in 0..<3 { #expect(members(simulation, sessionID, on: node) == everyone) }
    for joiner in ["p0x0", "p1x0"] {
      let believed = simulation.memberBeliefs(of: joiner)[sessionID] ?? [:]
      #expect(
        everyone.filter { $0 != joiner && believed[$0] != .connected } == [],
        "\(joiner) was not told these members are connected")
    }
    #expect(simulation.sessionProblems(sessionID) == [])
  }

  /// Leaving, declining and a star's rules, across nodes.
  @Test func leavesAndDeclinesConverge() throws {
    let simulation = linkedMesh(nodes: 5, seed: 6)
    let sessionID = try session(simulation, host: "p0", members: ["p1", "p2", "p3"])
    try simulation.leave(session: sessionID, peerID: "p2")
    let declined = try simulation.invite(from: "p3", to: "p4", session: sessionID)
    simulation.run(for: 50)
    try simulation.decline(declined, by: "p4")
    simulation.run(for: 500)
    for node in [0, 1, 3] { #expect(members(simulation, sessionID, on: node) == ["p0", "p1", "p3"]) }
    #expect(simulation.session(sessionID, on: 2) == nil)
    #expect(simulation.session(sessionID, on: 4) == nil)
    #expect(simulation.invitation(declined, on: 3)?.state == .declined)
    #expect(simulation.invitation(declined, on: 4)?.state == .declined)
    #expect(simulation.memberBeliefs(of: "p1")[sessionID]?["p2"] == .notConnected)
    #expect(simulation.sessionProblems(sessionID) == [])

    let star = try session(simulation, host: "p0", members: ["p1"], strategy: .star)
    let refused = #expect(throws: MeshFailure.self) {
      try simulation.invite(from: "p1", to: "p2", session: star)
    }
    #expect(refused == .onlyHubInvites)
    #expect(simulation.sessionProblems(star) == [])
  }

  /// Invitations nobody answers expire on both sides (the invitee's node at the timeout on its own clock, the
  /// inviter's after the grace); answering later is a 409. An answer within the timeout still counts.
  @Test func unansweredInvitationsExpireOnBothSidesAndLateAcceptsAreRefused() throws {
    let simulation = linkedMesh(nodes: 3, seed: 5, extraPeers: 1)
    let sessionID = simulation.createSession(creator: "p0")
    let start = simulation.now
    let remote = try simulation.invite(from: "p0", to: "p1", session: sessionID, timeoutMillis: 1000)
    let local = try simulation.invite(from: "p0", to: "p0x0", session: sessionID, timeoutMillis: 1000)
    let answered = try simulation.invite(from: "p0", to: "p2", session: sessionID, timeoutMillis: 1000)
    simulation.run(until: start + 950)
    try simulation.accept(answered, by: "p2")  // just in time: the answer is in flight when the timeout passes

    simulation.run(until: start + 1150)
    // The invitee's node and the local invitation have expired; the inviter's node waits for answers in flight.
    #expect(simulation.invitation(remote, on: 1)?.state == .expired)
    #expect(simulation.invitation(remote, on: 0)?.state == .pending)
    #expect(simulation.invitation(local, on: 0)?.state == .expired)
    #expect(invitationLog(simulation, "p1") == ["received \(remote)", "expired \(remote)"])
    #expect(invitationLog(simulation, "p0x0") == ["received \(local)", "expired \(local)"])
    for (id, peer) in [(remote, "p1"), (local, "p0x0")] {
      let late = #expect(throws: MeshFailure.self) { try simulation.accept(id, by: peer) }
      #expect(late.map(isClosedInvitation) == true)
    }

    simulation.run(until: start + 2200)
    #expect(simulation.invitation(remote, on: 0)?.state == .expired)
    #expect(simulation.invitation(remote, on: 1)?.state == .expired)
    #expect(invitationLog(simulation, "p1") == ["received \(remote)", "expired \(remote)"])
    let late = #expect(throws: MeshFailure.self) { try simulation.decline(remote, by: "p1") }
    #expect(late.map(isClosedInvitation) == true)
    #expect(simulation.invitation(answered, on: 0)?.state == .accepted)
    #expect(simulation.invitation(answered, on: 2)?.state == .accepted)
    #expect(members(simulation, sessionID, on: 0) == ["p0", "p2"])
    #expect(simulation.sessionProblems(sessionID) == [])
    #expect(simulation.invitationProblems() == [])
    let inviterLog = invitationLog(simulation, "p0")
    #expect(
      inviterLog.filter { $0.hasPrefix("expired") }.sorted() == ["expired \(local)", "expired \(remote)"].sorted())
    #expect(inviterLog.contains("accepted \(answered)"))
  }

  /// An accept held at a partition reaches the inviter's node after it expired the invitation: the answer is
  /// ignored, the invitee's node is told it expired, and nobody joins.
  @Test func anAcceptHeldPastTheGraceEndsExpiredOnBothSides() throws {
    let simulation = linkedMesh(nodes: 3, seed: 8)
    let sessionID = simulation.createSession(creator: "p0")
    let start = simulation.now
    let id = try simulation.invite(from: "p0", to: "p2", session: sessionID, timeoutMillis: 300)
    simulation.run(for: 50)
    simulation.partition([[0, 1], [2]])
    simulation.run(for: 50)
    try simulation.accept(id, by: "p2")
    #expect(simulation.invitation(id, on: 2)?.state == .accepted)
    simulation.run(until: start + 1600)  // past 300 ms + 1 s grace, short of the 2 s dead time
    #expect(simulation.invitation(id, on: 0)?.state == .expired)
    simulation.heal()
    simulation.run(for: 500)
    #expect(simulation.linkedNodes(of: 0) == [1, 2], "the link survived the short partition")
    #expect(simulation.invitation(id, on: 0)?.state == .expired)
    #expect(simulation.invitation(id, on: 2)?.state == .expired)
    #expect(invitationLog(simulation, "p2") == ["received \(id)", "accepted \(id)", "expired \(id)"])
    #expect(invitationLog(simulation, "p0") == ["expired \(id)"])
    #expect(members(simulation, sessionID, on: 0) == ["p0"])
    #expect(simulation.session(sessionID, on: 2) == nil)
    #expect(simulation.invitationProblems() == [])
  }

  /// Regression (found here, fixed in 66c4e21, which repeats outcomes after a re-link): the inviter's node sent
  /// `inviteClosed` once, so when that frame was lost with its link the two sides never agreed:
  /// - accepted, then the answer and the `inviteClosed(expired)` both lost with the link: the invitee's node kept
  ///   `accepted` for good (its peer was told `invitation.accepted` and never joined), the inviter's said `expired`;
  /// - canceled while the link was down: the invitee's node kept it `pending` (it could still accept it) until its
  ///   own timeout, then said `expired` while the inviter's node said `canceled`.
  @Test func invitationsClosedWhileTheirLinkIsLostEndAlikeOnBothSides() throws {
    let simulation = linkedMesh(nodes: 3, seed: 8)
    let sessionID = simulation.createSession(creator: "p0")
    let expiring = try simulation.invite(from: "p0", to: "p2", session: sessionID, timeoutMillis: 500)
    let canceled = try simulation.invite(from: "p0", to: "p1", session: sessionID, timeoutMillis: 30_000)
    simulation.run(for: 50)
    simulation.partition([[0], [1, 2]])
    simulation.run(for: 50)
    try simulation.accept(expiring, by: "p2")  // the answer is held at the partition, then lost with the link
    simulation.run(for: 3000)
    #expect(simulation.linkedNodes(of: 0) == [], "the links died of silence")
    try simulation.cancel(canceled, by: "p0")  // nowhere to send inviteClosed(canceled)
    simulation.heal()
    simulation.run(for: 5000)
    #expect(simulation.linkedNodes(of: 0) == [1, 2])
    #expect(simulation.invitation(expiring, on: 0)?.state == .expired)
    #expect(simulation.invitation(expiring, on: 2)?.state == .expired)
    #expect(invitationLog(simulation, "p2").last == "expired \(expiring)")
    #expect(simulation.invitation(canceled, on: 0)?.state == .canceled)
    #expect(simulation.invitation(canceled, on: 1)?.state == .canceled)
    #expect(simulation.invitationProblems() == [])
  }

  /// The netns suite's "partition 10 s: invitation" (1 run in 4 failed): p1's node is cut off, both sides declare the
  /// link dead, p1 accepts (200) and the partition heals. Both nodes were dialling (static seeds, SYNs waiting at the
  /// partition), so they connect twice at the heal and close a duplicate, and a closed connection is reset: a node
  /// that loses the `goodbye` sees the link go down and come back where the other saw it move, and the inviter's node
  /// dropped p1 if the repeated accept had arrived on the closed connection (seeds 186 and 187 before the fix: p1 in
  /// no session on either node). Whatever the interleaving (200 seeds, 22 of them with such a one-sided drop), the
  /// accept takes effect on both sides: p1 ends a connected member on both nodes.
  @Test(arguments: 1...200 as ClosedRange<UInt64>)
  func anAcceptWhileCutOffJoinsOnBothSidesAfterTheRelink(seed: UInt64) throws {
    var network = NetworkModel()
    network.discovery = .seedFull
    network.dialsWaitAtPartitions = true
    network.unreachableDialTimeout = 20_000
    network.closeResets = true
    network.maxDelay = 40
    let simulation = linkedMesh(nodes: 2, seed: seed, network: network)
    let sessionID = simulation.createSession(creator: "p0")
    let id = try simulation.invite(from: "p0", to: "p1", session: sessionID, timeoutMillis: 25_000)
    simulation.run(for: 50)
    simulation.partition([[0], [1]])
    simulation.run(for: 3000)
    #expect(simulation.linkedNodes(of: 0) == [] && simulation.linkedNodes(of: 1) == [], "the link died of silence")
    try simulation.accept(id, by: "p1")
    simulation.run(for: 7000)
    simulation.heal()
    simulation.run(for: 8000)
    #expect(simulation.linkedNodes(of: 0) == [1])
    #expect(simulation.invitation(id, on: 0)?.state == .accepted)
    #expect(simulation.invitation(id, on: 1)?.state == .accepted)
    #expect(members(simulation, sessionID, on: 0) == ["p0", "p1"], "seed \(seed)")
    #expect(members(simulation, sessionID, on: 1) == ["p0", "p1"], "seed \(seed)")
    #expect(simulation.sessionProblems(sessionID) == [], "seed \(seed)")
    #expect(simulation.invitationProblems() == [])
  }
}

// MARK: - Reliable data

@Suite(.timeLimit(.minutes(1))) struct ReliableDataTests {
  /// Keeps `members` in the session the way an auto-inviting app (transceive) would: the host re-invites whoever
  /// is not a connected member, cancels an invitation left unanswered for 200 ms (its frames may have been lost
  /// with a link), and every member accepts what it is offered.
  private func keepMembers(_ simulation: Simulation, _ sessionID: String, host: String, members: [String]) {
    let current = simulation.session(sessionID, on: simulation.home(of: host)!)
    let pending = simulation.pendingInvitations(of: host)
    for member in members {
      if let invitation = pending.first(where: { $0.offer.toPeerID == member }) {
        if simulation.now - invitation.createdAt > 200 { try? simulation.cancel(invitation.id, by: host) }
      } else if !(current?.members.contains { $0.peerID == member && $0.state == .connected } ?? false) {
        _ = try? simulation.invite(from: host, to: member, session: sessionID, timeoutMillis: 1000)
      }
      for invitation in simulation.pendingInvitations(of: member) where invitation.offer.toPeerID == member {
        try? simulation.accept(invitation.id, by: member)
      }
    }
  }

  /// The key property. One sender, receivers on five other nodes, 200 reliable messages (one every 50 ms) under
  /// 5 % TCP-like loss. Each lost frame resets its connection, which also drops the receivers on that node from the
  /// session until they are invited again, so links and memberships churn all the time. Every receiver gets its
  /// messages in order and never twice, and each message addressed to it that it did not get is named in a
  /// `session.send.failed` to the sender.
  @Test(
    arguments: [
      (21, .beacon), (22, .beacon), (23, .seedFull), (24, .seedFull), (25, .seedRing), (26, .seedRing),
    ] as [(UInt64, NetworkModel.Discovery)])
  func reliableDataIsDeliveredOnceInOrderOrReportedFailedUnderLoss(seed: UInt64, discovery: NetworkModel.Discovery)
    throws
  {
    var network = NetworkModel()
    network.discovery = discovery  // with seeds both sides dial, so links are also replaced (duplicate links)
    let simulation = linkedMesh(nodes: 6, seed: seed, network: network)
    let receivers = (1..<6).map { "p\($0)" }
    let sessionID = try session(simulation, host: "p0", members: receivers)
    #expect(members(simulation, sessionID, on: 0).count == 6)
    simulation.network.loss = 0.05
    var sent: [SentMessage] = []
    for number in 1...200 {
      for _ in 0..<5 {
        keepMembers(simulation, sessionID, host: "p0", members: receivers)
        simulation.run(for: 10)
      }
      sendNumbered(simulation, sessionID, from: "p0", number: number, into: &sent)
    }
    simulation.network.loss = 0
    simulation.run(for: 3000)  // every frame is delivered, acknowledged or failed with its link

    var delivered = 0
    for receiver in receivers {
      let report = checkDelivery(simulation, sessionID, from: "p0", to: receiver, sent: sent)
      #expect(report.problems == [], "seed \(seed)")
      #expect(report.delivered + report.failures >= report.addressed)
      delivered += report.delivered
    }
    #expect(simulation.stats.connectionResets > 50)
    // Most messages arrive: a reset costs a link about 100 ms and its members a re-invitation.
    #expect(delivered * 2 > receivers.count * 200, "delivered \(delivered) of \(receivers.count * 200)")
    // With the loss over, the auto-invites bring everyone back and the nodes agree on the session.
    for _ in 0..<50 {
      keepMembers(simulation, sessionID, host: "p0", members: receivers)
      simulation.run(for: 20)
    }
    #expect(members(simulation, sessionID, on: 0) == ["p0"] + receivers)
    #expect(simulation.sessionProblems(sessionID) == [])
    #expect(simulation.invitationProblems() == [])
  }

  /// Without loss, everything arrives, nothing fails, and fan-out sends one frame per node.
  @Test func withoutLossEveryMessageArrivesInOrder() throws {
    let simulation = linkedMesh(nodes: 4, seed: 9, extraPeers: 1)
    let receivers = ["p1", "p1x0", "p2", "p3", "p0x0"]
    let sessionID = try session(simulation, host: "p0", members: receivers)
    let framesBefore = simulation.stats.framesSent
    var sent: [SentMessage] = []
    for number in 1...50 {
      sendNumbered(simulation, sessionID, from: "p0", number: number, into: &sent)
      simulation.run(for: 1)
    }
    simulation.run(for: 200)
    for receiver in receivers {
      let report = checkDelivery(simulation, sessionID, from: "p0", to: receiver, sent: sent)
      #expect(report.problems == [])
      #expect(report.delivered == 50)
      #expect(report.failures == 0)
    }
    // 50 messages × 3 remote nodes, each acknowledged, plus heartbeats for 250 ms.
    let frames = simulation.stats.framesSent - framesBefore
    #expect(frames >= 300 && frames < 300 + 40, "\(frames) frames")
  }
}

// MARK: - Faults

@Suite(.timeLimit(.minutes(1))) struct SessionFaultTests {
  /// A partition cuts the host off from some members: within 3 s they are notConnected everywhere, the host's side
  /// converges without them, and after the heal they stay out (no zombie replica) until invited again.
  @Test func partitionRemovesTheFarSideAndHealingBringsNoZombies() throws {
    let simulation = linkedMesh(nodes: 8, seed: 12)
    let everyone = (0..<8).map { "p\($0)" }
    let sessionID = try session(simulation, host: "p0", members: Array(everyone.dropFirst()))
    #expect(members(simulation, sessionID, on: 5).count == 8)
    let near = ["p0", "p1", "p2", "p3"]
    let far = ["p4", "p5", "p6", "p7"]
    let split = simulation.now
    simulation.partition([[0, 1, 2, 3], [4, 5, 6, 7]])
    simulation.run(for: 3000)

    for node in 0..<4 { #expect(members(simulation, sessionID, on: node) == near, "node \(node)") }
    for node in 4..<8 { #expect(simulation.session(sessionID, on: node) == nil, "node \(node) kept a replica") }
    for peer in everyone {
      for other in everyone where other != peer && (far.contains(peer) || far.contains(other)) {
        // Near peers lose the far members; far peers lose everyone (their session has no host any more).
        let time = firstStateTime(simulation, peer, about: other, .notConnected, since: split)
        #expect(time != nil, "\(peer) was not told \(other) is notConnected")
        if let time { #expect(time - split <= 3000) }
      }
    }
    #expect(simulation.sessionProblems(sessionID) == [])

    simulation.heal()
    simulation.run(for: 6000)
    #expect(simulation.linkedNodes(of: 0).count == 7)
    for node in 0..<4 { #expect(members(simulation, sessionID, on: node) == near) }
    for node in 4..<8 { #expect(simulation.session(sessionID, on: node) == nil) }
    #expect(simulation.sessionProblems(sessionID) == [])
    let refused = #expect(throws: MeshFailure.self) {
      try simulation.send(session: sessionID, from: "p5", payload: [1])
    }
    #expect(refused == .notSessionMember(sessionID: sessionID))

    // Invited again, a far member is back and everyone agrees.
    let again = try simulation.invite(from: "p2", to: "p6", session: sessionID)
    simulation.run(for: 50)
    try simulation.accept(again, by: "p6")
    simulation.run(for: 500)
    #expect(members(simulation, sessionID, on: 6) == near + ["p6"])
    #expect(simulation.sessionProblems(sessionID) == [])
  }

  /// A member's node crashes while the host and another member stream reliable data to it: within 3 s its member
  /// is notConnected on every other node, and every message it did not get is reported failed to its sender.
  @Test(arguments: [NetworkModel.CrashDetection.silence, .reset])
  func aCrashedMembersDataFailsAndItIsNotConnectedWithinThreeSeconds(detection: NetworkModel.CrashDetection) throws {
    var network = NetworkModel()
    network.crashDetection = detection
    let simulation = linkedMesh(nodes: 6, seed: 14, network: network)
    let everyone = (0..<6).map { "p\($0)" }
    let sessionID = try session(simulation, host: "p0", members: Array(everyone.dropFirst()))
    var sent: [SentMessage] = []
    var crashedAt: UInt64 = 0
    for number in 1...400 {
      if number == 100 {
        crashedAt = simulation.now
        simulation.crash(5)
      }
      sendNumbered(simulation, sessionID, from: "p0", number: number, into: &sent)
      sendNumbered(simulation, sessionID, from: "p2", number: number, into: &sent)
      simulation.run(for: 10)
    }
    simulation.run(for: 500)

    for peer in everyone.dropLast() {
      let time = firstStateTime(simulation, peer, about: "p5", .notConnected, since: crashedAt)
      #expect(time != nil, "\(peer) was not told p5 is notConnected")
      if let time { #expect(time - crashedAt <= (detection == .reset ? 100 : 3000)) }
    }
    for node in 0..<5 { #expect(members(simulation, sessionID, on: node) == everyone.dropLast().sorted()) }
    #expect(simulation.sessionProblems(sessionID) == [])
    for sender in ["p0", "p2"] {
      let toCrashed = checkDelivery(simulation, sessionID, from: sender, to: "p5", sent: sent)
      #expect(toCrashed.problems == [])
      #expect(toCrashed.addressed > toCrashed.delivered, "some data was in flight or sent before the crash was seen")
      #expect(toCrashed.delivered >= 95)
      for receiver in everyone.dropLast() where receiver != sender {
        let report = checkDelivery(simulation, sessionID, from: sender, to: receiver, sent: sent)
        #expect(report.problems == [])
        #expect(report.delivered == 400)
        #expect(report.failures == 0)
      }
    }

    // Restarted, the node has no sessions; its peer can be invited again.
    simulation.restart(5)
    simulation.run(for: 2000)
    #expect(simulation.session(sessionID, on: 5) == nil)
    #expect(simulation.sessionProblems(sessionID) == [])
    let again = try simulation.invite(from: "p0", to: "p5", session: sessionID)
    simulation.run(for: 50)
    try simulation.accept(again, by: "p5")
    simulation.run(for: 200)
    #expect(members(simulation, sessionID, on: 5) == everyone)
    #expect(simulation.sessionProblems(sessionID) == [])
  }

  /// Regression (found here, fixed in 66c4e21): a replica that lost its link to another member's node marked that
  /// node's members notConnected locally (`nodeUnlinked`), and when the link came back nothing restored them. The
  /// host, linked to both all along, sent no new revision, so the replica disagreed with the host at the same
  /// revision for good: its peers were told the members were notConnected and could not send to them (409).
  @Test func aConnectionResetBetweenTwoMembersNodesHeals() throws {
    let simulation = linkedMesh(nodes: 3, seed: 16)
    let sessionID = try session(simulation, host: "p0", members: ["p1", "p2"])
    let linkDowns = simulation.stats.linkDowns
    #expect(simulation.resetConnections(between: 1, and: 2) == 1)
    simulation.run(for: 1000)
    #expect(simulation.linkedNodes(of: 1) == [0, 2])
    #expect(simulation.stats.linkDowns == linkDowns + 2, "both sides saw the link go down, then up again")
    for node in 0..<3 { #expect(members(simulation, sessionID, on: node) == ["p0", "p1", "p2"], "node \(node)") }
    #expect(simulation.sessionProblems(sessionID) == [])
    #expect(simulation.memberBeliefs(of: "p1")[sessionID]?["p2"] == .connected)
    #expect(throws: Never.self) { try simulation.send(session: sessionID, from: "p1", to: ["p2"], payload: [1]) }
  }

  /// Fails since 66c4e21 (SessionBook): on every re-link, `nodeLinked` repeats `inviteClosed` for every closed
  /// invitation to that node and `inviteAnswer` for every answered one from it, for as long as they are kept
  /// (10 minutes), and the inviter's node answers each repeated answer with one more `inviteClosed`. After 100
  /// settled invitations, one connection reset costs about 300 frames; under the loss model each of them may reset
  /// the new link again, so links flap (the loss test delivers ~40 % instead of ~70 %). Only invitations whose
  /// outcome the other side may have missed need repeating.
  @Test func aReLinkDoesNotRepeatEverySettledInvitation() throws {
    let simulation = linkedMesh(nodes: 3, seed: 40)
    let sessionID = simulation.createSession(creator: "p0")
    for _ in 0..<100 {
      let id = try simulation.invite(from: "p0", to: "p1", session: sessionID, timeoutMillis: 1000)
      simulation.run(for: 10)
      try simulation.decline(id, by: "p1")
      simulation.run(for: 10)
    }
    simulation.run(for: 1000)
    #expect(simulation.invitationProblems() == [])
    var frames: [Int] = []
    for other in [2, 1] {  // node 2 had no invitations, node 1 had 100, all settled on a live link
      let before = simulation.stats.framesSent
      #expect(simulation.resetConnections(between: 0, and: other) == 1)
      simulation.run(for: 500)
      #expect(simulation.linkedNodes(of: 0).contains(other))
      frames.append(simulation.stats.framesSent - before)
    }
    #expect(frames[1] <= frames[0] + 10, "a re-link cost \(frames[1]) frames after 100 invitations, \(frames[0]) else")
  }

  /// The host's node crashes: every replica ends and its members are told everyone else is gone.
  @Test func aCrashedHostEndsTheSessionEverywhere() throws {
    let simulation = linkedMesh(nodes: 4, seed: 15)
    let sessionID = try session(simulation, host: "p0", members: ["p1", "p2", "p3"])
    simulation.crash(0)
    simulation.run(for: 3000)
    for node in 1..<4 { #expect(simulation.session(sessionID, on: node) == nil) }
    let believed = (simulation.memberBeliefs(of: "p1")[sessionID] ?? [:]).filter { $0.key != "p1" }
    #expect(believed == ["p0": .notConnected, "p2": .notConnected, "p3": .notConnected])
    #expect(simulation.sessionProblems(sessionID) == [])
    simulation.restart(0)
    simulation.run(for: 3000)
    #expect(simulation.session(sessionID, on: 0) == nil)
    #expect(simulation.sessionProblems(sessionID) == [])
  }
}

// MARK: - Determinism

@Suite(.timeLimit(.minutes(1))) struct SessionDeterminismTests {
  /// Sessions, invitations and data under loss, a partition, a crash and a restart.
  private func eventful(seed: UInt64) throws -> Simulation {
    let simulation = linkedMesh(nodes: 6, seed: seed)
    let sessionID = try session(simulation, host: "p0", members: ["p1", "p2", "p3", "p4", "p5"])
    simulation.network.loss = 0.02
    var sent: [SentMessage] = []
    for number in 1...150 {
      if number == 50 { simulation.partition([[0, 1, 2], [3, 4, 5]]) }
      if number == 90 { simulation.crash(4) }
      if number == 100 { simulation.heal() }
      if number == 120 { simulation.restart(4) }
      if number % 10 == 0 {
        for peer in ["p1", "p2", "p3", "p4", "p5"] where simulation.isAlive(simulation.home(of: peer)!) {
          _ = try? simulation.invite(from: "p0", to: peer, session: sessionID, timeoutMillis: 500)
          for invitation in simulation.pendingInvitations(of: peer) where invitation.offer.toPeerID == peer {
            try? simulation.accept(invitation.id, by: peer)
          }
        }
      }
      sendNumbered(simulation, sessionID, from: "p0", number: number, into: &sent)
      simulation.run(for: 40)
    }
    simulation.network.loss = 0
    simulation.run(for: 3000)
    return simulation
  }

  @Test func sameSeedGivesIdenticalSessionLogs() throws {
    let first = try eventful(seed: 31)
    let second = try eventful(seed: 31)
    for node in 0..<6 {
      #expect(first.events(of: "p\(node)") == second.events(of: "p\(node)"))
      #expect(first.sessionView(node: node) == second.sessionView(node: node))
    }
    #expect(first.stats == second.stats)
    #expect(first.sessionEvents(of: "p1").count > 50)
    let other = try eventful(seed: 32)
    #expect(other.stats != first.stats)
  }
}

/// The encryption rule in a simulated mesh, whose links are plaintext (the simulator models no TLS).
@Suite struct EncryptionSimulationTests {
  @Test func requiredSessionsStayOnTheirNodeOverPlaintextLinks() throws {
    let simulation = linkedMesh(nodes: 3, seed: 8, extraPeers: 1)
    let required = simulation.createSession(creator: "p0", encryption: .required)
    let refused = #expect(throws: MeshFailure.self) {
      try simulation.invite(from: "p0", to: "p1", session: required)
    }
    #expect(refused.map { if case .encryptionUnavailable = $0 { true } else { false } } == true)
    // A peer on the host's own node joins; nothing about the session crossed a link.
    let local = try simulation.invite(from: "p0", to: "p0x0", session: required)
    simulation.run(for: 50)
    try simulation.accept(local, by: "p0x0")
    simulation.run(for: 200)
    #expect(members(simulation, required, on: 0) == ["p0", "p0x0"])
    for node in 1..<3 { #expect(simulation.session(required, on: node) == nil, "node \(node)") }

    // optional and none sessions cross the same links.
    for encryption in [SessionEncryption.optional, .none] {
      let crossing = simulation.createSession(creator: "p0", encryption: encryption)
      let invitation = try simulation.invite(from: "p0", to: "p2", session: crossing)
      simulation.run(for: 50)
      try simulation.accept(invitation, by: "p2")
      simulation.run(for: 200)
      #expect(members(simulation, crossing, on: 2) == ["p0", "p2"], "\(encryption)")
    }
  }
}

/// A late answer: the invitation expired, or is closed already.
private func isClosedInvitation(_ failure: MeshFailure) -> Bool {
  switch failure {
  case .invitationExpired, .invitationClosed: true
  default: false
  }
}
