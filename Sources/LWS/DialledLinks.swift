/// The connections a server dials (mesh links to other nodes): lws raw sockets carrying a TLS session and a WebSocket
/// of our own.
///
/// lws 4.1.6's WebSocket client parses what it receives one byte per function call (`lws_ws_client_rx_sm`): while a
/// node received a file over a link it had dialled, that was 53–58 % of its CPU (bench/RESULTS.md, 2026-12-03). lws
/// writes raw sockets with `LWS_WRITE_HTTP` (`LWS_WRITE_RAW` is a macro alias of it). Its raw client cannot start
/// TLS itself in 4.1.6 ("tls start fail"), so the server connects the socket, lws adopts it as a raw socket, and TLS
/// runs over memory buffers here (``TLSClientSession``). What goes over the wire is unchanged: the same upgrade
/// request, masked client frames.
///
/// Everything here runs on the service thread, inside lws callbacks or ``Server`` calls made there. The accepted side
/// of the same context is ``ServerSide``; both share the service thread (``ServiceLoop``) and the id counter.
internal import CLibWebSockets
import Glibc
import Logging

/// The dialled side of a ``Server``: every connection it dials, with the client TLS context they share, their TLS
/// sessions, opening handshakes and frame codec. Confined to the service thread.
final class DialledLinks: @unchecked Sendable {
  // @unchecked: confined to the service thread. Other threads never touch it: it is captured only by work that the
  // loop runs on that thread (`loop.execute`, its timers).
  private let configuration: ServerConfiguration
  private let logger: Logger
  private unowned let loop: ServiceLoop
  weak var delegate: (any ServerDelegate)?
  /// Dialled connections by wsi (lws callbacks) and by id (the caller's calls); removed when lws closes the socket.
  private var links: [OpaquePointer: DialledSocket] = [:]
  private var linksByID: [WebSocketID: DialledSocket] = [:]
  /// The TLS context every dialled connection shares, made on the first TLS dial; freed when the loop ends.
  private var tlsContext: OpaquePointer?
  /// Where dialled connections decrypt what they read (``Server/serviceBufferBytes``), and where frames and the
  /// upgrade request are put together before they are written (`LWS_PRE` of headroom, then ``scratchSize``).
  private let receiveScratch: UnsafeMutableRawPointer
  private let scratch: UnsafeMutableRawPointer
  private let scratchSize = 64 * 1024
  /// Messages written and received on dialled connections (for ``ServerStatistics``).
  private(set) var messagesOut = 0
  private(set) var messagesIn = 0
  /// Set once the server shuts down: no new dial starts.
  private var closing = false

  init(configuration: ServerConfiguration, logger: Logger, loop: ServiceLoop) {
    self.configuration = configuration
    self.logger = logger
    self.loop = loop
    self.receiveScratch = .allocate(byteCount: Server.serviceBufferBytes, alignment: 16)
    self.scratch = .allocate(byteCount: Int(CLWS_PRE) + scratchSize, alignment: 16)
  }

  deinit {
    receiveScratch.deallocate()
    scratch.deallocate()
    if let tlsContext { SSL_CTX_free(tlsContext) }
  }

  /// The WebSocket of dialled connection `id`, if it is one of these.
  func connection(_ id: WebSocketID) -> WebSocketConnection? { linksByID[id]?.connection }

  /// No dialled connection is open.
  var isIdle: Bool { links.isEmpty }

  /// Dials `ws://host:port/path` (`wss://` with `tls`); see ``Server/connect(host:port:path:subprotocol:tls:)``.
  func connect(host: String, port: Int, path: String, subprotocol: String, tls: Bool) -> WebSocketID? {
    guard !closing else { return nil }
    let address = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
    let hostHeader = address.contains(":") ? "[\(address)]" : address
    return dial(address: address, hostHeader: hostHeader, port: port, path: path, subprotocol: subprotocol, tls: tls)
  }

  /// Closes every dialled connection with 1001 and refuses new dials (the server is shutting down).
  func closeAll() {
    closing = true
    for link in links.values {
      link.connection.requestClose(code: 1001, reason: "node shutting down", discardingQueued: false)
    }
  }

