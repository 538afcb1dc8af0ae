/// The Job Manager app on the mesh: job CRUD and sending a job to a peer who receives jobs.
///
/// Layer 5 (apps) over sessions and invitations. "Receive Jobs" is advertising `jobmanager-jobs`. Sending a job
/// opens a pointToPoint session and invites the receiver with the whole job as context (its name, then `Due:`,
/// `Payment:` and `Notes:` lines, so they see who offers what, and the verification code). On accept, the sender's node sends the job as the named session event
/// `jobmanager.job` (reliable, so it arrives once or the sender hears it failed); the receiver's node stores a
/// copy in the receiver's list (`job.received`) and the sender's job records `assignedTo` (`job.delivered`).
/// Decline, expiry or cancel leave both lists as they were and tell the sender (`job.send.failed`).
import Foundation
import LWS
import Logging
import MeshCore

/// A job handed to an invitation, waiting for the answer.
struct PendingJobSend: Sendable {
  let jobID: String
  let senderPeerID: String
  let sessionID: String
  let receiver: JobParty
}

/// The Job Manager feature: the job routes' commands, offers through invitations and delivery as a named event, with
/// the live state they need (jobs offered through an invitation and jobs sent as a named event, waiting for their
/// answer). Owned by the node actor and only touched on its executor; the jobs themselves are in the store. Session
/// events and ended invitations reach it through ``NodeFeature``'s hooks.
final class JobsFeature: NodeFeature {
  /// Jobs handed to an invitation, by invitation id.
  var pendingSends: [String: PendingJobSend] = [:]
  /// Jobs sent as a named event and not yet known to have failed, by session id.
  var delivering: [String: PendingJobSend] = [:]

  // MARK: - Hooks

  /// A job offer arriving, a job delivery failing.
  func sessionEvent(_ event: SessionBook.Event, for peerID: String, node: isolated Node) {
    switch event {
    case .namedEvent(_, let from, JobRules.transferEvent, let object):
      Task { await node.features.jobs.arrived(for: peerID, from: from, object: object, node: node) }
    case .sendFailed(let sessionID, _, let reason):
      if let delivery = delivering.removeValue(forKey: sessionID) {
        Task { await node.features.jobs.deliveryFailed(delivery, reason: reason, node: node) }
      }
    default:
      break
    }
  }

  /// A deleted peer's job offers and deliveries are forgotten (the store deletes its jobs).
  func peerRemoved(_ peerID: String, node: isolated Node) {
    pendingSends = pendingSends.filter { $0.value.senderPeerID != peerID }
    delivering = delivering.filter { $0.value.senderPeerID != peerID }
  }

  func invitationEnded(_ invitation: SessionBook.Invitation, node: isolated Node) {
    if pendingSends[invitation.id] != nil { offerEnded(invitation, node: node) }
  }

  // MARK: - Jobs

  func fields(_ body: RequestBody, into job: inout Job, creating: Bool) throws {
    try body.allowOnly(["name", "dueDate", "payment", "notes"])
    if creating || body.object["name"] != nil {
      job.name = try JobRules.name(try body.requiredString("name"))
    }
    if let value = body.object["dueDate"] {
      job.dueDate = value == .null ? nil : try JobRules.dueDate(try body.requiredString("dueDate"))
    }
    if let value = body.object["payment"] {
      job.paymentCents = value == .null ? nil : try JobRules.payment(value)
    }
    if let value = body.object["notes"] {
      job.notes = value == .null ? nil : try JobRules.notes(try body.requiredString("notes"))
    }
  }

  func create(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let body = try RequestBody(context.request)
    let now = Timestamp.now()
    var job = Job(
      id: RecordID.make(), ownerPeerID: context.authenticatedPeer.id, name: "", createdAt: now,
      updatedAt: now)
    try fields(body, into: &job, creating: true)
    try await node.store.saveJob(job)
    return .json(["job": job.json], status: 201, headers: [("location", "/api/v1/jobs/\(job.id)")])
  }

  func list(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let query = context.request.head.query
    let limit = try query.limit(maximum: 500)
    let page: JobPage
    do {
      let cursor = query["cursor"].flatMap { $0.isEmpty ? nil : $0 }
      page = try await node.store.jobPage(owner: context.authenticatedPeer.id, after: cursor, limit: limit)
    } catch is JobCursorError {
      throw APIError.badRequest("cursor must be the nextCursor of a previous page of GET /api/v1/jobs")
    }
    return .json([
      "jobs": page.json, "nextCursor": page.count == limit ? page.lastID.map { .string($0) } ?? .null : .null,
    ])
  }

  func ownJob(_ context: RequestContext, node: isolated Node) async throws -> Job {
    let id = context.parameters["jobId"] ?? ""
    guard let job = try await node.store.job(id: id, owner: context.authenticatedPeer.id) else {
      throw APIError.notFound("no job \(id) in this peer's list; see GET /api/v1/jobs")
    }
    return job
  }

  func get(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    .json(["job": try await ownJob(context, node: node).json])
  }

