/// A libwebsockets server: one context, one port, HTTP and WebSocket, serviced on one thread.
///
/// Threading: lws is single-threaded (`LWS_MAX_SMP` is 1 in Debian's build). Every
/// `lws_*` call except `lws_cancel_service` happens on the service thread that
/// runs ``run()`` (``ServiceLoop``). The server is also a `SerialExecutor`: actors whose
/// `unownedExecutor` is this server run their code on that thread, so they may
/// call the loop-only methods (``respond(to:with:)``, ``send(_:to:)`` …)
/// directly. Other threads enqueue jobs under a `Mutex` and wake the loop with
/// `lws_cancel_service`, which lws documents as safe from any thread.
///
/// Ownership: lws keeps pointers (not copies) to protocol names, the interface string, the server string, the
/// protocols array, the token limits and the idle policy, so they live in ``CStringArena`` until the context is
/// destroyed. Per-connection state lives in the part that serves the connection (``ServerSide``,
/// ``DialledLinks``), in dictionaries keyed by `wsi`, removed on `LWS_CALLBACK_WSI_DESTROY`, which lws always
/// delivers (unlike `CLOSED_HTTP`).
internal import CLibWebSockets
import Dispatch
import Glibc
import Logging

/// Receives HTTP and WebSocket events. Every method is called on the service thread.
public protocol ServerDelegate: AnyObject {
  /// How the body of this request is taken, asked once when a head with a body arrives: its limit (a larger
  /// `Content-Length` is answered with 413), and whether it is streamed: then the request is handed to ``handle(_:)``
  /// with an empty body as soon as its head arrives, reading is paused, and the body follows through
  /// ``requestBodyReceived(_:_:)`` and ``requestBodyEnded(_:)`` once the handler calls
  /// ``Server/setBodyFlow(_:enabled:)`` (it still needs a `Content-Length` within the limit). The policy's `tag`
  /// comes back with the request (``HTTPRequestHead/tag``).
  func bodyPolicy(for head: HTTPRequestHead) -> RequestBodyPolicy
  /// A complete request. The delegate must answer it with ``Server/respond(to:with:)`` (now or later).
  func handle(_ request: HTTPRequest)
  /// The client went away before the response was completely written (also for streams).
  func requestClosed(_ id: RequestID)
  /// Whether to complete a WebSocket upgrade.
  func shouldAccept(webSocket head: HTTPRequestHead) -> WebSocketDecision
  /// A WebSocket connection is open.
  func webSocketOpened(_ id: WebSocketID, head: HTTPRequestHead)
  /// A complete message arrived.
  func webSocketReceived(_ id: WebSocketID, _ message: WebSocketMessage)
  /// The connection is gone (server-side and outbound connections alike).
  func webSocketClosed(_ id: WebSocketID)
  /// An outbound connection made with ``Server/connect(host:port:path:subprotocol:)`` is open.
  func webSocketConnected(_ id: WebSocketID)
  /// An outbound connection could not be established; no other callback follows for it.
  func webSocketConnectFailed(_ id: WebSocketID, reason: String)
  /// The response for a failure the server detects itself (411, 413, 501) before the request reaches a handler.
  func errorResponse(status: Int, message: String, head: HTTPRequestHead) -> HTTPResponse
  /// A piece of a streamed request body (only while its flow is enabled).
  func requestBodyReceived(_ id: RequestID, _ bytes: [UInt8])
  /// A streamed request body is complete.
  func requestBodyEnded(_ id: RequestID)
  /// Everything queued on the streaming response `id` was written to the socket (see ``Server/writeStream(_:_:)``).
  func streamDrained(_ id: RequestID)
  /// Everything queued on WebSocket `id` was written to the socket.
  func webSocketDrained(_ id: WebSocketID)
  /// Pull mode (``Server/setPulling(_:)``): the next message for WebSocket `id`, now that its socket can take it; nil
  /// when there is nothing to send.
  func webSocketNextMessage(_ id: WebSocketID) -> OutboundMessage?
}

extension ServerDelegate {
  public func requestBodyReceived(_ id: RequestID, _ bytes: [UInt8]) {}
  public func requestBodyEnded(_ id: RequestID) {}
  public func streamDrained(_ id: RequestID) {}
  public func webSocketDrained(_ id: WebSocketID) {}
  public func webSocketNextMessage(_ id: WebSocketID) -> OutboundMessage? { nil }
}

