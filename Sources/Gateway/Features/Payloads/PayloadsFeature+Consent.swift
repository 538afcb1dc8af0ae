/// File consent and re-offers of transfers this node already holds.
///
/// Layer 4. With `--file-consent ask` (or `fileConsent: "ask"` in `PATCH /api/v1/node/settings`) an offer from
/// another node is recorded in state `awaitingConsent` without any file being created; the recipient gets
/// `transfer.offered` and answers `POST /api/v1/transfers/{id}/accept` (optionally `{"always": true}`, which puts the
/// sender on its always-accept list) or `/decline`. The sender's node meanwhile spools the upload (its client gets
/// the usual 202) and sends nothing. The wait is bounded on both nodes: the receiver's by `--file-consent-timeout`,
/// the sender's by that plus ``LiveTransfer/consentGraceMillis``. Runs on the service thread in ``PayloadsFeature``, isolated to the ``Node`` actor.
import Foundation
import LWS
import Logging
import MeshCore

extension PayloadsFeature {
  // MARK: - Offers

  /// The sender offers again a transfer this node holds without a receiver: its recipient has not answered yet (the
  /// wait is told again), declined, or it ended otherwise.
  func reofferUnanswered(_ transfer: LiveTransfer, from nodeID: String, node: isolated Node) {
    let id = transfer.record.id
    let frame: MeshMessage
    switch transfer.record.state {
    case .awaitingConsent where transfer.record.role == .copy:
      frame = .transferAwaitingConsent(transferID: id, timeoutMillis: copyConsentMillisLeft(transfer))
    case .awaitingConsent:
      frame = .transferAwaitingConsent(transferID: id, timeoutMillis: consentMillisLeft(transfer))
    case .declined:
      frame = .transferReject(transferID: id, code: .declined, message: transfer.record.reason ?? "declined")
    case let state:
      frame = .transferReject(transferID: id, code: .unknownTransfer, message: "the transfer is \(state) here")
    }
    if transfer.record.role == .copy { retellRiderAnswers(transfer, node: node) }
    sendTransferFrame(frame, to: nodeID, node: node)
  }

  /// A group copy is offered again (a link loss, a restart of either node): the sender's node hears again, for each
  /// recipient riding on it, whether its answer is awaited, it accepted, or its transfer ended (declined, its wait
  /// over, canceled), so an answer given while the link was down (or lost with a restart) is not lost. The sender's
  /// node ignores what it already knows.
  func retellRiderAnswers(_ copy: LiveTransfer, node: isolated Node) {
    for rider in riders(of: copy) {
      let id = rider.record.id
      let reason = rider.record.reason ?? "the transfer \(rider.record.state)"
      let frame: MeshMessage
      switch rider.record.state {
      case .awaitingConsent: frame = .transferAwaitingConsent(transferID: id, timeoutMillis: consentMillisLeft(rider))
      case .declined: frame = .transferReject(transferID: id, code: .declined, message: reason)
      case .failed: frame = .transferFailed(transferID: id, reason: reason)
      case .canceled: frame = .transferCancel(transferID: id, reason: reason)
      case .finished: continue
      case .pending, .inProgress, .interrupted: frame = .transferAccept(transferID: id, offset: 0)
      }
      sendTransferFrame(frame, to: copy.record.fromNodeID, node: node)
    }
  }

  /// The sender offered an incoming transfer again (after a link loss, or a restart of either node) and it goes on
  /// from `offset` (the payload book sends the `transferAccept`).
  func incomingResumed(_ transfer: LiveTransfer, offset: UInt64, node: isolated Node) {
    transfer.lastProgressAt = Node.monotonicMillis()
    let wasInterrupted = transfer.record.state == .interrupted
    if offset > 0 { transfer.record.resumedFrom = offset }
    transfer.record.state = .inProgress
    persist(transfer, node: node)
    if transfer.record.role == .copy {
      syncRiders(transfer, node: node)
      retellRiderAnswers(transfer, node: node)
    }
    if wasInterrupted { reportPause("transfer.resumed", transfer, node: node) }
  }