  func update(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let body = try RequestBody(context.request)
    var job = try await ownJob(context, node: node)
    guard !body.object.keys.isEmpty else {
      throw APIError.badRequest("send at least one of name, dueDate, payment, notes")
    }
    try fields(body, into: &job, creating: false)
    job.updatedAt = Timestamp.now()
    try await node.store.saveJob(job)
    return .json(["job": job.json])
  }

  func delete(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let id = context.parameters["jobId"] ?? ""
    // A job being offered is withdrawn first: the receiver sees the invitation canceled, the sender job.send.failed.
    if let (invitationID, pending) = pendingSends.first(where: { $0.value.jobID == id }),
      pending.senderPeerID == context.authenticatedPeer.id
    {
      node.interpret((try? node.mesh.node.cancel(invitationID, by: pending.senderPeerID)) ?? [])
    }
    guard try await node.store.deleteJob(id: id, owner: context.authenticatedPeer.id) else {
      throw APIError.notFound("no job \(id) in this peer's list; see GET /api/v1/jobs")
    }
    return .noContent
  }

  func send(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let job = try await ownJob(context, node: node)
    let body = try RequestBody(context.request)
    try body.allowOnly(["to", "timeoutSeconds"])
    let toID = try body.requiredString("to")
    // A job offer is read before it is answered: it waits longer than a plain invitation unless told otherwise.
    let given = body.object["timeoutSeconds"].map { $0 != .null } ?? false
    let timeout = given ? try body.timeoutSeconds() : JobRules.defaultOfferTimeoutSeconds
    let sender = context.authenticatedPeer
    guard node.peers[sender.id] != nil else { throw APIError.invalidToken }
    if let assigned = job.assignedTo {
      throw APIError(
        status: 409, code: "already_assigned", message: "this job is already assigned to \(assigned.displayName)")
    }
    if pendingSends.values.contains(where: { $0.jobID == job.id }) {
      throw APIError(
        status: 409, code: "already_sending", message: "this job already has a pending offer; wait for the answer")
    }
    guard toID != sender.id else { throw APIError.badRequest("a peer cannot send a job to itself") }
    guard
      let receiver = node.mesh.node.directory.advertisers(of: JobRules.serviceType, excluding: sender.id)
        .first(where: { $0.peer.peerID == toID })?.peer
    else {
      if node.mesh.node.directory.peer(toID) == nil {
        throw APIError.notFound("no peer \(toID) in the mesh; browse with PUT /api/v1/browsing/jobmanager-jobs")
      }
      throw APIError(
        status: 409, code: "not_receiving_jobs",
        message: "that peer is not receiving jobs (it does not advertise jobmanager-jobs)")
    }
    let session = node.mesh.node.createSession(
      RecordID.make(), creator: SessionMember(hosting: sender, nodeID: node.nodeID), strategy: .pointToPoint,
      encryption: .optional,
      maxPeers: 2)
    let (invitation, effects): (SessionBook.Invitation, [MeshEffect])
    do {
      (invitation, effects) = try node.features.invitations.invite(
        receiver.peerID, displayName: receiver.displayName, nodeID: receiver.nodeID, from: sender.id,
        into: session.sessionID, context: Self.invitationContext(job), timeoutSeconds: timeout, node: node)
    } catch {
      node.interpret((try? node.mesh.node.leave(session.sessionID, peerID: sender.id)) ?? [])
      throw APIError(error)
    }
    pendingSends[invitation.id] = PendingJobSend(
      jobID: job.id, senderPeerID: sender.id, sessionID: session.sessionID,
      receiver: receiver)
    node.interpret(effects)
    return .json(["job": job.json, "invitation": invitation.json(node: node)], status: 202)
  }

  /// The whole job as invitation context, so the receiver can judge the offer before accepting: the name on the
  /// first line, then `Due: YYYY-MM-DD`, `Payment: 120.00` and `Notes: …` lines for the fields that are set (notes
  /// last; they may span lines). Whole characters, at most 4 KiB: long notes are cut there (the job itself arrives
  /// whole on accept).
  static func invitationContext(_ job: Job) -> [UInt8] {
    var text = job.name
    if let due = job.dueDate { text += "\nDue: \(due)" }
    if let cents = job.paymentCents { text += "\nPayment: \(JobRules.formatPayment(cents))" }
    if let notes = job.notes, !notes.isEmpty { text += "\nNotes: \(notes)" }
    var context: [UInt8] = []
    for character in text {
      let bytes = Array(String(character).utf8)
      guard context.count + bytes.count <= MeshFrameCodec.maxContextBytes else { break }
      context += bytes
    }
    return context
  }

  /// The inviter's side of a job offer ended: deliver the job on accept, report anything else.
  func offerEnded(_ invitation: SessionBook.Invitation, node: isolated Node) {
    guard let pending = pendingSends.removeValue(forKey: invitation.id) else { return }
    guard invitation.state == .accepted else {
      node.interpret((try? node.mesh.node.leave(pending.sessionID, peerID: pending.senderPeerID)) ?? [])
      Task { await node.features.jobs.publishSendFailed(pending, reason: invitation.state.rawValue, node: node) }
      return
    }
    Task { await node.features.jobs.deliver(pending, node: node) }
  }