/// Limits and addresses for a ``Server``.
public struct ServerConfiguration: Sendable {
  /// The IP address to bind (`0.0.0.0`, `127.0.0.1`, `::`, `::1` …).
  public var bindAddress: String
  /// The TCP port; 0 lets the kernel pick one (read it back from ``Server/port``).
  public var port: Int
  /// The largest WebSocket message accepted from a client; larger ones close with 1009.
  public var maxWebSocketMessageBytes: Int
  /// Bytes a WebSocket connection may have queued before ``Server/send(_:to:)`` answers `.queueFull`.
  public var maxQueuedBytesPerWebSocket: Int
  /// Bytes a streaming response may have queued before ``Server/writeStream(_:_:)`` refuses more.
  public var maxQueuedBytesPerStream: Int
  /// The `Server` header.
  public var serverName: String
  /// WebSocket subprotocols served (and dialled) besides plain browser WebSockets.
  public var subprotocols: [String]
  /// TLS for the port and for outbound connections; nil serves and dials plaintext only.
  public var tls: TLSConfiguration?
  /// Accepted connections (HTTP and WebSocket, including mesh links dialled by other nodes) served at once. Up to
  /// ``overflowConnections`` more are accepted only to be answered `503` with `Retry-After` (except
  /// ``alwaysServedPaths``); beyond that a new connection is closed as soon as it is accepted.
  public var maxConnections: Int
  /// Connections accepted over ``maxConnections`` to be answered `503` rather than closed unanswered.
  public var overflowConnections: Int
  /// Paths answered normally even on a connection over ``maxConnections`` (health checks).
  public var alwaysServedPaths: Set<String>
  /// The largest request head (request line and headers) served; a larger one is answered `431` (up to
  /// ``Server/headerBufferBytes``; beyond that lws closes the connection unanswered).
  public var maxRequestHeadBytes: Int
  /// Seconds a request body may go without a byte arriving before the connection is closed (0 = never). Time while
  /// the handler has paused a streamed body (``Server/setBodyFlow(_:enabled:)``) does not count.
  public var bodyIdleTimeoutSeconds: Int
  /// Bytes a request body must deliver in every ``bodyRateWindowSeconds`` while the server reads it (0 = no minimum):
  /// a body slower than that (a trickle that never goes quiet for ``bodyIdleTimeoutSeconds``) is answered `408` and
  /// its connection closed. Time while the handler has paused a streamed body does not count.
  public var minBodyBytesPerWindow: Int
  /// The window of ``minBodyBytesPerWindow``.
  public static let bodyRateWindowSeconds = 10
  /// Seconds an accepted WebSocket may go without proving it is alive (a PONG) before lws sends it a PING; it is
  /// closed ``webSocketPongGraceSeconds`` later if no PONG came. 0 turns the check off. lws's own default is 300.
  public var webSocketPingSeconds: Int
  /// Seconds after that PING before the connection is closed.
  public static let webSocketPongGraceSeconds = 10

  public init(
    bindAddress: String = "0.0.0.0", port: Int = 8080, maxWebSocketMessageBytes: Int = 1 << 20,
    maxQueuedBytesPerWebSocket: Int = 8 << 20, maxQueuedBytesPerStream: Int = 8 << 20, serverName: String = "meshgate",
    subprotocols: [String] = [], tls: TLSConfiguration? = nil, maxConnections: Int = 10_000,
    overflowConnections: Int = 64, alwaysServedPaths: Set<String> = [], maxRequestHeadBytes: Int = 16 << 10,
    bodyIdleTimeoutSeconds: Int = 10, webSocketPingSeconds: Int = 300, minBodyBytesPerWindow: Int = 0
  ) {
    self.minBodyBytesPerWindow = minBodyBytesPerWindow
    self.maxConnections = maxConnections
    self.overflowConnections = overflowConnections
    self.alwaysServedPaths = alwaysServedPaths
    self.maxRequestHeadBytes = maxRequestHeadBytes
    self.bodyIdleTimeoutSeconds = bodyIdleTimeoutSeconds
    self.webSocketPingSeconds = webSocketPingSeconds
    self.subprotocols = subprotocols
    self.tls = tls
    self.bindAddress = bindAddress
    self.port = port
    self.maxWebSocketMessageBytes = maxWebSocketMessageBytes
    self.maxQueuedBytesPerWebSocket = maxQueuedBytesPerWebSocket
    self.maxQueuedBytesPerStream = maxQueuedBytesPerStream
    self.serverName = serverName
  }
}

