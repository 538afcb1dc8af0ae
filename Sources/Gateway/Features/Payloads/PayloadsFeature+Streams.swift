/// Byte streams (MCSession startStream, Nearby STREAM payloads): a writer's request body flows, as it arrives, across
/// the mesh to a reader's streaming response, with credit-based backpressure from the reader back to the writer.
///
/// Layers 4 and 6, on the lws service thread in ``PayloadsFeature``, isolated to the ``Node`` actor. Nothing is stored: the writer's node forwards
/// each piece of `PUT /api/v1/streams/{id}` as a `streamData` frame while the window (``StreamFlow``) has room and
/// pauses reading the request otherwise; the reader's node queues at most a window of bytes and writes them to
/// `GET /api/v1/streams/{id}` as the socket drains, crediting what it wrote. Streams do not survive a link loss or a
/// restart (both ends see `stream.closed` with a reason).
import Foundation
import LWS
import Logging
import MeshCore

/// One stream as a node holds it. Confined to the service thread.
final class LiveStream {
  var record: StreamRecord
  /// Writer side (its window is in the payload book).
  var writer: RequestID?
  var writerSocket: WebSocketID?
  var writerPaused = false
  var writerEnded = false
  var writerDone: CheckedContinuation<Void, any Error>?
  /// Reader side (what arrived and what the reader took is in the payload book).
  var reader: RequestID?
  var readerSocket: WebSocketID?
  var buffer: [[UInt8]] = []
  var senderFinished = false

  init(record: StreamRecord) {
    self.record = record
  }
}

@available(*, unavailable)
extension LiveStream: Sendable {}

extension LiveStream {
  /// The writer's credit window: bytes sent and not yet handed to the reader.
  static let window: UInt64 = 1 << 20
  /// The reader's response queue is refilled only below this many bytes.
  static let readerQueue = 256 << 10

  /// The bulk lane (and link-scheduler producer) of a stream's data.
  static func producer(_ id: String) -> String { "stream:" + id }

  /// The stream id of `/api/v1/streams/{id}/ws`: the stream's writer sends binary frames there (closing the socket
  /// ends the stream), its reader receives binary frames (the node closes with 1000 at the end).
  static func socketStreamID(_ path: String) -> String? {
    let segments = path.split(separator: "/", omittingEmptySubsequences: true)
    guard segments.count == 5, segments[0] == "api", segments[1] == "v1", segments[2] == "streams",
      segments[4] == "ws"
    else { return nil }
    return String(segments[3])
  }
}

/// Where a stream is: open, closed (the writer finished and the reader took everything) or failed.
enum StreamState: String, Sendable {
  case open, closed, failed
}

/// A stream as shown to its two peers.
struct StreamRecord: PayloadRecord, Sendable {
  var id: String
  var parties: PayloadParties
  var name: String
  var state: StreamState
  var bytes: UInt64
  var reason: String?
  var createdAt: String
}

/// Stream state owned by the node actor.
struct StreamRuntime {
  var outgoing: [String: LiveStream] = [:]
  var incoming: [String: LiveStream] = [:]
  var byWriter: [RequestID: LiveStream] = [:]
  var byReader: [RequestID: LiveStream] = [:]
  var bySocket: [WebSocketID: LiveStream] = [:]
}

extension PayloadsFeature {
  // MARK: - REST

  func openStream(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    let peer = context.authenticatedPeer
    let session = try node.features.sessions.ownSession(context, node: node)
    let body = try RequestBody(context.request)
    try body.allowOnly(["to", "name"])
    let toID = try body.requiredString("to")
    let name = try body.optionalString("name") ?? "stream"
    guard !name.isEmpty, name.utf8.count <= 255, !name.unicodeScalars.contains(where: { $0.value < 0x20 }) else {
      throw APIError.badRequest("name must be 1–255 UTF-8 bytes without control characters")
    }
    guard toID != peer.id else {
      throw APIError.badRequest("to is the writer itself; open the stream to another member of the session")
    }
    let target = try connectedRecipient(toID, in: session, node: node)
    let record = StreamRecord(
      id: RecordID.make(),
      parties: PayloadParties(
        direction: .outgoing, sessionID: session.sessionID,
        from: PayloadParty(peerID: peer.id, displayName: peer.displayName, nodeID: node.nodeID),
        to: PayloadParty(peerID: toID, displayName: target.displayName, nodeID: target.nodeID)),
      name: name, state: .open, bytes: 0, reason: nil, createdAt: Timestamp.now())
    let stream = LiveStream(record: record)
    streams.outgoing[record.id] = stream
    node.mesh.node.payloads.openStream(record.id, to: target.nodeID, window: LiveStream.window)
    sendStreamFrame(
      .streamOpen(
        StreamOffer(
          streamID: record.id, sessionID: record.sessionID, fromPeerID: peer.id, fromDisplayName: peer.displayName,
          toPeerID: toID, name: name)), to: target.nodeID, node: node)
    return .json(["stream": streamJSON(record)], status: 201)
  }

