/// Group sends: one upload to many recipients (`POST /sessions/{id}/resources?to=a,b,c` or `?to=all`).
///
/// Layers 4 and 6, on the service thread in ``PayloadsFeature``, isolated to the ``Node`` actor, like the rest of the transfers.
///
/// The sender's node spools the upload once (a hidden `spool` record, id = the group id) and gives each recipient
/// its own transfer record (id, events, cancel, download) carrying the group id. A recipient on the sender's own node
/// gets the spool hard-linked as its file when the upload is complete: no mesh traffic. For every other node that
/// hosts recipients the sender's node runs ONE hidden `copy` transfer over the mesh (``TransferGroupOffer`` lists
/// that node's recipients), with the ordinary sender/receiver state machines: credit, resume after a link loss or a
/// restart, SHA-256. The receiving node stores the copy once and hard-links it as each local recipient's file; the
/// recipients' records "ride" on the copy (its progress, its end), so the file crosses each link once however many
/// recipients sit behind it. A recipient (or the sender for one recipient) cancels only that recipient's share; a
/// copy nobody rides on any more is canceled; canceling the group cancels every share.
import Crypto
import Foundation
import LWS
import Logging
import MeshCore

/// What a transfer record stands for.
enum TransferRole: String, Sendable {
  /// A recipient's transfer (single, or one share of a group send): the only kind the API shows.
  case transfer
  /// One node's copy of a group send on the mesh (hidden); the recipients' records ride on it.
  case copy
  /// A group send's upload spool on the sender's node (hidden); its id is the group id.
  case spool
}

/// A group send as its sender's node holds it. Confined to the service thread.
final class GroupSend {
  let id: String
  /// The copies (one per receiving node) and the recipients' transfers (outgoing records), by id.
  var copies: [String] = []
  var shares: [String] = []
  /// While the upload waits for the receiving nodes' answers: the copies not answered yet, and the wait.
  var unanswered: Set<String> = []
  var answered: CheckedContinuation<Void, Never>?
  var refusals: [String: APIError] = [:]
  /// False once every share has ended (the membership check skips it from then on).
  var open = true
  /// Nodes whose link went down during the group send: the session's host drops their members, so their recipients'
  /// absence from the session is no sign that they left (their copies resume on relink).
  var nodesAway: Set<String> = []

  init(id: String) {
    self.id = id
  }
}

extension GroupSend {
  /// How long the upload waits for every receiving node to answer its copy's offer.
  static let answerSeconds = 15
  /// Each copy's credit window (1 MiB, a single transfer's is 8): the copies of a group go to several nodes at once
  /// and their chunks in flight add up; with 1 MiB each, a 200 MiB group send to 30 recipients on 3 nodes peaked at
  /// 47 MiB on the sender's node (38 before the upload), and a window still covers a LAN's bandwidth-delay product.
  static let copyWindow: UInt64 = 1 << 20

  /// The state machine a recipient's transfer riding on a copy gets on the sender's node: it sends nothing (the copy
  /// carries the bytes; it has no file to read), but lets the recipient's answer through the payload book
  /// (`transferAwaitingConsent`, then `transferAccept` once the recipient accepted).
  static func answerMachine() -> TransferSender {
    TransferSender(size: 0, window: 1, chunkSize: 1, readAhead: 1)
  }
}

@available(*, unavailable)
extension GroupSend: Sendable {}

extension PayloadsFeature {
  // MARK: - Upload (sender's node)

  /// `to` is a comma-separated list of member ids or `all`: the members the group goes to.
  func groupRecipients(_ list: String, in session: SessionDescription, from senderID: String, node: isolated Node)
    throws(APIError)
    -> [SessionMember]
  {
    var members: [SessionMember] = []
    if list == "all" {
      for member in session.members where member.peerID != senderID && member.state == .connected {
        members.append(try connectedRecipient(member.peerID, in: session, node: node))
      }
      guard !members.isEmpty else {
        throw APIError(
          status: 409, code: "no_recipients",
          message: "session \(session.sessionID) has no other connected member to send the file to")
      }
      return members
    }
    var seen: Set<String> = []
    for part in list.split(separator: ",") {
      let id = part.trimmingCharacters(in: .whitespaces)
      guard !id.isEmpty, seen.insert(id).inserted else { continue }
      guard id != senderID else {
        throw APIError.badRequest("to lists the sender itself; send the file to other members of the session")
      }
      members.append(try connectedRecipient(id, in: session, node: node))
    }
    guard !members.isEmpty else {
      throw APIError.badRequest("to is required: member ids separated by commas, or all (?to=<peerId>,<peerId>)")
    }
    guard members.count <= MeshFrameCodec.maxTargetPeers else {
      throw APIError.badRequest("to lists \(members.count) members; one group send goes to at most 4096")
    }
    return members
  }

