import Crypto
import MeshCore

// Transfers and streams in the simulator: each node's runtime carries out its payload book's effects
// (``MeshEffect/payload(_:)``) the way the gateway's payloads feature does, with in-memory "files" that survive a
// crash (a node's disk): the sender's spool (the whole upload, hashed), the receiver's partial file (what was
// written, in order) and the verdicts. The book decides everything else (routing, accepts and resume offsets,
// credit, chunk order, digests, what a link loss interrupts and what to offer again), exactly as on a real node.

/// A transfer as a simulated node's disk holds it.
public struct SimulatedTransfer: Sendable {
  public let id: String
  public let fromNode: Int
  public let toNode: Int
  public let size: UInt64
  /// Sender: the whole upload (spooled before it is offered). Receiver: the bytes written so far, in order.
  public internal(set) var content: [UInt8]
  /// The SHA-256 the side ended with (sender: the upload's, receiver: the file's once verified).
  public internal(set) var sha256: [UInt8]?
  /// Times this side reported the transfer finished (``Simulation/transferFinishes(_:on:)``).
  public internal(set) var finishes = 0
  /// Why it failed, if it did.
  public internal(set) var failure: String?
  /// Offsets the receiver accepted from after the first accept (sender side): a resume continues where the
  /// receiver's file ends.
  public internal(set) var resumedFrom: [UInt64] = []
  /// The most bytes ever sent and not yet credited (sender side).
  public internal(set) var maxInFlight: UInt64 = 0
  /// Whether the receiver ever accepted it (sender side).
  public internal(set) var accepted = false
}

/// A stream's two ends as the simulator saw them.
public struct SimulatedStream: Sendable {
  public let id: String
  public let fromNode: Int
  public let toNode: Int
  /// What the writer still has to send.
  var pending: [UInt8]
  public let window: UInt64
  /// What the reader took, in order.
  public internal(set) var received: [UInt8] = []
  /// Whether the reader saw the writer's end.
  public internal(set) var ended = false
  /// Why it failed, if it did.
  public internal(set) var failure: String?
  /// The most bytes ever sent and not yet credited.
  public internal(set) var maxInFlight: UInt64 = 0
}

/// What each node's disk holds: transfers by id and side.
struct SimulatedDisk {
  var outgoing: [String: SimulatedTransfer] = [:]
  var incoming: [String: SimulatedTransfer] = [:]
}

/// The simulation's payload bookkeeping: each node's disk (it survives crashes), the offers as the senders' stores
/// keep them, the streams, and counters.
struct SimulatedPayloads {
  var disks: [Int: SimulatedDisk] = [:]
  var offers: [String: TransferOffer] = [:]
  var streams: [String: SimulatedStream] = [:]
  var nextNumber = 1
  /// Payload frames for a node that was not linked at that moment (dropped; the book resumes after the link loss).
  var framesUnlinked = 0
}

extension Simulation {
  /// A transfer's window and chunk size in the simulator (small, so a transfer takes many credits).
  public static let transferWindow: UInt64 = 4096
  public static let transferChunk = 1024
  public static let streamWindow: UInt64 = 2048
  static let streamPiece = 512
  /// Why an upload fails when the receiving node went away before it answered the offer.
  public static let unansweredOffer = "the receiver's node went away before it answered; try again"

  // MARK: - Commands