  /// `PUT /api/v1/streams/{id}`: the writer's bytes, forwarded as they arrive; answered when the reader took them all.
  func writeStream(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let id = context.parameters["streamId"] ?? ""
    guard let stream = streams.outgoing[id], stream.record.fromPeerID == context.authenticatedPeer.id else {
      throw APIError.notFound("no stream \(id) opened by this peer; open one with POST /api/v1/sessions/{id}/streams")
    }
    guard stream.record.state == .open, stream.writer == nil, stream.writerSocket == nil, !stream.writerEnded else {
      throw APIError(
        status: 409, code: "stream_busy",
        message: "stream \(id) is \(stream.record.state) or already has a writer; open a new stream")
    }
    stream.writer = context.request.id
    streams.byWriter[context.request.id] = stream
    node.server.setBodyFlow(context.request.id, enabled: true)
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
      stream.writerDone = continuation
    }
    return .json(["stream": streamJSON(stream.record)])
  }

  /// `GET /api/v1/streams/{id}`: the stream's bytes for its reader, as they arrive (the body ends when the writer
  /// finishes).
  func readStream(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    let id = context.parameters["streamId"] ?? ""
    guard let stream = streams.incoming[id], stream.record.toPeerID == context.authenticatedPeer.id else {
      throw APIError.notFound("no stream \(id) to this peer; streams opened to it are announced as stream.opened")
    }
    guard stream.record.state == .open || !stream.buffer.isEmpty, stream.reader == nil, stream.readerSocket == nil
    else {
      throw APIError(
        status: 409, code: "stream_busy", message: "stream \(id) is \(stream.record.state) or already has a reader")
    }
    stream.reader = context.request.id
    streams.byReader[context.request.id] = stream
    // The response goes out when this handler returns; fill it right after.
    Task {
      if let stream = node.features.payloads.streams.incoming[id] {
        node.features.payloads.pumpReader(stream, node: node)
      }
    }
    return HTTPResponse(
      status: 200, contentType: "application/octet-stream",
      headers: [("cache-control", "no-store"), ("x-accel-buffering", "no")], isStream: true)
  }

  // MARK: - Writer side

  func streamBodyReceived(_ requestID: RequestID, _ bytes: [UInt8], node: isolated Node) {
    guard let stream = streams.byWriter[requestID] else { return }
    forward(stream, bytes, node: node)
  }

  /// Sends a writer's bytes on as `streamData` frames of at most 256 KiB, then pauses the writer if it must wait.
  func forward(_ stream: LiveStream, _ bytes: [UInt8], node: isolated Node) {
    let id = stream.record.id
    guard stream.record.state == .open, node.mesh.node.payloads.outgoingStreams[id]?.flow != nil else { return }
    var start = 0
    while start < bytes.count {
      let end = min(bytes.count, start + MeshFrameCodec.maxChunkBytes)
      let piece = Array(bytes[start..<end])
      guard let offset = node.mesh.node.payloads.streamSend(id, count: piece.count) else { break }
      sendStreamFrame(.streamData(streamID: id, offset: offset, bytes: piece), to: stream.record.toNodeID, node: node)
      start = end
    }
    stream.record.bytes = node.mesh.node.payloads.outgoingStreams[id]?.flow?.sent ?? stream.record.bytes
    throttleWriter(stream, node: node)
  }

  func streamBodyEnded(_ requestID: RequestID, node: isolated Node) {
    guard let stream = streams.byWriter[requestID], stream.record.state == .open else { return }
    stream.writerEnded = true
    sendStreamFrame(.streamClose(streamID: stream.record.id, reason: ""), to: stream.record.toNodeID, node: node)
    finishWriterIfDrained(stream, node: node)
  }

  /// Pauses the writer while the window is closed or the link is congested, and lets it go on otherwise.
  func throttleWriter(_ stream: LiveStream, node: isolated Node) {
    guard let flow = node.mesh.node.payloads.outgoingStreams[stream.record.id]?.flow, !stream.writerEnded,
      stream.writer != nil || stream.writerSocket != nil
    else {
      return
    }
    let local = stream.record.toNodeID == node.nodeID
    let blocked =
      flow.isBlocked
      || (!local
        && !node.links.hasRoom(stream.record.toNodeID, producer: LiveStream.producer(stream.record.id), node: node))
    if blocked != stream.writerPaused {
      stream.writerPaused = blocked
      if let writer = stream.writer { node.server.setBodyFlow(writer, enabled: !blocked) }
      if let socket = stream.writerSocket { node.server.setReceiveFlow(socket, enabled: !blocked) }
    }
  }

  func finishWriterIfDrained(_ stream: LiveStream, node: isolated Node) {
    guard stream.writerEnded, node.mesh.node.payloads.outgoingStreams[stream.record.id]?.flow?.isDrained == true,
      stream.record.state == .open
    else { return }
    closeStream(stream, state: .closed, reason: nil, notify: false, node: node)
  }

  /// Every mesh tick: writers held back by a congested link try again.
  func streamTick(node: isolated Node) {
    for stream in streams.outgoing.values where stream.writerPaused { throttleWriter(stream, node: node) }
  }

  // MARK: - Reader side

  func pumpReader(_ stream: LiveStream, node: isolated Node) {
    let id = stream.record.id
    guard node.mesh.node.payloads.incomingStreams[id]?.intake != nil else { return }
    if let socket = stream.readerSocket {
      while !stream.buffer.isEmpty, let queued = node.server.queuedBytes(socket), queued < LiveStream.readerQueue {
        let piece = stream.buffer.removeFirst()
        guard node.server.send(OutboundMessage(bytes: piece, binary: true), to: socket) == .queued else { break }
        node.mesh.node.payloads.streamHandedOver(id, count: piece.count)
      }
      stream.record.bytes = node.mesh.node.payloads.incomingStreams[id]?.intake?.delivered ?? stream.record.bytes
      sendCreditIfDue(stream, node: node)
      if stream.senderFinished && stream.buffer.isEmpty {
        node.server.close(socket, code: 1000, reason: "end of stream")
        streams.bySocket[socket] = nil
        stream.readerSocket = nil
        if stream.record.state == .open { closeStream(stream, state: .closed, reason: nil, notify: false, node: node) }
      }
      return
    }
    guard let reader = stream.reader else { return }
    while !stream.buffer.isEmpty, let queued = node.server.streamQueuedBytes(reader), queued < LiveStream.readerQueue {
      let piece = stream.buffer.removeFirst()
      guard node.server.writeStream(reader, piece) else { break }
      node.mesh.node.payloads.streamHandedOver(id, count: piece.count)
    }
    stream.record.bytes = node.mesh.node.payloads.incomingStreams[id]?.intake?.delivered ?? stream.record.bytes
    sendCreditIfDue(stream, node: node)
    if stream.senderFinished && stream.buffer.isEmpty {
      node.server.endStream(reader)
      streams.byReader[reader] = nil
      stream.reader = nil
      if stream.record.state == .open { closeStream(stream, state: .closed, reason: nil, notify: false, node: node) }
    }
  }

  func sendCreditIfDue(_ stream: LiveStream, node: isolated Node) {
    guard let offset = node.mesh.node.payloads.streamCreditDue(stream.record.id) else { return }
    sendStreamFrame(
      .streamCredit(streamID: stream.record.id, offset: offset), to: stream.record.fromNodeID, node: node)
  }

  func streamResponseDrained(_ requestID: RequestID, node: isolated Node) {
    guard let stream = streams.byReader[requestID] else { return }
    pumpReader(stream, node: node)
  }

  // MARK: - Mesh messages

  /// Sends a stream frame to `nodeID`, or hands it to this node itself when both ends are here.
  func sendStreamFrame(_ message: MeshMessage, to nodeID: String, node: isolated Node) {
    if nodeID == node.nodeID {
      let from = node.nodeID
      Task { node.interpret(node.mesh.node.localPayload(message, from: from)) }
      return
    }
    sendTransferFrame(message, to: nodeID, node: node)
  }

  /// Carries out what the payload book decided about a stream frame.
  func streamEffect(_ effect: PayloadEffect, node: isolated Node) {
    switch effect {
    case .streamOffered(let offer, let nodeID):
      // The reader must be a local member that agreed to be in the session; the id must be new on this node.
      // (A stream between two peers of this node is both outgoing and incoming under one id.)
      let reader = localReceiver(
        offer.toPeerID, of: "a stream", from: offer.fromPeerID, at: nodeID, in: offer.sessionID, node: node)
      guard streams.incoming[offer.streamID] == nil, nodeID == node.nodeID || streams.outgoing[offer.streamID] == nil,
        let peer = reader
      else {
        sendStreamFrame(
          .streamClose(
            streamID: offer.streamID, reason: "peer \(offer.toPeerID) is not in session \(offer.sessionID) there"),
          to: nodeID, node: node)
        return
      }
      let record = StreamRecord(
        id: offer.streamID,
        parties: PayloadParties(
          direction: .incoming, sessionID: offer.sessionID,
          from: PayloadParty(peerID: offer.fromPeerID, displayName: offer.fromDisplayName, nodeID: nodeID),
          to: PayloadParty(peerID: peer.id, displayName: peer.displayName, nodeID: node.nodeID)),
        name: offer.name, state: .open, bytes: 0,
        reason: nil, createdAt: Timestamp.now())
      let stream = LiveStream(record: record)
      streams.incoming[record.id] = stream
      node.mesh.node.payloads.acceptStream(record.id, from: nodeID)
      publishStreamEvent("stream.opened", stream, node: node)
    case .streamData(let id, let bytes):
      guard let stream = streams.incoming[id], stream.record.state == .open else { return }
      if !bytes.isEmpty { stream.buffer.append(bytes) }
      pumpReader(stream, node: node)
    case .streamCredited(let id, _):
      guard let stream = streams.outgoing[id] else { return }
      throttleWriter(stream, node: node)
      finishWriterIfDrained(stream, node: node)
    case .streamEnded(let id):
      guard let stream = streams.incoming[id] else { return }
      stream.senderFinished = true
      pumpReader(stream, node: node)
      if stream.reader == nil && stream.buffer.isEmpty && stream.record.state == .open {
        closeStream(stream, state: .closed, reason: nil, notify: false, node: node)
      }
    case .streamFailed(let id, let direction, let reason, let notify):
      guard let stream = direction == .outgoing ? streams.outgoing[id] : streams.incoming[id] else { return }
      closeStream(stream, state: .failed, reason: reason, notify: notify, node: node)
    default:
      break
    }
  }

  // MARK: - Ending

  func closeStream(_ stream: LiveStream, state: StreamState, reason: String?, notify: Bool, node: isolated Node) {
    guard stream.record.state == .open else { return }
    stream.record.state = state
    stream.record.reason = reason
    node.mesh.node.payloads.closeStream(stream.record.id, stream.record.direction.payload)
    if notify {
      let other = stream.record.direction == .outgoing ? stream.record.toNodeID : stream.record.fromNodeID
      sendStreamFrame(.streamClose(streamID: stream.record.id, reason: reason ?? "closed"), to: other, node: node)
    }
    if let writer = stream.writer {
      streams.byWriter[writer] = nil
      stream.writer = nil
    }
    if let done = stream.writerDone {
      stream.writerDone = nil
      if state == .closed {
        done.resume()
      } else {
        done.resume(
          throwing: APIError(
            status: 502, code: "stream_failed", message: "the stream failed: \(reason ?? "no reason given")"))
      }
    }
    if state != .closed {
      for socket in [stream.writerSocket, stream.readerSocket].compactMap({ $0 }) {
        node.server.close(socket, code: 1011, reason: reason ?? "stream failed")
        streams.bySocket[socket] = nil
      }
      stream.writerSocket = nil
      stream.readerSocket = nil
    }
    if let reader = stream.reader, state != .closed {
      node.server.endStream(reader)
      streams.byReader[reader] = nil
      stream.reader = nil
      stream.buffer = []
    }
    var data: JSONObject = ["stream": streamJSON(stream.record)]
    data["reason"] = reason.map { .string($0) } ?? .null
    publishStreamEvent("stream.closed", stream, data: data, node: node)
  }

  /// A writer or reader went away.
  func streamRequestClosed(_ requestID: RequestID, node: isolated Node) {
    if let stream = streams.byWriter.removeValue(forKey: requestID) {
      stream.writer = nil
      if !stream.writerEnded {
        closeStream(stream, state: .failed, reason: "the writer disconnected before the end", notify: true, node: node)
      }
    }
    if let stream = streams.byReader.removeValue(forKey: requestID) {
      stream.reader = nil
      closeStream(stream, state: .failed, reason: "the reader disconnected", notify: true, node: node)
    }
  }

  func streamsLinkDown(_ nodeID: String, node: isolated Node) {
    for stream in Array(streams.outgoing.values) + Array(streams.incoming.values)
    where stream.record.state == .open && (stream.record.toNodeID == nodeID || stream.record.fromNodeID == nodeID)
      && stream.record.fromNodeID != stream.record.toNodeID
    {
      closeStream(stream, state: .failed, reason: "the link to the other node was lost", notify: false, node: node)
    }
  }

  // MARK: - WebSocket transport

  func acceptStreamSocket(_ head: HTTPRequestHead, node: isolated Node) -> WebSocketDecision {
    do throws(APIError) {
      let peer = try node.authenticate(head, allowQueryToken: true)
      let id = LiveStream.socketStreamID(head.path) ?? ""
      if let stream = streams.outgoing[id], stream.record.fromPeerID == peer.id {
        guard stream.record.state == .open, stream.writer == nil, stream.writerSocket == nil, !stream.writerEnded
        else { throw APIError(status: 409, code: "stream_busy", message: "stream \(id) already has a writer") }
        return .accept
      }
      if let stream = streams.incoming[id], stream.record.toPeerID == peer.id {
        guard stream.reader == nil, stream.readerSocket == nil, stream.record.state == .open else {
          throw APIError(status: 409, code: "stream_busy", message: "stream \(id) already has a reader")
        }
        return .accept
      }
      throw APIError.notFound("no stream \(id) written or read by this peer")
    } catch {
      return .reject(error.response)
    }
  }

  func streamSocketOpened(_ socket: WebSocketID, head: HTTPRequestHead, node: isolated Node) {
    guard let peer = try? node.authenticate(head, allowQueryToken: true), let id = LiveStream.socketStreamID(head.path)
    else {
      node.server.close(socket, code: 4401, reason: "token no longer valid")
      return
    }
    if let stream = streams.outgoing[id], stream.record.fromPeerID == peer.id, stream.writerSocket == nil,
      stream.writer == nil, stream.record.state == .open
    {
      stream.writerSocket = socket
      streams.bySocket[socket] = stream
      throttleWriter(stream, node: node)
    } else if let stream = streams.incoming[id], stream.record.toPeerID == peer.id, stream.readerSocket == nil,
      stream.reader == nil, stream.record.state == .open
    {
      stream.readerSocket = socket
      streams.bySocket[socket] = stream
      pumpReader(stream, node: node)
    } else {
      node.server.close(socket, code: 4409, reason: "stream busy or closed")
    }
  }

  /// Whether `socket` belongs to a stream (and the message was handled).
  func streamSocketReceived(_ socket: WebSocketID, _ message: WebSocketMessage, node: isolated Node) -> Bool {
    guard let stream = streams.bySocket[socket] else { return false }
    guard stream.writerSocket == socket, case .binary(let bytes) = message else {
      node.server.close(socket, code: 1003, reason: "stream writers send binary frames; readers send nothing")
      return true
    }
    forward(stream, bytes, node: node)
    return true
  }

  /// Whether `socket` belonged to a stream (and its end was handled).
  func streamSocketClosed(_ socket: WebSocketID, node: isolated Node) -> Bool {
    guard let stream = streams.bySocket.removeValue(forKey: socket) else { return false }
    if stream.writerSocket == socket {
      // The writer closing its socket ends the stream.
      stream.writerSocket = nil
      guard stream.record.state == .open, !stream.writerEnded else { return true }
      stream.writerEnded = true
      sendStreamFrame(.streamClose(streamID: stream.record.id, reason: ""), to: stream.record.toNodeID, node: node)
      finishWriterIfDrained(stream, node: node)
    } else if stream.readerSocket == socket {
      stream.readerSocket = nil
      closeStream(stream, state: .failed, reason: "the reader disconnected", notify: true, node: node)
    }
    return true
  }

  func streamSocketDrained(_ socket: WebSocketID, node: isolated Node) {
    guard let stream = streams.bySocket[socket], stream.readerSocket == socket else { return }
    pumpReader(stream, node: node)
  }

  // MARK: - Events

  func publishStreamEvent(_ type: String, _ stream: LiveStream, data: JSONObject? = nil, node: isolated Node) {
    let peerID = stream.record.direction == .outgoing ? stream.record.fromPeerID : stream.record.toPeerID
    guard node.peers[peerID] != nil else { return }
    let payload = data ?? ["stream": streamJSON(stream.record)]
    node.events.publishInBackground([(peerID: peerID, type: type, data: .object(payload))], node: node)
  }

  func streamJSON(_ record: StreamRecord) -> JSONValue {
    .object(record.commonJSON)
  }
}
