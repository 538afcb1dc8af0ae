/// Resource transfers between two nodes: the sender's and the receiver's state machines, sans I/O.
///
/// A transfer moves one file from a peer on the sender's node to a peer on the receiver's node over their mesh link
/// (frames 0x40–0x48, docs/mesh-protocol.md). The sender's node spools the uploaded body into its data directory
/// while it streams it on, so what was uploaded survives a link loss or a restart of either node:
///
/// 1. The sender offers (`transferOffer`); the receiver checks size, disk space and membership, then accepts with
///    the offset it already holds durably (0 for a new transfer) or rejects.
/// 2. The sender sends `transferChunk`s from that offset, never more than `window` bytes beyond the receiver's last
///    `transferCredit`, and never beyond what is spooled. The receiver writes each chunk in order and credits it once
///    it is on disk, which opens the window again: memory on both sides is bounded by the window, whatever the size.
/// 3. When every byte was sent and the upload is complete, the sender sends `transferEnd` with the SHA-256 of the
///    whole content. The receiver, once everything is written, compares digests and answers `transferFinished` or
///    `transferFailed`.
/// 4. A link loss interrupts both sides. When the link returns, the sender offers again with `resume` set and the
///    receiver accepts from its durable offset: nothing that arrived is sent twice. A receiver that already finished
///    (the link dropped before its `transferFinished` arrived) answers the re-offer with `transferFinished` and its
///    SHA-256 again, so the sender finishes too (``TransferReceiver/reoffered()``).
/// 5. Either side may cancel (`transferCancel`); both stop and remove partial data.
///
/// The node runtime feeds events in (`accepted`, `spooled`, `credit`, `linkLost` …), asks ``TransferSender/pump(canSend:)``
/// what to do next, and carries out the actions: reading the spool, sending frames, hashing and moving files.

/// Where one side of a transfer is. A sender goes `offering` → `sending`, a receiver `receiving` → `verifying`; both
/// may be `interrupted` by a link loss and end `finished`, `failed` or `canceled`.
public enum TransferPhase: Sendable, Equatable {
  /// The sender waits for the receiver's answer to an offer.
  case offering
  /// The sender sends chunks (or waits for spool, credit, or the receiver's verdict).
  case sending
  /// The receiver takes chunks.
  case receiving
  /// The receiver has every byte written and checks the digest.
  case verifying
  /// The link between the two nodes is down; the sender offers again (with `resume`) when it returns.
  case interrupted
  /// The receiver verified the content.
  case finished
  /// The transfer failed for good.
  case failed(String)
  /// A party canceled it.
  case canceled

  /// Whether nothing more will happen.
  public var isTerminal: Bool {
    switch self {
    case .finished, .failed, .canceled: true
    default: false
    }
  }

  /// Ends the transfer as failed, unless it has ended already.
  mutating func fail(_ reason: String) {
    if !isTerminal { self = .failed(reason) }
  }

  /// Ends the transfer as canceled, unless it has ended already.
  mutating func cancel() {
    if !isTerminal { self = .canceled }
  }
}

/// The sender's side of one transfer.
public struct TransferSender: Sendable, Equatable {
  /// What the node must do next.
  public enum Action: Sendable, Equatable {
    /// Read `count` bytes of the spool at `offset` and send them as one chunk, then call ``chunkSent(offset:count:)``
    /// (or ``chunkAbandoned(offset:)``). Several reads may be asked for at once (``readAhead``); the node carries
    /// them out in order and reports each in that order.
    case readChunk(offset: UInt64, count: Int)
    /// Send `transferEnd` with this digest.
    case sendEnd(sha256: [UInt8])
  }