/// TLS settings of a ``Server``.
///
/// With a certificate the port speaks TLS *and* plaintext: lws peeks at the first byte of each connection, so
/// `http://` and `https://` (and `ws://` and `wss://`) work on the same port. Certificate chains are not verified in
/// either direction (nodes use self-signed certificates and pin them by fingerprint above this layer); read what the
/// other end presented with ``Server/transportSecurity(of:)``.
public struct TLSConfiguration: Sendable, Equatable {
  /// The PEM certificate served on the port (nil: the port is plaintext only).
  public var certificatePath: String?
  /// Its PEM private key.
  public var keyPath: String?
  /// Ask TLS clients for a certificate (not required; a client without one still connects).
  public var requestClientCertificates: Bool
  /// The PEM certificate presented when dialling with TLS (nil: none).
  public var clientCertificatePath: String?
  /// Its PEM private key.
  public var clientKeyPath: String?

  public init(
    certificatePath: String? = nil, keyPath: String? = nil, requestClientCertificates: Bool = false,
    clientCertificatePath: String? = nil, clientKeyPath: String? = nil
  ) {
    self.certificatePath = certificatePath
    self.keyPath = keyPath
    self.requestClientCertificates = requestClientCertificates
    self.clientCertificatePath = clientCertificatePath
    self.clientKeyPath = clientKeyPath
  }
}

/// Whether a connection is encrypted, and the certificate the other end presented.
public struct TransportSecurity: Sendable, Equatable {
  /// The connection runs over TLS.
  public var encrypted: Bool
  /// The DER certificate the other end presented (a TLS server always does; a client only when asked and able).
  public var peerCertificate: [UInt8]?

  public init(encrypted: Bool, peerCertificate: [UInt8]?) {
    self.encrypted = encrypted
    self.peerCertificate = peerCertificate
  }
}

/// Counters read by `/metrics`. Loop-thread values copied out in one go.
public struct ServerStatistics: Sendable {
  /// Open WebSocket connections.
  public var openWebSockets: Int
  /// HTTP exchanges in progress (including open streams).
  public var openRequests: Int
  /// WebSocket messages written to clients.
  public var webSocketMessagesOut: Int
  /// WebSocket messages received from clients.
  public var webSocketMessagesIn: Int
  /// Socket writes that carried several queued WebSocket messages at once.
  public var coalescedWrites: Int = 0
  /// Accepted connections open now (HTTP, WebSocket and inbound mesh links).
  public var openConnections: Int = 0
  /// Connections refused for being over ``ServerConfiguration/maxConnections`` (answered 503 or closed at once).
  public var refusedConnections: Int = 0
  /// Failed `accept` calls for want of file descriptors (process-wide); each pending connection was closed.
  public var acceptFailures: Int = 0
  /// Requests answered 431 for a request head over ``ServerConfiguration/maxRequestHeadBytes``.
  public var oversizedHeads: Int = 0
  /// Connections closed because a request body stopped arriving (``ServerConfiguration/bodyIdleTimeoutSeconds``).
  public var bodyTimeouts: Int = 0
  /// Requests answered 408 because their body arrived slower than ``ServerConfiguration/minBodyBytesPerWindow``.
  public var slowBodies: Int = 0
  /// Times another thread woke the service loop (`lws_cancel_service`) to run what it queued.
  public var loopWakeUps: Int = 0
  /// Passes of the service loop, each one `poll` (how often the loop woke, for whatever reason).
  public var servicePasses: Int = 0
}

/// One lws context serving HTTP and WebSocket on one port, and dialling WebSockets from it.
///
/// The server is made of three parts, all on the one service thread: the ``ServiceLoop`` (the thread, its inbox and
/// timers, the executor), the ``ServerSide`` (HTTP exchanges and accepted WebSockets, behind ``ConnectionAdmission``)
/// and the ``DialledLinks`` (connections it dials, with their own TLS and WebSocket codec). lws's callback hands each
/// event to the part it concerns (`serverCallback`); the calls below hand each request or socket id to the part that
/// owns it.
public final class Server: @unchecked Sendable {
  // @unchecked: every stored property is a `let` written in `init` except `delegate` (set before `run()`),
  // `contextUser` and `draining`, which only the service thread touches. The parts are confined to the service thread
  // (checked with `loop.assertInLoop()` on every public call that reaches them), apart from the loop's thread-safe
  // entry points (`execute`, `enqueue`, `stop`).

