/// Resource transfers, the end of the story: terminal states, the events both sides see, the REST handlers that read,
/// cancel and download transfers, and recovery after a restart (see PayloadsFeature+Transfers.swift for the whole story).
import Crypto
import Foundation
import LWS
import Logging
import MeshCore

extension PayloadsFeature {
  // MARK: - Ending

  /// Records a terminal state, tells the local party, and forgets the file handle.
  func settle(_ transfer: LiveTransfer, state: TransferState, reason: String?, node: isolated Node) {
    transfer.record.state = state
    transfer.record.reason = reason
    transfer.record.updatedAt = Timestamp.now()
    persist(transfer, node: node)
    var extra: JSONObject = [:]
    if let sha = transfer.record.sha256, state == .finished { extra["sha256"] = .string(sha) }
    if let reason { extra["reason"] = .string(reason) }
    publishTransferEvent("transfer.\(state)", transfer, extra: extra, node: node)
    if let answer = transfer.answer {
      transfer.answer = nil
      answer.resume(throwing: APIError(status: 409, code: "transfer_\(state)", message: reason ?? "transfer \(state)"))
    }
    if let done = transfer.uploadDone {
      transfer.uploadDone = nil
      let status = state == .canceled || state == .declined ? 409 : 502
      done.resume(
        throwing: APIError(
          status: status, code: "transfer_\(state)",
          message: "the transfer was \(state): \(reason ?? "no reason given")"))
    }
    if let request = transfer.uploadRequest {
      transfers.byUpload[request] = nil
      transfer.uploadRequest = nil
    }
    if transfer.record.groupID != nil { groupSettled(transfer, state: state, reason: reason, node: node) }
  }

  func failTransfer(_ transfer: LiveTransfer, reason: String, notify: Bool, node: isolated Node) {
    guard !transfer.record.isTerminal else { return }
    node.mesh.node.payloads.fail(transfer.record.id, transfer.record.direction.payload, reason: reason)
    transfer.file?.close(remove: transfer.ownsFile)
    transfer.file = nil
    if notify { notifyOtherSide(transfer, .transferFailed(transferID: transfer.record.id, reason: reason), node: node) }
    settle(transfer, state: .failed, reason: reason, node: node)
  }

  func cancelTransfer(_ transfer: LiveTransfer, reason: String, notify: Bool, node: isolated Node) {
    guard !transfer.record.isTerminal else { return }
    node.mesh.node.payloads.cancel(transfer.record.id, transfer.record.direction.payload)
    transfer.file?.close(remove: transfer.ownsFile)
    transfer.file = nil
    if notify { notifyOtherSide(transfer, .transferCancel(transferID: transfer.record.id, reason: reason), node: node) }
    settle(transfer, state: .canceled, reason: reason, node: node)
  }

  /// Drops a transfer that never started (its offer was refused): no events, no record kept.
  func discard(_ transfer: LiveTransfer, state: TransferState, reason: String, node: isolated Node) {
    transfer.file?.close(remove: true)
    transfer.file = nil
    transfer.record.state = state
    transfer.record.reason = reason
    transfers.outgoing[transfer.record.id] = nil
    node.mesh.node.payloads.forget(transfer.record.id, .outgoing)
    let id = transfer.record.id
    Task { try? await node.store.deleteTransfer(id: id) }
  }

  func notifyOtherSide(_ transfer: LiveTransfer, _ message: MeshMessage, node: isolated Node) {
    let other = transfer.record.direction == .outgoing ? transfer.record.toNodeID : transfer.record.fromNodeID
    if other == node.nodeID {
      // Both sides are here: end the other record too.
      let peer =
        transfer.record.direction == .outgoing
        ? transfers.incoming[transfer.record.id] : transfers.outgoing[transfer.record.id]
      guard let peer, !peer.record.isTerminal else { return }
      switch message {
      case .transferCancel(_, let reason): cancelTransfer(peer, reason: reason, notify: false, node: node)
      case .transferFailed(_, let reason): failTransfer(peer, reason: reason, notify: false, node: node)
      default: break
      }
      return
    }
    sendOrQueueNotice(message, to: other, node: node)
  }

  func persist(_ transfer: LiveTransfer, node: isolated Node) {
    if transfer.record.role == .copy { syncRiders(transfer, node: node) }
    let record = transfer.record
    Task {
      do {
        try await node.store.saveTransfer(record)
      } catch {
        node.logger.warning(
          "Could not save a transfer.", ["transfer.id": record.id, "error": String(describing: error)])
      }
    }
  }

  // MARK: - Events

  func localParty(_ record: TransferRecord) -> String {
    record.direction == .outgoing ? record.fromPeerID : record.toPeerID
  }