  /// A new offer that must wait for the recipient's answer: recorded, announced, nothing written.
  func offerAwaitingConsent(_ transfer: LiveTransfer, node: isolated Node) {
    let id = transfer.record.id
    transfers.incoming[id] = transfer
    node.mesh.node.payloads.receive(id, from: transfer.record.fromNodeID, receiver: nil)
    startConsentWait(transfer, node: node)
    // The sender hears of the wait first: the recipient can answer as soon as the transfer is listed, before its
    // record is stored, and the decline, acceptance or failure that follows goes after this on the link (sent after
    // the store write, a decline in between went first and the wait never).
    sendTransferFrame(
      .transferAwaitingConsent(transferID: id, timeoutMillis: consentMillisLeft(transfer)),
      to: transfer.record.fromNodeID, node: node)
    Task {
      // The record as it is now (an answer may have come meanwhile; its own write follows this one).
      guard await recordIncoming(transfer, transfer.record, node: node) else { return }
      guard transfers.incoming[id] === transfer, transfer.record.state == .awaitingConsent else { return }
      // The timeout the wait got, not what is left of it after the store write (rounded down, one second less).
      publishTransferEvent(
        "transfer.offered", transfer, extra: ["timeoutSeconds": .int(Int64(transfer.consentTimeoutSeconds))], node: node
      )
    }
  }

  // MARK: - Bounded waits

  /// Starts (or, after a restart, starts again) the recipient's wait for `transfer`.
  func startConsentWait(_ transfer: LiveTransfer, node: isolated Node) {
    transfer.consentTimeoutSeconds = fileConsentTimeout(node: node)
    let millis = UInt64(transfer.consentTimeoutSeconds) * 1000
    transfer.consentDeadline = Node.monotonicMillis() + millis
    scheduleConsentExpiry(transfer.record.id, .incoming, after: millis, node: node)
  }

  /// What remains of the wait, in ms (0 when it is over or not running).
  func consentMillisLeft(_ transfer: LiveTransfer) -> UInt64 {
    guard let deadline = transfer.consentDeadline else { return 0 }
    let now = Node.monotonicMillis()
    return deadline > now ? deadline - now : 0
  }

  func scheduleConsentExpiry(_ id: String, _ direction: TransferDirection, after millis: UInt64, node: isolated Node) {
    Task { [weak node] in
      try? await Task.sleep(for: .milliseconds(Int64(min(millis, 1 << 40))))
      node?.onLoop { $0.features.payloads.consentExpired(id, direction, node: $0) }
    }
  }

  /// The wait for the recipient's answer may be over: the transfer fails, on both nodes.
  func consentExpired(_ id: String, _ direction: TransferDirection, node: isolated Node) {
    let transfer = direction == .incoming ? transfers.incoming[id] : transfers.outgoing[id]
    guard let transfer, !transfer.record.isTerminal, transfer.consentDeadline != nil else { return }
    let left = consentMillisLeft(transfer)
    guard left == 0 else {
      // Woken early (or the wait was restarted): sleep for the rest.
      scheduleConsentExpiry(id, direction, after: left, node: node)
      return
    }
    transfer.consentDeadline = nil
    let reason =
      direction == .incoming
      ? "\(transfer.record.toDisplayName) did not accept or decline the file within \(transfer.consentTimeoutSeconds) s"
      : "the recipient's node did not say within the consent timeout whether the file was accepted"
    failTransfer(transfer, reason: reason, notify: true, node: node)
  }

  // MARK: - REST

  /// The incoming transfer of the request's peer that waits for its answer.
  func transferAwaitingConsent(_ context: RequestContext) throws(APIError) -> LiveTransfer {
    let transfer = try ownTransfer(context)
    let record = transfer.record
    guard record.direction == .incoming, record.state == .awaitingConsent else {
      throw APIError(
        status: 409, code: "transfer_not_awaiting_consent",
        message: record.direction == .outgoing
          ? "transfer \(record.id) is one you send; only its recipient accepts or declines it"
          : "transfer \(record.id) is \(record.state); only a file waiting for your answer (state awaitingConsent) "
            + "can be accepted or declined")
    }
    return transfer
  }

