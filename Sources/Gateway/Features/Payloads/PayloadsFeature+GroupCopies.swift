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
    // Each refused recipient with the reason, and whether it was the recipient's file consent (not its membership).
    var refused: [(String, String)] = []
    var refusedForConsent = 0
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
            "peer \(recipient.peerID) is not in session \(offer.sessionID) on the receiving node"
          ))
        continue
      }
      if fileConsent(node: node) == .ask && !alwaysAccepts(peer.id, from: offer.fromPeerID, at: nodeID, node: node) {
        refusedForConsent += 1
        refused.append(
          (
            recipient.transferID,
            "the recipient's node asks before a file is stored (--file-consent ask) and this recipient does not "
              + "always accept files from the sender; send it the file on its own"
          ))
        continue
      }
      accepted.append((recipient, peer))
    }
    guard !accepted.isEmpty else {
      // Every recipient here is a member but waits for consent: the sender is refused, not told it is no member.
      let code: TransferRejection = refusedForConsent == refused.count && !refused.isEmpty ? .refused : .notMember
      return reject(code, refused.first?.1 ?? "no recipient of the group is on the receiving node")
    }
    if let rejection = receivability(size: offer.size, from: (nodeID, offer.fromPeerID), node: node) {
      return reject(rejection.code, rejection.message)
    }
    let name = TransferFile.sanitizedFileName(offer.name) ?? "file"
    let now = Timestamp.now()
    let from = PayloadParty(peerID: offer.fromPeerID, displayName: offer.fromDisplayName, nodeID: nodeID)
    func record(_ id: String, _ role: TransferRole, to: PayloadParty) -> TransferRecord {
      TransferRecord(
        id: id, parties: PayloadParties(direction: .incoming, sessionID: offer.sessionID, from: from, to: to),
        name: name, contentType: TransferRecord.cleanContentType(offer.contentType) ?? "application/octet-stream",
        size: offer.size, bytes: 0, state: .inProgress, reason: nil, sha256: nil,
        path: partialPath(id, .incoming, node: node),
        resumedFrom: nil, createdAt: now, updatedAt: now, groupID: offer.groupID, role: role,
        copyID: role == .copy ? nil : offer.copyID)
    }
    let copy = LiveTransfer(
      record: record(id, .copy, to: PayloadParty(peerID: "", displayName: "", nodeID: node.nodeID)))
    transfers.incoming[id] = copy
    node.mesh.node.payloads.receive(id, from: nodeID, receiver: TransferReceiver(size: offer.size))
    var records = [copy.record]
    for (recipient, peer) in accepted {
      let rider = LiveTransfer(
        record: record(
          recipient.transferID, .transfer,
          to: PayloadParty(peerID: peer.id, displayName: peer.displayName, nodeID: node.nodeID)))
      transfers.incoming[recipient.transferID] = rider
      node.mesh.node.payloads.receive(recipient.transferID, from: nodeID, receiver: nil)
      transfers.riders[id, default: []].append(recipient.transferID)
      records.append(rider.record)
    }
    for (transferID, reason) in refused {
      sendTransferFrame(.transferFailed(transferID: transferID, reason: reason), to: nodeID, node: node)
    }
    acceptIncoming(copy, records: records, from: nodeID, node: node)
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
