/// The payload protocol of one node, sans I/O: which transfer or stream every payload frame belongs to, and what the
/// transfer and stream state machines (``TransferSender``, ``TransferReceiver``, ``StreamFlow``, ``StreamIntake``)
/// decide about it (frames 0x40–0x4D, docs/mesh-protocol.md).
///
/// ``MeshNode`` holds the book and routes every transfer and stream frame from a linked node (after the frame guard)
/// into ``received(_:from:)``; the runtime carries out the ``PayloadEffect``s that come back. So a chunk enters the
/// core once and leaves it as a reason: ``PayloadEffect/write(transferID:offset:bytes:)`` (append it), or nothing
/// (not this transfer, not from its node, not expected now), or a failure (out of order, past the size).
///
/// The book knows every live transfer and stream by id and direction with the node at its other end (a transfer or
/// stream between two peers of one node is both outgoing and incoming under one id, the other end being the node
/// itself). A transfer may be known without a state machine (an offer waiting for its recipient's consent, a record
/// restored after a restart); frames for it are still routed (a cancel, a failure), but chunks and credit are not
/// taken. What stays in the runtime: files, digests of files, the store, events, HTTP bodies, link room, and the
/// policies that need them (membership, disk space, consent, group sends).
///
/// The runtime drives the sender with ``pump(_:canSend:)`` (link room and rate are its inputs), reports spool and
/// write progress (``spooled(_:upTo:)``, ``uploadCompleted(_:sha256:)``, ``wrote(_:upTo:)``, ``verified(_:sha256:)``),
/// link changes (``linkLost(_:)``, ``linkRestored(_:)``), and ends (``fail(_:_:reason:)``, ``cancel(_:_:)``).
public struct PayloadBook: Sendable, Equatable {
  /// Which side of a payload this node holds.
  public enum Direction: Sendable, Hashable {
    case outgoing, incoming
  }

  /// An outgoing transfer: the receiving node, and the sender's state machine once there is one.
  public struct Outgoing: Sendable, Equatable {
    public let nodeID: String
    public internal(set) var sender: TransferSender?
  }

  /// An incoming transfer: the sending node, and the receiver's state machine once the transfer was accepted.
  public struct Incoming: Sendable, Equatable {
    public let nodeID: String
    public internal(set) var receiver: TransferReceiver?
  }

  /// One end of a stream: the node at the other end, the writer's window or the reader's intake, and whether it is
  /// still open.
  public struct StreamEnd: Sendable, Equatable {
    public let nodeID: String
    public internal(set) var flow: StreamFlow?
    public internal(set) var intake: StreamIntake?
    public internal(set) var open = true
    /// The reader's last credit (what the writer was told the reader took).
    public internal(set) var credited: UInt64 = 0
  }

  /// An offer that came while the runtime restored its records (``holdsOffers``), with the node it came from.
  public struct HeldOffer: Sendable, Equatable {
    public let message: MeshMessage
    public let nodeID: String
  }

  public private(set) var outgoing: [String: Outgoing] = [:]
  public private(set) var incoming: [String: Incoming] = [:]
  public private(set) var outgoingStreams: [String: StreamEnd] = [:]
  public private(set) var incomingStreams: [String: StreamEnd] = [:]
  /// This node's id: an offer from another node may not reuse the id of a transfer this node sends (a transfer
  /// between two peers of this node is outgoing and incoming under one id).
  public let nodeID: String
  /// Whether offers wait in ``heldOffers`` until ``recordsRestored()``: after a start, until the runtime knows its
  /// transfers again, an offer cannot be told apart from a resume of a transfer the book does not know yet.
  public private(set) var holdsOffers: Bool
  public private(set) var heldOffers: [HeldOffer] = []
  /// The most offers held while the runtime restores its transfers; more are refused.
  public static let mostHeldOffers = 1024

  /// `nodeID`: this node's (empty: no offer is checked against outgoing ids); `holdsOffers`: offers wait for
  /// ``recordsRestored()``.
  public init(nodeID: String = "", holdsOffers: Bool = false) {
    self.nodeID = nodeID
    self.holdsOffers = holdsOffers
  }

  /// The runtime knows its transfers again (every restored one is registered): the offers held meanwhile are judged
  /// now, in the order they came, and offers from now on at once.
  public mutating func recordsRestored() -> [PayloadEffect] {
    holdsOffers = false
    let held = heldOffers
    heldOffers = []
    return held.flatMap { received($0.message, from: $0.nodeID) }
  }

