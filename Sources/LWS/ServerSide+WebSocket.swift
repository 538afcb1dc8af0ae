/// Accepted WebSockets on the server side: the upgrade (checked, or refused with an HTTP answer), message
/// reassembly, and the send queue with coalesced writes.
///
/// Service thread only, inside lws callbacks or ``Server`` calls made there.
internal import CLibWebSockets
import Glibc
import Logging

extension ServerSide {
  func webSocketUpgradeRequested(_ wsi: OpaquePointer) -> Int32 {
    let path = header(wsi, WSI_TOKEN_GET_URI) ?? "/"
    let head = makeHead(wsi, method: .get, path: path)
    guard let delegate else { return 1 }
    if let refusal = admission.refusal(wsi, path: path) {
      var response = delegate.errorResponse(status: refusal.status, message: refusal.message, head: head)
      response.headers += refusal.headers
      writeUpgradeRefusal(wsi, response)
      return 1
    }
    switch delegate.shouldAccept(webSocket: head) {
    case .accept:
      pendingUpgrades[wsi] = head
      return 0
    case .reject(let response):
      writeUpgradeRefusal(wsi, response)
      return 1
    }
  }

  /// Answers a refused upgrade request as plain HTTP/1.1 (lws's header helpers would say HTTP/1.0 here: it learns
  /// the request's version only for requests it serves as HTTP), then lws closes the connection.
  private func writeUpgradeRefusal(_ wsi: OpaquePointer, _ response: HTTPResponse) {
    var head = "HTTP/1.1 \(response.status) \(HTTPResponse.reasonPhrase(response.status))\r\n"
    head += "server: \(configuration.serverName)\r\n"
    if let type = response.contentType { head += "content-type: \(type)\r\n" }
    for (name, value) in response.headers where !name.contains("\r") && !value.contains("\r") {
      head += "\(name.lowercased()): \(value)\r\n"
    }
    let body = response.body.prefix(scratchSize / 2)
    head += "content-length: \(body.count)\r\nconnection: close\r\n\r\n"
    let bytes = Array(head.utf8.prefix(scratchSize / 2)) + body
    let start = (scratch + Int(CLWS_PRE)).assumingMemoryBound(to: UInt8.self)
    start.update(from: bytes, count: bytes.count)
    _ = lws_write(wsi, start, bytes.count, LWS_WRITE_HTTP_FINAL)
  }

  func webSocketEstablished(_ wsi: OpaquePointer) -> Int32 {
    let head = pendingUpgrades.removeValue(forKey: wsi) ?? HTTPRequestHead(method: .get, path: "/")
    let connection = WebSocketConnection(id: WebSocketID(loop.allocateID()), wsi: wsi)
    sockets[wsi] = connection
    socketsByID[connection.id] = connection
    if closing {
      connection.requestClose(code: 1001, reason: "node shutting down", discardingQueued: false)
      return 0
    }
    delegate?.webSocketOpened(connection.id, head: head)
    return 0
  }

  func webSocketReceived(_ wsi: OpaquePointer, _ input: UnsafeMutableRawPointer?, _ length: Int) -> Int32 {
    guard let connection = sockets[wsi], connection.closeRequest == nil else { return 0 }
    if connection.receiveBuffer.isEmpty {
      connection.receivingBinary = lws_frame_is_binary(wsi) != 0
      // The rest of this frame is known: reserve it once rather than let the buffer grow by doubling (a 256 KiB
      // file chunk arrives in 64 KiB pieces; each growth would copy what came so far).
      let frame = length + Int(lws_remaining_packet_payload(wsi))
      if frame > length && frame <= configuration.maxWebSocketMessageBytes {
        connection.receiveBuffer.reserveCapacity(frame)
      }
    }
    if connection.receiveBuffer.count + length > configuration.maxWebSocketMessageBytes {
      connection.receiveBuffer = []
      connection.requestClose(
        code: 1009, reason: "message larger than \(configuration.maxWebSocketMessageBytes) bytes",
        discardingQueued: false)
      return 0
    }
    if let input, length > 0 {
      connection.receiveBuffer.append(contentsOf: UnsafeRawBufferPointer(start: input, count: length))
    }
    // RECEIVE is not message-aligned: a message is complete at the final fragment with nothing left.
    guard lws_is_final_fragment(wsi) != 0, lws_remaining_packet_payload(wsi) == 0 else { return 0 }
    let bytes = connection.receiveBuffer
    connection.receiveBuffer = []
    messagesIn += 1
    delegate?.webSocketReceived(connection.id, connection.receivingBinary ? .binary(bytes) : .text(bytes))
    return 0
  }