  /// `POST /api/v1/transfers/{id}/accept`: creates the file and lets the sender's node send.
  func acceptTransfer(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let transfer = try transferAwaitingConsent(context)
    let body = try RequestBody(context.request, allowEmpty: true)
    try body.allowOnly(["always"])
    var always = false
    if let value = body.object["always"] {
      guard case .bool(let flag) = value else {
        throw APIError.badRequest("always must be true or false (true: accept every later file from this sender)")
      }
      always = flag
    }
    let id = transfer.record.id
    if always {
      try await addAlwaysAccept(
        peerID: transfer.record.toPeerID, sender: transfer.record.fromPeerID, name: transfer.record.fromDisplayName,
        nodeID: transfer.record.fromNodeID, node: node)
      guard transfers.incoming[id] === transfer, transfer.record.state == .awaitingConsent else {
        throw APIError(
          status: 409, code: "transfer_\(transfer.record.state)",
          message: "transfer \(id) is \(transfer.record.state) now; the sender stays on your always-accept list")
      }
    }
    if transfer.record.copyID != nil { return try await acceptRider(transfer, node: node) }
    transfer.consentDeadline = nil
    transfer.lastProgressAt = Node.monotonicMillis()
    node.mesh.node.payloads.setReceiver(transfer.record.id, TransferReceiver(size: transfer.record.size))
    transfer.record.state = .inProgress
    transfer.record.updatedAt = Timestamp.now()
    try? FileManager.default.createDirectory(
      atPath: "\(dataDirectoryPath(node: node))/transfers", withIntermediateDirectories: true)
    let file = TransferFile(path: transfer.record.path)
    transfer.file = file
    let opened: Result<UInt64, TransferIOError> = await withCheckedContinuation { continuation in
      file.open(rehash: false, exclusive: true) { continuation.resume(returning: $0) }
    }
    if case .failure(let error) = opened {
      failTransfer(transfer, reason: "the receiving node cannot write: \(error)", notify: true, node: node)
      throw APIError(status: 500, code: "storage_error", message: "the node cannot create the file: \(error)")
    }
    guard !transfer.record.isTerminal else {
      throw APIError(
        status: 409, code: "transfer_\(transfer.record.state)",
        message: "transfer \(id) was \(transfer.record.state) meanwhile: \(transfer.record.reason ?? "no reason given")"
      )
    }
    persist(transfer, node: node)
    publishTransferEvent("transfer.started", transfer, node: node)
    sendTransferFrame(.transferAccept(transferID: id, offset: 0), to: transfer.record.fromNodeID, node: node)
    return .json(["transfer": transferJSON(transfer.record)])
  }

  /// `POST /api/v1/transfers/{id}/decline`: nothing is stored; the sender's side ends `declined` too.
  func declineTransfer(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    let transfer = try transferAwaitingConsent(context)
    let body = try RequestBody(context.request, allowEmpty: true)
    try body.allowOnly([])
    let reason = "\(transfer.record.toDisplayName) declined the file"
    transfer.consentDeadline = nil
    sendOrQueueNotice(
      .transferReject(transferID: transfer.record.id, code: .declined, message: reason), to: transfer.record.fromNodeID,
      node: node)
    settle(transfer, state: .declined, reason: reason, node: node)
    return .json(["transfer": transferJSON(transfer.record)])
  }

