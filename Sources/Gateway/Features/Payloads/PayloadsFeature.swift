/// The payloads feature: file transfers (single and group sends, consent, resume) and byte streams. It owns their live
/// state and every method that acts on it; the node reaches it only through ``NodeFeature``'s hooks (mesh frames,
/// link changes, link room, streamed request bodies, request and socket ends, metrics, settings, the start), and its
/// routes (PayloadRoutes.swift) call it as `node.features.payloads`.
///
/// Layers 4 to 6, on the lws service thread: every method takes the node actor as its isolated parameter. The code is
/// spread over the files of this folder by concern: the upload path (PayloadsFeature+Transfers.swift), the end of a
/// transfer and restart recovery (+TransferRecords), mesh messages (+TransferMessages), consent (+Consent), group
/// sends on both sides (+TransferGroups, +GroupCopies), and streams (+Streams).
import LWS
import MeshCore

final class PayloadsFeature: NodeFeature {
  /// Live transfers, group sends, consent settings and lists.
  var transfers = TransferRuntime()
  /// Live streams.
  var streams = StreamRuntime()

  // MARK: - Hooks

  func nodeStarted(node: isolated Node) {
    Task { await node.features.payloads.restoreTransfers(node: node) }
  }

  func nodeLinked(_ nodeID: String, node: isolated Node) { transfersLinkUp(nodeID, node: node) }

  func nodeUnlinked(_ nodeID: String, node: isolated Node) { transfersLinkDown(nodeID, node: node) }

  func tick(node: isolated Node) { transferTick(node: node) }

  /// A deleted peer's payloads end as when a recipient leaves a group send's session: each live transfer it sends or
  /// receives fails and the other side is told (a group's spool takes its shares and copies with it; a rider ends
  /// its copy once no recipient on the node is left), each open stream of its fails likewise, and its always-accept
  /// list goes (the store's rows go with the peer's).
  func peerRemoved(_ peerID: String, node: isolated Node) {
    for table in [transfers.outgoing, transfers.incoming] {
      for transfer in table.values where transfer.record.role != .copy && localParty(transfer.record) == peerID {
        let record = transfer.record
        let name = record.direction == .outgoing ? record.fromDisplayName : record.toDisplayName
        failTransfer(transfer, reason: "\(name) was deleted before the file arrived", notify: true, node: node)
      }
    }
    for stream in Array(streams.outgoing.values) + Array(streams.incoming.values) {
      let record = stream.record
      guard (record.direction == .outgoing ? record.fromPeerID : record.toPeerID) == peerID else { continue }
      let name = record.direction == .outgoing ? record.fromDisplayName : record.toDisplayName
      closeStream(stream, state: .failed, reason: "\(name) was deleted", notify: true, node: node)
    }
    transfers.alwaysAccept[peerID] = nil
  }

  /// What the payload book decided about transfer and stream frames; and offers the mesh core refused, whose senders
  /// are told.
  func meshEffect(_ effect: MeshEffect, node: isolated Node) {
    switch effect {
    case .payload(let effect):
      payloadEffect(effect, node: node)
    case .frameRefused(let refusal):
      if let nodeID = refusal.nodeID, let answer = refusal.answer {
        answerRefusedFrame(refusal.message, to: nodeID, because: answer, node: node)
      }
    default:
      break
    }
  }

  /// Senders held back by a full link (file chunks, stream writers) try again.
  func linkRoomFreed(node: isolated Node) {
    for transfer in transfers.outgoing.values
    where node.mesh.node.payloads.sender(transfer.record.id)?.state == .sending {
      pump(transfer, node: node)
    }
    for stream in streams.outgoing.values where stream.writerPaused { throttleWriter(stream, node: node) }
  }