  // MARK: - Registration

  /// An outgoing transfer to node `nodeID` (`sender`: nil while there is no state machine, e.g. a group's spool).
  public mutating func send(_ transferID: String, to nodeID: String, sender: TransferSender?) {
    outgoing[transferID] = Outgoing(nodeID: nodeID, sender: sender)
  }

  /// An incoming transfer from node `nodeID` (`receiver`: nil until it is accepted, or for a restored record).
  public mutating func receive(_ transferID: String, from nodeID: String, receiver: TransferReceiver?) {
    incoming[transferID] = Incoming(nodeID: nodeID, receiver: receiver)
  }

  /// The incoming transfer now has a receiver (accepted after consent, or restored from its durable offset).
  public mutating func setReceiver(_ transferID: String, _ receiver: TransferReceiver) {
    incoming[transferID]?.receiver = receiver
  }

  /// The transfer is no longer live on this side.
  public mutating func forget(_ transferID: String, _ direction: Direction) {
    switch direction {
    case .outgoing: outgoing[transferID] = nil
    case .incoming: incoming[transferID] = nil
    }
  }

  /// A stream this node writes to node `nodeID`, with a window of `window` bytes.
  public mutating func openStream(_ streamID: String, to nodeID: String, window: UInt64) {
    outgoingStreams[streamID] = StreamEnd(nodeID: nodeID, flow: StreamFlow(window: window))
  }

  /// A stream from node `nodeID` this node reads.
  public mutating func acceptStream(_ streamID: String, from nodeID: String) {
    incomingStreams[streamID] = StreamEnd(nodeID: nodeID, intake: StreamIntake())
  }

  /// The stream ended on this side: nothing more is taken for it.
  public mutating func closeStream(_ streamID: String, _ direction: Direction) {
    switch direction {
    case .outgoing: outgoingStreams[streamID]?.open = false
    case .incoming: incomingStreams[streamID]?.open = false
    }
  }

  // MARK: - Queries

  /// The sender's state machine of an outgoing transfer.
  public func sender(_ transferID: String) -> TransferSender? { outgoing[transferID]?.sender }

  /// The receiver's state machine of an incoming transfer.
  public func receiver(_ transferID: String) -> TransferReceiver? { incoming[transferID]?.receiver }

  // MARK: - Frames

