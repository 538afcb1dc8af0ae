/// Group sends, the receiving node's side: a group offer (``TransferGroupOffer``) brings one copy of the file for
/// several local recipients; the copy is stored once and hard-linked as each recipient's file when it is verified.
///
/// Layers 4 and 6, on the service thread in ``PayloadsFeature``, isolated to the ``Node`` actor; the sender's side is `PayloadsFeature+TransferGroups.swift`.
import Crypto
import Foundation
import LWS
import Logging
import MeshCore

extension PayloadsFeature {
  // MARK: - Receiving node

  func groupOfferReceived(_ offer: TransferGroupOffer, from nodeID: String, node: isolated Node) {
    let id = offer.copyID
    func reject(_ code: TransferRejection, _ message: String) {
      sendTransferFrame(.transferReject(transferID: id, code: code, message: message), to: nodeID, node: node)
    }
    guard let session = node.mesh.node.sessions.sessions[offer.sessionID],
      session.members.contains(where: { $0.peerID == offer.fromPeerID && $0.nodeID == nodeID })
    else { return reject(.notMember, "the sender is not in session \(offer.sessionID) on the receiving node") }
    var accepted: [(TransferGroupRecipient, StoredPeer)] = []
    // Recipients asked first (`--file-consent ask`, the sender not on their always-accept list), like a single send.
    var asking: [(TransferGroupRecipient, StoredPeer)] = []
    var refused: [(String, String)] = []
    for recipient in offer.recipients {
      if node.peers[recipient.peerID] != nil
        && !node.mesh.node.sessions.hasAgreed(recipient.peerID, to: offer.sessionID)
      {
        node.links.refuseFrame(
          "not_agreed", from: nodeID, "a group offer to \(recipient.peerID), not a member by its own act")
      }
      guard let peer = node.peers[recipient.peerID],
        session.members.contains(where: { $0.peerID == recipient.peerID && $0.nodeID == node.nodeID }),
        node.mesh.node.sessions.hasAgreed(recipient.peerID, to: offer.sessionID)
      else {
        refused.append(
          (
            recipient.transferID,
            "peer \(recipient.peerID) is not in session \(offer.sessionID) on its node (it left, or was never "
              + "connected there); invite it again and send once it is connected"
          ))
        continue
      }
      if fileConsent(node: node) == .ask && !alwaysAccepts(peer.id, from: offer.fromPeerID, at: nodeID, node: node) {
        asking.append((recipient, peer))
      } else {
        accepted.append((recipient, peer))
      }
    }
    guard !accepted.isEmpty || !asking.isEmpty else {
      return reject(.notMember, refused.first?.1 ?? "no recipient of the group is on the receiving node")
    }
    if let rejection = receivability(size: offer.size, from: (nodeID, offer.fromPeerID), node: node) {
      return reject(rejection.code, rejection.message)
    }
    let name = TransferFile.sanitizedFileName(offer.name) ?? "file"
    let now = Timestamp.now()
    let from = PayloadParty(peerID: offer.fromPeerID, displayName: offer.fromDisplayName, nodeID: nodeID)
    func record(_ id: String, _ role: TransferRole, to: PayloadParty, state: TransferState) -> TransferRecord {
      TransferRecord(
        id: id, parties: PayloadParties(direction: .incoming, sessionID: offer.sessionID, from: from, to: to),
        name: name, contentType: TransferRecord.cleanContentType(offer.contentType) ?? "application/octet-stream",
        size: offer.size, bytes: 0, state: state, reason: nil, sha256: nil,
        path: partialPath(id, .incoming, node: node),
        resumedFrom: nil, createdAt: now, updatedAt: now, groupID: offer.groupID, role: role,
        copyID: role == .copy ? nil : offer.copyID)
    }
    // Nobody here takes the file yet: the copy waits (no file, no bytes) until the first asked recipient accepts.
    let copy = LiveTransfer(
      record: record(
        id, .copy, to: PayloadParty(peerID: "", displayName: "", nodeID: node.nodeID),
        state: accepted.isEmpty ? .awaitingConsent : .inProgress))
    transfers.incoming[id] = copy
    node.mesh.node.payloads.receive(
      id, from: nodeID, receiver: accepted.isEmpty ? nil : TransferReceiver(size: offer.size))
    var stored = [copy]
    var asked: [LiveTransfer] = []
    for ((recipient, peer), ask) in accepted.map({ ($0, false) }) + asking.map({ ($0, true) }) {
      let rider = LiveTransfer(
        record: record(
          recipient.transferID, .transfer,
          to: PayloadParty(peerID: peer.id, displayName: peer.displayName, nodeID: node.nodeID),
          state: ask ? .awaitingConsent : .inProgress))
      transfers.incoming[recipient.transferID] = rider
      node.mesh.node.payloads.receive(recipient.transferID, from: nodeID, receiver: nil)
      transfers.riders[id, default: []].append(recipient.transferID)
      stored.append(rider)
      if ask {
        startConsentWait(rider, node: node)
        asked.append(rider)
      }
    }
    for (transferID, reason) in refused {
      sendTransferFrame(.transferFailed(transferID: transferID, reason: reason), to: nodeID, node: node)
    }
    // The sender hears of each wait first (as for a single send): a recipient can answer as soon as its transfer is
    // listed, before the records are stored, and whatever it answers goes after this on the link; and it hears who
    // is asked before it hears that the copy is accepted.
    for rider in asked {
      sendTransferFrame(
        .transferAwaitingConsent(transferID: rider.record.id, timeoutMillis: consentMillisLeft(rider)), to: nodeID,
        node: node)
    }
    if accepted.isEmpty {
      sendTransferFrame(
        .transferAwaitingConsent(transferID: id, timeoutMillis: copyConsentMillisLeft(copy)), to: nodeID, node: node)
    }
    Task {
      // Each record as it is now (an answer may have come meanwhile; its own write follows this one).
      for transfer in stored {
        guard await recordIncoming(copy, transfer.record, node: node) else { return }
      }
      guard transfers.incoming[id] === copy, !copy.record.isTerminal else { return }
      for rider in asked where transfers.incoming[rider.record.id] === rider && rider.record.state == .awaitingConsent {
        // The timeout the wait got (as for a single send).
        publishTransferEvent(
          "transfer.offered", rider, extra: ["timeoutSeconds": .int(Int64(rider.consentTimeoutSeconds))], node: node)
      }
      if !accepted.isEmpty { acceptIncoming(copy, records: [], from: nodeID, node: node) }
    }
  }