  /// The recipient of a group share on another node accepted: from now on the share rides on its copy (finished at
  /// once when the copy is already stored there).
  func shareAccepted(_ share: LiveTransfer, node: isolated Node) {
    guard !share.record.isTerminal, let copyID = share.record.copyID, let copy = transfers.outgoing[copyID] else {
      return
    }
    let wasAwaiting = share.record.state == .awaitingConsent
    share.consentDeadline = nil
    if copy.record.state == .finished {
      share.record.sha256 = copy.record.sha256
      share.record.bytes = share.record.size
      share.record.state = .inProgress
      if wasAwaiting { publishTransferEvent("transfer.accepted", share, node: node) }
      settle(share, state: .finished, reason: nil, node: node)
      return
    }
    guard wasAwaiting else { return }
    share.record.state =
      copy.record.state == .awaitingConsent || copy.record.state == .pending ? .inProgress : copy.record.state
    share.record.bytes = copy.record.bytes
    share.record.updatedAt = Timestamp.now()
    persist(share, node: node)
    publishTransferEvent("transfer.accepted", share, node: node)
  }

  // MARK: - Always-accept lists

  /// Whether local peer `peerID` always accepts files from `sender` arriving from node `nodeID`: only on the node
  /// (and, over TLS, the certificate) the entry was made for. A peer id announced by another node, or the same node id
  /// presenting another certificate, is asked about again.
  func alwaysAccepts(_ peerID: String, from sender: String, at nodeID: String, node: isolated Node) -> Bool {
    guard let entry = transfers.alwaysAccept[peerID]?[sender], entry.senderNodeID == nodeID else { return false }
    guard let pinned = entry.senderFingerprint else { return true }
    return node.mesh.node.links.transport(of: nodeID)?.remoteFingerprint == pinned
  }

  func addAlwaysAccept(peerID: String, sender: String, name: String, nodeID: String, node: isolated Node) async throws {
    let list = transfers.alwaysAccept[peerID] ?? [:]
    if list[sender] == nil && list.count >= AlwaysAccepted.limit {
      throw APIError(
        status: 409, code: "always_accept_list_full",
        message: "your always-accept list holds \(AlwaysAccepted.limit) senders, the most it may; remove one with "
          + "DELETE /api/v1/file-consent/always-accept/{peerId}, or accept without always")
    }
    let entry = AlwaysAccepted(
      peerID: peerID, senderPeerID: sender, senderDisplayName: name, createdAt: Timestamp.now(), senderNodeID: nodeID,
      senderFingerprint: node.mesh.node.links.transport(of: nodeID)?.remoteFingerprint)
    do {
      try await node.store.saveAlwaysAccepted(entry)
    } catch {
      throw APIError(status: 500, code: "storage_error", message: "the always-accept list could not be saved: \(error)")
    }
    transfers.alwaysAccept[peerID, default: [:]][sender] = entry
  }

  func fileConsentResponse(of peerID: String, node: isolated Node) -> HTTPResponse {
    let list = (transfers.alwaysAccept[peerID] ?? [:]).values.sorted {
      ($0.createdAt, $0.senderPeerID) < ($1.createdAt, $1.senderPeerID)
    }
    let entries: [JSONValue] = list.map {
      [
        "peerId": .string($0.senderPeerID), "displayName": .string($0.senderDisplayName),
        "nodeId": $0.senderNodeID.map { .string($0) } ?? .null, "since": .string($0.createdAt),
      ]
    }
    return .json([
      "fileConsent": [
        "mode": .string(fileConsent(node: node).rawValue),
        "timeoutSeconds": .int(Int64(fileConsentTimeout(node: node))),
        "alwaysAccept": .array(entries),
      ]
    ])
  }

  /// `DELETE /api/v1/file-consent/always-accept/{peerId}`.
  func removeAlwaysAccept(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let peerID = context.authenticatedPeer.id
    let sender = context.parameters["peerId"] ?? ""
    guard transfers.alwaysAccept[peerID]?[sender] != nil else {
      throw APIError.notFound("peer \(sender) is not on your always-accept list; see GET /api/v1/file-consent")
    }
    do {
      try await node.store.deleteAlwaysAccepted(peerID: peerID, senderPeerID: sender)
    } catch {
      throw APIError(
        status: 500, code: "storage_error", message: "the always-accept list could not be saved: \(error)")
    }
    transfers.alwaysAccept[peerID]?[sender] = nil
    return fileConsentResponse(of: peerID, node: node)
  }
}