  /// Forgets every connection once the context is destroyed (lws closed their sockets), and frees their TLS context.
  func forgetAll() {
    links.removeAll()
    linksByID.removeAll()
    if let tlsContext { SSL_CTX_free(tlsContext) }
    tlsContext = nil
  }

  /// Whether dialled connection `id` runs over TLS and the certificate the server presented.
  func transportSecurity(of id: WebSocketID) -> TransportSecurity? {
    guard let dialled = linksByID[id] else { return nil }
    return TransportSecurity(encrypted: dialled.tls != nil, peerCertificate: dialled.tls?.peerCertificate)
  }

  /// Pauses or resumes reading dialled connection `id`: lws stops reading the socket, and frames already read wait in
  /// the decoder (or in the TLS session) until reading resumes.
  func setReceiveFlow(_ id: WebSocketID, enabled: Bool) {
    guard let dialled = linksByID[id] else { return }
    lws_rx_flow_control(dialled.connection.wsi, enabled ? 1 : 0)
    guard dialled.paused == enabled else { return }
    dialled.paused = !enabled
    // What was read before the pause is decoded on the next pass: lws reads the socket again only when new bytes
    // come, and this call may come from inside the delegate's receive.
    if enabled { loop.execute { [self] in resumeDialled(id) } }
  }

  /// The socket is gone (`RAW_CLOSE`, or `WSI_DESTROY` when that did not come): the delegate hears that the link
  /// closed, or that the dial failed and why.
  func closed(_ wsi: OpaquePointer) {
    guard let dialled = links.removeValue(forKey: wsi) else { return }
    let connection = dialled.connection
    linksByID[connection.id] = nil
    logger.trace(
      "WebSocket closed.",
      ["ws.connection.id": connection.id.rawValue, "dialled": true, "established": connection.established])
    if connection.established {
      delegate?.webSocketClosed(connection.id)
    } else {
      let reason = dialled.failure ?? "connection closed during the handshake"
      logger.debug("Dial failed.", ["ws.connection.id": connection.id.rawValue, "reason": reason])
      delegate?.webSocketConnectFailed(connection.id, reason: reason)
    }
  }

