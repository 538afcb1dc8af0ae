/// Resource transfers (MCSession sendResource, Nearby FILE payloads): REST handlers, the upload path, the mesh
/// side of ``TransferSender`` / ``TransferReceiver``, events and restart recovery.
///
/// Layers 4 and 6. Everything here runs on the lws service thread inside the ``Node`` actor; file I/O runs on each
/// transfer's ``TransferFile`` queue and comes back through ``Node/onLoop(_:)``.
///
/// The sender's node spools the upload into `<data dir>/transfers/<id>.out` while it streams it on to the receiver's
/// node, which writes `<data dir>/transfers/<id>.in`. The upload is answered 202 once the whole body is on disk
/// (fsynced) and its SHA-256 is recorded, so from then on the transfer survives a link loss or a restart of either
/// node: when the link returns, the sender offers it again and the receiver accepts from the bytes it holds. A
/// finished file lives at `<data dir>/files/<sent|received>/<id>/<name>` on both sides.
///
/// File consent (`--file-consent ask`): an offer from another node may wait for the recipient's Accept or Decline
/// (state `awaitingConsent`) before the receiver's node creates any file; see ``Node/acceptTransfer(_:)``.
import Crypto
import Foundation
import LWS
import Logging
import MeshCore

/// One transfer as a node holds it. Confined to the service thread.
final class LiveTransfer {
  var record: TransferRecord
  var sender: TransferSender?
  var receiver: TransferReceiver?
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

  init(record: TransferRecord) {
    self.record = record
  }
}

@available(*, unavailable)
extension LiveTransfer: Sendable {}

/// Transfer state owned by the node actor.
struct TransferRuntime {
  var outgoing: [String: LiveTransfer] = [:]
  var incoming: [String: LiveTransfer] = [:]
  var byUpload: [RequestID: LiveTransfer] = [:]
  /// Offers that arrived before the records were restored after a start.
  var restored = false
  var deferredOffers: [(TransferOffer, String)] = []
  /// Frames for nodes that are not linked now (a cancel or failure notice), sent when they link.
  var notices: [String: [MeshMessage]] = [:]
  /// File consent as changed at run time (`PATCH /api/v1/node/settings`); nil: as configured.
  var consentMode: FileConsent?
  var consentTimeout: Int?
  /// Per local recipient: the senders whose files it accepts without being asked, by sender peer id.
  var alwaysAccept: [String: [String: AlwaysAccepted]] = [:]
}

extension Node {
  static let transferWindow: UInt64 = 8 << 20
  static let transferChunk = 256 << 10
  /// Upload bytes waiting to be written above which reading the request is paused.
  static let uploadHighWater: UInt64 = 1 << 20
  static let uploadLowWater: UInt64 = 256 << 10
  /// The most senders one recipient may keep on its always-accept list.
  static let alwaysAcceptLimit = 1000
  /// How much longer than the receiver's consent timeout the sender waits before it fails the transfer itself.
  static let consentGraceMillis: UInt64 = 30_000

  var fileConsent: FileConsent { transfers.consentMode ?? configuration.fileConsent }
  var fileConsentTimeout: Int { transfers.consentTimeout ?? configuration.fileConsentTimeout }

  var dataDirectoryPath: String { URL(fileURLWithPath: configuration.dataDirectory).standardizedFileURL.path }

  /// Runs `body` on the service thread inside the actor; safe from any thread (file queues use it).
  nonisolated func onLoop(_ body: @escaping @Sendable (isolated Node) -> Void) {
    server.execute { [self] in self.assumeIsolated { body($0) } }
  }

  // MARK: - Names

  /// A file name that is safe to create in a directory: the last path component, without control characters or
  /// leading dots and spaces, at most 255 UTF-8 bytes. Nil when nothing usable remains.
  static func sanitizedFileName(_ raw: String) -> String? {
    let lastComponent = raw.split(whereSeparator: { $0 == "/" || $0 == "\\" }).last.map(String.init) ?? ""
    var scalars = String.UnicodeScalarView()
    for scalar in lastComponent.unicodeScalars {
      let value = scalar.value
      if value < 0x20 || value == 0x7F || (0x80...0x9F).contains(value) || value == 0x2028 || value == 0x2029 {
        continue
      }
      scalars.append(scalar)
    }
    var name = String(scalars)
    while let first = name.first, first == "." || first == " " { name.removeFirst() }
    while let last = name.last, last == " " { name.removeLast() }
    while name.utf8.count > 255 { name.removeLast() }
    return name.isEmpty ? nil : name
  }

  // MARK: - Paths

  // Paths are built from parts that cannot leave their directory: an id that is not a plain token (ids from other
  // nodes are checked as UUIDs before they get here) becomes a digest of itself, and a name is a sanitized file
  // name. TransferFile.move resolves the result and refuses anything outside the data directory.

  /// A path component for `id`: the id itself when it is a token (`A-Z a-z 0-9 - _`), else `id-` + a digest.
  static func pathComponent(_ id: String) -> String {
    WireIDs.isToken(id) ? id : "id-" + String(Crypto.sha256Hex(id).prefix(32))
  }

  func partialPath(_ id: String, _ direction: TransferDirection) -> String {
    "\(dataDirectoryPath)/transfers/\(Self.pathComponent(id)).\(direction == .outgoing ? "out" : "in")"
  }

  func finalPath(_ id: String, _ direction: TransferDirection, name: String) -> String {
    let file = Self.sanitizedFileName(name) ?? "file"
    return
      "\(dataDirectoryPath)/files/\(direction == .outgoing ? "sent" : "received")/\(Self.pathComponent(id))/\(file)"
  }

  // MARK: - Upload (sender's node)