  /// Peer `fromPeerID` sends `content` to peer `toPeerID` on another node (`POST /sessions/{id}/resources`): the
  /// upload is spooled and hashed at once, then offered. Returns the transfer id, or nil when the nodes are not
  /// linked now (the REST call would answer 503).
  @discardableResult
  public func sendFile(_ content: [UInt8], from fromPeerID: String, to toPeerID: String, id: String? = nil)
    -> String?
  {
    let from = liveHome(fromPeerID)
    let to = liveHome(toPeerID)
    let toNodeID = nodes[to].nodeID
    guard nodes[from].mesh.links.connection(of: toNodeID) != nil else { return nil }
    let id = id ?? "t\(payloadState.nextNumber)"
    payloadState.nextNumber += 1
    let digest = Crypto.sha256(content)
    let transfer = SimulatedTransfer(
      id: id, fromNode: from, toNode: to, size: UInt64(content.count), content: content, sha256: digest)
    payloadState.disks[from, default: SimulatedDisk()].outgoing[id] = transfer
    payloadState.offers[id] = TransferOffer(
      transferID: id, sessionID: "sim", fromPeerID: fromPeerID, fromDisplayName: fromPeerID, toPeerID: toPeerID,
      name: id, contentType: "application/octet-stream", size: UInt64(content.count), resume: false)
    var sender = TransferSender(
      size: UInt64(content.count), window: Self.transferWindow, chunkSize: Self.transferChunk, readAhead: 2)
    sender.uploadCompleted(sha256: digest)
    nodes[from].mesh.payloads.send(id, to: toNodeID, sender: sender)
    sendPayload(.transferOffer(payloadState.offers[id]!), from: from, to: toNodeID)
    return id
  }

  /// A group send: one upload to peers on several nodes, one copy per receiving node (each its own transfer from
  /// the same spool). Returns the copies' ids by recipient.
  public func sendFileToGroup(_ content: [UInt8], from fromPeerID: String, to peerIDs: [String]) -> [String: String] {
    var ids: [String: String] = [:]
    for peerID in peerIDs { ids[peerID] = sendFile(content, from: fromPeerID, to: peerID) }
    return ids
  }

  /// Peer `fromPeerID` opens a stream to `toPeerID` and writes `content` into it, then ends it.
  @discardableResult
  public func sendStream(_ content: [UInt8], from fromPeerID: String, to toPeerID: String) -> String? {
    let from = liveHome(fromPeerID)
    let to = liveHome(toPeerID)
    let toNodeID = nodes[to].nodeID
    guard nodes[from].mesh.links.connection(of: toNodeID) != nil else { return nil }
    let id = "s\(payloadState.nextNumber)"
    payloadState.nextNumber += 1
    payloadState.streams[id] = SimulatedStream(
      id: id, fromNode: from, toNode: to, pending: content, window: Self.streamWindow)
    nodes[from].mesh.payloads.openStream(id, to: toNodeID, window: Self.streamWindow)
    sendPayload(
      .streamOpen(
        StreamOffer(
          streamID: id, sessionID: "sim", fromPeerID: fromPeerID, fromDisplayName: fromPeerID, toPeerID: toPeerID,
          name: id)), from: from, to: toNodeID)
    pumpStream(id, on: from)
    return id
  }

  // MARK: - Views

  /// Transfer `id` as node `node`'s disk holds it (`outgoing`: the sender's side).
  public func transfer(_ id: String, on node: Int, outgoing: Bool) -> SimulatedTransfer? {
    outgoing ? payloadState.disks[node]?.outgoing[id] : payloadState.disks[node]?.incoming[id]
  }

  /// Stream `id` as the simulator saw it.
  public func stream(_ id: String) -> SimulatedStream? { payloadState.streams[id] }

  // MARK: - Restart

  /// After a restart: the node's transfers come back from its disk, as the payloads feature restores them from
  /// the store and its files. A complete upload is offered again once its link returns; a partial file is accepted
  /// from where it ends; a finished file answers a re-offer with its digest.
  func restorePayloads(on node: Int) {
    guard let disk = payloadState.disks[node] else { return }
    for (id, transfer) in disk.outgoing.sorted(by: { $0.key < $1.key })
    where transfer.finishes == 0 && transfer.failure == nil {
      let sender = TransferSender.restored(
        size: transfer.size, digest: transfer.sha256 ?? [], window: Self.transferWindow,
        chunkSize: Self.transferChunk, readAhead: 2)
      nodes[node].mesh.payloads.send(id, to: nodes[transfer.toNode].nodeID, sender: sender)
    }
    for (id, transfer) in disk.incoming.sorted(by: { $0.key < $1.key }) where transfer.failure == nil {
      let receiver: TransferReceiver
      if let digest = transfer.sha256 {
        receiver = .finished(size: transfer.size, sha256: digest)
      } else {
        var partial = TransferReceiver(size: transfer.size, offset: UInt64(transfer.content.count))
        partial.linkLost()
        receiver = partial
      }
      nodes[node].mesh.payloads.receive(id, from: nodes[transfer.fromNode].nodeID, receiver: receiver)
    }
  }

