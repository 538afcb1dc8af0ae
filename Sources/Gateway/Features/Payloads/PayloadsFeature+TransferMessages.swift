/// Resource transfers, the mesh side: offers, accepts, chunks, credit and ends from other nodes, and what a link
/// coming up or going down means for transfers in flight (see PayloadsFeature+Transfers.swift for the whole story).
import Crypto
import Foundation
import LWS
import Logging
import MeshCore

extension PayloadsFeature {
  // MARK: - Mesh messages

  /// Stores a new incoming transfer's record; when the store fails, the transfer fails (both sides are told) and this
  /// answers false.
  func recordIncoming(_ transfer: LiveTransfer, _ record: TransferRecord, node: isolated Node) async -> Bool {
    do {
      try await node.store.saveTransfer(record)
      return true
    } catch {
      failTransfer(
        transfer, reason: "the receiving node could not record the transfer: \(error)", notify: true, node: node)
      return false
    }
  }

  /// Carries out what the payload book decided about a frame (or a file's progress): the I/O, records and events.
  func payloadEffect(_ effect: PayloadEffect, node: isolated Node) {
    switch effect {
    case .send(let message, let nodeID):
      sendTransferFrame(message, to: nodeID, node: node)
    case .offered(let offer, let nodeID):
      offerReceived(offer, from: nodeID, node: node)
    case .groupOffered(let offer, let nodeID):
      groupOfferReceived(offer, from: nodeID, node: node)
    case .reofferedUnanswered(let id, let nodeID):
      guard let transfer = transfers.incoming[id] else { return }
      reofferUnanswered(transfer, from: nodeID, node: node)
    case .resumed(let id, let offset):
      guard let transfer = transfers.incoming[id] else { return }
      incomingResumed(transfer, offset: offset, node: node)
    case .refused:
      // The mesh core hands the book's refusals on as frame refusals (``meshEffect(_:node:)``).
      break
    case .accepted(let id, let offset, let resumedFrom):
      guard let transfer = transfers.outgoing[id] else { return }
      if transfer.record.role == .transfer, transfer.record.copyID != nil {
        return shareAccepted(transfer, node: node)
      }
      transfer.rateUpdatedAt = Node.monotonicMillis()
      transfer.rateTokens = 0
      transfer.record.bytes = offset
      let consented = transfer.consentDeadline != nil || transfer.record.state == .awaitingConsent
      transfer.consentDeadline = nil
      if let resumedFrom {
        let wasInterrupted = transfer.record.state == .interrupted
        transfer.record.resumedFrom = resumedFrom
        transfer.record.state = .inProgress
        node.meshLogger.info("Transfer resumed.", ["transfer.id": id, "offset": offset])
        persist(transfer, node: node)
        if transfer.record.role == .copy { syncRiders(transfer, node: node) }
        if wasInterrupted { reportPause("transfer.resumed", transfer, node: node) }
      } else if transfer.answer == nil && transfer.record.state != .inProgress {
        transfer.record.state = .inProgress
        persist(transfer, node: node)
      }
      if consented { publishTransferEvent("transfer.accepted", transfer, node: node) }
      if let answer = transfer.answer {
        transfer.answer = nil
        answer.resume()
      }
      copyAnswered(transfer, error: nil)
      pump(transfer, node: node)
    case .rejected(let id, let code, let text):
      guard let transfer = transfers.outgoing[id] else { return }
      if transfer.record.role == .copy, let groupID = transfer.record.groupID,
        transfers.groups[groupID]?.unanswered.contains(id) == true
      {
        copyAnswered(transfer, error: rejectionError(code, text))
        return
      }
      if code == .declined {
        guard !transfer.record.isTerminal else { return }
        node.mesh.node.payloads.cancel(id, .outgoing)
        transfer.file?.close(remove: true)
        transfer.file = nil
        transfer.consentDeadline = nil
        settle(transfer, state: .declined, reason: text, node: node)
        return
      }
      if let answer = transfer.answer {
        transfer.answer = nil
        answer.resume(throwing: rejectionError(code, text))
      } else {
        failTransfer(transfer, reason: "the receiver refused to resume: \(text)", notify: false, node: node)
      }
    case .write(let id, _, let bytes):
      guard let transfer = transfers.incoming[id], let file = transfer.file else { return }
      file.append(bytes) { [weak node] result in
        node?.onLoop { $0.features.payloads.receivedWritten(id, result, node: $0) }
      }
    case .credited(let id, let acknowledged):
      guard let transfer = transfers.outgoing[id] else { return }
      transfer.record.bytes = acknowledged
      reportProgress(transfer, node: node)
      pump(transfer, node: node)
    case .verify(let id, _):
      transfers.incoming[id]?.file?.finish { [weak node] result in
        node?.onLoop { $0.features.payloads.receivedVerified(id, result, node: $0) }
      }
    case .finished(let id, .outgoing, _):
      guard let transfer = transfers.outgoing[id] else { return }
      senderFinished(transfer, node: node)
    case .finished(let id, .incoming, let digest):
      guard let transfer = transfers.incoming[id] else { return }
      receiverFinished(transfer, digest: digest, node: node)
    case .failed(let id, let direction, let reason, let notify):
      guard let transfer = direction == .outgoing ? transfers.outgoing[id] : transfers.incoming[id] else { return }
      failTransfer(transfer, reason: reason, notify: notify, node: node)
    case .canceled(let id, let direction, let reason):
      guard let transfer = direction == .outgoing ? transfers.outgoing[id] : transfers.incoming[id] else { return }
      cancelTransfer(transfer, reason: reason, notify: false, node: node)
    case .awaitingConsent(let id, let timeoutMillis):
      guard let transfer = transfers.outgoing[id], !transfer.record.isTerminal else { return }
      // The receiver bounds the wait; this side gives up a little later by itself, should the verdict never come.
      let wait = min(timeoutMillis, 86_400_000) + LiveTransfer.consentGraceMillis
      transfer.consentDeadline = Node.monotonicMillis() + wait
      scheduleConsentExpiry(id, .outgoing, after: wait, node: node)
      if transfer.record.state != .awaitingConsent {
        transfer.record.state = .awaitingConsent
        persist(transfer, node: node)
      }
      if let answer = transfer.answer {
        transfer.answer = nil
        answer.resume()
      }
      // A group's copy that every recipient on its node must accept first: the upload goes on meanwhile.
      copyAnswered(transfer, error: nil)
    case .streamOffered, .streamData, .streamCredited, .streamEnded, .streamFailed:
      streamEffect(effect, node: node)
    }
  }

