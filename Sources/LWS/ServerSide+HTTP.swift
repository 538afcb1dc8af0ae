/// HTTP on the server side: a request's head, its body (collected, or streamed to the handler with flow control),
/// the body's idle and rate limits, and the response (plain, file or streaming).
///
/// Service thread only, inside lws callbacks or ``Server`` calls made there.
internal import CLibWebSockets
import Glibc
import Logging

extension ServerSide {
  func httpRequestStarted(_ wsi: OpaquePointer) -> Int32 {
    var uri: UnsafeMutablePointer<CChar>?
    var uriLength: Int32 = 0
    let methodIndex = Int(lws_http_get_uri_and_method(wsi, &uri, &uriLength))
    let path =
      uri.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: Int(uriLength)), as: UTF8.self) } ?? "/"
    let method: HTTPMethod? =
      switch methodIndex {
      case Int(LWSHUMETH_GET): .get
      case Int(LWSHUMETH_HEAD): .head
      case Int(LWSHUMETH_POST): .post
      case Int(LWSHUMETH_PUT): .put
      case Int(LWSHUMETH_PATCH): .patch
      case Int(LWSHUMETH_DELETE): .delete
      case Int(LWSHUMETH_OPTIONS): .options
      default: nil
      }
    let head = makeHead(wsi, method: method ?? .get, path: path)
    let exchange = HTTPExchange(id: RequestID(loop.allocateID()), wsi: wsi, head: head)
    if let previous = exchanges[wsi] { exchangesByID[previous.id] = nil }
    exchanges[wsi] = exchange
    exchangesByID[exchange.id] = exchange

    guard let method, let delegate else {
      reject(exchange, status: 501, message: "this HTTP method is not supported; use GET, POST, PUT, PATCH or DELETE")
      return 0
    }
    if let refusal = admission.refusal(wsi, path: path) {
      reject(exchange, status: refusal.status, message: refusal.message, headers: refusal.headers)
      return 0
    }
    if header(wsi, WSI_TOKEN_HTTP) == nil, header(wsi, WSI_TOKEN_HTTP_COLON_METHOD) == nil {
      // An HTTP/1 request line without its version was cut short: lws 4.1.6 decodes %0D and %0A in the URL and
      // then takes them for the end of the line, dropping the rest (the rest of the query and the version, after an
      // LF the next header line too). Refuse it rather than act on a query that lost its end.
      reject(
        exchange, status: 400,
        message: "the URL holds a percent-encoded line break (%0D or %0A), where this server's HTTP parser ends "
          + "the request line and loses the rest of it; leave the line break out")
      return 0
    }
    guard method.hasRequestBody else {
      dispatch(exchange)
      return 0
    }
    if let encoding = head.headers["transfer-encoding"], encoding.lowercased() != "identity" {
      reject(exchange, status: 411, message: "chunked request bodies are not supported; send a Content-Length header")
      return 0
    }
    guard let contentLength = head.contentLength else {
      // lws would wait for a body that never ends; answer as if it were empty and close afterwards.
      exchange.closeAfter = true
      dispatch(exchange)
      return 0
    }
    let policy = delegate.bodyPolicy(for: head)
    let limit = policy.limit
    exchange.head.tag = policy.tag
    if policy.streamed {
      if contentLength > limit {
        reject(
          exchange, status: 413,
          message: "the request body is \(contentLength) bytes; the limit here is \(limit) bytes")
        return 0
      }
      // Hand the request over now and stop reading until the handler enables the body's flow.
      exchange.streamsBody = true
      exchange.awaitingBody = contentLength > 0
      exchange.bodyEndPending = contentLength == 0
      lws_rx_flow_control(wsi, 0)
      dispatch(exchange)
      if !exchange.bodyFlowing { holdBodyTimeout(exchange.id) }
      return 0
    }
    if contentLength == 0 {
      // lws delivers no body callbacks for an empty PUT/PATCH body (and an immediate, ignored completion for POST).
      dispatch(exchange)
      return 0
    }
    if contentLength > limit {
      reject(
        exchange, status: 413, message: "the request body is \(contentLength) bytes; the limit here is \(limit) bytes")
      return 0
    }
    exchange.bodyLimit = limit
    exchange.awaitingBody = true
    exchange.lastBodyActivity = Self.monotonicMilliseconds()
    exchange.rateWindowStart = exchange.lastBodyActivity
    exchange.body.reserveCapacity(min(contentLength, 1 << 20))
    return 0
  }

  /// Milliseconds on the monotonic clock.
  static func monotonicMilliseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1000 + UInt64(now.tv_nsec) / 1_000_000
  }

  /// Closes connections whose request body has not moved for ``ServerConfiguration/bodyIdleTimeoutSeconds`` (while
  /// a streamed body is paused by its handler, the client is not waiting to send, so that time does not count).
  func closeIdleBodies() {
    let now = Self.monotonicMilliseconds()
    let timeout = UInt64(configuration.bodyIdleTimeoutSeconds) * 1000
    let window = UInt64(ServerConfiguration.bodyRateWindowSeconds) * 1000
    for exchange in exchanges.values where exchange.awaitingBody {
      let reading = exchange.streamsBody ? exchange.bodyFlowing && !exchange.bodyEnded : !exchange.dispatched
      guard reading else {
        // The client cannot send while the handler holds the body back: that time starts no window.
        exchange.rateWindowStart = now
        exchange.rateWindowBytes = 0
        continue
      }
      if configuration.minBodyBytesPerWindow > 0, now >= exchange.rateWindowStart + window {
        if exchange.rateWindowBytes < configuration.minBodyBytesPerWindow {
          closeSlowBody(exchange)
          continue
        }
        exchange.rateWindowStart = now
        exchange.rateWindowBytes = 0
      }
      guard timeout > 0, now >= exchange.lastBodyActivity + timeout else { continue }
      bodyTimeouts += 1
      logger.info(
        "Request body stalled; closing the connection.",
        ["http.request.id": exchange.id, "http.body.timeout.seconds": configuration.bodyIdleTimeoutSeconds])
      exchange.awaitingBody = false
      lws_set_timeout(exchange.wsi, PENDING_TIMEOUT_HTTP_CONTENT, LWS_TO_KILL_ASYNC)
    }
  }

  /// Answers a request whose body arrived slower than ``ServerConfiguration/minBodyBytesPerWindow`` with `408` and
  /// closes its connection (a streamed body already handed to its handler is cut off like a stalled one: the handler
  /// hears that the request closed).
  private func closeSlowBody(_ exchange: HTTPExchange) {
    slowBodies += 1
    logger.info(
      "Request body too slow; answering 408 and closing the connection.",
      [
        "http.request.id": exchange.id, "http.body.window.bytes": exchange.rateWindowBytes,
        "http.body.min.bytes": configuration.minBodyBytesPerWindow,
        "http.body.window.seconds": ServerConfiguration.bodyRateWindowSeconds,
      ])
    exchange.awaitingBody = false
    guard !exchange.dispatched else {
      lws_set_timeout(exchange.wsi, PENDING_TIMEOUT_HTTP_CONTENT, LWS_TO_KILL_ASYNC)
      return
    }
    reject(
      exchange, status: 408,
      message:
        "the request body arrived at \(exchange.rateWindowBytes) bytes in \(ServerConfiguration.bodyRateWindowSeconds) s; "
        + "this node needs at least \(configuration.minBodyBytesPerWindow) (--min-body-rate): send the body at once")
  }

  func httpBodyReceived(_ wsi: OpaquePointer, _ input: UnsafeMutableRawPointer?, _ length: Int) -> Int32 {
    exchanges[wsi]?.lastBodyActivity = Self.monotonicMilliseconds()
    exchanges[wsi]?.rateWindowBytes += length
    if let exchange = exchanges[wsi], exchange.streamsBody {
      guard exchange.awaitingBody, !exchange.bodyEnded, let input, length > 0 else { return 0 }
      let bytes = [UInt8](UnsafeRawBufferPointer(start: input, count: length))
      if exchange.bodyFlowing && exchange.pendingBody.isEmpty {
        delegate?.requestBodyReceived(exchange.id, bytes)
      } else {
        exchange.pendingBody.append(bytes)
      }
      return 0
    }
    guard let exchange = exchanges[wsi], exchange.awaitingBody, !exchange.dispatched else { return 0 }
    if let input, length > 0 {
      if exchange.body.count + length > exchange.bodyLimit {
        reject(exchange, status: 413, message: "the request body exceeds the limit of \(exchange.bodyLimit) bytes")
        return 0
      }
      exchange.body.append(contentsOf: UnsafeRawBufferPointer(start: input, count: length))
    }
    return 0
  }

  func httpBodyCompleted(_ wsi: OpaquePointer) -> Int32 {
    if let exchange = exchanges[wsi], exchange.streamsBody {
      guard exchange.awaitingBody else { return 0 }
      exchange.awaitingBody = false
      guard !exchange.bodyEnded else { return 0 }
      if exchange.bodyFlowing && exchange.pendingBody.isEmpty {
        exchange.bodyEnded = true
        delegate?.requestBodyEnded(exchange.id)
      } else {
        exchange.bodyEndPending = true
      }
      return 0
    }
    guard let exchange = exchanges[wsi] else { return 0 }
    guard !exchange.dispatched else {
      // One completion after an early dispatch is normal (a body on a method that takes none). More mean a request
      // is pipelined behind this body: lws 4.1.6 then re-runs BODY_COMPLETION on every service pass, and delivers no
      // HTTP_WRITEABLE, until this transaction completes (found by schemathesis). So the answer is written from here,
      // as soon as the handler gives it, and the connection closes after it; the client retries the rest on a new
      // connection. A handler that has not answered within 5 s of this busy wait loses the connection.
      exchange.repeatedCompletions += 1
      guard exchange.repeatedCompletions > 1 else { return 0 }
      exchange.closeAfter = true
      let now = Self.monotonicMilliseconds()
      if exchange.pipelinedSince == 0 { exchange.pipelinedSince = now }
      if exchange.response != nil { return httpWritable(wsi) }
      if now > exchange.pipelinedSince + 5000 {
        forget(exchange)
        return -1
      }
      return 0
    }
    exchange.awaitingBody = false
    dispatch(exchange)
    return 0
  }

  private func dispatch(_ exchange: HTTPExchange) {
    exchange.dispatched = true
    let request = HTTPRequest(id: exchange.id, head: exchange.head, body: exchange.body)
    exchange.body = []
    delegate?.handle(request)
  }

  /// Answers a protocol-level failure before the body was read; the connection closes afterwards.
  private func reject(_ exchange: HTTPExchange, status: Int, message: String, headers: [(String, String)] = []) {
    exchange.dispatched = true
    exchange.closeAfter = true
    var response =
      delegate?.errorResponse(status: status, message: message, head: exchange.head)
      ?? HTTPResponse(status: status, contentType: "text/plain", body: Array(message.utf8))
    response.headers += headers
    _ = respond(to: exchange.id, with: response)
  }

  /// Enables or pauses reading the streamed body of request `id` (see ``ServerDelegate/bodyPolicy(for:)``): while
  /// paused, lws stops reading the socket, so a client sending faster than the handler consumes is held back by TCP.
  /// Pieces already read are delivered (later, from the inbox) when the flow is enabled again. Service thread only.
  func setBodyFlow(_ id: RequestID, enabled: Bool) {
    guard let exchange = exchangesByID[id], exchange.streamsBody, !exchange.bodyEnded else { return }
    guard exchange.bodyFlowing != enabled else { return }
    exchange.bodyFlowing = enabled
    if !enabled {
      lws_rx_flow_control(exchange.wsi, 0)
      holdBodyTimeout(id)
      return
    }
    lws_rx_flow_control(exchange.wsi, 1)
    // The idle clock and the rate window restart: the client could not send while the handler held the body back.
    exchange.lastBodyActivity = Self.monotonicMilliseconds()
    exchange.rateWindowStart = exchange.lastBodyActivity
    exchange.rateWindowBytes = 0
    lws_set_timeout(exchange.wsi, PENDING_TIMEOUT_HTTP_CONTENT, Int32(30))
    if !exchange.pendingBody.isEmpty || exchange.bodyEndPending {
      // Delivered from the inbox, not from inside the caller.
      loop.execute { [self] in deliverPendingBody(id) }
    }
  }

  /// While the handler holds a streamed body back, lws's own content timeout (re-armed after every body callback) must
  /// not cut the connection: clear it once the current callback has returned.
  private func holdBodyTimeout(_ id: RequestID) {
    loop.execute { [self] in
      guard let exchange = exchangesByID[id], exchange.streamsBody, !exchange.bodyFlowing, !exchange.bodyEnded else {
        return
      }
      lws_set_timeout(exchange.wsi, NO_PENDING_TIMEOUT, 0)
    }
  }

  private func deliverPendingBody(_ id: RequestID) {
    guard let exchange = exchangesByID[id], exchange.streamsBody else { return }
    while exchange.bodyFlowing, !exchange.pendingBody.isEmpty {
      let bytes = exchange.pendingBody.removeFirst()
      delegate?.requestBodyReceived(id, bytes)
    }
    if exchange.bodyFlowing, exchange.pendingBody.isEmpty, exchange.bodyEndPending, !exchange.bodyEnded {
      exchange.bodyEndPending = false
      exchange.bodyEnded = true
      delegate?.requestBodyEnded(id)
    }
  }

  /// Queues the response for request `id`. Returns false when the client is gone or it was answered already.
  @discardableResult
  func respond(to id: RequestID, with response: HTTPResponse) -> Bool {
    guard let exchange = exchangesByID[id], exchange.response == nil else { return false }
    var response = response
    if exchange.streamsBody && !exchange.bodyEnded {
      // Answered before the body was read: lws writes the answer only once it reads again, so the rest of the body
      // is read and dropped, and the connection closes after the answer.
      exchange.closeAfter = true
      exchange.bodyFlowing = false
      exchange.bodyEnded = true
      exchange.pendingBody = []
      lws_rx_flow_control(exchange.wsi, 1)
    }
    if let file = response.file, !response.omitBody {
      let descriptor = open(file.path, O_RDONLY | O_CLOEXEC)
      if descriptor < 0 {
        response = HTTPResponse(
          status: 500, contentType: "text/plain", body: Array("the file to send could not be opened".utf8))
      } else {
        exchange.fileDescriptor = descriptor
      }
    }
    exchange.response = response
    lws_callback_on_writable(exchange.wsi)
    return true
  }

  /// Appends bytes to a streaming response. Returns false when the stream is gone, ended, or its
  /// queue is over ``ServerConfiguration/maxQueuedBytesPerStream`` (the caller should end it).
  func writeStream(_ id: RequestID, _ bytes: [UInt8]) -> Bool {
    guard let exchange = exchangesByID[id], exchange.isStreaming, !exchange.streamEnded else { return false }
    guard exchange.streamQueuedCount + bytes.count <= configuration.maxQueuedBytesPerStream else { return false }
    exchange.streamQueue.append(contentsOf: bytes)
    exchange.streamPieceEnds.append(exchange.streamWritten + exchange.streamQueuedCount)
    if exchange.headersSent { lws_callback_on_writable(exchange.wsi) }
    return true
  }

  /// Bytes queued on the streaming response `id` and not yet written, or nil when it is gone.
  func streamQueuedBytes(_ id: RequestID) -> Int? {
    guard let exchange = exchangesByID[id], exchange.isStreaming, !exchange.streamEnded else { return nil }
    return exchange.streamQueuedCount
  }

  /// Ends a streaming response after what is queued; the connection then closes.
  ///
  /// With `discardingQueued`, queued pieces the client has not started to receive are dropped first (the piece being
  /// written is finished, so the client never sees half of one), then `final` is written: a slow reader is told why
  /// it is cut off without waiting for everything it did not read. Such a client then has
  /// ``abandonAfterSeconds`` to read what is left before the connection is dropped.
  func endStream(_ id: RequestID, discardingQueued: Bool, final: [UInt8]) {
    guard let exchange = exchangesByID[id], exchange.isStreaming, !exchange.streamEnded else { return }
    if discardingQueued {
      while let end = exchange.streamPieceEnds.first, end <= exchange.streamWritten {
        exchange.streamPieceEnds.removeFirst()
      }
      // Keep the rest of the piece in progress (if any), drop whole pieces after it.
      let keep = exchange.streamPieceEnds.first.map { $0 - exchange.streamWritten } ?? 0
      let start = exchange.streamQueueHead
      exchange.streamQueue.removeSubrange((start + keep)...)
      exchange.streamPieceEnds = FIFO()
      if keep > 0 { exchange.streamPieceEnds.append(exchange.streamWritten + keep) }
      lws_set_timeout(exchange.wsi, PENDING_TIMEOUT_USER_OK, Int32(Server.abandonAfterSeconds))
    }
    if !final.isEmpty {
      exchange.streamQueue.append(contentsOf: final)
      exchange.streamPieceEnds.append(exchange.streamWritten + exchange.streamQueuedCount)
    }
    exchange.streamEnded = true
    lws_callback_on_writable(exchange.wsi)
  }

  func httpWritable(_ wsi: OpaquePointer) -> Int32 {
    guard let exchange = exchanges[wsi], let response = exchange.response else { return 0 }
    let start = (scratch + Int(CLWS_PRE)).assumingMemoryBound(to: UInt8.self)
    let end = start + scratchSize - 1
    if let file = response.file {
      return writeFileResponse(exchange, response, file, start: start, end: end)
    }
    if !exchange.headersSent {
      var cursor: UnsafeMutablePointer<UInt8>? = start
      let length = response.isStream ? CLWS_ILLEGAL_HTTP_CONTENT_LEN : lws_filepos_t(response.body.count)
      if lws_add_http_common_headers(wsi, UInt32(response.status), response.contentType, length, &cursor, end) != 0 {
        return -1
      }
      for (name, value) in response.headers {
        let nameWithColon = name.lowercased() + ":"
        if lws_add_http_header_by_name(wsi, nameWithColon, value, Int32(value.utf8.count), &cursor, end) != 0 {
          return -1
        }
      }
      if exchange.closeAfter && !response.isStream {
        if lws_add_http_header_by_token(wsi, WSI_TOKEN_CONNECTION, "close", 5, &cursor, end) != 0 { return -1 }
      }
      if lws_finalize_http_header(wsi, &cursor, end) != 0 { return -1 }
      exchange.headersSent = true
      let headerBytes = cursor! - start
      if response.isStream {
        if lws_write(wsi, start, headerBytes, LWS_WRITE_HTTP_HEADERS) < 0 { return -1 }
        // A stream stays open indefinitely: no lws pending timeout applies to it.
        lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0)
        if exchange.streamQueuedCount > 0 || exchange.streamEnded { lws_callback_on_writable(wsi) }
        return 0
      }
      let bodyBytes = response.omitBody ? 0 : response.body.count
      if bodyBytes <= end - cursor! {
        // Headers and body in one write: one send(2) for the common small response.
        if bodyBytes > 0 {
          response.body.withUnsafeBytes {
            UnsafeMutableRawPointer(cursor!).copyMemory(from: $0.baseAddress!, byteCount: bodyBytes)
          }
        }
        if lws_write(wsi, start, headerBytes + bodyBytes, LWS_WRITE_HTTP_FINAL) < 0 { return -1 }
        return finish(exchange)
      }
      if lws_write(wsi, start, headerBytes, LWS_WRITE_HTTP_HEADERS) < 0 { return -1 }
      lws_callback_on_writable(wsi)
      return 0
    }
    if response.isStream {
      return writeStreamChunk(exchange, start: start)
    }
    let remaining = response.body.count - exchange.bodyOffset
    let chunk = min(remaining, scratchSize)
    let last = chunk == remaining
    response.body.withUnsafeBytes { body in
      UnsafeMutableRawPointer(start).copyMemory(from: body.baseAddress! + exchange.bodyOffset, byteCount: chunk)
    }
    if lws_write(wsi, start, chunk, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < 0 { return -1 }
    exchange.bodyOffset += chunk
    guard last else {
      lws_callback_on_writable(wsi)
      return 0
    }
    return finish(exchange)
  }

  /// Writes the head, then one piece (up to the scratch size) of the file range per writable callback, so a slow
  /// client holds at most one piece in memory. The read is a `pread` of at most 64 KiB, as lws's own file serving does
  /// on its service thread.
  private func writeFileResponse(
    _ exchange: HTTPExchange, _ response: HTTPResponse, _ file: HTTPFileBody, start: UnsafeMutablePointer<UInt8>,
    end: UnsafeMutablePointer<UInt8>
  ) -> Int32 {
    let wsi = exchange.wsi
    if !exchange.headersSent {
      var cursor: UnsafeMutablePointer<UInt8>? = start
      if lws_add_http_common_headers(
        wsi, UInt32(response.status), response.contentType, lws_filepos_t(file.length), &cursor, end) != 0
      {
        return -1
      }
      for (name, value) in response.headers {
        let nameWithColon = name.lowercased() + ":"
        if lws_add_http_header_by_name(wsi, nameWithColon, value, Int32(value.utf8.count), &cursor, end) != 0 {
          return -1
        }
      }
      if exchange.closeAfter {
        if lws_add_http_header_by_token(wsi, WSI_TOKEN_CONNECTION, "close", 5, &cursor, end) != 0 { return -1 }
      }
      if lws_finalize_http_header(wsi, &cursor, end) != 0 { return -1 }
      exchange.headersSent = true
      let last = response.omitBody || file.length == 0
      if lws_write(wsi, start, cursor! - start, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP_HEADERS) < 0 {
        return -1
      }
      if last { return finish(exchange) }
      lws_callback_on_writable(wsi)
      return 0
    }
    let want = min(scratchSize, file.length - exchange.fileSent)
    let got = pread(exchange.fileDescriptor, start, want, off_t(file.offset + exchange.fileSent))
    guard got > 0 else {
      logger.warning("A file response could not be read; closing.", ["http.request.id": exchange.id])
      return -1
    }
    exchange.fileSent += got
    let last = exchange.fileSent >= file.length
    if lws_write(wsi, start, got, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < 0 { return -1 }
    if last { return finish(exchange) }
    lws_callback_on_writable(wsi)
    return 0
  }

  private func writeStreamChunk(_ exchange: HTTPExchange, start: UnsafeMutablePointer<UInt8>) -> Int32 {
    let chunk = min(exchange.streamQueuedCount, scratchSize)
    if chunk > 0 {
      exchange.streamQueue.withUnsafeBytes {
        UnsafeMutableRawPointer(start).copyMemory(from: $0.baseAddress! + exchange.streamQueueHead, byteCount: chunk)
      }
      exchange.streamQueueHead += chunk
      exchange.streamWritten += chunk
      while let end = exchange.streamPieceEnds.first, end <= exchange.streamWritten {
        exchange.streamPieceEnds.removeFirst()
      }
      if exchange.streamQueueHead == exchange.streamQueue.count {
        exchange.streamQueue.removeAll(keepingCapacity: true)
        exchange.streamQueueHead = 0
      } else if exchange.streamQueueHead >= 1 << 20 && exchange.streamQueueHead * 2 >= exchange.streamQueue.count {
        exchange.streamQueue.removeFirst(exchange.streamQueueHead)
        exchange.streamQueueHead = 0
      }
      if lws_write(exchange.wsi, start, chunk, LWS_WRITE_HTTP) < 0 { return -1 }
    }
    if exchange.streamQueuedCount > 0 {
      lws_callback_on_writable(exchange.wsi)
      return 0
    }
    if exchange.streamEnded {
      // Returning -1 with bytes still buffered inside lws would give them only lws's 5 s flush before the socket is
      // killed; wait until they are on the socket.
      if lws_partial_buffered(exchange.wsi) != 0 {
        lws_callback_on_writable(exchange.wsi)
        return 0
      }
      forget(exchange)
      return -1
    }
    if chunk > 0 { delegate?.streamDrained(exchange.id) }
    return 0
  }

  private func finish(_ exchange: HTTPExchange) -> Int32 {
    forget(exchange)
    if exchange.closeAfter { return -1 }
    // Non-zero means the connection must close (HTTP/1.0 or `Connection: close`).
    return lws_http_transaction_completed(exchange.wsi) != 0 ? -1 : 0
  }

  private func forget(_ exchange: HTTPExchange) {
    if exchange.fileDescriptor >= 0 {
      Glibc.close(exchange.fileDescriptor)
      exchange.fileDescriptor = -1
    }
    if exchanges[exchange.wsi] === exchange { exchanges[exchange.wsi] = nil }
    exchangesByID[exchange.id] = nil
  }
}