  // MARK: - Carrying out the book's effects

  func sendPayload(_ message: MeshMessage, from node: Int, to nodeID: String) {
    guard let connection = nodes[node].mesh.links.connection(of: nodeID) else {
      payloadState.framesUnlinked += 1
      return
    }
    send(message, from: node, on: connection)
  }

  func payload(_ effect: PayloadEffect, on node: Int) {
    switch effect {
    case .send(let message, let nodeID):
      sendPayload(message, from: node, to: nodeID)
    case .offered(let offer, let nodeID):
      offered(offer, from: nodeID, on: node)
    case .groupOffered(let offer, let nodeID):
      // Group sends are simulated as one copy per node (single offers); a group offer is refused.
      sendPayload(
        .transferReject(transferID: offer.copyID, code: .refused, message: "not simulated"), from: node, to: nodeID)
    case .accepted(let id, _, let resumedFrom):
      payloadState.disks[node]?.outgoing[id]?.accepted = true
      if let resumedFrom { payloadState.disks[node]?.outgoing[id]?.resumedFrom.append(resumedFrom) }
      pumpTransfer(id, on: node)
    case .rejected(let id, _, let message):
      nodes[node].mesh.payloads.fail(id, .outgoing, reason: message)
      payloadState.disks[node]?.outgoing[id]?.failure = message
    case .awaitingConsent, .reofferedUnanswered, .refused:
      break
    case .resumed(let id, let offset):
      // What the book accepts from is where the file ends: nothing that arrived is sent twice.
      precondition(
        offset == UInt64(payloadState.disks[node]?.incoming[id]?.content.count ?? 0), "resume offset is not the file")
    case .credited(let id, _):
      pumpTransfer(id, on: node)
    case .write(let id, let offset, let bytes):
      guard var transfer = payloadState.disks[node]?.incoming[id] else { return }
      precondition(offset == UInt64(transfer.content.count), "the book wrote out of order")
      transfer.content += bytes
      payloadState.disks[node]?.incoming[id] = transfer
      for effect in nodes[node].mesh.payloads.wrote(id, upTo: UInt64(transfer.content.count)) {
        payload(effect, on: node)
      }
    case .verify(let id, _):
      let digest = Crypto.sha256(payloadState.disks[node]?.incoming[id]?.content ?? [])
      for effect in nodes[node].mesh.payloads.verified(id, sha256: digest) { payload(effect, on: node) }
    case .finished(let id, .outgoing, _):
      payloadState.disks[node]?.outgoing[id]?.finishes += 1
    case .finished(let id, .incoming, let digest):
      guard var transfer = payloadState.disks[node]?.incoming[id] else { return }
      transfer.sha256 = digest
      transfer.finishes += 1
      payloadState.disks[node]?.incoming[id] = transfer
      sendPayload(
        .transferFinished(transferID: id, sha256: digest), from: node, to: nodes[transfer.fromNode].nodeID)
    case .failed(let id, let direction, let reason, let notify):
      let other: Int?
      switch direction {
      case .outgoing:
        payloadState.disks[node]?.outgoing[id]?.failure = reason
        other = payloadState.disks[node]?.outgoing[id]?.toNode
      case .incoming:
        payloadState.disks[node]?.incoming[id]?.failure = reason
        other = payloadState.disks[node]?.incoming[id]?.fromNode
      }
      if notify, let other {
        sendPayload(.transferFailed(transferID: id, reason: reason), from: node, to: nodes[other].nodeID)
      }
    case .canceled(let id, let direction, let reason):
      switch direction {
      case .outgoing: payloadState.disks[node]?.outgoing[id]?.failure = "canceled: \(reason)"
      case .incoming: payloadState.disks[node]?.incoming[id]?.failure = "canceled: \(reason)"
      }
    case .streamOffered(let offer, let nodeID):
      nodes[node].mesh.payloads.acceptStream(offer.streamID, from: nodeID)
    case .streamData(let id, let bytes):
      // The reader takes every piece at once and credits it.
      payloadState.streams[id]?.received += bytes
      nodes[node].mesh.payloads.streamHandedOver(id, count: bytes.count)
      if let from = payloadState.streams[id]?.fromNode, let offset = nodes[node].mesh.payloads.streamCreditDue(id) {
        sendPayload(.streamCredit(streamID: id, offset: offset), from: node, to: nodes[from].nodeID)
      }
    case .streamCredited(let id, _):
      pumpStream(id, on: node)
    case .streamEnded(let id):
      payloadState.streams[id]?.ended = true
      nodes[node].mesh.payloads.closeStream(id, .incoming)
    case .streamFailed(let id, let direction, let reason, _):
      if payloadState.streams[id]?.failure == nil { payloadState.streams[id]?.failure = reason }
      nodes[node].mesh.payloads.closeStream(id, direction)
    }
  }