  /// The content size in bytes.
  public let size: UInt64
  /// Bytes the sender may have sent beyond the receiver's last credit.
  public let window: UInt64
  /// The largest chunk.
  public let chunkSize: Int
  /// The most spool reads in flight at once: while one chunk is on its way to the link the next ones are read.
  public let readAhead: Int
  public private(set) var state: TransferPhase
  /// Bytes of the upload that are durable in the spool.
  public private(set) var spooled: UInt64 = 0
  /// The SHA-256 of the whole content, known once the upload is complete.
  public private(set) var digest: [UInt8]?
  /// The offset of the next chunk to send.
  public private(set) var sent: UInt64 = 0
  /// Everything before this offset is durable at the receiver.
  public private(set) var acknowledged: UInt64 = 0
  /// The offset the receiver accepted the last resume from (nil until a resume happened).
  public private(set) var resumedFrom: UInt64?
  /// Spool reads asked for and not yet reported (sent or abandoned), at most ``readAhead``.
  public private(set) var readsInFlight = 0
  /// Where the next read starts: `sent` plus what the reads in flight will bring.
  public private(set) var readOffset: UInt64 = 0
  /// Whether a spool read is being carried out.
  public var readInFlight: Bool { readsInFlight > 0 }
  private var endSent = false
  private var acceptedOnce = false

  /// A new transfer of `size` bytes, waiting for the receiver's answer to the first offer.
  public init(size: UInt64, window: UInt64 = 4 << 20, chunkSize: Int = 64 << 10, readAhead: Int = 1) {
    precondition(
      window > 0 && chunkSize > 0 && readAhead > 0, "TransferSender: window, chunk size and read-ahead must be positive"
    )
    self.size = size
    self.window = window
    self.chunkSize = chunkSize
    self.readAhead = readAhead
    self.state = .offering
  }

  /// A transfer restored after a restart: the upload is complete (`digest`), the link not yet up.
  public static func restored(
    size: UInt64, digest: [UInt8], window: UInt64 = 4 << 20, chunkSize: Int = 64 << 10, readAhead: Int = 1
  ) -> TransferSender {
    var sender = TransferSender(size: size, window: window, chunkSize: chunkSize, readAhead: readAhead)
    sender.spooled = size
    sender.digest = digest
    sender.acceptedOnce = true
    sender.state = .interrupted
    return sender
  }

  /// The receiver accepted, holding everything before `offset`. Returns false (and changes nothing) when the
  /// answer is not expected or the offset is impossible.
  public mutating func accepted(offset: UInt64) -> Bool {
    guard state == .offering, offset <= size else { return false }
    if acceptedOnce { resumedFrom = offset }
    acceptedOnce = true
    state = .sending
    sent = offset
    readOffset = offset
    acknowledged = offset
    endSent = false
    return true
  }

  /// The upload has reached `bytes` durable bytes in the spool.
  public mutating func spooled(upTo bytes: UInt64) {
    spooled = max(spooled, min(bytes, size))
  }

  /// The upload is complete; `sha256` is the digest of all `size` bytes.
  public mutating func uploadCompleted(sha256: [UInt8]) {
    spooled = size
    digest = sha256
  }

  /// The receiver credits everything before `offset`. Returns false for a credit beyond what was sent.
  public mutating func credit(offset: UInt64) -> Bool {
    guard state == .sending, offset <= sent else { return false }
    acknowledged = max(acknowledged, offset)
    return true
  }

  /// The chunk from ``Action/readChunk(offset:count:)`` went out (or, when the transfer stopped meanwhile, is dropped).
  public mutating func chunkSent(offset: UInt64, count: Int) {
    readsInFlight = max(readsInFlight - 1, 0)
    guard state == .sending, offset == sent else { return }
    sent += UInt64(count)
  }

  /// The read of the chunk at `offset` failed, or the chunk could not be sent (or was not the next one): it will be
  /// read again. Reading restarts at `sent` when the abandoned chunk was the next one to send, or when no read is
  /// left in flight (a late read from before a resume may have had another length; the reads after it would never
  /// line up).
  public mutating func chunkAbandoned(offset: UInt64? = nil) {
    readsInFlight = max(readsInFlight - 1, 0)
    if offset == nil || offset == sent || readsInFlight == 0 { readOffset = sent }
  }