  func publishTransferEvent(_ type: String, _ transfer: LiveTransfer, extra: JSONObject = [:], node: isolated Node) {
    let peerID = localParty(transfer.record)
    guard transfer.record.role == .transfer, node.peers[peerID] != nil else { return }
    var data: JSONObject = ["transfer": transferJSON(transfer.record)]
    for (key, value) in extra { data[key] = value }
    node.events.publishInBackground([(peerID: peerID, type: type, data: .object(data))], node: node)
  }

  func reportProgress(_ transfer: LiveTransfer, node: isolated Node) {
    if transfer.record.role == .copy {
      for rider in riders(of: transfer) where !rider.record.isTerminal && rider.record.state != .awaitingConsent {
        rider.record.bytes = transfer.record.bytes
        reportProgress(rider, node: node)
      }
      return
    }
    guard transfer.throttle.shouldReport(bytes: transfer.record.bytes, now: Node.monotonicMillis()) else { return }
    publishTransferEvent(
      "transfer.progress", transfer,
      extra: ["bytes": .int(Int64(transfer.record.bytes)), "total": .int(Int64(transfer.record.size))], node: node)
  }

  func transferJSON(_ record: TransferRecord) -> JSONValue {
    // The members in the order the API has always shown them.
    var object: JSONObject = [
      "id": .string(record.id), "sessionId": .string(record.sessionID),
      "direction": .string(record.direction.rawValue), "name": .string(record.name),
      "contentType": .string(record.contentType), "size": .int(Int64(record.size)),
      "bytes": .int(Int64(record.bytes)), "state": .string(record.state.rawValue), "from": record.parties.from.json,
      "to": record.parties.to.json, "createdAt": .string(record.createdAt), "updatedAt": .string(record.updatedAt),
      "sha256": record.sha256.map { .string($0) } ?? .null, "reason": record.reason.map { .string($0) } ?? .null,
      "resumedFrom": record.resumedFrom.map { .int(Int64($0)) } ?? .null,
    ]
    // Only a group send's transfers carry the member (a single transfer's view is as it always was).
    if let groupID = record.groupID { object["groupId"] = .string(groupID) }
    return .object(object)
  }

  // MARK: - REST

  func visibleTransfers(of peerID: String) -> [TransferRecord] {
    let outgoing = transfers.outgoing.values.map(\.record).filter { $0.fromPeerID == peerID && $0.role == .transfer }
    let incoming = transfers.incoming.values.map(\.record).filter { $0.toPeerID == peerID && $0.role == .transfer }
    return (outgoing + incoming).sorted {
      ($0.createdAt, $0.id, $0.direction.rawValue) < ($1.createdAt, $1.id, $1.direction.rawValue)
    }
  }

  func ownTransfer(_ context: RequestContext) throws(APIError) -> LiveTransfer {
    let id = context.parameters["transferId"] ?? ""
    let peerID = context.authenticatedPeer.id
    if let transfer = transfers.outgoing[id], transfer.record.fromPeerID == peerID, transfer.record.role == .transfer {
      return transfer
    }
    if let transfer = transfers.incoming[id], transfer.record.toPeerID == peerID, transfer.record.role == .transfer {
      return transfer
    }
    throw APIError.notFound("no transfer \(id) sent or received by this peer; see GET /api/v1/transfers")
  }

  func listTransfers(_ context: RequestContext) throws -> HTTPResponse {
    var list = visibleTransfers(of: context.authenticatedPeer.id)
    if let group = context.request.head.query["group"] { list = list.filter { $0.groupID == group } }
    let page = try Page(list, id: { "\($0.id).\($0.direction.rawValue)" }, query: context.request.head.query)
    return .json([
      "transfers": .array(page.items.map { transferJSON($0) }), "nextCursor": page.nextCursorJSON,
    ])
  }

  func getTransfer(_ context: RequestContext) throws -> HTTPResponse {
    .json(["transfer": transferJSON(try ownTransfer(context).record)])
  }

  func deleteTransfer(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    let transfer = try ownTransfer(context)
    guard !transfer.record.isTerminal else {
      throw APIError(
        status: 409, code: "transfer_\(transfer.record.state)",
        message:
          "transfer \(transfer.record.id) is already \(transfer.record.state); only transfers in progress can be canceled"
      )
    }
    let who = transfer.record.direction == .outgoing ? "the sender" : "the receiver"
    cancelTransfer(transfer, reason: "canceled by \(who)", notify: true, node: node)
    return .json(["transfer": transferJSON(transfer.record)])
  }