  /// Dials `address:port` as an lws raw socket for a WebSocket to `path` with `subprotocol`; nil when the connect
  /// failed at once, lws would not adopt the socket, or the TLS session could not be made.
  private func dial(address: String, hostHeader: String, port: Int, path: String, subprotocol: String, tls: Bool)
    -> WebSocketID?
  {
    var session: TLSClientSession?
    if tls {
      guard let context = clientTLSContext(), let made = TLSClientSession(context: context) else { return nil }
      session = made
    }
    guard let socket = Self.startConnect(address: address, port: port) else { return nil }
    // lws serves the socket as a raw one from here (it closes the socket itself if it cannot). Connecting it here,
    // not through lws's client, lets a node whose listener is IPv4-only (lws then has IPv6 off for the whole context,
    // LWS-NOTES pitfall 1) still dial IPv6 addresses.
    guard let vhost = lws_get_vhost_by_name(loop.context, "default") else {
      Glibc.close(socket)
      return nil
    }
    let wsi = subprotocol.withCString { name in
      lws_adopt_descriptor_vhost(vhost, LWS_ADOPT_SOCKET, lws_sock_file_fd_type(sockfd: socket), name, nil)
    }
    guard let wsi else { return nil }
    let handshake = WebSocketClientHandshake(subprotocol: subprotocol)
    let connection = WebSocketConnection(id: WebSocketID(loop.allocateID()), wsi: wsi)
    connection.established = false
    let dialled = DialledSocket(
      connection: connection, request: handshake.request(host: hostHeader, path: path), handshake: handshake,
      maxMessageBytes: configuration.maxWebSocketMessageBytes, tls: session)
    links[wsi] = dialled
    linksByID[connection.id] = dialled
    // The socket becomes writable once the connection is made (or has failed: ``writable(_:)`` asks which).
    // Until the upgrade is answered, the connect, TLS and upgrade together get lws's usual 30 s.
    lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, 30)
    lws_callback_on_writable(wsi)
    return connection.id
  }

  /// A non-blocking TCP socket connecting to the address literal `address` (IPv4 or IPv6) on `port`, with Nagle off
  /// as lws sets it for its own clients; nil when the address is not a literal or the connect failed at once.
  private static func startConnect(address: String, port: Int) -> Int32? {
    var hints = addrinfo()
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    var found: UnsafeMutablePointer<addrinfo>?
    guard getaddrinfo(address, String(port), &hints, &found) == 0, let info = found else { return nil }
    defer { freeaddrinfo(found) }
    let socket = Glibc.socket(
      info.pointee.ai_family,
      Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
        | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard socket >= 0 else { return nil }
    var on: Int32 = 1
    _ = setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
    guard Glibc.connect(socket, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 || errno == EINPROGRESS else {
      Glibc.close(socket)
      return nil
    }
    return socket
  }

  /// The TLS context every dialled connection shares (made on the first TLS dial): the node's client certificate,
  /// the same TLS 1.2 suites as served, any server certificate accepted (the caller pins it).
  private func clientTLSContext() -> OpaquePointer? {
    if let made = tlsContext { return made }
    let certificate = configuration.tls?.clientCertificatePath
    let key = configuration.tls?.clientKeyPath
    let made: OpaquePointer? = Server.tls12Ciphers.withCString { ciphers in
      guard let certificate, let key else { return clws_client_tls_context(nil, nil, ciphers) }
      return certificate.withCString { certificatePointer in
        key.withCString { clws_client_tls_context(certificatePointer, $0, ciphers) }
      }
    }
    if made == nil {
      logger.error(
        "Cannot make the TLS context for dialled connections.", ["tls.client.certificate": certificate ?? "-"])
    }
    tlsContext = made
    return made
  }

  /// The socket is connected: TLS starts, or the upgrade request goes out.
  private func dialledConnected(_ wsi: OpaquePointer, _ dialled: DialledSocket) -> Int32 {
    dialled.connected = true
    if let tls = dialled.tls {
      if case .failed(let reason) = tls.handshake() { return dialFailed(dialled, reason) }
    } else {
      dialled.requestUnsent = true
    }
    lws_callback_on_writable(wsi)
    return 0
  }

  /// Bytes lws read from a dialled socket.
  func received(_ wsi: OpaquePointer, _ input: UnsafeMutableRawPointer?, _ length: Int) -> Int32 {
    guard let dialled = links[wsi] else { return -1 }
    let connection = dialled.connection
    let bytes = UnsafeRawBufferPointer(start: input, count: input == nil ? 0 : length)
    guard let tls = dialled.tls else { return receivePlaintext(connection, dialled, bytes) }
    guard tls.feed(bytes) else { return dialFailed(dialled, "cannot buffer TLS input") }
    if !tls.handshakeDone {
      if case .failed(let reason) = tls.handshake() { return dialFailed(dialled, reason) }
      if tls.handshakeDone {
        guard dialled.request.withUnsafeBytes({ tls.write($0) }) else { return dialFailed(dialled, tls.failure) }
      }
      if tls.pendingOutput > 0 { lws_callback_on_writable(wsi) }
      guard tls.handshakeDone else { return 0 }
    }
    return drainTLS(connection, dialled, tls)
  }

  /// Decrypts what the TLS session holds and hands it on, until it needs more input or the delegate pauses reading.
  private func drainTLS(_ connection: WebSocketConnection, _ dialled: DialledSocket, _ tls: TLSClientSession) -> Int32 {
    let buffer = receiveScratch
    while !dialled.paused && !dialled.doneReading {
      guard let count = tls.read(into: buffer, capacity: Server.serviceBufferBytes) else {
        guard connection.established else { return dialFailed(dialled, tls.failure) }
        logger.debug(
          "Dialled connection's TLS ended.", ["ws.connection.id": connection.id.rawValue, "reason": tls.failure])
        return -1
      }
      if count == 0 { break }
      let result = receivePlaintext(connection, dialled, UnsafeRawBufferPointer(start: buffer, count: count))
      if result != 0 { return result }
    }
    // Reading TLS may have produced output of its own (a key update's answer).
    if tls.pendingOutput > 0 { lws_callback_on_writable(connection.wsi) }
    return 0
  }

  /// Plaintext from the server: the rest of the upgrade response, then frames.
  private func receivePlaintext(
    _ connection: WebSocketConnection, _ dialled: DialledSocket, _ bytes: UnsafeRawBufferPointer
  ) -> Int32 {
    guard !dialled.doneReading else { return 0 }
    if var handshake = dialled.handshake {
      let outcome = handshake.receive(bytes)
      dialled.handshake = handshake
      switch outcome {
      case .incomplete:
        return 0
      case .refused(let reason):
        return dialFailed(dialled, reason)
      case .accepted(let remainder):
        dialled.handshake = nil
        connection.established = true
        lws_set_timeout(connection.wsi, NO_PENDING_TIMEOUT, 0)
        delegate?.webSocketConnected(connection.id)
        if !connection.queue.isEmpty || connection.pulls { lws_callback_on_writable(connection.wsi) }
        return remainder.withUnsafeBytes { receivePlaintext(connection, dialled, $0) }
      }
    }
    guard !dialled.paused else {
      // Reading is paused (only plaintext sockets get here: TLS input waits in its session): decoded on resume.
      dialled.decoder.keep(bytes)
      return 0
    }
    return decodeFrames(connection, dialled, bytes)
  }

  private func decodeFrames(
    _ connection: WebSocketConnection, _ dialled: DialledSocket, _ bytes: UnsafeRawBufferPointer
  ) -> Int32 {
    do {
      _ = try dialled.decoder.decode(bytes) { handleFrame(connection, dialled, $0) }
    } catch {
      dialled.doneReading = true
      connection.requestClose(code: error.code, reason: error.reason, discardingQueued: false)
    }
    // The server answered our close: the closing handshake is complete and the socket closes now (a TLS server may
    // otherwise wait for our close_notify).
    return dialled.serverClosed && dialled.closeSent ? -1 : 0
  }

  /// One event from the decoder; returns whether to go on decoding.
  private func handleFrame(
    _ connection: WebSocketConnection, _ dialled: DialledSocket, _ event: WebSocketFrameDecoder.Event
  ) -> Bool {
    switch event {
    case .message(let binary, let bytes):
      guard connection.closeRequest == nil else { return true }
      messagesIn += 1
      delegate?.webSocketReceived(connection.id, binary ? .binary(bytes) : .text(bytes))
    case .ping(let payload):
      dialled.pong = WebSocketClientFrame.control(opcode: 0xA, payload: payload)
      lws_callback_on_writable(connection.wsi)
    case .pong:
      break
    case .close(let code, let reason):
      dialled.serverClosed = true
      dialled.doneReading = true
      if !dialled.closeSent {
        // Echo the server's close (RFC 6455 5.5.1), then close the socket once it is written.
        connection.queue = FIFO()
        connection.queuedBytes = 0
        connection.closeRequest = (code == 1005 ? 1000 : code, reason)
        lws_callback_on_writable(connection.wsi)
      }
      return false
    }
    return !dialled.paused
  }

  /// Records why a dial failed and has lws close the socket (returned from the callback).
  private func dialFailed(_ dialled: DialledSocket, _ reason: String) -> Int32 {
    if dialled.failure == nil { dialled.failure = reason }
    return -1
  }

  /// Writes what a dialled socket has to send: a waiting pong and TLS output first, then (once upgraded) its
  /// queued messages through ``writeMessages(_:_:)``. Returns -1 to close.
  func writable(_ wsi: OpaquePointer) -> Int32 {
    guard let dialled = links[wsi] else { return -1 }
    let connection = dialled.connection
    if !dialled.connected {
      // The first writable callback: the connect finished, one way or the other.
      var error: Int32 = 0
      var length = socklen_t(MemoryLayout<Int32>.size)
      let fd = lws_get_socket_fd(wsi)
      guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0, error == 0 else {
        return dialFailed(dialled, "connect failed: \(String(cString: strerror(error == 0 ? errno : error)))")
      }
      return dialledConnected(wsi, dialled)
    }
    guard flushDialled(connection, dialled) else { return -1 }
    if lws_send_pipe_choked(wsi) != 0 || (dialled.tls?.pendingOutput ?? 0) > 0 {
      lws_callback_on_writable(wsi)
      return 0
    }
    guard connection.established else { return 0 }
    if let request = connection.closeRequest, connection.queue.isEmpty {
      if !dialled.closeSent {
        dialled.closeSent = true
        let payload = WebSocketClientFrame.closePayload(code: request.code, reason: request.reason)
        guard sendDialled(connection, dialled, WebSocketClientFrame.control(opcode: 0x8, payload: payload)) else {
          return -1
        }
      }
      if lws_partial_buffered(wsi) != 0 || (dialled.tls?.pendingOutput ?? 0) > 0 {
        lws_callback_on_writable(wsi)
        return 0
      }
      // The server's close came first: ours answered it, and the socket closes. Otherwise wait for its answer (it
      // then closes the socket, or the read of its close frame does) for a few seconds at most.
      if dialled.serverClosed { return -1 }
      lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, 5)
      return 0
    }
    let result = writeMessages(connection, dialled)
    // Ciphertext the socket did not take yet (or a pong queued meanwhile) goes out on the next writable callback,
    // whether or not a message is still queued.
    if result == 0 && ((dialled.tls?.pendingOutput ?? 0) > 0 || dialled.pong != nil) {
      lws_callback_on_writable(wsi)
    }
    return result
  }

  /// Writes the upgrade request or pong waiting (``DialledSocket/pong``), then whatever ciphertext the TLS session
  /// holds, as far as the socket takes it. False when the connection failed.
  private func flushDialled(_ connection: WebSocketConnection, _ dialled: DialledSocket) -> Bool {
    if dialled.requestUnsent {
      dialled.requestUnsent = false
      guard sendDialled(connection, dialled, dialled.request) else { return false }
    }
    if let pong = dialled.pong {
      dialled.pong = nil
      guard sendDialled(connection, dialled, pong) else { return false }
    }
    guard let tls = dialled.tls else { return true }
    let start = scratch + Int(CLWS_PRE)
    while tls.pendingOutput > 0 && lws_send_pipe_choked(connection.wsi) == 0 {
      let count = tls.takeOutput(into: start, capacity: scratchSize)
      if count == 0 { break }
      if lws_write(connection.wsi, start.assumingMemoryBound(to: UInt8.self), count, LWS_WRITE_HTTP) < 0 {
        return false
      }
    }
    return true
  }

  /// Sends `bytes` (whole frames, already masked, or the upgrade request) on a dialled socket: through its TLS
  /// session, whose output ``flushDialled`` writes, or straight to lws. False when the connection failed.
  private func sendDialled(_ connection: WebSocketConnection, _ dialled: DialledSocket, _ bytes: [UInt8]) -> Bool {
    if let tls = dialled.tls {
      guard bytes.withUnsafeBytes({ tls.write($0) }) else { return false }
      return flushDialled(connection, dialled)
    }
    let start = (scratch + Int(CLWS_PRE)).assumingMemoryBound(to: UInt8.self)
    precondition(bytes.count <= scratchSize, "control frames and the upgrade request fit the scratch buffer")
    start.update(from: bytes, count: bytes.count)
    return lws_write(connection.wsi, start, bytes.count, LWS_WRITE_HTTP) >= 0
  }

  /// Writes `message` as one masked frame on a dialled socket: a single-use message is masked in place, behind a
  /// header built in its headroom; a shared one is copied first. Returns lws's result (negative: failed).
  private func writeDialled(
    _ message: OutboundMessage, _ connection: WebSocketConnection, _ dialled: DialledSocket
  ) -> Int32 {
    let key = UInt32.random(in: .min ... .max)
    let opcode: UInt8 = message.isBinary ? 0x2 : 0x1
    func write(_ payload: UnsafeMutablePointer<UInt8>) -> Int32 {
      let start = WebSocketClientFrame.writeHeader(before: payload, opcode: opcode, count: message.count, key: key)
      Self.mask(UnsafeMutableRawPointer(payload), count: message.count, key: key)
      let frame = UnsafeRawBufferPointer(start: start, count: payload + message.count - start)
      guard let tls = dialled.tls else { return lws_write(connection.wsi, start, frame.count, LWS_WRITE_HTTP) }
      return tls.write(frame) && flushDialled(connection, dialled) ? 0 : -1
    }
    precondition(WebSocketClientFrame.maxHeaderBytes <= Int(CLWS_PRE), "the frame header must fit the headroom")
    if message.singleUse { return write(message.payload) }
    // Client frames are masked in place (LWS-NOTES pitfall 9): mask a private copy, never the shared buffer.
    let pre = Int(CLWS_PRE)
    if message.count <= scratchSize {
      let payload = (scratch + pre).assumingMemoryBound(to: UInt8.self)
      payload.update(from: message.payload, count: message.count)
      return write(payload)
    }
    let buffer = UnsafeMutableRawPointer.allocate(byteCount: pre + message.count, alignment: 16)
    defer { buffer.deallocate() }
    let payload = (buffer + pre).assumingMemoryBound(to: UInt8.self)
    payload.update(from: message.payload, count: message.count)
    return write(payload)
  }

  /// Reading a dialled socket was resumed: what its decoder and TLS session kept is decoded now (lws reads the socket
  /// again only when new bytes arrive).
  private func resumeDialled(_ id: WebSocketID) {
    guard let dialled = linksByID[id], dialled.connection.established, !dialled.paused, !dialled.doneReading else {
      return
    }
    let connection = dialled.connection
    // What the decoder kept first (decoding no new bytes resumes it), then what waits in the TLS session.
    var result = decodeFrames(connection, dialled, UnsafeRawBufferPointer(start: nil, count: 0))
    if result == 0, let tls = dialled.tls, !dialled.paused { result = drainTLS(connection, dialled, tls) }
    // Outside lws's callbacks a return value cannot close the socket: ask lws to close it on its next pass.
    if result != 0 { lws_set_timeout(connection.wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC) }
  }

  /// Writes the queued (or pulled) messages of an upgraded connection as masked frames, then reports it drained; once
  /// a close is requested and the queue is empty, ``writable(_:)`` writes the close frame. Returns -1 to close.
  private func writeMessages(_ connection: WebSocketConnection, _ dialled: DialledSocket) -> Int32 {
    guard
      let (written, more) = connection.writeQueued(
        budget: 32, delegate: delegate, write: { writeDialled($0, connection, dialled) >= 0 })
    else { return -1 }
    messagesOut += written
    if more {
      lws_callback_on_writable(connection.wsi)
      return 0
    }
    if connection.closeRequest != nil {
      // The close frame follows, now that the queue is empty.
      lws_callback_on_writable(connection.wsi)
      return 0
    }
    if written > 0 { delegate?.webSocketDrained(connection.id) }
    return 0
  }

  /// XORs `count` bytes at `bytes` with the 4-byte masking key `key` (as it lies in memory), 8 bytes at a time.
  static func mask(_ bytes: UnsafeMutableRawPointer, count: Int, key: UInt32) {
    let wide = UInt64(key) | UInt64(key) << 32
    var index = 0
    while index + 8 <= count {
      let word = bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self)
      bytes.storeBytes(of: word ^ wide, toByteOffset: index, as: UInt64.self)
      index += 8
    }
    withUnsafeBytes(of: key) { keyBytes in
      while index < count {
        bytes.storeBytes(
          of: bytes.load(fromByteOffset: index, as: UInt8.self) ^ keyBytes[index & 3], toByteOffset: index,
          as: UInt8.self)
        index += 1
      }
    }
  }
}