  /// A payload frame from node `nodeID` (the node itself for a payload between two of its peers): what to do.
  public mutating func received(_ message: MeshMessage, from nodeID: String) -> [PayloadEffect] {
    var effects: [PayloadEffect] = []
    switch message {
    case .transferOffer, .transferGroupOffer:
      guard !holdsOffers else {
        guard heldOffers.count < Self.mostHeldOffers else {
          // Bounded: a node flooding offers while this one starts is refused, not queued without end.
          var id = ""
          if case .transferOffer(let offer) = message { id = offer.transferID }
          if case .transferGroupOffer(let offer) = message { id = offer.copyID }
          effects.append(
            .send(
              .transferReject(
                transferID: id, code: .refused,
                message: "the node is starting and holds \(Self.mostHeldOffers) offers already; offer again shortly"),
              to: nodeID))
          break
        }
        heldOffers.append(HeldOffer(message: message, nodeID: nodeID))
        break
      }
      if case .transferOffer(let offer) = message {
        offerReceived(
          offer.transferID, ids: [offer.transferID], resume: offer.resume, message, from: nodeID, into: &effects)
      } else if case .transferGroupOffer(let offer) = message {
        // One copy for several recipients: the copy is offered again as a whole; a new one takes every id it names.
        offerReceived(
          offer.copyID, ids: [offer.copyID] + offer.recipients.map(\.transferID), resume: offer.resume, message,
          from: nodeID, into: &effects)
      }
    case .transferAccept(let id, let offset):
      guard var sender = outgoingSender(id, nodeID), sender.accepted(offset: offset) else { break }
      outgoing[id]?.sender = sender
      effects.append(.accepted(transferID: id, offset: offset, resumedFrom: sender.resumedFrom))
    case .transferReject(let id, let code, let text):
      guard outgoing[id]?.nodeID == nodeID else { break }
      effects.append(.rejected(transferID: id, code: code, message: text))
    case .transferAwaitingConsent(let id, let timeoutMillis):
      guard outgoingSender(id, nodeID)?.state == .offering else { break }
      effects.append(.awaitingConsent(transferID: id, timeoutMillis: timeoutMillis))
    case .transferChunk(let id, let offset, let bytes):
      guard var receiver = incomingReceiver(id, nodeID) else { break }
      let decision = receiver.chunk(offset: offset, count: bytes.count)
      incoming[id]?.receiver = receiver
      switch decision {
      case .ignore: break
      case .reject(let reason):
        effects.append(.failed(transferID: id, .incoming, reason: "protocol error: \(reason)", notify: true))
      case .write: effects.append(.write(transferID: id, offset: offset, bytes: bytes))
      }
    case .transferCredit(let id, let offset):
      guard var sender = outgoingSender(id, nodeID), sender.credit(offset: offset) else { break }
      outgoing[id]?.sender = sender
      effects.append(.credited(transferID: id, acknowledged: sender.acknowledged))
    case .transferEnd(let id, let size, let digest):
      guard var receiver = incomingReceiver(id, nodeID) else { break }
      let (actions, failure) = receiver.end(size: size, sha256: digest)
      incoming[id]?.receiver = receiver
      if let failure {
        effects.append(.failed(transferID: id, .incoming, reason: failure, notify: true))
        break
      }
      absorb(actions, id, into: &effects)
    case .transferFinished(let id, let digest):
      guard var sender = outgoingSender(id, nodeID) else { break }
      sender.receiverFinished(sha256: digest)
      outgoing[id]?.sender = sender
      switch sender.state {
      case .finished: effects.append(.finished(transferID: id, .outgoing, sha256: digest))
      case .failed(let reason): effects.append(.failed(transferID: id, .outgoing, reason: reason, notify: false))
      default: break
      }
    case .transferFailed(let id, let reason):
      for direction in parties(of: id, nodeID) {
        fail(id, direction, reason: reason)
        effects.append(.failed(transferID: id, direction, reason: reason, notify: false))
      }
    case .transferCancel(let id, let reason):
      for direction in parties(of: id, nodeID) {
        cancel(id, direction)
        effects.append(.canceled(transferID: id, direction, reason: reason))
      }
    case .streamOpen(let offer):
      effects.append(.streamOffered(offer, from: nodeID))
    case .streamData(let id, let offset, let bytes):
      guard var end = incomingStreams[id], end.nodeID == nodeID, end.open, var intake = end.intake else { break }
      guard intake.arrived(offset: offset, count: bytes.count) else {
        effects.append(
          .streamFailed(streamID: id, .incoming, reason: "protocol error: stream data out of order", notify: true))
        break
      }
      end.intake = intake
      incomingStreams[id] = end
      effects.append(.streamData(streamID: id, bytes: bytes))
    case .streamCredit(let id, let offset):
      guard var end = outgoingStreams[id], end.nodeID == nodeID, var flow = end.flow, flow.credit(offset) else { break }
      end.flow = flow
      outgoingStreams[id] = end
      effects.append(.streamCredited(streamID: id, drained: flow.isDrained))
    case .streamClose(let id, let reason):
      if let end = incomingStreams[id], end.nodeID == nodeID, reason.isEmpty {
        effects.append(.streamEnded(streamID: id))
        break
      }
      for (direction, end) in [(Direction.outgoing, outgoingStreams[id]), (.incoming, incomingStreams[id])]
      where end?.nodeID == nodeID {
        effects.append(
          .streamFailed(streamID: id, direction, reason: reason.isEmpty ? "closed" : reason, notify: false))
      }
    default:
      break
    }
    return effects
  }