  /// The port actually bound (differs from the configuration when it asked for port 0).
  public let port: Int
  /// The configuration the server was created with.
  public let configuration: ServerConfiguration

  /// Set before ``run()``; called on the service thread only.
  public weak var delegate: (any ServerDelegate)? {
    didSet {
      side.delegate = delegate
      links.delegate = delegate
    }
  }

  let logger = Logger(component: "lws")
  let context: OpaquePointer
  /// What lws keeps pointers to (names, protocols, limits, the idle policy): alive until the context is destroyed.
  private let arena: CStringArena
  /// Keeps the context's user object alive; it points back at the server (unowned).
  private var contextUser: ContextUser?
  /// The service thread, its inbox and timers; the server's executor.
  let loop: ServiceLoop
  /// HTTP and accepted WebSockets.
  let side: ServerSide
  /// Connections this server dials.
  let links: DialledLinks
  /// ``shutdown(grace:)`` began: the loop stops once no WebSocket or stream is left.
  private(set) var draining = false

  /// Bytes lws reads from one socket per service pass (``lws_context_creation_info/pt_serv_buf_size``).
  static let serviceBufferBytes = 64 * 1024

  /// Creates the lws context and binds the port. Throws when the address or port cannot be bound.
  public init(configuration: ServerConfiguration) throws(LWSError) {
    self.configuration = configuration
    LWSLogBridge.install()
    let arena = CStringArena()
    self.arena = arena

    // protocols[0] serves plain HTTP and browser WebSockets (which send no subprotocol, so lws binds
    // them to protocols[0]); the others are WebSocket subprotocols (e.g. `meshgate-node.v1`), used by
    // both accepted and outbound connections. One callback handles all of them, which sidesteps lws
    // routing HTTP events to a "default" WebSocket protocol. The array ends with an all-zero terminator.
    let count = configuration.subprotocols.count + 2
    let protocols = UnsafeMutablePointer<lws_protocols>.allocate(capacity: count)
    protocols.initialize(repeating: lws_protocols(), count: count)
    for (index, name) in (["http"] + configuration.subprotocols).enumerated() {
      protocols[index].name = arena.make(name)
      protocols[index].callback = serverCallback
      protocols[index].per_session_data_size = 0
      protocols[index].rx_buffer_size = 64 * 1024
    }
    arena.keep(protocols, count: count)

    var info = lws_context_creation_info()
    info.port = Int32(configuration.port)
    info.protocols = UnsafePointer(protocols)
    info.gid = -1
    info.uid = -1
    info.server_string = arena.make(configuration.serverName)
    info.timeout_secs = 30
    // The service thread's read buffer: lws reads at most this much per socket per service pass (its default is
    // 4 KiB, which splits a 1 MiB mesh frame into 256 reads, passes and callbacks). One buffer per service thread.
    info.pt_serv_buf_size = UInt32(Self.serviceBufferBytes)
    info.ka_time = 0
    // Request heads: lws keeps them in one buffer per connection, sized here (its default is 4 KiB, and a head that
    // overflows it is dropped without an answer). Each known header is also capped at the served size, so an
    // oversized Cookie is cut short instead of overflowing the buffer, and the request is answered 431.
    info.max_http_header_data = UInt16(Self.headerBufferBytes)
    let tokenLimits = UnsafeMutablePointer<lws_token_limits>.allocate(capacity: 1)
    tokenLimits.initialize(to: lws_token_limits())
    withUnsafeMutableBytes(of: &tokenLimits.pointee.token_limit) { raw in
      let limit = UInt16(clamping: min(configuration.maxRequestHeadBytes, Self.headerBufferBytes - 1))
      for index in 0..<raw.count / 2 { raw.storeBytes(of: limit, toByteOffset: index * 2, as: UInt16.self) }
    }
    arena.keep(tokenLimits)
    info.token_limits = UnsafePointer(tokenLimits)
    // RFC 6455: a text frame that is not valid UTF-8 closes the connection with 1007 (lws checks it).
    var options = UInt64(LWS_SERVER_OPTION_VALIDATE_UTF8)
    // An IP address with IPv6 enabled binds [::]; pin IPv4 addresses to IPv4 (LWS-NOTES pitfall 1).
    if !configuration.bindAddress.contains(":") {
      options |= UInt64(LWS_SERVER_OPTION_DISABLE_IPV6)
    }
    if let tls = configuration.tls {
      options |= UInt64(LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT)
      // AEAD suites only for TLS 1.2 (Mozilla's "intermediate" profile); TLS 1.3 suites are all AEAD already. Dialled
      // connections use the same suites through their own TLS context (``clientTLSContext()``): lws dials nothing.
      info.ssl_cipher_list = arena.make(Self.tls12Ciphers)
      info.ssl_options_set = Int(CLWS_SSL_OP_NO_OLD_PROTOCOLS)
      if let certificate = tls.certificatePath, let key = tls.keyPath {
        info.ssl_cert_filepath = arena.make(certificate)
        info.ssl_private_key_filepath = arena.make(key)
        // Plain HTTP keeps working on the TLS port: lws peeks at the first byte (0x16 starts a TLS handshake) and
        // serves the rest as plain HTTP (both options are needed in 4.1).
        options |= CLWS_OPTION_ALLOW_NON_SSL_ON_SSL_PORT
        options |= CLWS_OPTION_ALLOW_HTTP_ON_HTTPS_LISTENER
        // HTTP/1.1 only: this server's response writer (headers and body in one write) is HTTP/1, and lws would
        // otherwise offer h2 to TLS clients through ALPN.
        info.alpn = arena.make("http/1.1")
        if tls.requestClientCertificates {
          // Despite its name this only *asks* for a client certificate (PEER_CERT_NOT_REQUIRED), and the verify
          // callback accepts any: the caller pins what it gets.
          options |= CLWS_OPTION_REQUIRE_VALID_OPENSSL_CLIENT_CERT
          options |= UInt64(LWS_SERVER_OPTION_PEER_CERT_NOT_REQUIRED)
        }
      }
    }
    info.options = options
    if configuration.bindAddress != "0.0.0.0" && configuration.bindAddress != "::" {
      info.iface = arena.make(configuration.bindAddress)
    }
    info.vhost_name = arena.make("default")
    // The vhost's idle policy (lws keeps the pointer: it lives until deinit). Only its validity part is used: PING a
    // connection silent for `webSocketPingSeconds`, close it if no PONG came `webSocketPongGraceSeconds` later.
    let ping = UInt16(clamping: max(0, configuration.webSocketPingSeconds))
    let idlePolicy = UnsafeMutablePointer<lws_retry_bo_t>.allocate(capacity: 1)
    idlePolicy.initialize(to: lws_retry_bo_t())
    arena.keep(idlePolicy)
    idlePolicy.pointee.secs_since_valid_ping = ping
    idlePolicy.pointee.secs_since_valid_hangup =
      ping == 0 ? 0 : UInt16(clamping: Int(ping) + ServerConfiguration.webSocketPongGraceSeconds)
    info.retry_and_idle_policy = UnsafePointer(idlePolicy)

    // The context's user pointer is a box that points back at this server (unowned): the server outlives the
    // context, which ``run()`` destroys before returning.
    let box = ContextUser()
    info.user = Unmanaged.passUnretained(box).toOpaque()
    guard let context = lws_create_context(&info) else {
      throw .cannotListen(address: configuration.bindAddress, port: configuration.port)
    }
    guard let vhost = lws_get_vhost_by_name(context, "default"),
      lws_get_vhost_listen_port(vhost) > 0
    else {
      lws_context_destroy(context)
      throw .cannotListen(address: configuration.bindAddress, port: configuration.port)
    }
    self.context = context
    self.port = Int(lws_get_vhost_listen_port(vhost))
    self.contextUser = box
    let loop = ServiceLoop(context: context)
    self.loop = loop
    self.side = ServerSide(
      configuration: configuration, logger: logger, loop: loop, listenSocket: AcceptGuard.register(port: port))
    self.links = DialledLinks(configuration: configuration, logger: logger, loop: loop)
    box.server = self
  }