  /// `job.send.failed` data: the job as it is now, like `job.received` and `job.delivered` (null only if it was
  /// deleted meanwhile), with `jobId`, `to` and `reason`.
  static func jobSendFailed(_ job: Job?, _ pending: PendingJobSend, reason: String) -> JSONValue {
    [
      "job": job?.json ?? .null, "jobId": .string(pending.jobID), "to": pending.receiver.json,
      "reason": .string(reason),
    ]
  }

  /// Tells the sender an offer ended without delivery (declined, expired, canceled), with the job as stored.
  func publishSendFailed(_ pending: PendingJobSend, reason: String, node: isolated Node) async {
    let job = try? await node.store.job(id: pending.jobID, owner: pending.senderPeerID)
    node.events.publishInBackground(
      [
        (pending.senderPeerID, "job.send.failed", Self.jobSendFailed(job, pending, reason: reason))
      ], node: node)
  }

  func deliver(_ pending: PendingJobSend, node: isolated Node) async {
    do {
      guard var job = try await node.store.job(id: pending.jobID, owner: pending.senderPeerID),
        let sender = node.peers[pending.senderPeerID]
      else { return }
      let payload: JSONValue = [
        "job": job.json,
        "from": ["id": .string(sender.id), "displayName": .string(sender.displayName), "nodeId": .string(node.nodeID)],
      ]
      let result = try node.mesh.node.send(
        pending.sessionID, from: pending.senderPeerID, to: [pending.receiver.peerID], payload: payload.serialized(),
        reliable: true, namedEvent: JobRules.transferEvent)
      node.interpret(result.effects)
      guard result.undelivered.isEmpty else {
        try await node.events.publish(
          [
            (
              pending.senderPeerID, "job.send.failed",
              Self.jobSendFailed(job, pending, reason: "receiver's node not linked")
            )
          ], node: node)
        return
      }
      job.assignedTo = pending.receiver
      job.updatedAt = Timestamp.now()
      // If the link drops before the receiver's node acknowledges the job, session.send.failed undoes this.
      delivering[pending.sessionID] = pending
      try await node.store.saveJob(job)
      try await node.events.publish([(pending.senderPeerID, "job.delivered", ["job": job.json])], node: node)
      // After the job is on the wire: a leave would overtake it and the receiver would drop it.
      try? node.features.sessions.leaveAfterQueuedData(pending.sessionID, peerID: pending.senderPeerID, node: node)
    } catch {
      node.logger.error("Delivering a job failed.", ["job.id": pending.jobID, "error": String(describing: error)])
    }
  }

  /// The job's named event was not acknowledged (the link dropped): the job is not assigned after all.
  func deliveryFailed(_ delivery: PendingJobSend, reason: String, node: isolated Node) async {
    do {
      guard var job = try await node.store.job(id: delivery.jobID, owner: delivery.senderPeerID),
        job.assignedTo?.peerID == delivery.receiver.peerID
      else { return }
      job.assignedTo = nil
      job.updatedAt = Timestamp.now()
      try await node.store.saveJob(job)
      try await node.events.publish(
        [
          (delivery.senderPeerID, "job.send.failed", Self.jobSendFailed(job, delivery, reason: reason))
        ], node: node)
    } catch {
      node.logger.error(
        "Undoing a job assignment failed.", ["job.id": delivery.jobID, "error": String(describing: error)])
    }
  }

  /// The receiver's side: a job arrived as a named session event from `fromPeerID` (the session book checked that it
  /// is a member on the sending node); store it in the receiver's list. The sender shown is that peer as the
  /// directory knows it, never what the envelope claims.
  func arrived(for peerID: String, from fromPeerID: String, object: [UInt8], node: isolated Node) async {
    guard case .object(let envelope)? = try? JSONValue.parse(object),
      case .object(let incoming)? = envelope["job"], case .object(var from)? = envelope["from"]
    else { return }
    if from["id"]?.stringValue != fromPeerID, let sender = node.mesh.node.directory.peer(fromPeerID) {
      from = [
        "id": .string(sender.peerID), "displayName": .string(sender.displayName), "nodeId": .string(sender.nodeID),
      ]
    }
    let now = Timestamp.now()
    let job = Job(
      id: RecordID.make(), ownerPeerID: peerID, name: incoming["name"]?.stringValue ?? "",
      dueDate: incoming["dueDate"]?.stringValue,
      paymentCents: incoming["payment"].flatMap { try? JobRules.payment($0) },
      notes: incoming["notes"]?.stringValue, assignedTo: nil,
      receivedFrom: JobParty(
        peerID: from["id"]?.stringValue ?? "", displayName: from["displayName"]?.stringValue ?? "",
        nodeID: from["nodeId"]?.stringValue ?? ""),
      createdAt: now, updatedAt: now)
    do {
      try await node.store.saveJob(job)
      try await node.events.publish([(peerID, "job.received", ["job": job.json])], node: node)
    } catch {
      node.logger.error("Storing a received job failed.", ["peer.id": peerID, "error": String(describing: error)])
    }
  }
}

@available(*, unavailable) extension JobsFeature: Sendable {}