  /// What to do now; `canSend` says whether the link has room for another chunk.
  public mutating func pump(canSend: Bool) -> [Action] {
    var actions: [Action] = []
    guard state == .sending, canSend else { return actions }
    readOffset = max(readOffset, sent)
    while readsInFlight < readAhead && readOffset < spooled && readOffset - acknowledged < window {
      let count = Int(min(UInt64(chunkSize), spooled - readOffset, window - (readOffset - acknowledged)))
      readsInFlight += 1
      actions.append(.readChunk(offset: readOffset, count: count))
      readOffset += UInt64(count)
    }
    if actions.isEmpty, readsInFlight == 0, let digest, sent == size, !endSent {
      endSent = true
      actions.append(.sendEnd(sha256: digest))
    }
    return actions
  }

  /// The receiver reports the content complete with `sha256`; it must match the sender's digest.
  public mutating func receiverFinished(sha256: [UInt8]) {
    guard !state.isTerminal else { return }
    state = sha256 == digest ? .finished : .failed("the receiver's SHA-256 does not match the upload")
  }

  /// The transfer failed (at the receiver, or here).
  public mutating func fail(_ reason: String) { state.fail(reason) }

  /// A party canceled.
  public mutating func cancel() { state.cancel() }

  /// The link to the receiver's node went down.
  public mutating func linkLost() {
    guard state == .offering || state == .sending else { return }
    state = .interrupted
  }

  /// The link is back: returns true when the node must offer again (with `resume` set).
  public mutating func linkRestored() -> Bool {
    guard state == .interrupted else { return false }
    state = .offering
    return true
  }
}

/// The receiver's side of one transfer.
public struct TransferReceiver: Sendable, Equatable {
  /// What to do with a chunk.
  public enum ChunkDecision: Sendable, Equatable {
    /// Append it to the file.
    case write
    /// Fail the transfer: the sender broke the protocol (the reason says how).
    case reject(String)
    /// Not expected now (e.g. after a cancel); drop it.
    case ignore
  }

  /// What the node must do next.
  public enum Action: Sendable, Equatable {
    /// Credit everything before `offset` to the sender.
    case sendCredit(offset: UInt64)
    /// Everything is written: finish the digest and compare it with `expected`, then call ``verified(sha256:)``.
    case verify(expected: [UInt8])
  }

  public let size: UInt64
  public private(set) var state: TransferPhase
  /// The offset of the next expected chunk (bytes handed to the writer).
  public private(set) var received: UInt64
  /// Bytes durable on disk.
  public private(set) var written: UInt64
  /// The sender's digest, once `transferEnd` arrived.
  public private(set) var expectedDigest: [UInt8]?
  /// The digest of the content as written, once verified.
  public private(set) var digest: [UInt8]?

  /// How the receiver answers an offer made again (after a link loss, or a restart of the sender's node).
  public enum ReofferAnswer: Sendable, Hashable {
    /// Accept from `offset`: everything before it is held.
    case accept(offset: UInt64)
    /// The content is complete and verified: answer `transferFinished` with this digest.
    case finished(sha256: [UInt8])
    /// Every byte is written and the digest is being checked: the verdict follows, no answer now.
    case pending
    /// The transfer ended here otherwise (failed, canceled); refuse with this reason.
    case refuse(String)
  }

  /// A receiver holding `offset` durable bytes already (0 for a new transfer).
  public init(size: UInt64, offset: UInt64 = 0) {
    self.size = size
    self.received = min(offset, size)
    self.written = min(offset, size)
    self.state = .receiving
  }

  /// A transfer restored after a restart that had already finished here with `sha256`.
  public static func finished(size: UInt64, sha256: [UInt8]) -> TransferReceiver {
    var receiver = TransferReceiver(size: size, offset: size)
    receiver.expectedDigest = sha256
    receiver.digest = sha256
    receiver.state = .finished
    return receiver
  }