  func uploadResource(_ context: RequestContext) async throws -> HTTPResponse {
    let peer = context.authenticatedPeer
    let session = try ownSession(context)
    let query = context.request.head.query
    guard let toID = query["to"], !toID.isEmpty else {
      throw APIError.badRequest("to is required: the id of the session member to send the file to (?to=<peerId>)")
    }
    guard let rawName = query["name"], !rawName.isEmpty else {
      throw APIError.badRequest("name is required: the file name the receiver sees (?name=report.pdf)")
    }
    guard let name = Self.sanitizedFileName(rawName) else {
      throw APIError.badRequest(
        "name \(rawName.debugDescription) has no usable characters: give a file name without path separators, "
          + "control characters or leading dots", code: "invalid_name")
    }
    guard let size = context.request.head.contentLength else {
      throw APIError(
        status: 411, code: "length_required",
        message: "send the file with a Content-Length header (curl --data-binary @file does)")
    }
    guard size <= configuration.maxTransferBytes else {
      throw APIError(
        status: 413, code: "payload_too_large",
        message: "the file is \(size) bytes; this node sends at most \(configuration.maxTransferBytes) bytes")
    }
    guard toID != peer.id else {
      throw APIError.badRequest("to is the sender itself; send the file to another member of the session")
    }
    let target = try connectedRecipient(toID, in: session)
    let local = target.nodeID == nodeID
    // Refused early when the disk cannot take it now; checked again, and reserved, once the spool is open.
    try checkReceivable(size: UInt64(size), spooling: !local)

    let id = UUID().uuidString.lowercased()
    let now = Timestamp.now()
    let contentType =
      context.request.head.headers["content-type"].flatMap(Self.cleanContentType)
      ?? "application/octet-stream"
    let record = TransferRecord(
      id: id, direction: .outgoing, sessionID: session.sessionID, fromPeerID: peer.id,
      fromDisplayName: peer.displayName, fromNodeID: nodeID, toPeerID: toID, toDisplayName: target.displayName,
      toNodeID: target.nodeID, name: name, contentType: contentType, size: UInt64(size), bytes: 0, state: "pending",
      reason: nil, sha256: nil, path: partialPath(id, .outgoing), resumedFrom: nil, createdAt: now, updatedAt: now)
    let transfer = LiveTransfer(record: record)
    transfer.sender = TransferSender(
      size: UInt64(size), window: Self.transferWindow, chunkSize: Self.transferChunk)
    try FileManager.default.createDirectory(
      atPath: "\(dataDirectoryPath)/transfers", withIntermediateDirectories: true)
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
      try checkReceivable(size: UInt64(size), spooling: !local)
    } catch {
      file.close(remove: true)
      throw error
    }
    transfers.outgoing[id] = transfer
    try await store.saveTransfer(record)