  func transferContent(_ context: RequestContext) throws -> HTTPResponse {
    let transfer = try ownTransfer(context)
    let record = transfer.record
    guard record.state == .finished else {
      throw APIError(
        status: 409, code: "transfer_not_finished",
        message: "transfer \(record.id) is \(record.state); its content can be downloaded once it is finished")
    }
    let size = Int(record.size)
    var headers: [(String, String)] = [
      ("accept-ranges", "bytes"), ("content-disposition", TransferRecord.contentDisposition(record.name)),
      ("cache-control", "no-store"),
    ]
    if let sha = record.sha256 { headers.append(("x-content-sha256", sha)) }
    var status = 200
    var offset = 0
    var length = size
    if let range = context.request.head.headers["range"] {
      switch ByteRange.parse(range, size: size) {
      case .none:
        break
      case .unsatisfiable:
        throw APIError(
          status: 416, code: "range_not_satisfiable",
          message: "the range \(range) is outside the \(size) bytes of this file",
          headers: [("content-range", "bytes */\(size)")])
      case .range(let first, let last):
        status = 206
        offset = first
        length = last - first + 1
        headers.append(("content-range", "bytes \(first)-\(last)/\(size)"))
      }
    }
    var response = HTTPResponse(status: status, contentType: record.contentType, headers: headers)
    response.file = HTTPFileBody(path: record.path, offset: offset, length: length)
    return response
  }

  // MARK: - Restart

  /// Loads the transfer records after a start: finished ones for listing, unfinished ones to resume.
  /// Waits until the transfers stored before this start are listed (at once after that).
  func untilTransfersListed(node: isolated Node) async {
    guard !transfers.listed else { return }
    await withCheckedContinuation { transfers.awaitingList.append($0) }
  }

  /// The stored transfers are listed: requests that waited for them go on.
  private func transfersListed() {
    transfers.listed = true
    let waiting = transfers.awaitingList
    transfers.awaitingList = []
    for request in waiting { request.resume() }
  }

  func restoreTransfers(node: isolated Node) async {
    let records: [TransferRecord]
    do {
      records = try await node.store.allTransfers()
    } catch {
      node.logger.error("Could not load transfers.", ["error": String(describing: error)])
      records = []
    }
    var rehashing = 0
    // Every stored transfer is listed at once, before any of them waits for its file: the transfer routes answer
    // from then on (a request right after a start saw none, or only those before a partial file being read).
    let restored = records.map { record in
      let transfer = LiveTransfer(record: record)
      switch record.direction {
      case .outgoing:
        transfers.outgoing[record.id] = transfer
        node.mesh.node.payloads.send(record.id, to: record.toNodeID, sender: nil)
      case .incoming:
        transfers.incoming[record.id] = transfer
        // A finished one keeps its verdict (an offer made again, the sender having missed it, is answered with it).
        let finished = record.state == .finished ? record.sha256.flatMap(TransferRecord.unhex) : nil
        node.mesh.node.payloads.receive(
          record.id, from: record.fromNodeID,
          receiver: finished.map { TransferReceiver.finished(size: record.size, sha256: $0) })
      }
      return transfer
    }
    transfersListed()
    for transfer in restored {
      var record = transfer.record
      guard !record.isTerminal else { continue }
      if record.copyID != nil {
        // A group recipient's share: its node's copy holds the bytes and the state machine (see restoreGroups). A
        // recipient asked first is asked on (its wait starts again); the sender's side hears again when the copy is
        // offered again, through the share's answer machine.
        if record.direction == .incoming && record.state == .awaitingConsent {
          startConsentWait(transfer, node: node)
          continue
        }
        if record.direction == .outgoing && record.toNodeID != node.nodeID {
          node.mesh.node.payloads.send(record.id, to: record.toNodeID, sender: GroupSend.answerMachine())
          if record.state == .awaitingConsent {
            // Still asked: its node answers when it hears from this one again (or tells the wait again when the
            // copy is offered again). Bounded meanwhile by this node's consent timeout plus the grace.
            let wait = UInt64(fileConsentTimeout(node: node)) * 1000 + LiveTransfer.consentGraceMillis
            transfer.consentDeadline = Node.monotonicMillis() + wait
            scheduleConsentExpiry(record.id, .outgoing, after: wait, node: node)
            continue
          }
        }
        transfer.record.state = .interrupted
        continue
      }
      let local = record.fromNodeID == node.nodeID && record.toNodeID == node.nodeID
      if record.direction == .outgoing {
        guard !local, let hex = record.sha256, let digest = TransferRecord.unhex(hex),
          FileManager.default.fileExists(atPath: record.path)
        else {
          let reason = "the sending node restarted before the upload was complete"
          failTransfer(transfer, reason: reason, notify: !local, node: node)
          continue
        }
        node.mesh.node.payloads.send(
          record.id, to: record.toNodeID,
          sender: TransferSender.restored(
            size: record.size, digest: digest,
            window: record.role == .copy ? GroupSend.copyWindow : LiveTransfer.window, chunkSize: LiveTransfer.chunk,
            readAhead: LiveTransfer.readAhead))
        transfer.file = TransferFile(path: record.path)
        transfer.file?.open(rehash: false) { _ in }
        record.state = .interrupted
        transfer.record = record
      } else {
        guard !local else {
          failTransfer(transfer, reason: "the node restarted before the upload was complete", notify: false, node: node)
          continue
        }
        if record.state == .awaitingConsent {
          // Nothing was written yet: the wait for the recipient's answer starts again (bounded as before). A group
          // copy nobody accepted yet waits through its recipients' waits.
          if record.role != .copy { startConsentWait(transfer, node: node) }
          continue
        }
        let file = TransferFile(path: record.path)
        transfer.file = file
        transfer.record.state = .interrupted
        rehashing += 1
        let id = record.id
        let length: Result<UInt64, TransferIOError> = await withCheckedContinuation { continuation in
          file.open(rehash: true) { continuation.resume(returning: $0) }
        }
        switch length {
        case .failure(let error):
          failTransfer(
            transfer, reason: "the partial file could not be read after a restart: \(error)", notify: true, node: node)
        case .success(let offset):
          var receiver = TransferReceiver(size: record.size, offset: offset)
          receiver.linkLost()
          node.mesh.node.payloads.setReceiver(id, receiver)
          transfer.record.bytes = min(offset, record.size)
          node.meshLogger.info("Transfer restored.", ["transfer.id": id, "offset": offset])
        }
      }
    }
    do {
      for entry in try await node.store.allAlwaysAccepted() {
        transfers.alwaysAccept[entry.peerID, default: [:]][entry.senderPeerID] = entry
      }
    } catch {
      node.logger.error("Could not load the always-accept lists.", ["error": String(describing: error)])
    }
    restoreGroups(node: node)
    // Offers that came meanwhile waited in the payload book: it judges them now.
    node.interpret(node.mesh.node.payloadRecordsRestored())
    for linked in node.mesh.node.links.linkedNodeIDs { transfersLinkUp(linked, node: node) }
  }

