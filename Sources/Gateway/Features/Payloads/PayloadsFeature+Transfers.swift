/// Resource transfers (MCSession sendResource, Nearby FILE payloads): REST handlers, the upload path, carrying out
/// the payload book's decisions (MeshCore's ``PayloadBook`` holds the ``TransferSender`` / ``TransferReceiver``
/// state machines), events and restart recovery.
///
/// Layers 4 and 6. Everything here runs on the lws service thread in ``PayloadsFeature``, isolated to the ``Node`` actor; file I/O runs on each
/// transfer's ``TransferFile`` queue and comes back through ``Node/onLoop(_:)``.
///
/// The sender's node spools the upload into `<data dir>/transfers/<id>.out` while it streams it on to the receiver's
/// node, which writes `<data dir>/transfers/<id>.in`. The upload is answered 202 once the whole body is on disk
/// (fsynced) and its SHA-256 is recorded, so from then on the transfer survives a link loss or a restart of either
/// node: when the link returns, the sender offers it again and the receiver accepts from the bytes it holds. A
/// finished file lives at `<data dir>/files/<sent|received>/<id>/<name>` on both sides.
///
/// File consent (`--file-consent ask`): an offer from another node may wait for the recipient's Accept or Decline
/// (state `awaitingConsent`) before the receiver's node creates any file; see ``PayloadsFeature/acceptTransfer(_:node:)``.
import Crypto
import Foundation
import LWS
import Logging
import MeshCore

/// One transfer as a node holds it. Confined to the service thread.
final class LiveTransfer {
  var record: TransferRecord
  var file: TransferFile?
  var throttle = ProgressThrottle()
  /// The upload request while its body streams in.
  var uploadRequest: RequestID?
  var uploadReceived: UInt64 = 0
  var uploadSpooled: UInt64 = 0
  var uploadPaused = false
  var uploadDone: CheckedContinuation<Void, any Error>?
  var answer: CheckedContinuation<Void, any Error>?
  /// A token bucket for `--transfer-rate`: bytes that may be sent now (at most one second's worth accumulates, so a
  /// pause never turns into a burst) and when it was last topped up (monotonic ms).
  var rateTokens: Double = 0
  var rateUpdatedAt: UInt64 = 0
  /// While the transfer waits for the recipient's consent: when the wait ends (monotonic ms).
  var consentDeadline: UInt64?
  /// The consent timeout this transfer's wait got, in seconds: what `transfer.offered` and the failure reason say.
  var consentTimeoutSeconds = 0
  /// When an incoming transfer last made progress (created or restored, accepted, bytes written; monotonic ms): one
  /// idle for `--transfer-idle-timeout` fails and releases the space it reserved (``PayloadsFeature/failIdleTransfers(node:)``).
  var lastProgressAt = Node.monotonicMillis()

  init(record: TransferRecord) {
    self.record = record
  }

  /// Whether ending the transfer removes its file: a group copy on the sender's node reads the group's shared spool.
  var ownsFile: Bool { !(record.role == .copy && record.direction == .outgoing) }
}

@available(*, unavailable)
extension LiveTransfer: Sendable {}

extension LiveTransfer {
  /// A single transfer's credit window (bytes sent and not yet acknowledged) and chunk size.
  static let window: UInt64 = 8 << 20
  static let chunk = 256 << 10
  /// Spool reads in flight per transfer (each a chunk read straight into its frame): the next chunks are read while
  /// one is on its way to the link.
  static let readAhead = 4
  /// Upload bytes waiting to be written above which reading the request is paused.
  static let uploadHighWater: UInt64 = 1 << 20
  static let uploadLowWater: UInt64 = 256 << 10
  /// How much longer than the receiver's consent timeout the sender waits before it fails the transfer itself.
  static let consentGraceMillis: UInt64 = 30_000

  /// A new sender's state machine for `size` bytes, with this node's window, chunk size and read-ahead.
  static func sender(size: UInt64) -> TransferSender {
    TransferSender(size: size, window: window, chunkSize: chunk, readAhead: readAhead)
  }

  /// The bulk lane (and link-scheduler producer) of a transfer's chunks.
  static func producer(_ id: String) -> String { "transfer:" + id }
}