  /// A transfer offer: new ones are accepted from 0 (simulated peers are members with room); offers made again are
  /// answered as the book says.
  /// A new offer (the book answers offers made again, and refuses resumes of transfers it does not know): every
  /// simulated recipient accepts at once.
  func offered(_ offer: TransferOffer, from nodeID: String, on node: Int) {
    let id = offer.transferID
    guard let sender = nodeIndex[nodeID] else { return }
    payloadState.disks[node, default: SimulatedDisk()].incoming[id] = SimulatedTransfer(
      id: id, fromNode: sender, toNode: node, size: offer.size, content: [])
    nodes[node].mesh.payloads.receive(id, from: nodeID, receiver: TransferReceiver(size: offer.size))
    sendPayload(.transferAccept(transferID: id, offset: 0), from: node, to: nodeID)
  }

  /// Reads and sends what the sender's book asks for (links have room at once in the simulator; the window bounds
  /// what is in flight).
  func pumpTransfer(_ id: String, on node: Int) {
    guard let transfer = payloadState.disks[node]?.outgoing[id] else { return }
    let toNodeID = nodes[transfer.toNode].nodeID
    while true {
      let actions = nodes[node].mesh.payloads.pump(id, canSend: true)
      if actions.isEmpty { return }
      for action in actions {
        switch action {
        case .readChunk(let offset, let count):
          let linked = nodes[node].mesh.links.connection(of: toNodeID) != nil
          let verdict = nodes[node].mesh.payloads.chunkRead(id, offset: offset, linked: linked)
          guard verdict.send else { continue }
          let bytes = Array(transfer.content[Int(offset)..<Int(offset) + count])
          sendPayload(.transferChunk(transferID: id, offset: offset, bytes: bytes), from: node, to: toNodeID)
          nodes[node].mesh.payloads.chunkSent(id, offset: offset, count: count)
          if let sender = nodes[node].mesh.payloads.sender(id) {
            let inFlight = sender.sent - sender.acknowledged
            if inFlight > (payloadState.disks[node]?.outgoing[id]?.maxInFlight ?? 0) {
              payloadState.disks[node]?.outgoing[id]?.maxInFlight = inFlight
            }
          }
        case .sendEnd(let digest):
          sendPayload(
            .transferEnd(transferID: id, size: transfer.size, sha256: digest), from: node, to: toNodeID)
        }
      }
    }
  }