  /// The link to the sender's node `nodeID` is up: the answers of recipients who answered after their node's copy
  /// was stored (an accept that gave them the file, a decline, a wait that ended) are told again. Such an answer went
  /// as a notice kept in memory, lost when this node restarted before the link returned, and a stored copy is never
  /// offered again to hear it. Only answers recent enough for the sender's side to be still waiting for them (this
  /// node's consent timeout plus the grace); the sender's node ignores what it already knows.
  func retellLateAnswers(to nodeID: String, node: isolated Node) {
    let window = TimeInterval(fileConsentTimeout(node: node)) + TimeInterval(LiveTransfer.consentGraceMillis / 1000)
    let since = Timestamp.format(Date().addingTimeInterval(-window))
    for rider in transfers.incoming.values
    where rider.record.fromNodeID == nodeID && rider.record.role == .transfer && rider.record.isTerminal
      && rider.record.updatedAt >= since
    {
      guard let copyID = rider.record.copyID, let copy = transfers.incoming[copyID], copy.record.state == .finished,
        rider.record.updatedAt > copy.record.updatedAt
      else { continue }
      let id = rider.record.id
      let reason = rider.record.reason ?? "the transfer \(rider.record.state)"
      switch rider.record.state {
      case .finished: sendTransferFrame(.transferAccept(transferID: id, offset: 0), to: nodeID, node: node)
      case .declined:
        sendTransferFrame(.transferReject(transferID: id, code: .declined, message: reason), to: nodeID, node: node)
      case .failed: sendTransferFrame(.transferFailed(transferID: id, reason: reason), to: nodeID, node: node)
      case .canceled: sendTransferFrame(.transferCancel(transferID: id, reason: reason), to: nodeID, node: node)
      default: continue
      }
    }
  }

  /// How long a copy that nobody accepted yet may still wait: until the last of its asked recipients' waits ends.
  func copyConsentMillisLeft(_ copy: LiveTransfer) -> UInt64 {
    riders(of: copy).filter { $0.record.state == .awaitingConsent }.map(consentMillisLeft).max() ?? 0
  }

