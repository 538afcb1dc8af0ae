public import MeshCore

// Sessions and invitations: the commands the REST handlers of `Node+Sessions.swift` run against each node's
// ``MeshNode``, what peers were told (from their event logs), and checks that the nodes agree.

/// What a ``Simulation/send(session:from:to:payload:reliable:namedEvent:)`` did, as `POST /sessions/{id}/data`
/// reports it.
public struct SendOutcome: Sendable, Hashable {
  /// Every peer the data was addressed to (sorted), reachable or not.
  public var addressed: [String]
  /// The addressed peers whose node is not linked now (also told in a `sendFailed` event when reliable).
  public var undelivered: [String]
}

/// One session or invitation event a peer was told.
public struct SessionLogEntry: Sendable, Hashable {
  /// Virtual milliseconds.
  public var time: UInt64
  public var event: SessionBook.Event
}

extension Simulation {
  // MARK: - Commands

  /// `POST /sessions` by `peerID`: a session hosted on the peer's node, with the peer as its first, connected
  /// member. `pointToPoint` sessions hold two peers whatever `maxPeers` says, as in the REST layer. Returns the
  /// session id (`s1`, `s2` … in creation order).
  @discardableResult
  public func createSession(
    creator peerID: String, strategy: SessionStrategy = .cluster, encryption: SessionEncryption = .optional,
    maxPeers: UInt16 = 64
  ) -> String {
    let node = liveHome(peerID)
    let sessionID = "s\(nextSessionNumber)"
    nextSessionNumber += 1
    let creator = SessionMember(
      peerID: peerID, displayName: nodes[node].durable[peerID]!.displayName, nodeID: nodes[node].nodeID,
      state: .connected)
    _ = nodes[node].mesh.createSession(
      sessionID, creator: creator, strategy: strategy, encryption: encryption,
      maxPeers: strategy == .pointToPoint ? 2 : maxPeers)
    sessionHosts[sessionID] = node
    changed()
    return sessionID
  }

  /// `POST /invitations` by `peerID`: invites `targetID`, looked up in the inviter's node's directory as the REST
  /// layer does (404 when the node does not know it). Returns the invitation id (`i1`, `i2` …).
  @discardableResult
  public func invite(
    from peerID: String, to targetID: String, session sessionID: String, context: [UInt8] = [],
    timeoutMillis: UInt32 = 30_000
  ) throws(MeshFailure) -> String {
    let node = liveHome(peerID)
    guard let target = nodes[node].mesh.directory.peer(targetID) else {
      throw .unknownPeer(peerID: targetID)
    }
    let invitationID = "i\(nextInvitationNumber)"
    let (_, effects) = try nodes[node].mesh.invite(
      invitationID, from: peerID,
      to: SessionMember(
        peerID: target.peerID, displayName: target.displayName, nodeID: target.nodeID, state: .connecting),
      sessionID: sessionID, context: context, timeoutMillis: timeoutMillis, now: now)
    nextInvitationNumber += 1
    changed()
    interpret(effects, on: node)
    return invitationID
  }

  /// `POST /invitations/{id}/accept` by the invitee `peerID`.
  public func accept(_ invitationID: String, by peerID: String) throws(MeshFailure) {
    try answer(invitationID, by: peerID, accept: true)
  }

  /// `POST /invitations/{id}/decline` by the invitee `peerID`.
  public func decline(_ invitationID: String, by peerID: String) throws(MeshFailure) {
    try answer(invitationID, by: peerID, accept: false)
  }

  func answer(_ invitationID: String, by peerID: String, accept: Bool) throws(MeshFailure) {
    let node = liveHome(peerID)
    let effects = try command { () throws(MeshFailure) in
      try nodes[node].mesh.answer(invitationID, by: peerID, accept: accept, now: now)
    }
    changed()
    interpret(effects, on: node)
  }

  /// `DELETE /invitations/{id}` by the inviter `peerID`.
  public func cancel(_ invitationID: String, by peerID: String) throws(MeshFailure) {
    let node = liveHome(peerID)
    let effects = try command { () throws(MeshFailure) in try nodes[node].mesh.cancel(invitationID, by: peerID) }
    changed()
    interpret(effects, on: node)
  }

  /// `DELETE /sessions/{id}/members/me` by `peerID`.
  public func leave(session sessionID: String, peerID: String) throws(MeshFailure) {
    let node = liveHome(peerID)
    let effects = try command { () throws(MeshFailure) in try nodes[node].mesh.leave(sessionID, peerID: peerID) }
    departures[sessionID, default: []].insert(peerID)
    changed()
    interpret(effects, on: node)
  }