  /// A transfer offer (`id`; a group's copy, whose offer also names each recipient's transfer id: `ids`): a new one
  /// goes to the runtime to judge (membership, space, consent); one made again (after a link loss, or because the
  /// answer was lost) is answered here from the receiver's state; a resume of a transfer this node does not know, or
  /// a new offer reusing the id of a transfer this node holds, is refused.
  private mutating func offerReceived(
    _ id: String, ids: [String], resume: Bool, _ message: MeshMessage, from nodeID: String,
    into effects: inout [PayloadEffect]
  ) {
    func reject(_ code: TransferRejection, _ text: String) {
      effects.append(.send(.transferReject(transferID: id, code: code, message: text), to: nodeID))
    }
    if let known = incoming[id] {
      guard known.nodeID == nodeID else { return reject(.unknownTransfer, "transfer \(id) comes from another node") }
      guard known.receiver != nil else {
        // Not accepted yet (its recipient has not answered) or declined: the runtime's record says which.
        return effects.append(.reofferedUnanswered(transferID: id, from: nodeID))
      }
      switch reoffered(id) {
      case .accept(let offset)?:
        effects.append(.resumed(transferID: id, offset: offset))
        effects.append(.send(.transferAccept(transferID: id, offset: offset), to: nodeID))
      case .finished(let digest)?:
        // The sender missed the verdict (the link dropped just after it was sent): it is sent again.
        effects.append(.send(.transferFinished(transferID: id, sha256: digest), to: nodeID))
      case .pending?, nil:
        break
      case .refuse(let reason)?:
        reject(.unknownTransfer, reason)
      }
      return
    }
    if resume { return reject(.unknownTransfer, "this node has no transfer \(id)") }
    // A transfer between two peers of this node is outgoing and incoming under one id.
    let reused = ids.contains { incoming[$0] != nil || (outgoing[$0] != nil && nodeID != self.nodeID) }
    guard !reused else {
      return effects.append(
        .refused(
          FrameRefusal(
            reason: "invalid_id", detail: "a transfer offer reuses the id of a transfer this node holds",
            nodeID: nodeID, message: message, answer: "a transfer id it names is in use here")))
    }
    switch message {
    case .transferOffer(let offer): effects.append(.offered(offer, from: nodeID))
    case .transferGroupOffer(let offer): effects.append(.groupOffered(offer, from: nodeID))
    default: break
    }
  }

  private func outgoingSender(_ id: String, _ nodeID: String) -> TransferSender? {
    guard let entry = outgoing[id], entry.nodeID == nodeID else { return nil }
    return entry.sender
  }

  private func incomingReceiver(_ id: String, _ nodeID: String) -> TransferReceiver? {
    guard let entry = incoming[id], entry.nodeID == nodeID else { return nil }
    return entry.receiver
  }

  /// The sides of transfer `id` whose other end is `nodeID`.
  private func parties(of id: String, _ nodeID: String) -> [Direction] {
    var directions: [Direction] = []
    if outgoing[id]?.nodeID == nodeID { directions.append(.outgoing) }
    if incoming[id]?.nodeID == nodeID { directions.append(.incoming) }
    return directions
  }

  private func absorb(_ actions: [TransferReceiver.Action], _ id: String, into effects: inout [PayloadEffect]) {
    guard let nodeID = incoming[id]?.nodeID else { return }
    for action in actions {
      switch action {
      case .sendCredit(let offset): effects.append(.send(.transferCredit(transferID: id, offset: offset), to: nodeID))
      case .verify(let expected): effects.append(.verify(transferID: id, expected: expected))
      }
    }
  }

  // MARK: - Sender commands

  /// What the sender of `transferID` does now; `canSend` says whether its link (and its rate) has room.
  public mutating func pump(_ transferID: String, canSend: Bool) -> [TransferSender.Action] {
    guard var sender = outgoing[transferID]?.sender else { return [] }
    let actions = sender.pump(canSend: canSend)
    outgoing[transferID]?.sender = sender
    return actions
  }

  /// The upload of `transferID` has `bytes` durable bytes in its spool.
  public mutating func spooled(_ transferID: String, upTo bytes: UInt64) {
    outgoing[transferID]?.sender?.spooled(upTo: bytes)
  }

  /// The upload of `transferID` is complete and hashes to `sha256`.
  public mutating func uploadCompleted(_ transferID: String, sha256: [UInt8]) {
    outgoing[transferID]?.sender?.uploadCompleted(sha256: sha256)
  }

  /// A transfer between two peers of this node needs no offer: it is accepted from the start.
  public mutating func acceptedLocally(_ transferID: String) {
    _ = outgoing[transferID]?.sender?.accepted(offset: 0)
  }

  /// A chunk read for ``TransferSender/Action/readChunk(offset:count:)`` is ready: whether it is still the next one to
  /// send (the runtime sends it and reports ``chunkSent(_:offset:count:)``), or must be dropped (reported here as
  /// abandoned; `next` says whether the reads must go on from the next offset).
  public mutating func chunkRead(_ transferID: String, offset: UInt64, linked: Bool) -> (send: Bool, next: Bool) {
    guard var sender = outgoing[transferID]?.sender else { return (false, false) }
    guard sender.state == .sending, sender.sent == offset, linked else {
      let next = sender.sent != offset
      sender.chunkAbandoned(offset: offset)
      outgoing[transferID]?.sender = sender
      return (false, next)
    }
    return (true, false)
  }