  /// The writer sends while its window has room (pieces cut to the room left), then ends the stream once drained.
  func pumpStream(_ id: String, on node: Int) {
    guard var stream = payloadState.streams[id], stream.failure == nil else { return }
    let toNodeID = nodes[stream.toNode].nodeID
    while !stream.pending.isEmpty, let room = nodes[node].mesh.payloads.outgoingStreams[id]?.flow?.room, room > 0 {
      let count = min(stream.pending.count, Self.streamPiece, Int(room))
      guard let offset = nodes[node].mesh.payloads.streamSend(id, count: count) else { break }
      sendPayload(
        .streamData(streamID: id, offset: offset, bytes: Array(stream.pending.prefix(count))), from: node, to: toNodeID)
      stream.pending.removeFirst(count)
      if let flow = nodes[node].mesh.payloads.outgoingStreams[id]?.flow {
        stream.maxInFlight = max(stream.maxInFlight, flow.sent - flow.credited)
      }
    }
    let drained = nodes[node].mesh.payloads.outgoingStreams[id]?.flow?.isDrained == true
    let open = nodes[node].mesh.payloads.outgoingStreams[id]?.open == true
    payloadState.streams[id] = stream
    if stream.pending.isEmpty, drained, open {
      sendPayload(.streamClose(streamID: id, reason: ""), from: node, to: toNodeID)
      nodes[node].mesh.payloads.closeStream(id, .outgoing)
    }
  }

  /// The link to `nodeID` came up: interrupted transfers are offered again, and a stream waiting for it starts.
  func payloadsLinked(_ nodeID: String, on node: Int) {
    for id in nodes[node].mesh.payloads.linkRestored(nodeID) {
      guard var offer = payloadState.offers[id] else { continue }
      offer.resume = true
      sendPayload(.transferOffer(offer), from: node, to: nodeID)
    }
    for (id, stream) in payloadState.streams.sorted(by: { $0.key < $1.key }) where stream.fromNode == node {
      if nodes[node].mesh.payloads.outgoingStreams[id]?.open == true { pumpStream(id, on: node) }
    }
  }

  /// The link to `nodeID` went down: its transfers are interrupted (the book says which), its streams fail.
  func payloadsUnlinked(_ nodeID: String, on node: Int) {
    _ = nodes[node].mesh.payloads.linkLost(nodeID)
    // As on a real node, an upload whose offer was never answered fails (the client is answered 503 and tries
    // again); only accepted transfers resume.
    for (id, transfer) in (payloadState.disks[node]?.outgoing ?? [:]).sorted(by: { $0.key < $1.key })
    where !transfer.accepted && transfer.failure == nil && nodes[transfer.toNode].nodeID == nodeID {
      let reason = Self.unansweredOffer
      nodes[node].mesh.payloads.fail(id, .outgoing, reason: reason)
      payloadState.disks[node]?.outgoing[id]?.failure = reason
    }
    for (id, stream) in payloadState.streams.sorted(by: { $0.key < $1.key })
    where (stream.fromNode == node && nodes[stream.toNode].nodeID == nodeID)
      || (stream.toNode == node && nodes[stream.fromNode].nodeID == nodeID)
    {
      let direction: PayloadBook.Direction = stream.fromNode == node ? .outgoing : .incoming
      let book = nodes[node].mesh.payloads
      let open = direction == .outgoing ? book.outgoingStreams[id]?.open : book.incomingStreams[id]?.open
      guard open == true else { continue }
      if payloadState.streams[id]?.failure == nil, payloadState.streams[id]?.ended == false {
        payloadState.streams[id]?.failure = "the link to the other node was lost"
      }
      nodes[node].mesh.payloads.closeStream(id, direction)
    }
  }
}

extension SimulatedRuntime {
  func payload(_ effect: PayloadEffect) { simulation.payload(effect, on: node) }
}