  /// The size of lws's per-connection buffer for a request head; heads between
  /// ``ServerConfiguration/maxRequestHeadBytes`` and this are answered 431, longer ones closed unanswered.
  public static let headerBufferBytes = 65_535

  /// TLS 1.2 cipher suites offered and accepted: ECDHE/DHE with AES-GCM or ChaCha20-Poly1305 (no CBC, no RSA key
  /// exchange), Mozilla's "intermediate" list.
  public static let tls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
    + "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"
    + "DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-CHACHA20-POLY1305"

  /// Seconds a connection cut off for reading too slowly (``close(_:code:reason:discardingQueued:)``,
  /// ``endStream(_:discardingQueued:final:)``) gets to read its last bytes and the close frame before it is dropped.
  public static let abandonAfterSeconds = 30

  /// The largest message ``send(_:to:writeNow:)`` writes at once: a small event, not a bulk one (a large write that
  /// the socket only partly takes would leave lws holding a copy of the rest).
  public static let writeNowBytes = 64 << 10

  // MARK: - Lifecycle

  /// Whether the caller runs on the service thread.
  public var inLoop: Bool { loop.inLoop }

  /// Services the context on the calling thread until ``shutdown(grace:)`` or ``stop()``; then destroys it.
  public func run() {
    loop.serviceUntilStopped { side.startBodyTimer() }
    AcceptGuard.unregister(side.admission.listenSocket)
    lws_context_destroy(context)
    side.forgetAll()
    links.forgetAll()
    contextUser = nil
    logger.debug("Service loop stopped.")
  }