/// Transfer state owned by the node actor.
struct TransferRuntime {
  /// Whether the transfers stored before a start are listed again (the transfer routes wait for it, and
  /// `awaitingList` holds the requests that came before).
  var listed = false
  var awaitingList: [CheckedContinuation<Void, Never>] = []
  var outgoing: [String: LiveTransfer] = [:]
  var incoming: [String: LiveTransfer] = [:]
  var byUpload: [RequestID: LiveTransfer] = [:]
  /// Frames for nodes that are not linked now (a cancel or failure notice), sent when they link.
  var notices: [String: [MeshMessage]] = [:]
  /// File consent as changed at run time (`PATCH /api/v1/node/settings`); nil: as configured.
  var consentMode: FileConsent?
  var consentTimeout: Int?
  /// Per local recipient: the senders whose files it accepts without being asked, by sender peer id.
  var alwaysAccept: [String: [String: AlwaysAccepted]] = [:]
  /// Group sends this node sends, by group id; and the recipients' transfers riding on each group copy, by copy id.
  var groups: [String: GroupSend] = [:]
  var riders: [String: [String]] = [:]
  /// File bytes sent over each mesh link, by receiving node id (`meshgate_mesh_payload_bytes_total`).
  var payloadBytes: [String: UInt64] = [:]
  /// When incoming transfers are next checked for idleness (monotonic ms; once a second).
  var nextIdleCheck: UInt64 = 0
}

extension PayloadsFeature {
  func fileConsent(node: isolated Node) -> FileConsent { transfers.consentMode ?? node.configuration.fileConsent }
  func fileConsentTimeout(node: isolated Node) -> Int {
    transfers.consentTimeout ?? node.configuration.fileConsentTimeout
  }

  func dataDirectoryPath(node: isolated Node) -> String {
    URL(fileURLWithPath: node.configuration.dataDirectory).standardizedFileURL.path
  }

  // MARK: - Paths

  // Paths are built from parts that cannot leave their directory: an id that is not a plain token (ids from other
  // nodes are checked as UUIDs before they get here) becomes a digest of itself, and a name is a sanitized file
  // name. TransferFile.move resolves the result and refuses anything outside the data directory.

  func partialPath(_ id: String, _ direction: TransferDirection, node: isolated Node) -> String {
    "\(dataDirectoryPath(node: node))/transfers/\(TransferFile.pathComponent(id)).\(direction == .outgoing ? "out" : "in")"
  }

  func finalPath(_ id: String, _ direction: TransferDirection, name: String, node: isolated Node) -> String {
    let file = TransferFile.sanitizedFileName(name) ?? "file"
    return
      "\(dataDirectoryPath(node: node))/files/\(direction == .outgoing ? "sent" : "received")/\(TransferFile.pathComponent(id))/\(file)"
  }

  // MARK: - Upload (sender's node)