  /// Queues `message` on accepted WebSocket `id`; nil when `id` is not one of these (see ``Server/send(_:to:writeNow:)``).
  func send(_ message: OutboundMessage, to id: WebSocketID, writeNow: Bool) -> SendResult? {
    guard let connection = socketsByID[id] else { return nil }
    if writeNow && message.count <= Server.writeNowBytes && connection.queue.isEmpty && connection.closeRequest == nil
      && !connection.pulls && lws_partial_buffered(connection.wsi) == 0
      && message.count <= configuration.maxQueuedBytesPerWebSocket
    {
      let kind = message.isBinary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT
      if lws_write(connection.wsi, message.payload, message.count, kind) < 0 {
        // Outside its callbacks lws cannot be told to close by a return value: ask it to close on its next pass.
        lws_set_timeout(connection.wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC)
        return .closed
      }
      messagesOut += 1
      return .queued
    }
    return connection.enqueue(message, limit: configuration.maxQueuedBytesPerWebSocket)
  }

  func webSocketWritable(_ wsi: OpaquePointer) -> Int32 {
    guard let connection = sockets[wsi] else { return 0 }
    var coalesced = 0
    var budget = 32
    if connection.queue.count > 1 {
      // Several small frames waiting (a fan-out burst): frame them here and hand them to the socket in one write,
      // one syscall instead of one per frame.
      coalesced = writeCoalesced(connection, wsi: wsi)
      if coalesced < 0 { return -1 }
      budget = lws_send_pipe_choked(wsi) != 0 ? 0 : budget - coalesced
    }
    let pumped = connection.writeQueued(budget: budget, delegate: delegate) { message in
      lws_write(wsi, message.payload, message.count, message.isBinary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT) >= 0
    }
    guard let (written, more) = pumped else { return -1 }
    messagesOut += written
    if more {
      lws_callback_on_writable(wsi)
      return 0
    }
    guard let request = connection.closeRequest else {
      if budget - written < 32 { delegate?.webSocketDrained(connection.id) }
      return 0
    }
    // The close frame must follow the last message onto the socket: returning -1 while lws still holds part of a
    // message would make lws flush it and then drop the connection without any close frame (the client sees 1006).
    if lws_partial_buffered(wsi) != 0 {
      lws_callback_on_writable(wsi)
      return 0
    }
    var reason = Array(request.reason.utf8)
    lws_close_reason(wsi, lws_close_status(rawValue: UInt32(request.code)), &reason, reason.count)
    return -1
  }

  /// Writes as many queued server frames as fit in the scratch buffer (RFC 6455 headers, unmasked, no extensions
  /// are negotiated) with a single raw write; lws keeps whatever the socket does not take and flushes it before
  /// the next writable callback. Returns how many messages went out (0 when the first does not fit), -1 on error.
  private func writeCoalesced(_ connection: WebSocketConnection, wsi: OpaquePointer) -> Int {
    let start = (scratch + Int(CLWS_PRE)).assumingMemoryBound(to: UInt8.self)
    var used = 0
    var messages = 0
    while messages < 64, let message = connection.queue.first {
      let header = message.count < 126 ? 2 : message.count < 65536 ? 4 : 10
      guard used + header + message.count <= scratchSize else { break }
      start[used] = 0x80 | (message.isBinary ? 0x2 : 0x1)
      if header == 2 {
        start[used + 1] = UInt8(message.count)
      } else if header == 4 {
        start[used + 1] = 126
        start[used + 2] = UInt8(message.count >> 8)
        start[used + 3] = UInt8(truncatingIfNeeded: message.count)
      } else {
        start[used + 1] = 127
        for index in 0..<8 { start[used + 2 + index] = UInt8(truncatingIfNeeded: message.count >> (56 - 8 * index)) }
      }
      (start + used + header).update(from: message.payload, count: message.count)
      used += header + message.count
      connection.queue.removeFirst()
      connection.queuedBytes -= message.count
      messages += 1
    }
    guard messages > 0 else { return 0 }
    if lws_write(wsi, start, used, LWS_WRITE_HTTP) < 0 { return -1 }
    messagesOut += messages
    coalescedWrites += 1
    return messages
  }

  func webSocketClosed(_ wsi: OpaquePointer) {
    guard let connection = sockets.removeValue(forKey: wsi) else { return }
    socketsByID[connection.id] = nil
    logger.trace("WebSocket closed.", ["ws.connection.id": connection.id.rawValue, "dialled": false])
    delegate?.webSocketClosed(connection.id)
  }

  /// lws destroys the connection (`WSI_DESTROY`, which it always delivers): whatever was kept for it goes, and a
  /// request still open is reported closed.
  func connectionDestroyed(_ wsi: OpaquePointer) {
    pendingUpgrades[wsi] = nil
    remoteAddresses[wsi] = nil
    admission.forget(wsi)
    if let exchange = exchanges.removeValue(forKey: wsi) {
      if exchange.fileDescriptor >= 0 {
        Glibc.close(exchange.fileDescriptor)
        exchange.fileDescriptor = -1
      }
      exchangesByID[exchange.id] = nil
      delegate?.requestClosed(exchange.id)
    }
    webSocketClosed(wsi)
  }
}