  /// Stops the loop at once; safe from any thread. Open connections are dropped.
  public func stop() {
    loop.stop()
  }

  /// Closes WebSockets with 1001 and ends streams, then stops the loop once they are gone or
  /// `grace` has passed. Safe from any thread.
  public func shutdown(grace: Duration = .seconds(2)) {
    execute { [self] in
      guard !draining else { return }
      draining = true
      side.closeAll()
      links.closeAll()
      stopWhenIdle()
    }
    let (seconds, attoseconds) = grace.components
    let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
    DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(nanoseconds)) { [self] in stop() }
  }

  /// While draining, stops the loop after this pass once no WebSocket or stream is left. Service thread only.
  func stopWhenIdle() {
    if draining && side.isIdle && links.isIdle { loop.stopAfterThisPass() }
  }

  /// Runs `action` on the service thread; safe from any thread.
  public func execute(_ action: @escaping @Sendable () -> Void) {
    loop.execute(action)
  }

  /// Runs `action` on the service thread every `interval` (the first time one interval from now) until the timer is
  /// cancelled or the loop ends. Service thread only.
  public func repeating(every interval: Duration, _ action: @escaping @Sendable () -> Void) -> LoopTimer {
    loop.repeating(every: interval, action)
  }

  /// Counters for `/metrics`. Service thread only.
  public func statistics() -> ServerStatistics {
    loop.assertInLoop()
    return ServerStatistics(
      openWebSockets: side.sockets.count, openRequests: side.exchanges.count,
      webSocketMessagesOut: side.messagesOut + links.messagesOut,
      webSocketMessagesIn: side.messagesIn + links.messagesIn, coalescedWrites: side.coalescedWrites,
      openConnections: side.admission.openConnections, refusedConnections: side.admission.refusedConnections,
      acceptFailures: AcceptGuard.failures, oversizedHeads: side.admission.oversizedHeads,
      bodyTimeouts: side.bodyTimeouts, slowBodies: side.slowBodies, loopWakeUps: loop.wakeUps,
      servicePasses: loop.servicePasses)
  }

  // MARK: - HTTP requests (the server side)

  /// Queues the response for request `id`. Returns false when the client is gone or it was answered already.
  /// Service thread only.
  @discardableResult
  public func respond(to id: RequestID, with response: HTTPResponse) -> Bool {
    loop.assertInLoop()
    return side.respond(to: id, with: response)
  }

  /// Appends bytes to a streaming response. Returns false when the stream is gone, ended, or its
  /// queue is over ``ServerConfiguration/maxQueuedBytesPerStream`` (the caller should end it). Service thread only.
  public func writeStream(_ id: RequestID, _ bytes: [UInt8]) -> Bool {
    loop.assertInLoop()
    return side.writeStream(id, bytes)
  }

  /// Bytes queued on the streaming response `id` and not yet written, or nil when it is gone. Service thread only.
  public func streamQueuedBytes(_ id: RequestID) -> Int? {
    loop.assertInLoop()
    return side.streamQueuedBytes(id)
  }

  /// Ends a streaming response after what is queued; the connection then closes.
  ///
  /// With `discardingQueued`, queued pieces the client has not started to receive are dropped first (the piece being
  /// written is finished, so the client never sees half of one), then `final` is written: a slow reader is told why
  /// it is cut off without waiting for everything it did not read. Such a client then has
  /// ``abandonAfterSeconds`` to read what is left before the connection is dropped. Service thread only.
  public func endStream(_ id: RequestID, discardingQueued: Bool = false, final: [UInt8] = []) {
    loop.assertInLoop()
    side.endStream(id, discardingQueued: discardingQueued, final: final)
  }

  /// Enables or pauses reading the streamed body of request `id` (see ``ServerDelegate/bodyPolicy(for:)``): while
  /// paused, lws stops reading the socket, so a client sending faster than the handler consumes is held back by TCP.
  /// Pieces already read are delivered (later, from the inbox) when the flow is enabled again. Service thread only.
  public func setBodyFlow(_ id: RequestID, enabled: Bool) {
    loop.assertInLoop()
    side.setBodyFlow(id, enabled: enabled)
  }

  // MARK: - WebSockets (accepted or dialled)

  /// WebSocket `id`, accepted or dialled; nil when it is gone.
  private func webSocket(_ id: WebSocketID) -> WebSocketConnection? {
    loop.assertInLoop()
    return side.connection(id) ?? links.connection(id)
  }

  /// Queues `message` on connection `id`. Service thread only.
  ///
  /// With `writeNow`, a message of at most ``writeNowBytes`` for a server-side connection with nothing queued and
  /// nothing half-written goes to the socket at once, instead of on the socket's next writable callback: a live event
  /// fanned out to many idle clients then costs no extra poll pass, nor a writable callback per client. Whatever the
  /// socket does not take, lws keeps and writes first when the socket drains, and later messages queue behind it.
  /// Replays and other bursts leave it off, so their messages are framed together into few writes; larger messages
  /// always wait for the writable callback.
  public func send(_ message: OutboundMessage, to id: WebSocketID, writeNow: Bool = false) -> SendResult {
    loop.assertInLoop()
    if let result = side.send(message, to: id, writeNow: writeNow) { return result }
    guard let connection = links.connection(id) else { return .closed }
    return connection.enqueue(message, limit: configuration.maxQueuedBytesPerWebSocket)
  }

  /// Bytes queued on connection `id`, or nil when it is gone. Service thread only.
  public func queuedBytes(_ id: WebSocketID) -> Int? {
    webSocket(id)?.queuedBytes
  }

  /// Closes connection `id` with a close frame after what is already queued. Returns false if it is gone.
  ///
  /// With `discardingQueued`, queued messages not yet handed to the socket are dropped and the close frame follows
  /// what the socket already took: a client that stopped reading gets a real close frame once it reads on, instead
  /// of waiting behind everything it did not read. It has ``abandonAfterSeconds`` to do so before the connection is
  /// dropped. Service thread only.
  @discardableResult
  public func close(_ id: WebSocketID, code: UInt16, reason: String, discardingQueued: Bool = false) -> Bool {
    guard let connection = webSocket(id) else { return false }
    connection.requestClose(code: code, reason: reason, discardingQueued: discardingQueued)
    return true
  }

  /// Puts connection `id` in pull mode: whenever its queue is empty and the socket can take more, the server asks
  /// ``ServerDelegate/webSocketNextMessage(_:)`` for the next message. Call ``wantsToWrite(_:)`` when the owner has
  /// something new for an idle connection. Service thread only.
  public func setPulling(_ id: WebSocketID) {
    webSocket(id)?.pulls = true
  }

  /// Asks for a writable callback on connection `id` (pull mode: the owner has a message for it). Service thread only.
  public func wantsToWrite(_ id: WebSocketID) {
    webSocket(id)?.wantsToWrite()
  }

  /// Pauses or resumes reading WebSocket `id` (lws rx flow control): while paused, a client sending faster than the
  /// delegate consumes is held back by TCP. Service thread only.
  public func setReceiveFlow(_ id: WebSocketID, enabled: Bool) {
    loop.assertInLoop()
    if let connection = side.connection(id) {
      lws_rx_flow_control(connection.wsi, enabled ? 1 : 0)
    } else {
      links.setReceiveFlow(id, enabled: enabled)
    }
  }

  /// Keeps at most about `bytes` not yet sent in the kernel's send queue of WebSocket `id` (Linux
  /// `TCP_NOTSENT_LOWAT`): the socket reports writable only below it, so what waits for a slow receiver waits in the
  /// caller's own queue, where it can still be reordered (a small message passes a bulk backlog), instead of several
  /// megabytes of kernel buffer. Throughput is unchanged: bytes in flight are not counted. Service thread only.
  public func limitUnsentBytes(_ id: WebSocketID, to bytes: Int) {
    guard let connection = webSocket(id), !connection.limitUnsentBytes(to: bytes) else { return }
    logger.debug("TCP_NOTSENT_LOWAT not set.", ["ws.connection.id": id.rawValue, "errno": errno])
  }

  /// What the kernel received on WebSocket `id`'s TCP connection (Linux `TCP_INFO`), for link liveness and its log
  /// lines; nil when it is gone or the kernel does not say. Service thread only.
  public func receiveStatus(_ id: WebSocketID) -> TCPReceiveStatus? {
    webSocket(id)?.receiveStatus()
  }

  /// The local and remote TCP ports of WebSocket `id`'s connection (to match it with `ss` output in log lines); nil
  /// when it is gone. Service thread only.
  public func socketPorts(_ id: WebSocketID) -> (local: UInt16, remote: UInt16)? {
    webSocket(id)?.socketPorts()
  }

  /// Whether WebSocket `id` runs over TLS and which certificate the other end presented; nil when it is gone.
  /// Service thread only.
  public func transportSecurity(of id: WebSocketID) -> TransportSecurity? {
    loop.assertInLoop()
    return side.transportSecurity(of: id) ?? links.transportSecurity(of: id)
  }

  // MARK: - Dialling (the dialled links)

  /// Dials `ws://host:port/path` (`wss://` with `tls`, presenting ``TLSConfiguration/clientCertificatePath``) with
  /// `subprotocol` (one of ``ServerConfiguration/subprotocols``). Returns the id
  /// the delegate's ``ServerDelegate/webSocketConnected(_:)`` or ``ServerDelegate/webSocketConnectFailed(_:reason:)``
  /// will carry; nil when the connection could not be started at all, or the server is shutting down. Service thread
  /// only.
  public func connect(host: String, port: Int, path: String, subprotocol: String, tls: Bool = false) -> WebSocketID? {
    loop.assertInLoop()
    return links.connect(host: host, port: port, path: path, subprotocol: subprotocol, tls: tls)
  }
}