  /// `POST /sessions/{id}/data?to=…&mode=…` (or, with `namedEvent`, `POST /sessions/{id}/events`) by `peerID`:
  /// `targets` nil means every connected member. The linked nodes are the link manager's, as in the runtime.
  @discardableResult
  public func send(
    session sessionID: String, from peerID: String, to targets: [String]? = nil, payload: [UInt8],
    reliable: Bool = true, namedEvent: String? = nil
  ) throws(MeshFailure) -> SendOutcome {
    let node = liveHome(peerID)
    let result = try command { () throws(MeshFailure) in
      try nodes[node].mesh.send(
        sessionID, from: peerID, to: targets, payload: payload, reliable: reliable, namedEvent: namedEvent)
    }
    let addressed = result.undelivered + MeshNode.addressed(by: result.effects)
    interpret(result.effects, on: node)
    return SendOutcome(addressed: addressed.sorted(), undelivered: result.undelivered)
  }

  /// Runs a session command (its failure is the mesh core's, as the REST layer maps it).
  func command<Result>(_ body: () throws(MeshFailure) -> Result) throws(MeshFailure) -> Result {
    try body()
  }

  /// The home of `peerID`, which must be running (a REST call to a crashed node cannot happen).
  func liveHome(_ peerID: String) -> Int {
    let node = home(peerID)
    precondition(nodes[node].alive, "peer \(peerID)'s node \(node) is not running")
    return node
  }

  // MARK: - Queries

  /// The sessions node `node` holds (hosted ones and replicas), by id; empty for a crashed node.
  public func sessionView(node: Int) -> [String: SessionDescription] {
    nodes[node].alive ? nodes[node].mesh.sessions.sessions : [:]
  }

  /// Node `node`'s copy of session `sessionID`.
  public func session(_ sessionID: String, on node: Int) -> SessionDescription? { sessionView(node: node)[sessionID] }

  /// The node session `sessionID` was created on.
  public func host(of sessionID: String) -> Int? { sessionHosts[sessionID] }

  /// Node `node`'s record of invitation `invitationID`.
  public func invitation(_ invitationID: String, on node: Int) -> SessionBook.Invitation? {
    nodes[node].alive ? nodes[node].mesh.sessions.invitations[invitationID] : nil
  }

  /// `GET /invitations` for `peerID`: what its node knows of the invitations it sent or received, newest first.
  public func invitations(of peerID: String) -> [SessionBook.Invitation] {
    let node = home(peerID)
    return nodes[node].alive ? nodes[node].mesh.sessions.invitations(of: peerID) : []
  }

  /// The pending invitations `peerID` sent or received, by id: ``invitations(of:)`` without the closed ones, which
  /// pile up (the session book keeps them for 10 minutes) and make that query slow in long runs.
  public func pendingInvitations(of peerID: String) -> [SessionBook.Invitation] {
    let node = home(peerID)
    guard nodes[node].alive else { return [] }
    return nodes[node].mesh.sessions.invitations.values.filter {
      $0.state == .pending && ($0.offer.fromPeerID == peerID || $0.offer.toPeerID == peerID)
    }.sorted { $0.id < $1.id }
  }

  /// The session and invitation events `peerID` was told, in order.
  public func sessionEvents(of peerID: String) -> [SessionLogEntry] {
    events(of: peerID).compactMap {
      if case .session(let event) = $0.kind { return SessionLogEntry(time: $0.time, event: event) }
      return nil
    }
  }

  /// What `peerID` believes about the members of its sessions, from its `session.peer.state` events alone
  /// (the last state told for each member, forgotten when its node crashed or restarted):
  /// session id → member peer id → state.
  public func memberBeliefs(of peerID: String) -> [String: [String: MemberState]] {
    var beliefs: [String: [String: MemberState]] = [:]
    for entry in events(of: peerID) {
      switch entry.kind {
      case .nodeCrashed, .nodeRestarted:
        beliefs = [:]
      case .session(.memberState(let sessionID, let member)):
        beliefs[sessionID, default: [:]][member.peerID] = member.state
      default:
        break
      }
    }
    return beliefs
  }

  // MARK: - Consistency