  /// The member a file or stream goes to: connected, its node linked, and the link good enough for the session.
  func connectedRecipient(_ toID: String, in session: SessionDescription, node: isolated Node) throws(APIError)
    -> SessionMember
  {
    guard let target = session.members.first(where: { $0.peerID == toID }) else {
      throw APIError(
        status: 409, code: "not_a_member",
        message: "peer \(toID) is not a member of session \(session.sessionID); invite it first")
    }
    guard target.state == .connected else {
      throw APIError(
        status: 409, code: "peer_not_connected",
        message: "peer \(toID) is \(target.state.rawValue) in this session; wait until it is connected")
    }
    if target.nodeID != node.nodeID && node.mesh.node.links.connection(of: target.nodeID) == nil {
      throw APIError.unavailable("the node of peer \(toID) is not linked right now; try again when it is")
    }
    try requireCarriage(session, to: target, node: node)
    return target
  }

  /// `encryption: required` sessions never cross a plaintext link: their files and streams neither.
  func requireCarriage(_ session: SessionDescription, to target: SessionMember, node: isolated Node) throws(APIError) {
    guard node.mesh.node.sessions.mayCarry(session, to: target.nodeID) else {
      throw APIError(
        status: 409, code: "encryption_unavailable",
        message: "session \(session.sessionID) requires encryption, but the link to the node of \(target.displayName) "
          + "is not encrypted (is it running with --mesh-tls off?)")
    }
  }
}

/// A `Range` header as a download of a transfer's file reads it.
enum ByteRange: Equatable {
  case none
  case unsatisfiable
  case range(Int, Int)

  /// One `bytes=` range (RFC 9110 §14.1.2): `a-b`, `a-` or `-n`. Several ranges or other units are ignored (the
  /// whole file is sent), as the RFC allows.
  static func parse(_ header: String, size: Int) -> ByteRange {
    let text = header.trimmingCharacters(in: .whitespaces)
    guard text.lowercased().hasPrefix("bytes="), !text.contains(",") else { return .none }
    let spec = text.dropFirst(6).trimmingCharacters(in: .whitespaces)
    guard let dash = spec.firstIndex(of: "-") else { return .none }
    let startText = spec[..<dash]
    let endText = spec[spec.index(after: dash)...]
    if startText.isEmpty {
      guard let suffix = Int(endText), suffix >= 0 else { return .none }
      guard suffix > 0, size > 0 else { return .unsatisfiable }
      return .range(max(0, size - suffix), size - 1)
    }
    guard let first = Int(startText), first >= 0 else { return .none }
    guard first < size else { return .unsatisfiable }
    if endText.isEmpty { return .range(first, size - 1) }
    guard let last = Int(endText), last >= first else { return .none }
    return .range(first, min(last, size - 1))
  }
}