  /// The chunk at `offset` went out.
  public mutating func chunkSent(_ transferID: String, offset: UInt64, count: Int) {
    outgoing[transferID]?.sender?.chunkSent(offset: offset, count: count)
  }

  /// The read of the chunk at `offset` failed.
  public mutating func chunkAbandoned(_ transferID: String, offset: UInt64) {
    outgoing[transferID]?.sender?.chunkAbandoned(offset: offset)
  }

  // MARK: - Receiver commands

  /// Everything of incoming `transferID` before `offset` is durable: credit and verification to carry out.
  public mutating func wrote(_ transferID: String, upTo offset: UInt64) -> [PayloadEffect] {
    var effects: [PayloadEffect] = []
    guard var receiver = incoming[transferID]?.receiver else { return effects }
    let actions = receiver.wrote(upTo: offset)
    incoming[transferID]?.receiver = receiver
    absorb(actions, transferID, into: &effects)
    return effects
  }

  /// The written content of incoming `transferID` hashes to `sha256`: finished (send the verdict) or failed.
  public mutating func verified(_ transferID: String, sha256: [UInt8]) -> [PayloadEffect] {
    var effects: [PayloadEffect] = []
    guard var receiver = incoming[transferID]?.receiver else { return effects }
    let matched = receiver.verified(sha256: sha256)
    incoming[transferID]?.receiver = receiver
    if matched {
      effects.append(.finished(transferID: transferID, .incoming, sha256: sha256))
    } else if case .failed(let reason) = receiver.state {
      effects.append(.failed(transferID: transferID, .incoming, reason: reason, notify: true))
    }
    return effects
  }

  /// The sender offered incoming `transferID` again: what to answer (``TransferReceiver/reoffered()``); nil when the
  /// transfer has no receiver here.
  public mutating func reoffered(_ transferID: String) -> TransferReceiver.ReofferAnswer? {
    guard var receiver = incoming[transferID]?.receiver else { return nil }
    let answer = receiver.reoffered()
    incoming[transferID]?.receiver = receiver
    return answer
  }

  // MARK: - Streams

  /// The writer of stream `streamID` sends `count` bytes at the returned offset (nil: the stream is not open).
  public mutating func streamSend(_ streamID: String, count: Int) -> UInt64? {
    guard var end = outgoingStreams[streamID], end.open, var flow = end.flow else { return nil }
    let offset = flow.sent
    flow.didSend(count)
    end.flow = flow
    outgoingStreams[streamID] = end
    return offset
  }

  /// The reader of stream `streamID` took `count` more bytes (credit them with ``streamCreditDue(_:)``).
  public mutating func streamHandedOver(_ streamID: String, count: Int) {
    incomingStreams[streamID]?.intake?.handedOver(count)
  }

  /// The offset to credit to the writer of open stream `streamID` now: what the reader took, when it moved past the
  /// last credit (nil: nothing to credit). Recorded as credited.
  public mutating func streamCreditDue(_ streamID: String) -> UInt64? {
    guard var end = incomingStreams[streamID], end.open, let delivered = end.intake?.delivered,
      delivered > end.credited
    else { return nil }
    end.credited = delivered
    incomingStreams[streamID] = end
    return delivered
  }

  // MARK: - Links and ends

  /// The link to `nodeID` went down: the transfers with that node are interrupted (those that were in flight are
  /// returned, for `transfer.interrupted`).
  public mutating func linkLost(_ nodeID: String) -> (outgoing: [String], incoming: [String]) {
    var lost: (outgoing: [String], incoming: [String]) = ([], [])
    for (id, entry) in outgoing where entry.nodeID == nodeID {
      guard var sender = entry.sender else { continue }
      sender.linkLost()
      outgoing[id]?.sender = sender
      if sender.state == .interrupted { lost.outgoing.append(id) }
    }
    for (id, entry) in incoming where entry.nodeID == nodeID {
      guard var receiver = entry.receiver else { continue }
      receiver.linkLost()
      incoming[id]?.receiver = receiver
      if receiver.state == .interrupted { lost.incoming.append(id) }
    }
    return lost
  }

  /// The link to `nodeID` is back: the outgoing transfers to offer again (with `resume` set).
  public mutating func linkRestored(_ nodeID: String) -> [String] {
    var reoffer: [String] = []
    for (id, entry) in outgoing where entry.nodeID == nodeID {
      guard var sender = entry.sender, sender.linkRestored() else { continue }
      outgoing[id]?.sender = sender
      reoffer.append(id)
    }
    return reoffer.sorted()
  }