    if local {
      var incoming = record
      incoming.direction = .incoming
      incoming.state = "inProgress"
      incoming.path = finalPath(id, .incoming, name: name)
      transfers.incoming[id] = LiveTransfer(record: incoming)
      try await store.saveTransfer(incoming)
      transfer.record.state = "inProgress"
      _ = transfer.sender?.accepted(offset: 0)
      publishTransferEvent("transfer.started", transfers.incoming[id]!)
    } else {
      // Offer it and wait for the receiver's answer (size, disk space, membership) before reading the body.
      sendTransferFrame(.transferOffer(offer(for: transfer.record, resume: false)), to: target.nodeID)
      do {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
          transfer.answer = continuation
          Task { [weak self] in
            try? await Task.sleep(for: .seconds(15))
            await self?.answerTimedOut(id)
          }
        }
      } catch {
        discard(transfer, state: "failed", reason: "\(error)")
        throw error
      }
      // Accepted (or already on its way), or waiting for the recipient's consent (awaitingConsent).
      if transfer.record.state == "pending" { transfer.record.state = "inProgress" }
    }
    publishTransferEvent("transfer.started", transfer)
    transfer.uploadRequest = context.request.id
    transfers.byUpload[context.request.id] = transfer
    server.setBodyFlow(context.request.id, enabled: true)
    // Wait until the whole body is on disk and hashed (or the upload breaks, or someone cancels).
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
      transfer.uploadDone = continuation
    }
    return .json(["transfer": transferJSON(transfer.record)], status: 202)
  }

  static func cleanContentType(_ value: String) -> String? {
    let trimmed = value.trimmingCharacters(in: .whitespaces)
    // curl's --data-binary labels every body as a form; a file upload never is one.
    if trimmed.lowercased().hasPrefix("application/x-www-form-urlencoded") { return nil }
    guard !trimmed.isEmpty, trimmed.utf8.count <= 255,
      trimmed.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value < 0x7F })
    else { return nil }
    return trimmed
  }

  func answerTimedOut(_ id: String) {
    guard let transfer = transfers.outgoing[id], let answer = transfer.answer else { return }
    transfer.answer = nil
    answer.resume(
      throwing: APIError.unavailable("the receiver's node did not answer the transfer offer within 15 s; try again"))
  }

  /// Refuses a file this node could not take: over the size limit, or leaving less than the free-space reserve.
  /// `spooling`: the file is an upload this node spools before sending it to another node (the message says so).
  func checkReceivable(size: UInt64, spooling: Bool = false) throws(APIError) {
    if let rejection = receivability(size: size, spooling: spooling) {
      throw rejectionError(rejection.code, rejection.message)
    }
  }

  /// Bytes this node has promised to store but not written yet: the rest of every incoming transfer it accepted and
  /// of every upload it is spooling. Free space minus this is what a new file may use, so concurrent offers cannot
  /// all be accepted against the same free space (and then all fail when the disk fills).
  func promisedBytes() -> UInt64 {
    var total: UInt64 = 0
    for transfer in transfers.incoming.values where !transfer.record.isTerminal && transfer.record.fromNodeID != nodeID
    {
      total += transfer.record.size - min(transfer.record.bytes, transfer.record.size)
    }
    for transfer in transfers.outgoing.values where !transfer.record.isTerminal && transfer.record.sha256 == nil {
      total += transfer.record.size - min(transfer.uploadSpooled, transfer.record.size)
    }
    return total
  }

  func receivability(size: UInt64, spooling: Bool = false) -> (code: TransferRejection, message: String)? {
    if size > UInt64(configuration.maxTransferBytes) && !spooling {
      return (
        .tooLarge, "the file is \(size) bytes; the receiving node accepts at most \(configuration.maxTransferBytes)"
      )
    }
    let free = TransferFile.freeBytes(in: dataDirectoryPath) ?? .max
    let promised = promisedBytes()
    let available = free > promised ? free - promised : 0
    let reserve = UInt64(configuration.minFreeBytes)
    if available < reserve || available - reserve < size {
      let node = spooling ? "this node (which stores the upload before sending it on)" : "the receiving node"
      return (
        .insufficientStorage,
        "\(node) has \(free) bytes free, \(promised) of them promised to transfers in progress, and keeps "
          + "\(reserve) in reserve (--min-free-bytes); the file needs \(size). Retry when a transfer has finished "
          + "or space is freed"
      )
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

  func uploadBodyReceived(_ requestID: RequestID, _ bytes: [UInt8]) {
    guard let transfer = transfers.byUpload[requestID], let file = transfer.file else { return }
    transfer.uploadReceived += UInt64(bytes.count)
    let id = transfer.record.id
    file.append(bytes) { [weak self] result in
      self?.onLoop { $0.spoolWritten(id, result) }
    }
    if transfer.uploadReceived - transfer.uploadSpooled > Self.uploadHighWater && !transfer.uploadPaused {
      transfer.uploadPaused = true
      server.setBodyFlow(requestID, enabled: false)
    }
  }

  func spoolWritten(_ id: String, _ result: Result<UInt64, TransferIOError>) {
    guard let transfer = transfers.outgoing[id], !transfer.record.isTerminal else { return }
    switch result {
    case .failure(let error):
      failTransfer(transfer, reason: "the upload could not be spooled: \(error)", notify: true)
    case .success(let length):
      transfer.uploadSpooled = length
      if transfer.uploadPaused, transfer.uploadReceived - length < Self.uploadLowWater,
        let request = transfer.uploadRequest
      {
        transfer.uploadPaused = false
        server.setBodyFlow(request, enabled: true)
      }
      transfer.sender?.spooled(upTo: length)
      pump(transfer)
    }
  }

  func uploadBodyEnded(_ requestID: RequestID) {
    guard let transfer = transfers.byUpload[requestID], let file = transfer.file else { return }
    let id = transfer.record.id
    file.finish { [weak self] result in
      self?.onLoop { node in Task { await node.uploadCompleted(id, result) } }
    }
  }

  func uploadCompleted(_ id: String, _ result: Result<[UInt8], TransferIOError>) async {
    guard let transfer = transfers.outgoing[id], !transfer.record.isTerminal else { return }
    switch result {
    case .failure(let error):
      failTransfer(transfer, reason: "the upload could not be stored: \(error)", notify: true)
    case .success(let digest):
      transfer.record.sha256 = Crypto.hex(digest)
      transfer.record.updatedAt = Timestamp.now()
      do {
        try await store.saveTransfer(transfer.record)
      } catch {
        failTransfer(transfer, reason: "the transfer could not be recorded: \(error)", notify: true)
        return
      }
      guard !transfer.record.isTerminal else { return }
      if let request = transfer.uploadRequest { transfers.byUpload[request] = nil }
      transfer.uploadRequest = nil
      transfer.sender?.uploadCompleted(sha256: digest)
      transfer.uploadDone?.resume()
      transfer.uploadDone = nil
      if let incoming = transfers.incoming[id], incoming.record.fromNodeID == nodeID {
        finishLocal(transfer, incoming, digest: digest)
      } else {
        pump(transfer)
      }
    }
  }

  /// The client went away before its upload was complete.
  func uploadRequestClosed(_ requestID: RequestID) {
    guard let transfer = transfers.byUpload.removeValue(forKey: requestID) else { return }
    transfer.uploadRequest = nil
    guard !transfer.record.isTerminal, transfer.record.sha256 == nil else { return }
    failTransfer(
      transfer,
      reason:
        "the upload ended after \(transfer.uploadReceived) of \(transfer.record.size) bytes (client disconnected)",
      notify: true)
  }

  /// A transfer between two peers of this node: the spool becomes both files.
  func finishLocal(_ outgoing: LiveTransfer, _ incoming: LiveTransfer, digest: [UInt8]) {
    guard let file = outgoing.file else { return }
    let id = outgoing.record.id
    let sent = finalPath(id, .outgoing, name: outgoing.record.name)
    let received = incoming.record.path
    file.move(to: sent, alsoAt: received, within: dataDirectoryPath) { [weak self] error in
      self?.onLoop { node in
        guard let outgoing = node.transfers.outgoing[id], let incoming = node.transfers.incoming[id] else { return }
        if let error {
          node.failTransfer(outgoing, reason: "\(error)", notify: false)
          node.failTransfer(incoming, reason: "\(error)", notify: false)
          return
        }
        outgoing.record.path = sent
        outgoing.file?.close(remove: false)
        outgoing.file = nil
        for transfer in [outgoing, incoming] {
          transfer.record.sha256 = Crypto.hex(digest)
          transfer.record.bytes = transfer.record.size
          node.settle(transfer, state: "finished", reason: nil)
        }
      }
    }
  }

  // MARK: - Sending chunks

  func pump(_ transfer: LiveTransfer) {
    guard var sender = transfer.sender, transfer.record.toNodeID != nodeID, let file = transfer.file else { return }
    var canSend = linkHasRoom(transfer.record.toNodeID, producer: "transfer:" + transfer.record.id)
    if canSend && configuration.transferRate > 0 {
      let now = Self.monotonicMillis()
      let rate = Double(configuration.transferRate)
      transfer.rateTokens = min(rate, transfer.rateTokens + rate * Double(now - transfer.rateUpdatedAt) / 1000)
      transfer.rateUpdatedAt = now
      canSend = transfer.rateTokens > 0
    }
    let actions = sender.pump(canSend: canSend)
    transfer.sender = sender
    let id = transfer.record.id
    for action in actions {
      switch action {
      case .readChunk(let offset, let count):
        file.read(offset: offset, count: count) { [weak self] result in
          self?.onLoop { $0.chunkRead(id, offset: offset, result) }
        }
      case .sendEnd(let digest):
        sendTransferFrame(
          .transferEnd(transferID: id, size: transfer.record.size, sha256: digest), to: transfer.record.toNodeID)
      }
    }
  }

  func chunkRead(_ id: String, offset: UInt64, _ result: Result<[UInt8], TransferIOError>) {
    guard let transfer = transfers.outgoing[id], var sender = transfer.sender else { return }
    switch result {
    case .failure(let error):
      sender.chunkAbandoned()
      transfer.sender = sender
      failTransfer(transfer, reason: "the spool could not be read: \(error)", notify: true)
    case .success(let bytes):
      guard sender.state == .sending, sender.sent == offset,
        sendTransferFrame(
          .transferChunk(transferID: id, offset: offset, bytes: bytes), to: transfer.record.toNodeID)
      else {
        sender.chunkAbandoned()
        transfer.sender = sender
        return
      }
      sender.chunkSent(offset: offset, count: bytes.count)
      transfer.sender = sender
      transfer.rateTokens -= Double(bytes.count)
      pump(transfer)
    }
  }

  @discardableResult
  func sendTransferFrame(_ message: MeshMessage, to nodeID: String) -> Bool {
    guard let connection = mesh.links.connection(of: nodeID), mesh.socketByConnection[connection] != nil else {
      return false
    }
    sendMessage(message, on: connection)
    return true
  }

  /// Sends `message` now, or when `nodeID` links again.
  func sendOrQueueNotice(_ message: MeshMessage, to nodeID: String) {
    if !sendTransferFrame(message, to: nodeID) { transfers.notices[nodeID, default: []].append(message) }
  }

  /// Called every mesh tick: senders held back by a full link or the rate limit try again.
  func transferTick() {
    streamTick()
    for transfer in transfers.outgoing.values where transfer.sender?.state == .sending {
      pump(transfer)
    }
  }

  // MARK: - Mesh messages

  func transferMessage(_ message: MeshMessage, from nodeID: String) {
    switch message {
    case .transferOffer(let offer):
      guard transfers.restored else {
        transfers.deferredOffers.append((offer, nodeID))
        return
      }
      offerReceived(offer, from: nodeID)
    case .transferAccept(let id, let offset):
      guard let transfer = transfers.outgoing[id], transfer.record.toNodeID == nodeID, var sender = transfer.sender
      else { return }
      guard sender.accepted(offset: offset) else { return }
      transfer.sender = sender
      transfer.rateUpdatedAt = Self.monotonicMillis()
      transfer.rateTokens = 0
      transfer.record.bytes = offset
      let consented = transfer.consentDeadline != nil || transfer.record.state == "awaitingConsent"
      transfer.consentDeadline = nil
      if let resumedFrom = sender.resumedFrom {
        transfer.record.resumedFrom = resumedFrom
        transfer.record.state = "inProgress"
        meshLogger.info("Transfer resumed.", ["transfer.id": id, "offset": offset])
        persist(transfer)
      } else if transfer.answer == nil && transfer.record.state != "inProgress" {
        transfer.record.state = "inProgress"
        persist(transfer)
      }
      if consented { publishTransferEvent("transfer.accepted", transfer) }
      if let answer = transfer.answer {
        transfer.answer = nil
        answer.resume()
      }
      pump(transfer)
    case .transferReject(let id, let code, let text):
      guard let transfer = transfers.outgoing[id], transfer.record.toNodeID == nodeID else { return }
      if code == .declined {
        guard !transfer.record.isTerminal else { return }
        transfer.sender?.cancel()
        transfer.file?.close(remove: true)
        transfer.file = nil
        transfer.consentDeadline = nil
        settle(transfer, state: "declined", reason: text)
        return
      }
      if let answer = transfer.answer {
        transfer.answer = nil
        answer.resume(throwing: rejectionError(code, text))
      } else {
        failTransfer(transfer, reason: "the receiver refused to resume: \(text)", notify: false)
      }
    case .transferChunk(let id, let offset, let bytes):
      guard let transfer = transfers.incoming[id], transfer.record.fromNodeID == nodeID,
        var receiver = transfer.receiver, let file = transfer.file
      else { return }
      let decision = receiver.chunk(offset: offset, count: bytes.count)
      transfer.receiver = receiver
      switch decision {
      case .ignore: break
      case .reject(let reason): failTransfer(transfer, reason: "protocol error: \(reason)", notify: true)
      case .write:
        file.append(bytes) { [weak self] result in
          self?.onLoop { $0.receivedWritten(id, result) }
        }
      }
    case .transferCredit(let id, let offset):
      guard let transfer = transfers.outgoing[id], transfer.record.toNodeID == nodeID, var sender = transfer.sender,
        sender.credit(offset: offset)
      else { return }
      transfer.sender = sender
      transfer.record.bytes = sender.acknowledged
      reportProgress(transfer)
      pump(transfer)
    case .transferEnd(let id, let size, let digest):
      guard let transfer = transfers.incoming[id], transfer.record.fromNodeID == nodeID,
        var receiver = transfer.receiver
      else { return }
      let (actions, failure) = receiver.end(size: size, sha256: digest)
      transfer.receiver = receiver
      if let failure {
        failTransfer(transfer, reason: failure, notify: true)
        return
      }
      carryOut(actions, transfer)
    case .transferFinished(let id, let digest):
      guard let transfer = transfers.outgoing[id], transfer.record.toNodeID == nodeID, var sender = transfer.sender
      else { return }
      sender.receiverFinished(sha256: digest)
      transfer.sender = sender
      if case .failed(let reason) = sender.state {
        failTransfer(transfer, reason: reason, notify: false)
        return
      }
      transfer.record.bytes = transfer.record.size
      let final = finalPath(id, .outgoing, name: transfer.record.name)
      transfer.file?.move(to: final, within: dataDirectoryPath) { [weak self] error in
        self?.onLoop { node in
          guard let transfer = node.transfers.outgoing[id], !transfer.record.isTerminal else { return }
          if error == nil { transfer.record.path = final }
          transfer.file?.close(remove: false)
          transfer.file = nil
          node.settle(transfer, state: "finished", reason: nil)
        }
      }
    case .transferFailed(let id, let reason):
      for transfer in [transfers.outgoing[id], transfers.incoming[id]].compactMap({ $0 })
      where transfer.record.fromNodeID == nodeID || transfer.record.toNodeID == nodeID {
        failTransfer(transfer, reason: reason, notify: false)
      }
    case .transferCancel(let id, let reason):
      for transfer in [transfers.outgoing[id], transfers.incoming[id]].compactMap({ $0 })
      where transfer.record.fromNodeID == nodeID || transfer.record.toNodeID == nodeID {
        cancelTransfer(transfer, reason: reason, notify: false)
      }
    case .transferAwaitingConsent(let id, let timeoutMillis):
      guard let transfer = transfers.outgoing[id], transfer.record.toNodeID == nodeID,
        transfer.sender?.state == .offering, !transfer.record.isTerminal
      else { return }
      // The receiver bounds the wait; this side gives up a little later by itself, should the verdict never come.
      let wait = min(timeoutMillis, 86_400_000) + Self.consentGraceMillis
      transfer.consentDeadline = Self.monotonicMillis() + wait
      scheduleConsentExpiry(id, .outgoing, after: wait)
      if transfer.record.state != "awaitingConsent" {
        transfer.record.state = "awaitingConsent"
        persist(transfer)
      }
      if let answer = transfer.answer {
        transfer.answer = nil
        answer.resume()
      }
    default:
      break
    }
  }

  func offerReceived(_ offer: TransferOffer, from nodeID: String) {
    let id = offer.transferID
    if let transfer = transfers.incoming[id] {
      reofferReceived(transfer, from: nodeID)
      return
    }
    if offer.resume {
      sendTransferFrame(
        .transferReject(transferID: id, code: .unknownTransfer, message: "this node has no transfer \(id)"),
        to: nodeID)
      return
    }
    guard nodeID == self.nodeID || transfers.outgoing[id] == nil else {
      // The id of a transfer this node sends: one id, one record.
      refuseFrame("invalid_id", from: nodeID, "a transfer offer reuses the id of an outgoing transfer")
      sendTransferFrame(
        .transferReject(transferID: id, code: .refused, message: "transfer id \(id) is in use here"), to: nodeID)
      return
    }
    // The receiver must be a local member that agreed to be in the session (not one a linked node listed).
    if peers[offer.toPeerID] != nil && !mesh.sessions.hasAgreed(offer.toPeerID, to: offer.sessionID) {
      refuseFrame("not_agreed", from: nodeID, "a transfer offer to \(offer.toPeerID), not a member by its own act")
    }
    guard let peer = peers[offer.toPeerID], let session = mesh.sessions.sessions[offer.sessionID],
      session.members.contains(where: { $0.peerID == offer.toPeerID && $0.nodeID == self.nodeID }),
      mesh.sessions.hasAgreed(offer.toPeerID, to: offer.sessionID),
      session.members.contains(where: { $0.peerID == offer.fromPeerID && $0.nodeID == nodeID })
    else {
      sendTransferFrame(
        .transferReject(
          transferID: id, code: .notMember,
          message: "peer \(offer.toPeerID) is not in session \(offer.sessionID) on the receiving node"),
        to: nodeID)
      return
    }
    if let rejection = receivability(size: offer.size) {
      sendTransferFrame(.transferReject(transferID: id, code: rejection.code, message: rejection.message), to: nodeID)
      return
    }
    let name = Self.sanitizedFileName(offer.name) ?? "file"
    let now = Timestamp.now()
    let ask = fileConsent == .ask && transfers.alwaysAccept[peer.id]?[offer.fromPeerID] == nil
    let record = TransferRecord(
      id: id, direction: .incoming, sessionID: offer.sessionID, fromPeerID: offer.fromPeerID,
      fromDisplayName: offer.fromDisplayName, fromNodeID: nodeID, toPeerID: peer.id, toDisplayName: peer.displayName,
      toNodeID: self.nodeID, name: name,
      contentType: Self.cleanContentType(offer.contentType) ?? "application/octet-stream", size: offer.size,
      bytes: 0, state: ask ? "awaitingConsent" : "inProgress", reason: nil, sha256: nil,
      path: partialPath(id, .incoming), resumedFrom: nil, createdAt: now, updatedAt: now)
    let transfer = LiveTransfer(record: record)
    if ask {
      offerAwaitingConsent(transfer)
      return
    }
    transfer.receiver = TransferReceiver(size: offer.size)
    transfers.incoming[id] = transfer
    try? FileManager.default.createDirectory(
      atPath: "\(dataDirectoryPath)/transfers", withIntermediateDirectories: true)
    let file = TransferFile(path: record.path)
    transfer.file = file
    Task {
      do {
        try await store.saveTransfer(record)
      } catch {
        failTransfer(transfer, reason: "the receiving node could not record the transfer: \(error)", notify: true)
        return
      }
      file.open(rehash: false, exclusive: true) { [weak self] result in
        self?.onLoop { node in
          guard let transfer = node.transfers.incoming[id], !transfer.record.isTerminal else { return }
          if case .failure(let error) = result {
            node.failTransfer(transfer, reason: "the receiving node cannot write: \(error)", notify: true)
            return
          }
          node.publishTransferEvent("transfer.started", transfer)
          node.sendTransferFrame(.transferAccept(transferID: id, offset: 0), to: nodeID)
        }
      }
    }
  }

  func receivedWritten(_ id: String, _ result: Result<UInt64, TransferIOError>) {
    guard let transfer = transfers.incoming[id], var receiver = transfer.receiver, !transfer.record.isTerminal else {
      return
    }
    switch result {
    case .failure(let error):
      failTransfer(transfer, reason: "the receiving node could not write: \(error)", notify: true)
    case .success(let length):
      let actions = receiver.wrote(upTo: length)
      transfer.receiver = receiver
      transfer.record.bytes = receiver.written
      reportProgress(transfer)
      carryOut(actions, transfer)
    }
  }

  func carryOut(_ actions: [TransferReceiver.Action], _ transfer: LiveTransfer) {
    let id = transfer.record.id
    for action in actions {
      switch action {
      case .sendCredit(let offset):
        sendTransferFrame(.transferCredit(transferID: id, offset: offset), to: transfer.record.fromNodeID)
      case .verify:
        transfer.file?.finish { [weak self] result in
          self?.onLoop { $0.receivedVerified(id, result) }
        }
      }
    }
  }

  func receivedVerified(_ id: String, _ result: Result<[UInt8], TransferIOError>) {
    guard let transfer = transfers.incoming[id], var receiver = transfer.receiver else { return }
    let digest: [UInt8]
    switch result {
    case .failure(let error):
      failTransfer(transfer, reason: "the receiving node could not flush the file: \(error)", notify: true)
      return
    case .success(let value): digest = value
    }
    let matched = receiver.verified(sha256: digest)
    transfer.receiver = receiver
    guard matched else {
      if case .failed(let reason) = receiver.state { failTransfer(transfer, reason: reason, notify: true) }
      return
    }
    let final = finalPath(id, .incoming, name: transfer.record.name)
    transfer.file?.move(to: final, within: dataDirectoryPath) { [weak self] error in
      self?.onLoop { node in
        guard let transfer = node.transfers.incoming[id], !transfer.record.isTerminal else { return }
        if let error {
          node.failTransfer(transfer, reason: "the finished file could not be moved into place: \(error)", notify: true)
          return
        }
        transfer.file?.close(remove: false)
        transfer.file = nil
        transfer.record.path = final
        transfer.record.sha256 = Crypto.hex(digest)
        transfer.record.bytes = transfer.record.size
        node.sendTransferFrame(.transferFinished(transferID: id, sha256: digest), to: transfer.record.fromNodeID)
        node.settle(transfer, state: "finished", reason: nil)
      }
    }
  }

  // MARK: - Links

  func transfersLinkUp(_ nodeID: String) {
    for message in transfers.notices.removeValue(forKey: nodeID) ?? [] {
      sendTransferFrame(message, to: nodeID)
    }
    for transfer in transfers.outgoing.values where transfer.record.toNodeID == nodeID {
      guard var sender = transfer.sender, sender.linkRestored() else { continue }
      transfer.sender = sender
      sendTransferFrame(.transferOffer(offer(for: transfer.record, resume: true)), to: nodeID)
    }
  }

  func transfersLinkDown(_ nodeID: String) {
    streamsLinkDown(nodeID)
    for transfer in transfers.outgoing.values where transfer.record.toNodeID == nodeID && !transfer.record.isTerminal {
      transfer.sender?.linkLost()
      if let answer = transfer.answer {
        transfer.answer = nil
        answer.resume(throwing: APIError.unavailable("the receiver's node went away before it answered; try again"))
      }
      if transfer.sender?.state == .interrupted { transfer.record.state = "interrupted" }
    }
    for transfer in transfers.incoming.values where transfer.record.fromNodeID == nodeID && !transfer.record.isTerminal
    {
      transfer.receiver?.linkLost()
      if transfer.receiver?.state == .interrupted { transfer.record.state = "interrupted" }
    }
  }

  // MARK: - Ending

  /// Records a terminal state, tells the local party, and forgets the file handle.
  func settle(_ transfer: LiveTransfer, state: String, reason: String?) {
    transfer.record.state = state
    transfer.record.reason = reason
    transfer.record.updatedAt = Timestamp.now()
    persist(transfer)
    var extra: JSONObject = [:]
    if let sha = transfer.record.sha256, state == "finished" { extra["sha256"] = .string(sha) }
    if let reason { extra["reason"] = .string(reason) }
    publishTransferEvent("transfer.\(state)", transfer, extra: extra)
    if let answer = transfer.answer {
      transfer.answer = nil
      answer.resume(throwing: APIError(status: 409, code: "transfer_\(state)", message: reason ?? "transfer \(state)"))
    }
    if let done = transfer.uploadDone {
      transfer.uploadDone = nil
      let status = state == "canceled" || state == "declined" ? 409 : 502
      done.resume(
        throwing: APIError(
          status: status, code: "transfer_\(state)",
          message: "the transfer was \(state): \(reason ?? "no reason given")"))
    }
    if let request = transfer.uploadRequest {
      transfers.byUpload[request] = nil
      transfer.uploadRequest = nil
    }
  }

  func failTransfer(_ transfer: LiveTransfer, reason: String, notify: Bool) {
    guard !transfer.record.isTerminal else { return }
    transfer.sender?.fail(reason)
    transfer.receiver?.fail(reason)
    transfer.file?.close(remove: true)
    transfer.file = nil
    if notify { notifyOtherSide(transfer, .transferFailed(transferID: transfer.record.id, reason: reason)) }
    settle(transfer, state: "failed", reason: reason)
  }

  func cancelTransfer(_ transfer: LiveTransfer, reason: String, notify: Bool) {
    guard !transfer.record.isTerminal else { return }
    transfer.sender?.cancel()
    transfer.receiver?.cancel()
    transfer.file?.close(remove: true)
    transfer.file = nil
    if notify { notifyOtherSide(transfer, .transferCancel(transferID: transfer.record.id, reason: reason)) }
    settle(transfer, state: "canceled", reason: reason)
  }

  /// Drops a transfer that never started (its offer was refused): no events, no record kept.
  func discard(_ transfer: LiveTransfer, state: String, reason: String) {
    transfer.file?.close(remove: true)
    transfer.file = nil
    transfer.record.state = state
    transfer.record.reason = reason
    transfers.outgoing[transfer.record.id] = nil
    let id = transfer.record.id
    Task { try? await store.deleteTransfer(id: id) }
  }

  func notifyOtherSide(_ transfer: LiveTransfer, _ message: MeshMessage) {
    let other = transfer.record.direction == .outgoing ? transfer.record.toNodeID : transfer.record.fromNodeID
    if other == nodeID {
      // Both sides are here: end the other record too.
      let peer =
        transfer.record.direction == .outgoing
        ? transfers.incoming[transfer.record.id] : transfers.outgoing[transfer.record.id]
      guard let peer, !peer.record.isTerminal else { return }
      switch message {
      case .transferCancel(_, let reason): cancelTransfer(peer, reason: reason, notify: false)
      case .transferFailed(_, let reason): failTransfer(peer, reason: reason, notify: false)
      default: break
      }
      return
    }
    sendOrQueueNotice(message, to: other)
  }

  func persist(_ transfer: LiveTransfer) {
    let record = transfer.record
    Task {
      do {
        try await store.saveTransfer(record)
      } catch {
        logger.warning("Could not save a transfer.", ["transfer.id": record.id, "error": String(describing: error)])
      }
    }
  }

  // MARK: - Events

  func localParty(_ record: TransferRecord) -> String {
    record.direction == .outgoing ? record.fromPeerID : record.toPeerID
  }

  func publishTransferEvent(_ type: String, _ transfer: LiveTransfer, extra: JSONObject = [:]) {
    let peerID = localParty(transfer.record)
    guard peers[peerID] != nil else { return }
    var data: JSONObject = ["transfer": transferJSON(transfer.record)]
    for (key, value) in extra { data[key] = value }
    publishInBackground([(peerID: peerID, type: type, data: .object(data))])
  }

  func reportProgress(_ transfer: LiveTransfer) {
    guard transfer.throttle.shouldReport(bytes: transfer.record.bytes, now: Self.monotonicMillis()) else { return }
    publishTransferEvent(
      "transfer.progress", transfer,
      extra: ["bytes": .int(Int64(transfer.record.bytes)), "total": .int(Int64(transfer.record.size))])
  }

  func transferJSON(_ record: TransferRecord) -> JSONValue {
    var object: JSONObject = [
      "id": .string(record.id), "sessionId": .string(record.sessionID),
      "direction": .string(record.direction.rawValue), "name": .string(record.name),
      "contentType": .string(record.contentType), "size": .int(Int64(record.size)),
      "bytes": .int(Int64(record.bytes)), "state": .string(record.state),
      "from": [
        "id": .string(record.fromPeerID), "displayName": .string(record.fromDisplayName),
        "nodeId": .string(record.fromNodeID),
      ],
      "to": [
        "id": .string(record.toPeerID), "displayName": .string(record.toDisplayName),
        "nodeId": .string(record.toNodeID),
      ],
      "createdAt": .string(record.createdAt), "updatedAt": .string(record.updatedAt),
    ]
    object["sha256"] = record.sha256.map { .string($0) } ?? .null
    object["reason"] = record.reason.map { .string($0) } ?? .null
    object["resumedFrom"] = record.resumedFrom.map { .int(Int64($0)) } ?? .null
    return .object(object)
  }

  // MARK: - REST

  func visibleTransfers(of peerID: String) -> [TransferRecord] {
    let outgoing = transfers.outgoing.values.map(\.record).filter { $0.fromPeerID == peerID }
    let incoming = transfers.incoming.values.map(\.record).filter { $0.toPeerID == peerID }
    return (outgoing + incoming).sorted {
      ($0.createdAt, $0.id, $0.direction.rawValue) < ($1.createdAt, $1.id, $1.direction.rawValue)
    }
  }

  func ownTransfer(_ context: RequestContext) throws(APIError) -> LiveTransfer {
    let id = context.parameters["transferId"] ?? ""
    let peerID = context.authenticatedPeer.id
    if let transfer = transfers.outgoing[id], transfer.record.fromPeerID == peerID { return transfer }
    if let transfer = transfers.incoming[id], transfer.record.toPeerID == peerID { return transfer }
    throw APIError.notFound("no transfer \(id) sent or received by this peer; see GET /api/v1/transfers")
  }

  func listTransfers(_ context: RequestContext) throws -> HTTPResponse {
    let list = visibleTransfers(of: context.authenticatedPeer.id)
    let page = try Page(list, id: { "\($0.id).\($0.direction.rawValue)" }, query: context.request.head.query)
    return .json(["transfers": .array(page.items.map(transferJSON)), "nextCursor": page.nextCursorJSON])
  }

  func getTransfer(_ context: RequestContext) throws -> HTTPResponse {
    .json(["transfer": transferJSON(try ownTransfer(context).record)])
  }

  func deleteTransfer(_ context: RequestContext) throws -> HTTPResponse {
    let transfer = try ownTransfer(context)
    guard !transfer.record.isTerminal else {
      throw APIError(
        status: 409, code: "transfer_\(transfer.record.state)",
        message:
          "transfer \(transfer.record.id) is already \(transfer.record.state); only transfers in progress can be canceled"
      )
    }
    let who = transfer.record.direction == .outgoing ? "the sender" : "the receiver"
    cancelTransfer(transfer, reason: "canceled by \(who)", notify: true)
    return .json(["transfer": transferJSON(transfer.record)])
  }

  func transferContent(_ context: RequestContext) throws -> HTTPResponse {
    let transfer = try ownTransfer(context)
    let record = transfer.record
    guard record.state == "finished" else {
      throw APIError(
        status: 409, code: "transfer_not_finished",
        message: "transfer \(record.id) is \(record.state); its content can be downloaded once it is finished")
    }
    let size = Int(record.size)
    var headers: [(String, String)] = [
      ("accept-ranges", "bytes"), ("content-disposition", Self.contentDisposition(record.name)),
      ("cache-control", "no-store"),
    ]
    if let sha = record.sha256 { headers.append(("x-content-sha256", sha)) }
    var status = 200
    var offset = 0
    var length = size
    if let range = context.request.head.headers["range"] {
      switch Self.parseRange(range, size: size) {
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

  enum ByteRange: Equatable {
    case none
    case unsatisfiable
    case range(Int, Int)
  }

  /// One `bytes=` range (RFC 9110 §14.1.2): `a-b`, `a-` or `-n`. Several ranges or other units are ignored (the
  /// whole file is sent), as the RFC allows.
  static func parseRange(_ header: String, size: Int) -> ByteRange {
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

  /// `attachment` with an ASCII fallback name and the exact UTF-8 name (RFC 6266 / 8187).
  static func contentDisposition(_ name: String) -> String {
    let fallback = String(
      name.unicodeScalars.map { $0.isASCII && $0 != "\"" && $0 != "\\" && $0.value >= 0x20 ? Character($0) : "_" })
    let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8)
    let encoded = name.utf8.map { unreserved.contains($0) ? String(UnicodeScalar($0)) : String(format: "%%%02X", $0) }
      .joined()
    return "attachment; filename=\"\(fallback)\"; filename*=UTF-8''\(encoded)"
  }

  // MARK: - Restart

  /// Loads the transfer records after a start: finished ones for listing, unfinished ones to resume.
  func restoreTransfers() async {
    let records: [TransferRecord]
    do {
      records = try await store.allTransfers()
    } catch {
      logger.error("Could not load transfers.", ["error": String(describing: error)])
      records = []
    }
    var rehashing = 0
    for var record in records {
      let transfer = LiveTransfer(record: record)
      switch record.direction {
      case .outgoing: transfers.outgoing[record.id] = transfer
      case .incoming: transfers.incoming[record.id] = transfer
      }
      guard !record.isTerminal else { continue }
      let local = record.fromNodeID == nodeID && record.toNodeID == nodeID
      if record.direction == .outgoing {
        guard !local, let hex = record.sha256, let digest = Self.unhex(hex),
          FileManager.default.fileExists(atPath: record.path)
        else {
          let reason = "the sending node restarted before the upload was complete"
          failTransfer(transfer, reason: reason, notify: !local)
          continue
        }
        transfer.sender = TransferSender.restored(
          size: record.size, digest: digest, window: Self.transferWindow, chunkSize: Self.transferChunk)
        transfer.file = TransferFile(path: record.path)
        transfer.file?.open(rehash: false) { _ in }
        record.state = "interrupted"
        transfer.record = record
      } else {
        guard !local else {
          failTransfer(transfer, reason: "the node restarted before the upload was complete", notify: false)
          continue
        }
        if record.state == "awaitingConsent" {
          // Nothing was written yet: the wait for the recipient's answer starts again (bounded as before).
          startConsentWait(transfer)
          continue
        }
        let file = TransferFile(path: record.path)
        transfer.file = file
        transfer.record.state = "interrupted"
        rehashing += 1
        let id = record.id
        let length: Result<UInt64, TransferIOError> = await withCheckedContinuation { continuation in
          file.open(rehash: true) { continuation.resume(returning: $0) }
        }
        switch length {
        case .failure(let error):
          failTransfer(transfer, reason: "the partial file could not be read after a restart: \(error)", notify: true)
        case .success(let offset):
          var receiver = TransferReceiver(size: record.size, offset: offset)
          receiver.linkLost()
          transfer.receiver = receiver
          transfer.record.bytes = min(offset, record.size)
          meshLogger.info("Transfer restored.", ["transfer.id": id, "offset": offset])
        }
      }
    }
    do {
      for entry in try await store.allAlwaysAccepted() {
        transfers.alwaysAccept[entry.peerID, default: [:]][entry.senderPeerID] = entry
      }
    } catch {
      logger.error("Could not load the always-accept lists.", ["error": String(describing: error)])
    }
    transfers.restored = true
    let deferred = transfers.deferredOffers
    transfers.deferredOffers = []
    for (offer, from) in deferred { offerReceived(offer, from: from) }
    for nodeID in mesh.links.linkedNodeIDs { transfersLinkUp(nodeID) }
  }

  static func unhex(_ text: String) -> [UInt8]? {
    let digits = Array(text.utf8)
    guard digits.count % 2 == 0 else { return nil }
    var bytes: [UInt8] = []
    var index = 0
    while index < digits.count {
      guard let high = hexValue(digits[index]), let low = hexValue(digits[index + 1]) else { return nil }
      bytes.append(high << 4 | low)
      index += 2
    }
    return bytes
  }

  private static func hexValue(_ digit: UInt8) -> UInt8? {
    switch digit {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
    default: nil
    }
  }

  /// The member a file or stream goes to: connected, its node linked, and the link good enough for the session.
  func connectedRecipient(_ toID: String, in session: SessionDescription) throws(APIError) -> SessionMember {
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
    if target.nodeID != nodeID && mesh.links.connection(of: target.nodeID) == nil {
      throw APIError.unavailable("the node of peer \(toID) is not linked right now; try again when it is")
    }
    try requireCarriage(session, to: target)
    return target
  }

  /// `encryption: required` sessions never cross a plaintext link: their files and streams neither.
  func requireCarriage(_ session: SessionDescription, to target: SessionMember) throws(APIError) {
    guard mesh.sessions.mayCarry(session, to: target.nodeID) else {
      throw APIError(
        status: 409, code: "encryption_unavailable",
        message: "session \(session.sessionID) requires encryption, but the link to the node of \(target.displayName) "
          + "is not encrypted (is it running with --mesh-tls off?)")
    }
  }
}