  /// The receiver verified the outgoing transfer: its spool becomes the sent file (a group copy's spool stays for
  /// the other copies, and is removed when the last one ends).
  func senderFinished(_ transfer: LiveTransfer, node: isolated Node) {
    let id = transfer.record.id
    transfer.record.bytes = transfer.record.size
    if transfer.record.role == .copy {
      transfer.file?.close(remove: false)
      transfer.file = nil
      settle(transfer, state: .finished, reason: nil, node: node)
      return
    }
    let final = finalPath(id, .outgoing, name: transfer.record.name, node: node)
    transfer.file?.move(to: final, within: dataDirectoryPath(node: node)) { [weak node] error in
      node?.onLoop { node in
        guard let transfer = node.features.payloads.transfers.outgoing[id], !transfer.record.isTerminal else {
          return
        }
        if error == nil { transfer.record.path = final }
        transfer.file?.close(remove: false)
        transfer.file = nil
        node.features.payloads.settle(transfer, state: .finished, reason: nil, node: node)
      }
    }
  }

  func offerReceived(_ offer: TransferOffer, from nodeID: String, node: isolated Node) {
    let id = offer.transferID
    guard
      let peer = localReceiver(
        offer.toPeerID, of: "a transfer offer", from: offer.fromPeerID, at: nodeID, in: offer.sessionID, node: node)
    else {
      sendTransferFrame(
        .transferReject(
          transferID: id, code: .notMember,
          message: "peer \(offer.toPeerID) is not in session \(offer.sessionID) on the receiving node"),
        to: nodeID, node: node)
      return
    }
    if let rejection = receivability(size: offer.size, from: (nodeID, offer.fromPeerID), node: node) {
      sendTransferFrame(
        .transferReject(transferID: id, code: rejection.code, message: rejection.message), to: nodeID, node: node)
      return
    }
    let name = TransferFile.sanitizedFileName(offer.name) ?? "file"
    let now = Timestamp.now()
    let ask = fileConsent(node: node) == .ask && !alwaysAccepts(peer.id, from: offer.fromPeerID, at: nodeID, node: node)
    let record = TransferRecord(
      id: id,
      parties: PayloadParties(
        direction: .incoming, sessionID: offer.sessionID,
        from: PayloadParty(peerID: offer.fromPeerID, displayName: offer.fromDisplayName, nodeID: nodeID),
        to: PayloadParty(peerID: peer.id, displayName: peer.displayName, nodeID: node.nodeID)),
      name: name,
      contentType: TransferRecord.cleanContentType(offer.contentType) ?? "application/octet-stream", size: offer.size,
      bytes: 0, state: ask ? .awaitingConsent : .inProgress, reason: nil, sha256: nil,
      path: partialPath(id, .incoming, node: node), resumedFrom: nil, createdAt: now, updatedAt: now)
    let transfer = LiveTransfer(record: record)
    if ask {
      offerAwaitingConsent(transfer, node: node)
      return
    }
    transfers.incoming[id] = transfer
    node.mesh.node.payloads.receive(id, from: nodeID, receiver: TransferReceiver(size: offer.size))
    acceptIncoming(transfer, records: [record], from: nodeID, node: node)
  }