  /// A chunk of `count` bytes at `offset` arrived.
  public mutating func chunk(offset: UInt64, count: Int) -> ChunkDecision {
    guard state == .receiving else { return .ignore }
    guard offset == received else {
      return .reject("chunk at offset \(offset), expected \(received)")
    }
    guard UInt64(count) <= size - received else {
      return .reject("chunk past the announced size of \(size) bytes")
    }
    received += UInt64(count)
    return .write
  }

  /// Everything before `offset` is on disk.
  public mutating func wrote(upTo offset: UInt64) -> [Action] {
    var actions: [Action] = []
    guard offset > written, offset <= received else { return actions }
    written = offset
    guard state == .receiving || state == .interrupted else { return actions }
    if state == .receiving { actions.append(.sendCredit(offset: written)) }
    actions += verifyIfComplete()
    return actions
  }

  /// The sender says everything was sent: `size` bytes hashing to `sha256`.
  public mutating func end(size announced: UInt64, sha256: [UInt8]) -> (actions: [Action], failure: String?) {
    guard state == .receiving else { return ([], nil) }
    guard announced == size, received == size else {
      let reason = "the sender ended after \(received) of \(size) bytes"
      state = .failed(reason)
      return ([], reason)
    }
    expectedDigest = sha256
    return (verifyIfComplete(), nil)
  }

  private mutating func verifyIfComplete() -> [Action] {
    var actions: [Action] = []
    if state == .receiving, written == size, let expectedDigest {
      state = .verifying
      actions.append(.verify(expected: expectedDigest))
    }
    return actions
  }

  /// The digest of the written file is `sha256`. Returns true when it matched (the transfer is finished).
  public mutating func verified(sha256: [UInt8]) -> Bool {
    guard state == .verifying else { return false }
    if sha256 == expectedDigest {
      digest = sha256
      state = .finished
      return true
    }
    state = .failed("SHA-256 mismatch: the received content differs from what was sent")
    return false
  }

  /// The sender offered again after a link loss: returns the offset to accept from, or nil when it cannot resume.
  public mutating func resumeOffered() -> UInt64? {
    guard state == .interrupted || state == .receiving else { return nil }
    state = .receiving
    // Chunks handed to the writer but not yet durable will be durable before anything after them: accept from the
    // end of what the writer has, which is where the sender must continue.
    return received
  }

  /// The sender offered the transfer again (`resume` set): what to answer. Unlike ``resumeOffered()``, a finished
  /// transfer is answered `finished` (the sender missed the verdict), not refused.
  public mutating func reoffered() -> ReofferAnswer {
    switch state {
    case .finished:
      guard let digest else { return .refuse("the transfer is finished here, but its digest is unknown") }
      return .finished(sha256: digest)
    case .verifying:
      return .pending
    case .receiving, .interrupted, .offering, .sending:
      return resumeOffered().map { .accept(offset: $0) } ?? .refuse("the transfer cannot resume")
    case .failed(let reason):
      return .refuse("the transfer failed here: \(reason)")
    case .canceled:
      return .refuse("the transfer was canceled here")
    }
  }

  public mutating func linkLost() {
    guard state == .receiving else { return }
    state = .interrupted
  }

  public mutating func fail(_ reason: String) { state.fail(reason) }

  public mutating func cancel() { state.cancel() }
}

/// Rate-limits progress reports: at most one per `interval` milliseconds, and only when the count moved.
public struct ProgressThrottle: Sendable, Equatable {
  public let intervalMillis: UInt64
  private var lastAt: UInt64?
  private var lastBytes: UInt64?

  public init(intervalMillis: UInt64 = 100) {
    self.intervalMillis = intervalMillis
  }

  /// Whether a progress report for `bytes` is due at `now`; records it when it is.
  public mutating func shouldReport(bytes: UInt64, now: UInt64) -> Bool {
    if bytes == lastBytes { return false }
    if let lastAt, now < lastAt + intervalMillis { return false }
    lastAt = now
    lastBytes = bytes
    return true
  }
}