/// The server's executor is its service loop: actors pinned to it run on the service thread.
extension Server: SerialExecutor {
  public func enqueue(_ job: consuming ExecutorJob) {
    loop.enqueue(job)
  }

  public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
    loop.asUnownedSerialExecutor()
  }

  public func checkIsolated() {
    loop.checkIsolated()
  }
}

/// The object behind the lws context user pointer. Only the service thread reads `server`.
final class ContextUser {
  unowned(unsafe) var server: Server?
}

/// Owns what lws keeps pointers to (LWS-NOTES pitfall 8): C strings, the protocols array, the token limits and the
/// idle policy; freed when the arena dies, after the context.
final class CStringArena {
  private var strings: [UnsafeMutablePointer<CChar>] = []
  private var protocols: (pointer: UnsafeMutablePointer<lws_protocols>, count: Int)?
  private var blocks: [UnsafeMutableRawPointer] = []

  func make(_ string: String) -> UnsafePointer<CChar> {
    let copy = strdup(string)!
    strings.append(copy)
    return UnsafePointer(copy)
  }

  /// Keeps the protocols array (`count` entries, initialized) until the arena dies.
  func keep(_ protocols: UnsafeMutablePointer<lws_protocols>, count: Int) {
    self.protocols = (protocols, count)
  }

  /// Keeps one allocated, trivially typed value (lws structs) until the arena dies.
  func keep<T>(_ value: UnsafeMutablePointer<T>) {
    blocks.append(UnsafeMutableRawPointer(value))
  }

  deinit {
    strings.forEach { free($0) }
    if let protocols {
      protocols.pointer.deinitialize(count: protocols.count)
      protocols.pointer.deallocate()
    }
    blocks.forEach { $0.deallocate() }
  }
}

/// Errors from setting up or driving libwebsockets.
public struct LWSError: Error, Equatable, CustomStringConvertible {
  private enum Code: Equatable {
    case cannotListen(address: String, port: Int)
  }
  private let code: Code

  /// The context could not be created or the port could not be bound.
  public static func cannotListen(address: String, port: Int) -> LWSError {
    LWSError(code: .cannotListen(address: address, port: port))
  }

  public var description: String {
    switch code {
    case .cannotListen(let address, let port):
      "cannot listen on \(address):\(port): the port is in use or the address is not local; "
        + "choose another --port or --bind"
    }
  }
}