  /// A piece of a streamed request body: an upload's or a stream writer's.
  func requestBodyReceived(_ requestID: RequestID, _ bytes: [UInt8], node: isolated Node) {
    if transfers.byUpload[requestID] != nil {
      uploadBodyReceived(requestID, bytes, node: node)
    } else {
      streamBodyReceived(requestID, bytes, node: node)
    }
  }

  func requestBodyEnded(_ requestID: RequestID, node: isolated Node) {
    if transfers.byUpload[requestID] != nil {
      uploadBodyEnded(requestID, node: node)
    } else {
      streamBodyEnded(requestID, node: node)
    }
  }

  func responseDrained(_ requestID: RequestID, node: isolated Node) {
    streamResponseDrained(requestID, node: node)
  }

  /// An upload's or a stream writer's or reader's request went away.
  func requestClosed(_ requestID: RequestID, node: isolated Node) {
    uploadRequestClosed(requestID, node: node)
    streamRequestClosed(requestID, node: node)
  }

  func webSocketReceived(_ socket: WebSocketID, _ message: WebSocketMessage, node: isolated Node) {
    _ = streamSocketReceived(socket, message, node: node)
  }

  func webSocketClosed(_ socket: WebSocketID, node: isolated Node) {
    _ = streamSocketClosed(socket, node: node)
  }

  func webSocketDrained(_ socket: WebSocketID, node: isolated Node) {
    streamSocketDrained(socket, node: node)
  }

  func metricsLines(into lines: inout [String], node: isolated Node) {
    lines += transferMetricLines(node: node)
  }

  var settingNames: [String] { ["fileConsent", "fileConsentTimeout"] }

  func settings(into object: inout JSONObject, node: isolated Node) {
    object["fileConsent"] = .string(fileConsent(node: node).rawValue)
    object["fileConsentTimeout"] = .int(Int64(fileConsentTimeout(node: node)))
  }

  func checkSettings(_ body: RequestBody, node: isolated Node) throws(APIError) {
    _ = try Self.consentSettings(body)
  }

  func applySettings(_ body: RequestBody, node: isolated Node) {
    guard let (consent, timeout) = try? Self.consentSettings(body) else { return }
    if let consent { transfers.consentMode = consent }
    if let timeout { transfers.consentTimeout = timeout }
  }

  /// File consent as `PATCH /api/v1/node/settings` changes it (nil: unchanged).
  static func consentSettings(_ body: RequestBody) throws(APIError) -> (FileConsent?, Int?) {
    var consent: FileConsent?
    if let value = body.object["fileConsent"] {
      guard case .string(let text) = value, let mode = FileConsent(rawValue: text) else {
        throw APIError.badRequest("fileConsent must be \"auto\" or \"ask\"")
      }
      consent = mode
    }
    var timeout: Int?
    if let value = body.object["fileConsentTimeout"] {
      guard case .int(let number) = value, (1...86_400).contains(Int(number)) else {
        throw .badRequest("fileConsentTimeout must be an integer from 1 to 86400")
      }
      timeout = Int(number)
    }
    return (consent, timeout)
  }

  /// Tells the sender of a refused offer that it was refused, so that nothing waits for an answer that never comes.
  /// The ids are echoed only through the codec (a string field), never used.
  func answerRefusedFrame(_ message: MeshMessage, to nodeID: String, because reason: String, node: isolated Node) {
    switch message {
    case .transferOffer(let offer):
      sendTransferFrame(
        .transferReject(transferID: offer.transferID, code: .refused, message: "refused: \(reason)"), to: nodeID,
        node: node)
    case .transferGroupOffer(let offer):
      sendTransferFrame(
        .transferReject(transferID: offer.copyID, code: .refused, message: "refused: \(reason)"), to: nodeID,
        node: node)
    case .streamOpen(let offer):
      sendStreamFrame(.streamClose(streamID: offer.streamID, reason: "refused: \(reason)"), to: nodeID, node: node)
    default:
      break
    }
  }
}

@available(*, unavailable) extension PayloadsFeature: Sendable {}