  func uploadResource(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let peer = context.authenticatedPeer
    let session = try node.features.sessions.ownSession(context, node: node)
    let query = context.request.head.query
    guard let toID = query["to"], !toID.isEmpty else {
      throw APIError.badRequest("to is required: the id of the session member to send the file to (?to=<peerId>)")
    }
    guard let rawName = query["name"], !rawName.isEmpty else {
      throw APIError.badRequest("name is required: the file name the receiver sees (?name=report.pdf)")
    }
    guard let name = TransferFile.sanitizedFileName(rawName) else {
      throw APIError.badRequest(
        "name \(rawName.debugDescription) has no usable characters: give a file name without path separators, "
          + "control characters or leading dots", code: "invalid_name")
    }
    guard let size = context.request.head.contentLength else {
      throw APIError(
        status: 411, code: "length_required",
        message: "send the file with a Content-Length header (curl --data-binary @file does)")
    }
    guard size <= node.configuration.maxTransferBytes else {
      throw APIError(
        status: 413, code: "payload_too_large",
        message: "the file is \(size) bytes; this node sends at most \(node.configuration.maxTransferBytes) bytes")
    }
    if toID == "all" || toID.contains(",") {
      return try await uploadGroup(context, session: session, to: toID, name: name, size: UInt64(size), node: node)
    }
    guard toID != peer.id else {
      throw APIError.badRequest("to is the sender itself; send the file to another member of the session")
    }
    let target = try connectedRecipient(toID, in: session, node: node)
    let local = target.nodeID == node.nodeID
    // Refused early when the disk cannot take it now; checked again, and reserved, once the spool is open.
    try checkReceivable(size: UInt64(size), spooling: !local, node: node)

    let id = RecordID.make()
    let now = Timestamp.now()
    let contentType =
      context.request.head.headers["content-type"].flatMap(TransferRecord.cleanContentType)
      ?? "application/octet-stream"
    let record = TransferRecord(
      id: id,
      parties: PayloadParties(
        direction: .outgoing, sessionID: session.sessionID,
        from: PayloadParty(peerID: peer.id, displayName: peer.displayName, nodeID: node.nodeID),
        to: PayloadParty(peerID: toID, displayName: target.displayName, nodeID: target.nodeID)),
      name: name, contentType: contentType, size: UInt64(size), bytes: 0, state: .pending,
      reason: nil, sha256: nil, path: partialPath(id, .outgoing, node: node), resumedFrom: nil, createdAt: now,
      updatedAt: now)
    let transfer = LiveTransfer(record: record)
    try FileManager.default.createDirectory(
      atPath: "\(dataDirectoryPath(node: node))/transfers", withIntermediateDirectories: true)
    let file = TransferFile(path: record.path)
    transfer.file = file
    let opened: Result<UInt64, TransferIOError> = await withCheckedContinuation { continuation in
      file.open(rehash: false) { continuation.resume(returning: $0) }
    }
    if case .failure(let error) = opened {
      throw APIError(status: 500, code: "storage_error", message: "the node cannot spool the upload: \(error)")
    }
    // Check and reserve in one step (no await between): concurrent uploads cannot all count the same free space.
    do {
      try checkReceivable(size: UInt64(size), spooling: !local, node: node)
    } catch {
      file.close(remove: true)
      throw error
    }
    transfers.outgoing[id] = transfer
    node.mesh.node.payloads.send(id, to: target.nodeID, sender: LiveTransfer.sender(size: UInt64(size)))
    try await node.store.saveTransfer(record)

    if local {
      var incoming = record
      incoming.parties.direction = .incoming
      incoming.state = .inProgress
      incoming.path = finalPath(id, .incoming, name: name, node: node)
      transfers.incoming[id] = LiveTransfer(record: incoming)
      node.mesh.node.payloads.receive(id, from: node.nodeID, receiver: nil)
      try await node.store.saveTransfer(incoming)
      transfer.record.state = .inProgress
      node.mesh.node.payloads.acceptedLocally(id)
      publishTransferEvent("transfer.started", transfers.incoming[id]!, node: node)
    } else {
      // Offer it and wait for the receiver's answer (size, disk space, membership) before reading the body.
      sendTransferFrame(
        .transferOffer(offer(for: transfer.record, resume: false)), to: target.nodeID, node: node)
      do {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
          transfer.answer = continuation
          Task { [weak node] in
            try? await Task.sleep(for: .seconds(15))
            node?.onLoop { $0.features.payloads.answerTimedOut(id, node: $0) }
          }
        }
      } catch {
        discard(transfer, state: .failed, reason: "\(error)", node: node)
        throw error
      }
      // Accepted (or already on its way), or waiting for the recipient's consent (awaitingConsent).
      if transfer.record.state == .pending { transfer.record.state = .inProgress }
    }
    publishTransferEvent("transfer.started", transfer, node: node)
    try await receiveUpload(context, into: transfer, node: node)
    return .json(["transfer": transferJSON(transfer.record)], status: 202)
  }

  /// Lets the request's body flow into `transfer` (a single transfer, or a group send's spool) and waits until the
  /// whole body is on disk and hashed (or the upload breaks, or someone cancels).
  func receiveUpload(_ context: RequestContext, into transfer: LiveTransfer, node: isolated Node) async throws {
    transfer.uploadRequest = context.request.id
    transfers.byUpload[context.request.id] = transfer
    node.server.setBodyFlow(context.request.id, enabled: true)
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
      transfer.uploadDone = continuation
    }
  }

  func answerTimedOut(_ id: String, node: isolated Node) {
    guard let transfer = transfers.outgoing[id], let answer = transfer.answer else { return }
    transfer.answer = nil
    answer.resume(
      throwing: APIError.unavailable("the receiver's node did not answer the transfer offer within 15 s; try again"))
  }

  /// Refuses a file this node could not take: over the size limit, or leaving less than the free-space reserve.
  /// `spooling`: the file is an upload this node spools before sending it to another node (the message says so).
  func checkReceivable(size: UInt64, spooling: Bool = false, node: isolated Node) throws(APIError) {
    if let rejection = receivability(size: size, spooling: spooling, node: node) {
      throw rejectionError(rejection.code, rejection.message)
    }
  }

  /// Bytes this node has promised to store but not written yet: the rest of every incoming transfer it accepted and
  /// of every upload it is spooling. Free space minus this is what a new file may use, so concurrent offers cannot
  /// all be accepted against the same free space (and then all fail when the disk fills).
  func promisedBytes(fromNode nodeFilter: String? = nil, sender: String? = nil, node: isolated Node) -> UInt64 {
    var total: UInt64 = 0
    // A group's file is promised once: by its copy (receiving node) or its spool (sending node), not per recipient.
    for transfer in transfers.incoming.values
    where !transfer.record.isTerminal && transfer.record.fromNodeID != node.nodeID && transfer.record.copyID == nil
      && (nodeFilter == nil || transfer.record.fromNodeID == nodeFilter)
      && (sender == nil || transfer.record.fromPeerID == sender)
    {
      total += transfer.record.size - min(transfer.record.bytes, transfer.record.size)
    }
    guard nodeFilter == nil && sender == nil else { return total }
    for transfer in transfers.outgoing.values
    where !transfer.record.isTerminal && transfer.record.sha256 == nil
      && (transfer.record.groupID == nil || transfer.record.role == .spool)
    {
      total += transfer.record.size - min(transfer.uploadSpooled, transfer.record.size)
    }
    return total
  }

  /// The shares of the space for files (free space above `--min-free-bytes` not promised to others) that one linked
  /// node (3/4) and one of its senders (1/2) may hold with the incoming files it offered and this node has not stored
  /// yet (accepted, or waiting for consent): so no one node, and no one sender, can reserve the whole disk, while one
  /// file of up to half the space still goes through.
  static let nodeShare: (numerator: UInt64, denominator: UInt64) = (3, 4)
  static let senderShare: (numerator: UInt64, denominator: UInt64) = (1, 2)

  /// Why a file of `size` bytes cannot be taken now (nil: it can). `from`: the linked node and sender offering it
  /// (nil for an upload this node spools), held to their shares of the space.
  func receivability(
    size: UInt64, spooling: Bool = false, from offerer: (node: String, sender: String)? = nil, node: isolated Node
  )
    -> (code: TransferRejection, message: String)?
  {
    if size > UInt64(node.configuration.maxTransferBytes) && !spooling {
      return (
        .tooLarge,
        "the file is \(size) bytes; the receiving node accepts at most \(node.configuration.maxTransferBytes) "
          + "(--max-transfer-bytes): send a smaller file, or split it"
      )
    }
    let free = TransferFile.freeBytes(in: dataDirectoryPath(node: node)) ?? .max
    let promised = promisedBytes(node: node)
    let available = free > promised ? free - promised : 0
    let reserve = UInt64(node.configuration.minFreeBytes)
    if available < reserve || available - reserve < size {
      let holder = spooling ? "this node (which stores the upload before sending it on)" : "the receiving node"
      return (
        .insufficientStorage,
        "\(holder) has \(free) bytes free, \(promised) of them promised to transfers in progress, and keeps "
          + "\(reserve) in reserve (--min-free-bytes); the file needs \(size). Retry when a transfer has finished "
          + "or space is freed"
      )
    }
    guard let offerer else { return nil }
    let shares: [(held: UInt64, share: (numerator: UInt64, denominator: UInt64), who: String, kind: String)] = [
      (promisedBytes(fromNode: offerer.node, node: node), Self.nodeShare, "node \(offerer.node)", "linked node"),
      (promisedBytes(sender: offerer.sender, node: node), Self.senderShare, "sender \(offerer.sender)", "sender"),
    ]
    for share in shares {
      // The space for files outside everyone else's promises: what this offerer holds plus what is still free.
      let space = available - reserve + share.held
      let limit = space / share.share.denominator * share.share.numerator
      if share.held + size > limit {
        return (
          .insufficientStorage,
          "\(share.who) already holds \(share.held) bytes promised to its files not yet stored here, and one "
            + "\(share.kind) may hold at most \(share.share.numerator)/\(share.share.denominator) of this node's "
            + "space for files (\(limit) bytes now); the file needs \(size). Retry when its other files have arrived"
        )
      }
    }
    return nil
  }

  func rejectionError(_ code: TransferRejection, _ message: String) -> APIError {
    switch code {
    case .tooLarge: APIError(status: 413, code: "payload_too_large", message: message)
    case .insufficientStorage: APIError(status: 507, code: "insufficient_storage", message: message)
    case .notMember: APIError(status: 409, code: "not_a_member", message: message)
    case .unknownTransfer: APIError.notFound(message)
    case .refused: APIError(status: 409, code: "transfer_refused", message: message)
    case .declined: APIError(status: 409, code: "transfer_declined", message: message)
    }
  }

  func offer(for record: TransferRecord, resume: Bool) -> TransferOffer {
    TransferOffer(
      transferID: record.id, sessionID: record.sessionID, fromPeerID: record.fromPeerID,
      fromDisplayName: record.fromDisplayName, toPeerID: record.toPeerID, name: record.name,
      contentType: record.contentType, size: record.size, resume: resume)
  }

  func uploadBodyReceived(_ requestID: RequestID, _ bytes: [UInt8], node: isolated Node) {
    guard let transfer = transfers.byUpload[requestID], let file = transfer.file else { return }
    transfer.uploadReceived += UInt64(bytes.count)
    let id = transfer.record.id
    file.append(bytes) { [weak node] result in
      node?.onLoop { $0.features.payloads.spoolWritten(id, result, node: $0) }
    }
    if transfer.uploadReceived - transfer.uploadSpooled > LiveTransfer.uploadHighWater && !transfer.uploadPaused {
      transfer.uploadPaused = true
      node.server.setBodyFlow(requestID, enabled: false)
    }
  }

  func spoolWritten(_ id: String, _ result: Result<UInt64, TransferIOError>, node: isolated Node) {
    guard let transfer = transfers.outgoing[id], !transfer.record.isTerminal else { return }
    switch result {
    case .failure(let error):
      failTransfer(transfer, reason: "the upload could not be spooled: \(error)", notify: true, node: node)
    case .success(let length):
      transfer.uploadSpooled = length
      if transfer.uploadPaused, transfer.uploadReceived - length < LiveTransfer.uploadLowWater,
        let request = transfer.uploadRequest
      {
        transfer.uploadPaused = false
        node.server.setBodyFlow(request, enabled: true)
      }
      node.mesh.node.payloads.spooled(id, upTo: length)
      if transfer.record.role == .spool { groupSpooled(transfer, upTo: length, node: node) }
      pump(transfer, node: node)
    }
  }

  func uploadBodyEnded(_ requestID: RequestID, node: isolated Node) {
    guard let transfer = transfers.byUpload[requestID], let file = transfer.file else { return }
    let id = transfer.record.id
    file.finish { [weak node] result in
      node?.onLoop { node in Task { await node.features.payloads.uploadCompleted(id, result, node: node) } }
    }
  }

  func uploadCompleted(_ id: String, _ result: Result<[UInt8], TransferIOError>, node: isolated Node) async {
    guard let transfer = transfers.outgoing[id], !transfer.record.isTerminal else { return }
    switch result {
    case .failure(let error):
      failTransfer(transfer, reason: "the upload could not be stored: \(error)", notify: true, node: node)
    case .success(let digest):
      transfer.record.sha256 = Crypto.hex(digest)
      transfer.record.updatedAt = Timestamp.now()
      do {
        try await node.store.saveTransfer(transfer.record)
      } catch {
        failTransfer(transfer, reason: "the transfer could not be recorded: \(error)", notify: true, node: node)
        return
      }
      guard !transfer.record.isTerminal else { return }
      if let request = transfer.uploadRequest { transfers.byUpload[request] = nil }
      transfer.uploadRequest = nil
      node.mesh.node.payloads.uploadCompleted(id, sha256: digest)
      transfer.uploadDone?.resume()
      transfer.uploadDone = nil
      if transfer.record.role == .spool {
        groupUploadCompleted(transfer, digest: digest, node: node)
      } else if let incoming = transfers.incoming[id], incoming.record.fromNodeID == node.nodeID {
        finishLocal(transfer, incoming, digest: digest, node: node)
      } else {
        pump(transfer, node: node)
      }
    }
  }

  /// The client went away before its upload was complete.
  func uploadRequestClosed(_ requestID: RequestID, node: isolated Node) {
    guard let transfer = transfers.byUpload.removeValue(forKey: requestID) else { return }
    transfer.uploadRequest = nil
    guard !transfer.record.isTerminal, transfer.record.sha256 == nil else { return }
    failTransfer(
      transfer,
      reason:
        "the upload ended after \(transfer.uploadReceived) of \(transfer.record.size) bytes (client disconnected)",
      notify: true, node: node)
  }

  /// A transfer between two peers of this node: the spool becomes both files.
  func finishLocal(_ outgoing: LiveTransfer, _ incoming: LiveTransfer, digest: [UInt8], node: isolated Node) {
    guard let file = outgoing.file else { return }
    let id = outgoing.record.id
    let sent = finalPath(id, .outgoing, name: outgoing.record.name, node: node)
    let received = incoming.record.path
    file.move(to: sent, alsoAt: received, within: dataDirectoryPath(node: node)) { [weak node] error in
      node?.onLoop { node in
        guard let outgoing = node.features.payloads.transfers.outgoing[id],
          let incoming = node.features.payloads.transfers.incoming[id]
        else { return }
        if let error {
          node.features.payloads.failTransfer(outgoing, reason: "\(error)", notify: false, node: node)
          node.features.payloads.failTransfer(incoming, reason: "\(error)", notify: false, node: node)
          return
        }
        outgoing.record.path = sent
        outgoing.file?.close(remove: false)
        outgoing.file = nil
        for transfer in [outgoing, incoming] {
          transfer.record.sha256 = Crypto.hex(digest)
          transfer.record.bytes = transfer.record.size
          node.features.payloads.settle(transfer, state: .finished, reason: nil, node: node)
        }
      }
    }
  }

  // MARK: - Sending chunks

  func pump(_ transfer: LiveTransfer, node: isolated Node) {
    let id = transfer.record.id
    guard node.mesh.node.payloads.sender(id) != nil, transfer.record.toNodeID != node.nodeID, let file = transfer.file
    else {
      return
    }
    var canSend = node.links.hasRoom(transfer.record.toNodeID, producer: LiveTransfer.producer(id), node: node)
    if canSend && node.configuration.transferRate > 0 {
      let now = Node.monotonicMillis()
      let rate = Double(node.configuration.transferRate)
      transfer.rateTokens = min(rate, transfer.rateTokens + rate * Double(now - transfer.rateUpdatedAt) / 1000)
      transfer.rateUpdatedAt = now
      canSend = transfer.rateTokens > 0
    }
    for action in node.mesh.node.payloads.pump(id, canSend: canSend) {
      switch action {
      case .readChunk(let offset, let count):
        // The chunk is read straight into its frame after the frame's prefix: no copy of the content here.
        let prefix = MeshFrameCodec.transferChunkPrefix(transferID: id, offset: offset, count: count)
        file.readFrame(prefix: prefix, offset: offset, count: count) { [weak node] result in
          node?.onLoop { $0.features.payloads.chunkRead(id, offset: offset, count: count, result, node: $0) }
        }
      case .sendEnd(let digest):
        sendTransferFrame(
          .transferEnd(transferID: id, size: transfer.record.size, sha256: digest), to: transfer.record.toNodeID,
          node: node)
      }
    }
  }

  func chunkRead(
    _ id: String, offset: UInt64, count: Int, _ result: Result<OutboundMessage, TransferIOError>, node: isolated Node
  ) {
    guard let transfer = transfers.outgoing[id], node.mesh.node.payloads.sender(id) != nil else { return }
    switch result {
    case .failure(let error):
      node.mesh.node.payloads.chunkAbandoned(id, offset: offset)
      failTransfer(transfer, reason: "the spool could not be read: \(error)", notify: true, node: node)
    case .success(let frame):
      let connection = linkedConnection(to: transfer.record.toNodeID, node: node)
      let verdict = node.mesh.node.payloads.chunkRead(id, offset: offset, linked: connection != nil)
      guard verdict.send, let connection else {
        // A read that did not line up (a late one from before a resume): the reads go on from the next offset.
        if verdict.next { pump(transfer, node: node) }
        return
      }
      node.links.sendFrame(frame, on: connection, lane: .bulk(LiveTransfer.producer(id)), node: node)
      node.mesh.node.payloads.chunkSent(id, offset: offset, count: count)
      transfers.payloadBytes[transfer.record.toNodeID, default: 0] += UInt64(count)
      transfer.rateTokens -= Double(count)
      pump(transfer, node: node)
    }
  }

  /// The connection of the link to `nodeID` while it has a socket; nil when the node is not linked now.
  func linkedConnection(to nodeID: String, node: isolated Node) -> LinkManager.ConnectionID? {
    guard let connection = node.mesh.node.links.connection(of: nodeID), node.mesh.socketByConnection[connection] != nil
    else {
      return nil
    }
    return connection
  }

  @discardableResult
  func sendTransferFrame(_ message: MeshMessage, to nodeID: String, node: isolated Node) -> Bool {
    guard let connection = linkedConnection(to: nodeID, node: node) else { return false }
    node.links.sendFrame(
      OutboundMessage(bytes: MeshFrameCodec.encode(message), binary: true), on: connection,
      lane: Self.lane(of: message),
      node: node)
    return true
  }

  /// The link-scheduler lane of a payload frame: a transfer's chunks and end, and a stream's data and close, travel
  /// in their payload's bulk lane (the end and the close behind their data); all else is control.
  static func lane(of message: MeshMessage) -> LinkScheduler<MeshOutbound>.Lane {
    switch message {
    case .transferChunk(let id, _, _), .transferEnd(let id, _, _): .bulk(LiveTransfer.producer(id))
    case .streamData(let id, _, _), .streamClose(let id, _): .bulk(LiveStream.producer(id))
    default: .control
    }
  }

  /// Sends `message` now, or when `nodeID` links again.
  func sendOrQueueNotice(_ message: MeshMessage, to nodeID: String, node: isolated Node) {
    if !sendTransferFrame(message, to: nodeID, node: node) { transfers.notices[nodeID, default: []].append(message) }
  }

  /// Called every mesh tick: senders held back by a full link or the rate limit try again.
  func transferTick(node: isolated Node) {
    streamTick(node: node)
    groupMembershipTick(node: node)
    for transfer in transfers.outgoing.values
    where node.mesh.node.payloads.sender(transfer.record.id)?.state == .sending {
      pump(transfer, node: node)
    }
    failIdleTransfers(node: node)
  }

  /// Fails every accepted incoming file from another node that has gone `--transfer-idle-timeout` without a byte
  /// (its link up, down, or this node restarted meanwhile), so the disk space it reserved is released: a sender that
  /// offers files and never sends them, or vanishes, holds that space for at most the timeout. The sender is told
  /// (it may offer the file again). Files waiting for consent have their own timeout; riders of a group copy end
  /// with their copy.
  func failIdleTransfers(node: isolated Node) {
    let now = Node.monotonicMillis()
    let limit = UInt64(node.configuration.transferIdleTimeoutSeconds) * 1000
    guard now >= transfers.nextIdleCheck else { return }
    transfers.nextIdleCheck = now + 1000
    let idle = transfers.incoming.values.filter {
      !$0.record.isTerminal && $0.record.state != .awaitingConsent && $0.record.fromNodeID != node.nodeID
        && $0.record.copyID == nil && now - min($0.lastProgressAt, now) >= limit
    }
    for transfer in idle {
      node.meshLogger.info(
        "An incoming file made no progress; it failed and its reserved space was released.",
        ["transfer.id": transfer.record.id, "node.id": transfer.record.fromNodeID])
      failTransfer(
        transfer,
        reason: "no byte of the file arrived for \(node.configuration.transferIdleTimeoutSeconds) s "
          + "(--transfer-idle-timeout); the space it reserved was released; send it again",
        notify: true, node: node)
    }
  }
}