  func uploadGroup(
    _ context: RequestContext, session: SessionDescription, to list: String, name: String, size: UInt64,
    node: isolated Node
  ) async throws -> HTTPResponse {
    let peer = context.authenticatedPeer
    let members = try groupRecipients(list, in: session, from: peer.id, node: node)
    let remote = members.contains { $0.nodeID != node.nodeID }
    try checkReceivable(size: size, spooling: remote, node: node)
    let groupID = RecordID.make()
    let now = Timestamp.now()
    let contentType =
      context.request.head.headers["content-type"].flatMap(TransferRecord.cleanContentType)
      ?? "application/octet-stream"
    let sender = PayloadParty(peerID: peer.id, displayName: peer.displayName, nodeID: node.nodeID)
    let spoolPath = partialPath(groupID, .outgoing, node: node)
    func record(_ id: String, _ role: TransferRole, to: PayloadParty, copyID: String?) -> TransferRecord {
      TransferRecord(
        id: id,
        parties: PayloadParties(direction: .outgoing, sessionID: session.sessionID, from: sender, to: to),
        name: name, contentType: contentType, size: size, bytes: 0, state: .pending, reason: nil, sha256: nil,
        path: spoolPath, resumedFrom: nil, createdAt: now, updatedAt: now, groupID: groupID, role: role,
        copyID: copyID)
    }
    let spool = LiveTransfer(
      record: record(groupID, .spool, to: PayloadParty(peerID: "", displayName: "", nodeID: node.nodeID), copyID: nil))
    spool.record.state = .inProgress
    try FileManager.default.createDirectory(
      atPath: "\(dataDirectoryPath(node: node))/transfers", withIntermediateDirectories: true)
    let file = TransferFile(path: spoolPath)
    spool.file = file
    let opened: Result<UInt64, TransferIOError> = await withCheckedContinuation { continuation in
      file.open(rehash: false, exclusive: true) { continuation.resume(returning: $0) }
    }
    if case .failure(let error) = opened {
      throw APIError(status: 500, code: "storage_error", message: "the node cannot spool the upload: \(error)")
    }
    do {
      try checkReceivable(size: size, spooling: remote, node: node)
    } catch {
      file.close(remove: true)
      throw error
    }
    let group = GroupSend(id: groupID)
    transfers.groups[groupID] = group
    transfers.outgoing[groupID] = spool
    var records = [spool.record]
    // One copy per receiving node, then one share per recipient (riding on its node's copy, or local).
    var copyOf: [String: LiveTransfer] = [:]
    for member in members where member.nodeID != node.nodeID && copyOf[member.nodeID] == nil {
      let copy = LiveTransfer(
        record: record(
          RecordID.make(), .copy, to: PayloadParty(peerID: "", displayName: "", nodeID: member.nodeID),
          copyID: nil))
      let reader = TransferFile(path: spoolPath)
      reader.open(rehash: false) { _ in }
      copy.file = reader
      copyOf[member.nodeID] = copy
      transfers.outgoing[copy.record.id] = copy
      node.mesh.node.payloads.send(
        copy.record.id, to: member.nodeID,
        sender: TransferSender(
          size: size, window: GroupSend.copyWindow, chunkSize: LiveTransfer.chunk, readAhead: LiveTransfer.readAhead))
      group.copies.append(copy.record.id)
      records.append(copy.record)
    }
    var recipients: [String: [TransferGroupRecipient]] = [:]
    for member in members {
      let copy = copyOf[member.nodeID]
      let share = LiveTransfer(
        record: record(
          RecordID.make(), .transfer,
          to: PayloadParty(peerID: member.peerID, displayName: member.displayName, nodeID: member.nodeID),
          copyID: copy?.record.id))
      let id = share.record.id
      transfers.outgoing[id] = share
      node.mesh.node.payloads.send(id, to: member.nodeID, sender: copy == nil ? nil : GroupSend.answerMachine())
      group.shares.append(id)
      records.append(share.record)
      if let copy {
        transfers.riders[copy.record.id, default: []].append(id)
        recipients[member.nodeID, default: []].append(TransferGroupRecipient(transferID: id, peerID: member.peerID))
      } else {
        var incoming = share.record
        incoming.parties.direction = .incoming
        incoming.state = .inProgress
        incoming.path = finalPath(id, .incoming, name: name, node: node)
        transfers.incoming[id] = LiveTransfer(record: incoming)
        node.mesh.node.payloads.receive(id, from: node.nodeID, receiver: nil)
        records.append(incoming)
      }
    }
    do {
      for item in records { try await node.store.saveTransfer(item) }
    } catch {
      endGroup(group, canceled: false, reason: "the group send could not be recorded: \(error)", node: node)
      throw APIError(status: 500, code: "storage_error", message: "the group send could not be recorded: \(error)")
    }
    // Offer each node its copy and wait (bounded) until every node has answered.
    for copy in copyOf.values {
      group.unanswered.insert(copy.record.id)
      sendTransferFrame(
        .transferGroupOffer(
          groupOffer(for: copy, resume: false, recipients: recipients[copy.record.toNodeID] ?? [])),
        to: copy.record.toNodeID, node: node)
    }
    if !group.unanswered.isEmpty {
      await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        group.answered = continuation
        Task { [weak node] in
          try? await Task.sleep(for: .seconds(GroupSend.answerSeconds))
          node?.onLoop { $0.features.payloads.groupAnswersTimedOut(groupID, node: $0) }
        }
      }
    }
    for (copyID, error) in group.refusals {
      if let copy = transfers.outgoing[copyID] { failTransfer(copy, reason: error.message, notify: false, node: node) }
    }
    let live = group.shares.compactMap { transfers.outgoing[$0] }.filter { !$0.record.isTerminal }
    guard !live.isEmpty, !spool.record.isTerminal else {
      let error =
        group.refusals.values.first
        ?? APIError(
          status: 409, code: "transfer_canceled", message: "every recipient's transfer ended before the upload")
      endGroup(group, canceled: false, reason: error.message, node: node)
      throw error
    }
    for share in live {
      if share.record.state == .pending {
        share.record.state = .inProgress
      }
      publishTransferEvent("transfer.started", share, node: node)
      if let incoming = transfers.incoming[share.record.id], share.record.copyID == nil {
        publishTransferEvent("transfer.started", incoming, node: node)
      }
    }
    try await receiveUpload(context, into: spool, node: node)
    return .json(
      [
        "group": groupJSON(group),
        "transfers": .array(
          group.shares.compactMap { transfers.outgoing[$0].map { transferJSON($0.record) } }),
      ], status: 202)
  }

  func groupOffer(for copy: LiveTransfer, resume: Bool, recipients: [TransferGroupRecipient])
    -> TransferGroupOffer
  {
    let record = copy.record
    return TransferGroupOffer(
      copyID: record.id, groupID: record.groupID ?? "", sessionID: record.sessionID, fromPeerID: record.fromPeerID,
      fromDisplayName: record.fromDisplayName, name: record.name, contentType: record.contentType, size: record.size,
      resume: resume, recipients: recipients)
  }

  /// The riders of a copy, as held on this side.
  func riders(of copy: LiveTransfer) -> [LiveTransfer] {
    let table = copy.record.direction == .outgoing ? transfers.outgoing : transfers.incoming
    return (transfers.riders[copy.record.id] ?? []).compactMap { table[$0] }
  }

  /// A copy's node answered its offer (or cannot any more): the upload stops waiting once every node has.
  func copyAnswered(_ copy: LiveTransfer, error: APIError?) {
    guard copy.record.role == .copy, let groupID = copy.record.groupID, let group = transfers.groups[groupID],
      group.unanswered.remove(copy.record.id) != nil
    else { return }
    if let error { group.refusals[copy.record.id] = error }
    if group.unanswered.isEmpty, let answered = group.answered {
      group.answered = nil
      answered.resume()
    }
  }

  func groupAnswersTimedOut(_ groupID: String, node: isolated Node) {
    guard let group = transfers.groups[groupID] else { return }
    for id in group.unanswered {
      guard let copy = transfers.outgoing[id] else { continue }
      copyAnswered(
        copy,
        error: APIError.unavailable(
          "the receiving node did not answer the transfer offer within \(GroupSend.answerSeconds) s; try again"))
    }
  }

  /// The spool is complete: local recipients get their file now, each copy may send its end.
  func groupUploadCompleted(_ spool: LiveTransfer, digest: [UInt8], node: isolated Node) {
    guard let group = transfers.groups[spool.record.id], let file = spool.file else { return }
    let sent = finalPath(group.id, .outgoing, name: spool.record.name, node: node)
    let locals = group.shares.compactMap { transfers.incoming[$0] }.filter { !$0.record.isTerminal }
    let groupID = group.id
    file.hardLink(to: [sent] + locals.map(\.record.path), within: dataDirectoryPath(node: node)) { [weak node] error in
      node?.onLoop { node in
        guard let group = node.features.payloads.transfers.groups[groupID],
          let spool = node.features.payloads.transfers.outgoing[groupID]
        else { return }
        spool.file?.close(remove: false)
        spool.file = nil
        spool.record.state = .finished
        node.features.payloads.persist(spool, node: node)
        for id in group.shares {
          guard let share = node.features.payloads.transfers.outgoing[id] else { continue }
          share.record.path = sent
          guard share.record.copyID == nil, !share.record.isTerminal else { continue }
          let incoming = node.features.payloads.transfers.incoming[id]
          for side in [share, incoming].compactMap({ $0 }) where !side.record.isTerminal {
            if let error {
              node.features.payloads.failTransfer(
                side, reason: "the file could not be linked for the recipient: \(error)", notify: false, node: node)
              continue
            }
            side.record.sha256 = spool.record.sha256
            side.record.bytes = side.record.size
            node.features.payloads.settle(side, state: .finished, reason: nil, node: node)
          }
        }
        for id in group.copies {
          guard let copy = node.features.payloads.transfers.outgoing[id], !copy.record.isTerminal,
            node.mesh.node.payloads.sender(id) != nil
          else {
            continue
          }
          node.mesh.node.payloads.uploadCompleted(id, sha256: digest)
          copy.record.sha256 = spool.record.sha256
          node.features.payloads.persist(copy, node: node)
          node.features.payloads.pump(copy, node: node)
        }
        node.features.payloads.groupMaybeDone(group, node: node)
      }
    }
  }

  /// Spool bytes are durable: every copy may send up to there.
  func groupSpooled(_ spool: LiveTransfer, upTo length: UInt64, node: isolated Node) {
    guard let group = transfers.groups[spool.record.id] else { return }
    for id in group.copies {
      guard let copy = transfers.outgoing[id], !copy.record.isTerminal else { continue }
      node.mesh.node.payloads.spooled(id, upTo: length)
      pump(copy, node: node)
    }
  }

  /// Ends every share and copy of a group that has not ended (the upload failed, or the sender canceled the group).
  func endGroup(_ group: GroupSend, canceled: Bool, reason: String, node: isolated Node) {
    for id in group.copies + group.shares + [group.id] {
      for transfer in [transfers.outgoing[id], transfers.incoming[id]].compactMap({ $0 })
      where !transfer.record.isTerminal {
        if canceled {
          cancelTransfer(transfer, reason: reason, notify: true, node: node)
        } else {
          failTransfer(transfer, reason: reason, notify: true, node: node)
        }
      }
    }
  }

  /// Removes the spool once the upload is over and no copy reads it any more (the sent file is a hard link to it).
  func groupMaybeDone(_ group: GroupSend, node: isolated Node) {
    guard let spool = transfers.outgoing[group.id], spool.record.isTerminal,
      group.copies.allSatisfy({ transfers.outgoing[$0]?.record.isTerminal ?? true })
    else { return }
    let path = partialPath(group.id, .outgoing, node: node)
    let unused = !group.shares.contains { transfers.outgoing[$0]?.record.state == .finished }
    let sent = finalPath(group.id, .outgoing, name: spool.record.name, node: node)
    DispatchQueue.global().async {
      unlink(path)
      if unused { unlink(sent) }
    }
  }

  /// Every mesh tick: a recipient that is no longer a member of the group's session (it left) fails alone; the
  /// others go on. A recipient whose node went away keeps its share (the host drops such members; the copy resumes
  /// on relink).
  func groupMembershipTick(node: isolated Node) {
    for group in transfers.groups.values where group.open {
      var live = 0
      for id in group.shares {
        guard let share = transfers.outgoing[id], !share.record.isTerminal else { continue }
        live += 1
        let toNode = share.record.toNodeID
        guard !group.nodesAway.contains(toNode),
          toNode == node.nodeID || node.mesh.node.links.connection(of: toNode) != nil,
          let session = node.mesh.node.sessions.sessions[share.record.sessionID],
          !session.members.contains(where: { $0.peerID == share.record.toPeerID })
        else { continue }
        failTransfer(
          share, reason: "\(share.record.toDisplayName) left the session before the file arrived", notify: true,
          node: node)
      }
      if live == 0 && transfers.outgoing[group.id]?.record.isTerminal != false { group.open = false }
    }
  }

  // MARK: - Settling

  /// What a record's end means for the rest of its group: a copy's end is its riders' end; a share that ends early
  /// may leave its copy (or the whole upload) with nobody to serve.
  func groupSettled(_ transfer: LiveTransfer, state: TransferState, reason: String?, node: isolated Node) {
    let record = transfer.record
    switch record.role {
    case .copy:
      // A recipient still asked keeps waiting when the copy is stored: its name for the file is made (see
      // copyVerified) and it is given the file, or the name is removed, when it answers or its wait ends.
      for rider in riders(of: transfer)
      where !rider.record.isTerminal && !(state == .finished && rider.record.state == .awaitingConsent) {
        if state == .finished {
          rider.record.sha256 = record.sha256
          rider.record.bytes = record.size
        }
        settle(rider, state: state, reason: reason, node: node)
      }
      if record.direction == .outgoing {
        copyAnswered(
          transfer, error: APIError(status: 409, code: "transfer_\(state)", message: reason ?? "transfer \(state)"))
        if let groupID = record.groupID, let group = transfers.groups[groupID] { groupMaybeDone(group, node: node) }
      }
    case .spool:
      guard state != .finished, let group = transfers.groups[record.id] else { return }
      endGroup(group, canceled: state == .canceled, reason: reason ?? "the upload \(state)", node: node)
      groupMaybeDone(group, node: node)
    case .transfer:
      guard state != .finished else { return }
      if let copyID = record.copyID {
        let copy = record.direction == .outgoing ? transfers.outgoing[copyID] : transfers.incoming[copyID]
        if record.direction == .incoming, copy?.record.state == .finished {
          // The copy was stored while this recipient was still asked: its name for the file goes.
          let path = record.path
          DispatchQueue.global().async {
            unlink(path)
            rmdir((path as NSString).deletingLastPathComponent)
          }
        }
        if let copy, !copy.record.isTerminal, riders(of: copy).allSatisfy(\.record.isTerminal) {
          cancelTransfer(copy, reason: "no recipient on the node wants the file any more", notify: true, node: node)
        }
      }
      if record.direction == .outgoing, let groupID = record.groupID, let group = transfers.groups[groupID],
        let spool = transfers.outgoing[groupID], !spool.record.isTerminal,
        group.shares.allSatisfy({ transfers.outgoing[$0]?.record.isTerminal ?? true })
      {
        cancelTransfer(spool, reason: "every recipient's transfer ended", notify: false, node: node)
      }
    }
  }

  /// A copy's progress or state is its riders'.
  func syncRiders(_ copy: LiveTransfer, node: isolated Node) {
    // A recipient asked first has no share of the copy's progress until it accepts (nor does a waiting copy lend
    // its wait to the recipients that took the file).
    guard copy.record.state != .awaitingConsent else { return }
    for rider in riders(of: copy) where !rider.record.isTerminal && rider.record.state != .awaitingConsent {
      let changed = rider.record.state != copy.record.state || rider.record.resumedFrom != copy.record.resumedFrom
      rider.record.bytes = copy.record.bytes
      guard changed, !copy.record.isTerminal else { continue }
      rider.record.state = copy.record.state
      rider.record.resumedFrom = copy.record.resumedFrom
      rider.record.updatedAt = Timestamp.now()
      persist(rider, node: node)
    }
  }

  // MARK: - REST

  /// The group as its sender sees it: how many recipients, how many finished, failed, canceled, bytes so far.
  func groupJSON(_ group: GroupSend) -> JSONValue {
    let shares = group.shares.compactMap { transfers.outgoing[$0]?.record }
    let spool = transfers.outgoing[group.id]?.record
    var counts: [TransferState: Int] = [:]
    for share in shares { counts[share.state, default: 0] += 1 }
    let finished = counts[.finished] ?? 0
    let failed = (counts[.failed] ?? 0) + (counts[.declined] ?? 0)
    let declined = counts[.declined] ?? 0
    let awaiting = counts[.awaitingConsent] ?? 0
    let canceled = counts[.canceled] ?? 0
    let size = spool?.size ?? 0
    let object: JSONObject = [
      "id": .string(group.id), "sessionId": .string(spool?.sessionID ?? ""), "name": .string(spool?.name ?? ""),
      "size": .int(Int64(size)), "sha256": spool?.sha256.map { .string($0) } ?? .null,
      "recipients": .int(Int64(shares.count)), "copies": .int(Int64(group.copies.count)),
      "pending": .int(Int64(shares.count - finished - failed - canceled)), "finished": .int(Int64(finished)),
      "failed": .int(Int64(failed)), "canceled": .int(Int64(canceled)), "declined": .int(Int64(declined)),
      "awaitingConsent": .int(Int64(awaiting)),
      "bytes": .int(Int64(shares.reduce(UInt64(0)) { $0 + min($1.bytes, $1.size) })),
      "totalBytes": .int(Int64(size) * Int64(shares.count)), "createdAt": .string(spool?.createdAt ?? ""),
    ]
    return .object(object)
  }

  func ownGroup(_ context: RequestContext) throws(APIError) -> GroupSend {
    let id = context.parameters["groupId"] ?? ""
    guard let group = transfers.groups[id], transfers.outgoing[id]?.record.fromPeerID == context.authenticatedPeer.id
    else {
      throw APIError.notFound("no group send \(id) by this peer; the upload's answer names its group")
    }
    return group
  }

  /// `GET /api/v1/transfer-groups/{id}`: the summary and every recipient's transfer (who accepted, declined, or
  /// has not answered yet).
  func getTransferGroup(_ context: RequestContext) throws -> HTTPResponse {
    let group = try ownGroup(context)
    return .json([
      "group": groupJSON(group),
      "transfers": .array(group.shares.compactMap { transfers.outgoing[$0].map { transferJSON($0.record) } }),
    ])
  }

  func cancelTransferGroup(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    let group = try ownGroup(context)
    let live = group.shares.compactMap { transfers.outgoing[$0] }.filter { !$0.record.isTerminal }
    guard !live.isEmpty else {
      throw APIError(
        status: 409, code: "transfer_group_ended",
        message: "every transfer of group \(group.id) has already finished, failed or been canceled")
    }
    for share in live { cancelTransfer(share, reason: "canceled by the sender", notify: true, node: node) }
    return .json(["group": groupJSON(group)])
  }

  // MARK: - Metrics

  /// `meshgate_mesh_payload_bytes_total{node}`: file bytes sent over each mesh link (transfers and group copies).
  func transferMetricLines(node: isolated Node) -> [String] {
    var lines = [
      "# HELP meshgate_mesh_payload_bytes_total File transfer bytes sent over each mesh link, by receiving node id.",
      "# TYPE meshgate_mesh_payload_bytes_total counter",
    ]
    for (receiver, bytes) in transfers.payloadBytes.sorted(by: { $0.key < $1.key }) {
      lines.append("meshgate_mesh_payload_bytes_total{node=\"\(PrometheusText.escapeLabel(receiver))\"} \(bytes)")
    }
    return lines
  }

  // MARK: - Restart

  /// After the records are loaded: rebuild the groups and the riders' index; a copy that ended takes its riders.
  func restoreGroups(node: isolated Node) {
    for transfer in transfers.outgoing.values {
      let record = transfer.record
      guard let groupID = record.groupID else { continue }
      let group = transfers.groups[groupID] ?? GroupSend(id: groupID)
      transfers.groups[groupID] = group
      // Every link was down across the restart: no recipient's absence from a session means it left.
      if record.toNodeID != node.nodeID { group.nodesAway.insert(record.toNodeID) }
      switch record.role {
      case .copy: group.copies.append(record.id)
      case .transfer: group.shares.append(record.id)
      case .spool: break
      }
    }
    for table in [transfers.outgoing, transfers.incoming] {
      for transfer in table.values where transfer.record.role == .transfer {
        guard let copyID = transfer.record.copyID else { continue }
        transfers.riders[copyID, default: []].append(transfer.record.id)
      }
    }
    for group in transfers.groups.values {
      group.shares.sort {
        (transfers.outgoing[$0]?.record.createdAt ?? "", $0) < (transfers.outgoing[$1]?.record.createdAt ?? "", $1)
      }
    }
    for table in [transfers.outgoing, transfers.incoming] {
      for copy in table.values where copy.record.role == .copy {
        if copy.record.isTerminal {
          for rider in riders(of: copy)
          where !rider.record.isTerminal && !(copy.record.state == .finished && rider.record.state == .awaitingConsent)
          {
            settle(rider, state: copy.record.state, reason: copy.record.reason, node: node)
          }
        } else {
          syncRiders(copy, node: node)
        }
      }
    }
    for group in transfers.groups.values { groupMaybeDone(group, node: node) }
  }
}