  /// Whether the sender of `transferID` is interrupted by a link loss.
  public func isInterrupted(_ transferID: String, _ direction: Direction) -> Bool {
    switch direction {
    case .outgoing: outgoing[transferID]?.sender?.state == .interrupted
    case .incoming: incoming[transferID]?.receiver?.state == .interrupted
    }
  }

  /// The transfer failed on this side.
  public mutating func fail(_ transferID: String, _ direction: Direction, reason: String) {
    switch direction {
    case .outgoing: outgoing[transferID]?.sender?.fail(reason)
    case .incoming: incoming[transferID]?.receiver?.fail(reason)
    }
  }

  /// The transfer was canceled on this side.
  public mutating func cancel(_ transferID: String, _ direction: Direction) {
    switch direction {
    case .outgoing: outgoing[transferID]?.sender?.cancel()
    case .incoming: incoming[transferID]?.receiver?.cancel()
    }
  }
}

/// What the runtime must do for the ``PayloadBook``: send a payload frame, touch a file, or act on a decision (an
/// offer to judge, a transfer accepted, credited, finished, failed …). Carried out in order.
public enum PayloadEffect: Sendable, Hashable {
  /// Send this payload frame to node `nodeID` (a transfer's credit; in its lane).
  case send(MeshMessage, to: String)
  /// A new transfer offer from node `nodeID`: judge membership, space and consent, then accept (register it with
  /// ``PayloadBook/receive(_:from:receiver:)``) or reject.
  case offered(TransferOffer, from: String)
  /// The sender offered an incoming transfer again that has no receiver here (its recipient has not answered, or
  /// declined): answer from the transfer's record.
  case reofferedUnanswered(transferID: String, from: String)
  /// The sender offered an incoming transfer again and it goes on from `offset` (the `transferAccept` follows).
  case resumed(transferID: String, offset: UInt64)
  /// A frame the book refuses (counted and logged like the frame guard's refusals; an offer's sender is told).
  case refused(FrameRefusal)
  /// A group send's offer for one copy from node `nodeID`.
  case groupOffered(TransferGroupOffer, from: String)
  /// The receiver accepted the outgoing transfer from `offset`; `resumedFrom` is set when this was a resume.
  case accepted(transferID: String, offset: UInt64, resumedFrom: UInt64?)
  /// The receiver refused the outgoing transfer.
  case rejected(transferID: String, code: TransferRejection, message: String)
  /// The outgoing transfer waits for its recipient's consent, at most `timeoutMillis`.
  case awaitingConsent(transferID: String, timeoutMillis: UInt64)
  /// The receiver holds every byte of the outgoing transfer before `acknowledged`: pump again.
  case credited(transferID: String, acknowledged: UInt64)
  /// Append this chunk to the incoming transfer's file at `offset` (the end of what was handed to the writer), then
  /// report ``PayloadBook/wrote(_:upTo:)``.
  case write(transferID: String, offset: UInt64, bytes: [UInt8])
  /// Every byte of the incoming transfer is written: hash the file, compare with `expected`, report
  /// ``PayloadBook/verified(_:sha256:)``.
  case verify(transferID: String, expected: [UInt8])
  /// The transfer finished on this side with this digest (outgoing: the receiver verified it; incoming: verified
  /// here, send `transferFinished` once the file is in place).
  case finished(transferID: String, PayloadBook.Direction, sha256: [UInt8])
  /// The transfer failed on this side; with `notify`, the other side must be told (`transferFailed`).
  case failed(transferID: String, PayloadBook.Direction, reason: String, notify: Bool)
  /// The other side canceled the transfer.
  case canceled(transferID: String, PayloadBook.Direction, reason: String)
  /// A stream opened by node `nodeID`: judge the reader's membership, then ``PayloadBook/acceptStream(_:from:)``.
  case streamOffered(StreamOffer, from: String)
  /// The next bytes of an incoming stream, in order: hand them to the reader.
  case streamData(streamID: String, bytes: [UInt8])
  /// The reader credited the outgoing stream; `drained` says every byte sent was taken.
  case streamCredited(streamID: String, drained: Bool)
  /// The writer of the incoming stream finished.
  case streamEnded(streamID: String)
  /// The stream failed on this side (a close with a reason, or a protocol error); with `notify`, the other side must
  /// be told (`streamClose` with the reason).
  case streamFailed(streamID: String, PayloadBook.Direction, reason: String, notify: Bool)
}