  /// Where the nodes and peers disagree about session `sessionID`, one line per problem; empty when consistent.
  ///
  /// The host node's description is the truth (none when the host is down). It must list only connected members
  /// on running nodes the host can reach. Every other running node must hold exactly that description (same
  /// revision and members) if it hosts one of its members, and nothing otherwise (no zombie replica). Every peer's
  /// beliefs (``memberBeliefs(of:)``) must match its node's copy: each other member in its state, every member it
  /// was told about that is no longer listed `notConnected`; with no copy, everyone else `notConnected`. A peer
  /// that left the session on its own and is not a member again is not checked (it is not told about the others
  /// any more).
  public func sessionProblems(_ sessionID: String) -> [String] {
    guard let host = sessionHosts[sessionID] else { return ["no session \(sessionID) was created"] }
    var problems: [String] = []
    let truth = nodes[host].alive ? nodes[host].mesh.sessions.sessions[sessionID] : nil
    for member in truth?.members ?? [] {
      let memberNode = nodeIndex[member.nodeID]
      if member.state != .connected { problems.append("host lists \(member.peerID) as \(member.state.rawValue)") }
      if memberNode == nil || peerHome[member.peerID] != memberNode {
        problems.append("host lists \(member.peerID) on the wrong node")
      } else if let node = memberNode, !nodes[node].alive || !reachable(node, host) {
        problems.append("host lists \(member.peerID) on node \(node), which is down or unreachable")
      }
    }
    for node in nodes where node.alive && node.index != host {
      let replica = node.mesh.sessions.sessions[sessionID]
      let expected = truth.flatMap { truth in truth.members.contains { $0.nodeID == node.nodeID } ? truth : nil }
      if replica != expected {
        problems.append("node \(node.index) holds \(Self.summary(replica)), expected \(Self.summary(expected))")
      }
    }
    for node in nodes where node.alive {
      let copy = node.mesh.sessions.sessions[sessionID]
      for peerID in node.durable.keys.sorted() {
        let isMember = copy?.members.contains { $0.peerID == peerID } ?? false
        if !isMember && departures[sessionID]?.contains(peerID) == true { continue }
        let believed = memberBeliefs(of: peerID)[sessionID] ?? [:]
        for (other, state) in believed.sorted(by: { $0.key < $1.key }) where other != peerID {
          let actual = copy?.members.first { $0.peerID == other }?.state ?? .notConnected
          if state != actual {
            problems.append(
              "\(peerID) believes \(other) is \(state.rawValue), node \(node.index) says \(actual.rawValue)")
          }
        }
        guard let copy, isMember else { continue }
        for member in copy.members where member.peerID != peerID && believed[member.peerID] == nil {
          problems.append("\(peerID) was never told about member \(member.peerID)")
        }
      }
    }
    return problems
  }

  /// Invitations on whose outcome the inviter's node and the invitee's node (both running) disagree, one line each;
  /// empty when they agree. An invitation still pending on the inviter's node is skipped (it may yet change), and
  /// so is one the invitee's node does not know (the `invite` frame never arrived, or that node restarted).
  public func invitationProblems() -> [String] {
    var problems: [String] = []
    for inviter in nodes where inviter.alive {
      for (id, invitation) in inviter.mesh.sessions.invitations.sorted(by: { $0.key < $1.key })
      where invitation.fromNodeID == inviter.nodeID && invitation.state != .pending {
        guard let invitee = nodeIndex[invitation.toNodeID], invitee != inviter.index, nodes[invitee].alive,
          let other = nodes[invitee].mesh.sessions.invitations[id]
        else { continue }
        if other.state != invitation.state {
          problems.append(
            "invitation \(id): node \(inviter.index) (inviter) says \(invitation.state.rawValue), node \(invitee)"
              + " (invitee) says \(other.state.rawValue)")
        }
      }
    }
    return problems
  }

  static func summary(_ session: SessionDescription?) -> String {
    guard let session else { return "nothing" }
    let members = session.members.map { "\($0.peerID):\($0.state.rawValue)" }.sorted().joined(separator: ",")
    return "revision \(session.revision) [\(members)]"
  }

  /// Runs until `condition` holds (checked every `checkEvery` virtual ms) or `maxTime` virtual ms have passed.
  /// Returns the virtual ms it took, or nil if the condition never held.
  @discardableResult
  public func run(until condition: () -> Bool, maxTime: UInt64, checkEvery: UInt64 = 10) -> UInt64? {
    let start = now
    while true {
      if condition() { return now - start }
      guard now - start < maxTime else { return nil }
      run(for: min(checkEvery, maxTime - (now - start)))
    }
  }
}