  /// A group recipient accepted (`POST /api/v1/transfers/{id}/accept`): it rides on its node's copy from now on. The
  /// first to accept a copy nobody took yet starts it (the file is created and the bytes flow); a copy already
  /// stored gives the recipient its file at once. The sender's node is told (`transferAccept` for the recipient).
  func acceptRider(_ rider: LiveTransfer, node: isolated Node) async throws -> HTTPResponse {
    let id = rider.record.id
    guard let copyID = rider.record.copyID, let copy = transfers.incoming[copyID],
      !copy.record.isTerminal || copy.record.state == .finished
    else {
      failTransfer(rider, reason: "the group's copy of the file ended before it was accepted", notify: true, node: node)
      throw APIError(
        status: 409, code: "transfer_failed",
        message: "transfer \(id) ended: the group's copy of the file is gone; ask the sender to send it again")
    }
    rider.consentDeadline = nil
    rider.lastProgressAt = Node.monotonicMillis()
    if copy.record.state == .awaitingConsent {
      copy.consentDeadline = nil
      copy.record.state = .inProgress
      copy.lastProgressAt = Node.monotonicMillis()
      node.mesh.node.payloads.setReceiver(copyID, TransferReceiver(size: copy.record.size))
      let file = TransferFile(path: copy.record.path)
      try? FileManager.default.createDirectory(
        atPath: "\(dataDirectoryPath(node: node))/transfers", withIntermediateDirectories: true)
      copy.file = file
      let opened: Result<UInt64, TransferIOError> = await withCheckedContinuation { continuation in
        file.open(rehash: false, exclusive: true) { continuation.resume(returning: $0) }
      }
      if case .failure(let error) = opened {
        failTransfer(copy, reason: "the receiving node cannot write: \(error)", notify: true, node: node)
        throw APIError(status: 500, code: "storage_error", message: "the node cannot create the file: \(error)")
      }
      guard !copy.record.isTerminal, !rider.record.isTerminal else {
        throw APIError(
          status: 409, code: "transfer_\(rider.record.state)",
          message: "transfer \(id) was \(rider.record.state) meanwhile: \(rider.record.reason ?? "no reason given")")
      }
      persist(copy, node: node)
      sendTransferFrame(.transferAccept(transferID: copyID, offset: 0), to: copy.record.fromNodeID, node: node)
    }
    sendOrQueueNotice(.transferAccept(transferID: id, offset: 0), to: rider.record.fromNodeID, node: node)
    if copy.record.state == .finished {
      rider.record.sha256 = copy.record.sha256
      rider.record.bytes = rider.record.size
      rider.record.state = .inProgress
      publishTransferEvent("transfer.started", rider, node: node)
      settle(rider, state: .finished, reason: nil, node: node)
    } else {
      rider.record.state = copy.record.state
      rider.record.bytes = copy.record.bytes
      rider.record.resumedFrom = copy.record.resumedFrom
      rider.record.updatedAt = Timestamp.now()
      persist(rider, node: node)
      publishTransferEvent("transfer.started", rider, node: node)
    }
    return .json(["transfer": transferJSON(rider.record)])
  }

  /// The copy is verified and in place: each recipient gets its own name for the one file, then the copy settles
  /// (and with it every rider).
  func copyVerified(_ copy: LiveTransfer, digest: [UInt8], node: isolated Node) {
    let id = copy.record.id
    let live = riders(of: copy).filter { !$0.record.isTerminal }.map(\.record.id)
    let paths = riders(of: copy).filter { !$0.record.isTerminal }.map {
      finalPath($0.record.id, .incoming, name: $0.record.name, node: node)
    }
    guard let file = copy.file else { return }
    file.hardLink(to: paths, within: dataDirectoryPath(node: node)) { [weak node] error in
      node?.onLoop { node in
        guard let copy = node.features.payloads.transfers.incoming[id], !copy.record.isTerminal else { return }
        if let error {
          node.features.payloads.failTransfer(
            copy, reason: "the finished file could not be linked for a recipient: \(error)", notify: true, node: node)
          return
        }
        for (riderID, path) in zip(live, paths) {
          node.features.payloads.transfers.incoming[riderID]?.record.path = path
        }
        // The recipients' names hold the file now; the partial name goes.
        copy.file?.close(remove: true)
        copy.record.path = paths.first ?? copy.record.path
        copy.file = nil
        copy.record.sha256 = Crypto.hex(digest)
        copy.record.bytes = copy.record.size
        node.features.payloads.sendTransferFrame(
          .transferFinished(transferID: id, sha256: digest), to: copy.record.fromNodeID, node: node)
        node.features.payloads.settle(copy, state: .finished, reason: nil, node: node)
      }
    }
  }
}