  /// Records an incoming transfer the node takes (`records`: its own, and those of a group copy's riders), opens its
  /// partial file and accepts it from offset 0, announcing `transfer.started` to the transfer's peer (or, for a group
  /// copy, to each rider's). A record or a file that cannot be written fails the transfer instead.
  func acceptIncoming(_ transfer: LiveTransfer, records: [TransferRecord], from nodeID: String, node: isolated Node) {
    let id = transfer.record.id
    try? FileManager.default.createDirectory(
      atPath: "\(dataDirectoryPath(node: node))/transfers", withIntermediateDirectories: true)
    let file = TransferFile(path: transfer.record.path)
    transfer.file = file
    Task {
      for record in records {
        guard await recordIncoming(transfer, record, node: node) else { return }
      }
      file.open(rehash: false, exclusive: true) { [weak node] result in
        node?.onLoop { node in
          guard let transfer = node.features.payloads.transfers.incoming[id], !transfer.record.isTerminal else {
            return
          }
          if case .failure(let error) = result {
            node.features.payloads.failTransfer(
              transfer, reason: "the receiving node cannot write: \(error)", notify: true, node: node)
            return
          }
          let announced =
            transfer.record.role == .copy ? node.features.payloads.riders(of: transfer) : [transfer]
          for started in announced where !started.record.isTerminal && started.record.state != .awaitingConsent {
            node.features.payloads.publishTransferEvent("transfer.started", started, node: node)
          }
          node.features.payloads.sendTransferFrame(.transferAccept(transferID: id, offset: 0), to: nodeID, node: node)
        }
      }
    }
  }

  /// The local peer `toPeerID` when it may receive `what` (a transfer offer, a stream) from `fromPeerID` of node
  /// `nodeID`: both are members of the session, and the receiver agreed to be in it by its own act (not merely listed
  /// by a linked node; an offer to such a peer is counted as a refused frame). Nil when it may not.
  func localReceiver(
    _ toPeerID: String, of what: String, from fromPeerID: String, at nodeID: String, in sessionID: String,
    node: isolated Node
  ) -> StoredPeer? {
    let agreed = node.mesh.node.sessions.hasAgreed(toPeerID, to: sessionID)
    if node.peers[toPeerID] != nil && !agreed {
      node.links.refuseFrame("not_agreed", from: nodeID, "\(what) to \(toPeerID), not a member by its own act")
    }
    guard agreed, let peer = node.peers[toPeerID], let session = node.mesh.node.sessions.sessions[sessionID],
      session.members.contains(where: { $0.peerID == toPeerID && $0.nodeID == node.nodeID }),
      session.members.contains(where: { $0.peerID == fromPeerID && $0.nodeID == nodeID })
    else { return nil }
    return peer
  }

  func receivedWritten(_ id: String, _ result: Result<UInt64, TransferIOError>, node: isolated Node) {
    guard let transfer = transfers.incoming[id], node.mesh.node.payloads.receiver(id) != nil,
      !transfer.record.isTerminal
    else {
      return
    }
    switch result {
    case .failure(let error):
      failTransfer(transfer, reason: "the receiving node could not write: \(error)", notify: true, node: node)
    case .success(let length):
      transfer.lastProgressAt = Node.monotonicMillis()
      let effects = node.mesh.node.payloads.wrote(id, upTo: length)
      transfer.record.bytes = node.mesh.node.payloads.receiver(id)?.written ?? transfer.record.bytes
      reportProgress(transfer, node: node)
      for effect in effects { payloadEffect(effect, node: node) }
    }
  }

  func receivedVerified(_ id: String, _ result: Result<[UInt8], TransferIOError>, node: isolated Node) {
    guard let transfer = transfers.incoming[id], node.mesh.node.payloads.receiver(id) != nil else { return }
    switch result {
    case .failure(let error):
      failTransfer(transfer, reason: "the receiving node could not flush the file: \(error)", notify: true, node: node)
    case .success(let digest):
      for effect in node.mesh.node.payloads.verified(id, sha256: digest) { payloadEffect(effect, node: node) }
    }
  }

  /// The incoming transfer's content was verified here: the partial file moves into place and the sender is told.
  func receiverFinished(_ transfer: LiveTransfer, digest: [UInt8], node: isolated Node) {
    let id = transfer.record.id
    if transfer.record.role == .copy {
      copyVerified(transfer, digest: digest, node: node)
      return
    }
    let final = finalPath(id, .incoming, name: transfer.record.name, node: node)
    transfer.file?.move(to: final, within: dataDirectoryPath(node: node)) { [weak node] error in
      node?.onLoop { node in
        guard let transfer = node.features.payloads.transfers.incoming[id], !transfer.record.isTerminal else { return }
        if let error {
          node.features.payloads.failTransfer(
            transfer, reason: "the finished file could not be moved into place: \(error)", notify: true, node: node)
          return
        }
        transfer.file?.close(remove: false)
        transfer.file = nil
        transfer.record.path = final
        transfer.record.sha256 = Crypto.hex(digest)
        transfer.record.bytes = transfer.record.size
        node.features.payloads.sendTransferFrame(
          .transferFinished(transferID: id, sha256: digest), to: transfer.record.fromNodeID, node: node)
        node.features.payloads.settle(transfer, state: .finished, reason: nil, node: node)
      }
    }
  }

  // MARK: - Links

  func transfersLinkUp(_ nodeID: String, node: isolated Node) {
    for message in transfers.notices.removeValue(forKey: nodeID) ?? [] {
      sendTransferFrame(message, to: nodeID, node: node)
    }
    retellLateAnswers(to: nodeID, node: node)
    for id in node.mesh.node.payloads.linkRestored(nodeID) {
      // A recipient's transfer riding on a copy is offered again with its copy.
      guard let transfer = transfers.outgoing[id], transfer.record.copyID == nil else { continue }
      if transfer.record.role == .copy {
        let recipients = riders(of: transfer).map {
          TransferGroupRecipient(transferID: $0.record.id, peerID: $0.record.toPeerID)
        }
        sendTransferFrame(
          .transferGroupOffer(groupOffer(for: transfer, resume: true, recipients: recipients)), to: nodeID,
          node: node)
        continue
      }
      sendTransferFrame(.transferOffer(offer(for: transfer.record, resume: true)), to: nodeID, node: node)
    }
  }

  func transfersLinkDown(_ nodeID: String, node: isolated Node) {
    streamsLinkDown(nodeID, node: node)
    var paused: [LiveTransfer] = []
    for group in transfers.groups.values where group.open { group.nodesAway.insert(nodeID) }
    let lost = node.mesh.node.payloads.linkLost(nodeID)
    let interrupted = (outgoing: Set(lost.outgoing), incoming: Set(lost.incoming))
    for transfer in transfers.outgoing.values where transfer.record.toNodeID == nodeID && !transfer.record.isTerminal {
      if transfer.record.state == .inProgress { paused.append(transfer) }
      if let answer = transfer.answer {
        transfer.answer = nil
        answer.resume(throwing: APIError.unavailable("the receiver's node went away before it answered; try again"))
      }
      if interrupted.outgoing.contains(transfer.record.id) && transfer.record.state != .awaitingConsent {
        transfer.record.state = .interrupted
      }
      if transfer.record.role == .copy {
        copyAnswered(
          transfer, error: APIError.unavailable("the receiving node went away before it answered; try again"))
        syncRiders(transfer, node: node)
      }
    }
    for transfer in transfers.incoming.values where transfer.record.fromNodeID == nodeID && !transfer.record.isTerminal
    {
      if transfer.record.state == .inProgress { paused.append(transfer) }
      if interrupted.incoming.contains(transfer.record.id) { transfer.record.state = .interrupted }
      if transfer.record.role == .copy { syncRiders(transfer, node: node) }
    }
    for transfer in paused where transfer.record.state == .interrupted {
      reportPause("transfer.interrupted", transfer, extra: ["nodeId": .string(nodeID)], node: node)
    }
  }

  /// Publishes `transfer.interrupted` or `transfer.resumed` to the transfer's local party, or for a group send's
  /// node copy to each of its recipients' transfers.
  func reportPause(_ type: String, _ transfer: LiveTransfer, extra: JSONObject = [:], node: isolated Node) {
    guard transfer.record.role == .copy else { return publishTransferEvent(type, transfer, extra: extra, node: node) }
    for rider in riders(of: transfer) where !rider.record.isTerminal {
      publishTransferEvent(type, rider, extra: extra, node: node)
    }
  }
}
