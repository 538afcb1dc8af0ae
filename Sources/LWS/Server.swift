/// A libwebsockets server: one context, one port, HTTP and WebSocket, serviced on one thread.
///
/// Threading: lws is single-threaded (`LWS_MAX_SMP` is 1 in Debian's build). Every
/// `lws_*` call except `lws_cancel_service` happens on the service thread that
/// runs ``run()``. The server is also a `SerialExecutor`: actors whose
/// `unownedExecutor` is this server run their code on that thread, so they may
/// call the loop-only methods (``respond(to:with:)``, ``send(_:to:)`` …)
/// directly. Other threads enqueue jobs under a `Mutex` and wake the loop with
/// `lws_cancel_service`, which lws documents as safe from any thread; the loop
/// drains them on `LWS_CALLBACK_EVENT_WAIT_CANCELLED`. What the service thread
/// enqueues itself runs when the current service pass returns, without a wake-up.
///
/// Ownership: lws keeps pointers (not copies) to protocol names, the
/// interface string and the server string, so they live in ``CStringArena``
/// until the context is destroyed. Per-connection state lives in Swift
/// dictionaries keyed by `wsi`, removed on `LWS_CALLBACK_WSI_DESTROY`, which lws
/// always delivers (unlike `CLOSED_HTTP`).
internal import CLibWebSockets
import Dispatch
import Glibc
import Logging
import Synchronization

/// Receives HTTP and WebSocket events. Every method is called on the service thread.
public protocol ServerDelegate: AnyObject {
  /// The largest body accepted for this request; a larger `Content-Length` is answered with 413.
  func bodyLimit(for head: HTTPRequestHead) -> Int
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
  /// Whether this request's body is streamed: the request is handed to ``handle(_:)`` with an empty body as soon as
  /// its head arrives, reading is paused, and the body follows through ``requestBodyReceived(_:_:)`` and
  /// ``requestBodyEnded(_:)`` once the handler calls ``Server/setBodyFlow(_:enabled:)``. It still needs a
  /// `Content-Length` within ``bodyLimit(for:)``.
  func streamsBody(for head: HTTPRequestHead) -> Bool
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
  public func streamsBody(for head: HTTPRequestHead) -> Bool { false }
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

/// One lws context serving HTTP and WebSocket on one port.
public final class Server: @unchecked Sendable {
  // @unchecked: `context`, `protocols` and `arena` are written once in `init` and then read-only
  // (lws only touches them on the service thread). Every other `var` is confined to the service
  // thread (checked with `assertInLoop()`). `inbox` is guarded by its Mutex, `loopThread` and
  // `stopRequested` are atomics.

  /// The port actually bound (differs from the configuration when it asked for port 0).
  public let port: Int
  /// The configuration the server was created with.
  public let configuration: ServerConfiguration

  /// Set before ``run()``; called on the service thread only.
  public weak var delegate: (any ServerDelegate)?

  let logger = Logger(component: "lws")
  let context: OpaquePointer
  private let protocols: UnsafeMutablePointer<lws_protocols>
  private let protocolCount: Int
  private let arena: CStringArena

  private struct Inbox: ~Copyable {
    var open = true
    var jobs: [UnownedJob] = []
    var actions: [@Sendable () -> Void] = []
  }
  private let inbox = Mutex(Inbox())
  /// Whether ``wakeUp()`` may still call `lws_cancel_service` (false once ``run()`` is about to destroy the context).
  private let contextAlive = Atomic<Bool>(true)
  /// Threads inside ``wakeUp()`` now; ``run()`` waits for none before destroying the context.
  private let wakersInside = Atomic<Int>(0)
  private let loopThread = Atomic<UInt>(0)
  /// `lws_cancel_service` calls made to wake the loop (``ServerStatistics/loopWakeUps``).
  private let wakeUps = Atomic<Int>(0)
  /// Whether work the service thread queues for itself must wake the loop: true inside an lws callback that may run
  /// before lws polls (see `serverCallback`). Service thread only.
  var wakeForOwnWork = false
  private let stopRequested = Atomic<Bool>(false)

  /// Runs `body` with ``wakeForOwnWork`` set to `wake`, then puts it back (callbacks and timers nest). Service thread
  /// only.
  func withWakeForOwnWork<T>(_ wake: Bool, _ body: () throws -> T) rethrows -> T {
    let previous = wakeForOwnWork
    wakeForOwnWork = wake
    defer { wakeForOwnWork = previous }
    return try body()
  }

  // Loop-thread state.
  var exchanges: [OpaquePointer: HTTPExchange] = [:]
  var exchangesByID: [RequestID: HTTPExchange] = [:]
  var sockets: [OpaquePointer: WebSocketConnection] = [:]
  var socketsByID: [WebSocketID: WebSocketConnection] = [:]
  var pendingUpgrades: [OpaquePointer: HTTPRequestHead] = [:]
  /// Each connection's peer address, once asked (``remoteAddress(of:)``); removed on `WSI_DESTROY`.
  var remoteAddresses: [OpaquePointer: String] = [:]
  var nextID: UInt64 = 1
  var messagesOut = 0
  /// Writes that carried several queued WebSocket frames at once.
  var coalescedWrites = 0
  var messagesIn = 0
  var servicePasses = 0
  /// Accepted connections (by wsi) and those of them accepted over the cap, to be answered 503.
  var acceptedConnections: Set<OpaquePointer> = []
  var overCapacity: Set<OpaquePointer> = []
  /// Set by FILTER_NETWORK_CONNECTION for the adoption that immediately follows it.
  var nextAcceptIsOverCapacity = false
  var refusedConnections = 0
  var oversizedHeads = 0
  var bodyTimeouts = 0
  var slowBodies = 0
  /// The connection-limit warning: when it was last written (monotonic seconds) and the copies suppressed since.
  var connectionLimitLoggedAt: UInt64?
  var connectionLimitSuppressed = 0
  /// Timers on lws's timer list now running (``repeating(every:_:)``).
  var loopTimers: [LoopTimer] = []
  private let tokenLimits: UnsafeMutablePointer<lws_token_limits>
  let scratch: UnsafeMutableRawPointer
  let scratchSize = 64 * 1024
  /// Where dialled connections decrypt what they read (``serviceBufferBytes``).
  let receiveScratch: UnsafeMutableRawPointer
  /// The TLS context of dialled connections, made on the first TLS dial; freed when the loop ends.
  var dialTLSContext: OpaquePointer?
  /// The vhost's `retry_and_idle_policy`; lws keeps a pointer to it, so it lives as long as the server.
  let idlePolicy = UnsafeMutablePointer<lws_retry_bo_t>.allocate(capacity: 1)
  var draining = false

  /// Creates the lws context and binds the port. Throws when the address or port cannot be bound.
  /// Bytes lws reads from one socket per service pass (``lws_context_creation_info/pt_serv_buf_size``).
  static let serviceBufferBytes = 64 * 1024

  public init(configuration: ServerConfiguration) throws(LWSError) {
    self.configuration = configuration
    LWSLogBridge.install()
    let arena = CStringArena()
    self.arena = arena
    self.scratch = .allocate(byteCount: Int(CLWS_PRE) + scratchSize, alignment: 16)
    self.receiveScratch = .allocate(byteCount: Self.serviceBufferBytes, alignment: 16)

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
    self.protocols = protocols
    self.protocolCount = count

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
    self.tokenLimits = tokenLimits
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
    idlePolicy.initialize(to: lws_retry_bo_t())
    idlePolicy.pointee.secs_since_valid_ping = ping
    idlePolicy.pointee.secs_since_valid_hangup =
      ping == 0 ? 0 : UInt16(clamping: Int(ping) + ServerConfiguration.webSocketPongGraceSeconds)
    info.retry_and_idle_policy = UnsafePointer(idlePolicy)

    // The context's user pointer is this server, unretained: the server outlives the context,
    // which ``run()`` destroys before returning.
    let box = ContextUser()
    info.user = Unmanaged.passUnretained(box).toOpaque()
    guard let context = lws_create_context(&info) else {
      protocols.deinitialize(count: count)
      protocols.deallocate()
      tokenLimits.deallocate()
      throw .cannotListen(address: configuration.bindAddress, port: configuration.port)
    }
    guard let vhost = lws_get_vhost_by_name(context, "default"),
      lws_get_vhost_listen_port(vhost) > 0
    else {
      lws_context_destroy(context)
      protocols.deinitialize(count: count)
      protocols.deallocate()
      tokenLimits.deallocate()
      throw .cannotListen(address: configuration.bindAddress, port: configuration.port)
    }
    self.context = context
    self.port = Int(lws_get_vhost_listen_port(vhost))
    self.contextUser = box
    box.server = self
    self.listenSocket = AcceptGuard.register(port: self.port)
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

  /// The listening socket's descriptor (found after lws bound it), for the out-of-descriptors fallback.
  private var listenSocket: Int32 = -1

  /// Keeps the context's user object alive; it points back weakly-by-convention (unowned) at the server.
  private var contextUser: ContextUser?

  deinit {
    tokenLimits.deallocate()
    scratch.deallocate()
    idlePolicy.deallocate()
    protocols.deinitialize(count: protocolCount)
    protocols.deallocate()
  }

  /// Whether the caller runs on the service thread.
  public var inLoop: Bool {
    let owner = loopThread.load(ordering: .acquiring)
    return owner != 0 && owner == UInt(pthread_self())
  }

  func assertInLoop(_ function: StaticString = #function) {
    precondition(inLoop, "\(function) must run on the lws service thread")
  }

  /// Services the context on the calling thread until ``shutdown(grace:)`` or ``stop()``; then destroys it.
  public func run() {
    loopThread.store(UInt(pthread_self()), ordering: .releasing)
    startBodyTimer()
    while !stopRequested.load(ordering: .acquiring) {
      if lws_service(context, 0) < 0 { break }
      servicePasses += 1
      runDueTimers()
      // What this thread queued during the pass (a handler starting a task) runs now, before the next poll: no
      // `lws_cancel_service` round trip (an eventfd write, a poll return and a read) for work that never left it.
      drainInbox()
    }
    // Run what was queued while stopping, then close the inbox so nobody wakes a destroyed context.
    drainInbox()
    cancelLoopTimers()
    inbox.withLock { $0.open = false }
    // No wake-up may touch the context from here on: refuse new ones, wait for any already inside (a few µs).
    contextAlive.store(false, ordering: .sequentiallyConsistent)
    while wakersInside.load(ordering: .sequentiallyConsistent) != 0 { sched_yield() }
    AcceptGuard.unregister(listenSocket)
    lws_context_destroy(context)
    exchanges.removeAll()
    exchangesByID.removeAll()
    sockets.removeAll()
    socketsByID.removeAll()
    remoteAddresses.removeAll()
    if let dialTLSContext { SSL_CTX_free(dialTLSContext) }
    dialTLSContext = nil
    contextUser = nil
    logger.debug("Service loop stopped.")
  }

  /// Stops the loop at once; safe from any thread. Open connections are dropped.
  public func stop() {
    stopRequested.store(true, ordering: .releasing)
    wakeUp()
  }

  /// Closes WebSockets with 1001 and ends streams, then stops the loop once they are gone or
  /// `grace` has passed. Safe from any thread.
  public func shutdown(grace: Duration = .seconds(2)) {
    execute { [self] in
      guard !draining else { return }
      draining = true
      for connection in sockets.values {
        _ = close(connection.id, code: 1001, reason: "node shutting down")
      }
      for exchange in exchanges.values where exchange.isStreaming {
        endStream(exchange.id)
      }
      stopWhenIdle()
    }
    let (seconds, attoseconds) = grace.components
    let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
    DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(nanoseconds)) { [self] in stop() }
  }

  func stopWhenIdle() {
    if draining && sockets.isEmpty && !exchanges.values.contains(where: \.isStreaming) {
      stopRequested.store(true, ordering: .releasing)
    }
  }

  /// Runs `action` on the service thread; safe from any thread.
  public func execute(_ action: @escaping @Sendable () -> Void) {
    let fromLoop = inLoop && !wakeForOwnWork
    let wake = inbox.withLock { inbox -> Bool in
      guard inbox.open else { return false }
      inbox.actions.append(action)
      return !fromLoop && inbox.actions.count + inbox.jobs.count == 1
    }
    if wake { wakeUp() }
  }

  private func wakeUp() {
    // lws_cancel_service is the one lws call documented as safe from any thread. It runs outside the inbox lock (a
    // write to lws's event pipe, during which the service thread would otherwise block on the lock to drain the
    // inbox); the two counters order it against `run()` destroying the context instead: run() clears
    // `contextAlive`, then waits until no thread is inside. Both sides use sequentially consistent operations, so a
    // waker that still sees the context alive is seen inside by run().
    wakersInside.add(1, ordering: .sequentiallyConsistent)
    defer { wakersInside.subtract(1, ordering: .sequentiallyConsistent) }
    wakeUps.add(1, ordering: .relaxed)
    if contextAlive.load(ordering: .sequentiallyConsistent) { lws_cancel_service(context) }
  }

  func drainInbox() {
    while true {
      let (jobs, actions) = inbox.withLock { inbox -> ([UnownedJob], [@Sendable () -> Void]) in
        defer {
          inbox.jobs.removeAll(keepingCapacity: true)
          inbox.actions.removeAll(keepingCapacity: true)
        }
        return (inbox.jobs, inbox.actions)
      }
      if jobs.isEmpty && actions.isEmpty { return }
      for action in actions { action() }
      for job in jobs { job.runSynchronously(on: asUnownedSerialExecutor()) }
    }
  }

  /// Counters for `/metrics`. Service thread only.
  public func statistics() -> ServerStatistics {
    assertInLoop()
    return ServerStatistics(
      openWebSockets: sockets.count, openRequests: exchanges.count, webSocketMessagesOut: messagesOut,
      webSocketMessagesIn: messagesIn, coalescedWrites: coalescedWrites, openConnections: acceptedConnections.count,
      refusedConnections: refusedConnections, acceptFailures: AcceptGuard.failures, oversizedHeads: oversizedHeads,
      bodyTimeouts: bodyTimeouts, slowBodies: slowBodies, loopWakeUps: wakeUps.load(ordering: .relaxed),
      servicePasses: servicePasses)
  }

  /// Once a second (on the service thread), closes connections whose request body has not moved for
  /// ``ServerConfiguration/bodyIdleTimeoutSeconds``.
  private func startBodyTimer() {
    guard configuration.bodyIdleTimeoutSeconds > 0 || configuration.minBodyBytesPerWindow > 0 else { return }
    _ = repeating(every: .seconds(1)) { [weak self] in self?.closeIdleBodies() }
  }

  func allocateID() -> UInt64 {
    defer { nextID += 1 }
    return nextID
  }
}

extension Server: SerialExecutor {
  public func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    let fromLoop = inLoop && !wakeForOwnWork
    let wake = inbox.withLock { inbox -> Bool in
      inbox.jobs.append(job)
      return !fromLoop && inbox.open && inbox.actions.count + inbox.jobs.count == 1
    }
    // Only the empty → non-empty transition wakes the loop: it swaps the whole inbox out. What the service thread
    // enqueues while lws serves sockets, or while `run()` drains, needs no wake-up: `run()` drains after every pass,
    // before the next poll (a job another thread adds meanwhile finds the inbox non-empty and is drained with it).
    // Inside a callback lws may make from its timers, before the poll, it wakes the loop (`wakeForOwnWork`).
    if wake { wakeUp() }
  }

  public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
    UnownedSerialExecutor(ordinary: self)
  }

  public func checkIsolated() {
    precondition(inLoop, "Expected to be on the lws service thread")
  }
}

/// The object behind the lws context user pointer. Only the service thread reads `server`.
final class ContextUser {
  unowned(unsafe) var server: Server?
}

/// Owns C strings lws keeps pointers to; freed when the arena dies (after the context).
final class CStringArena {
  private var strings: [UnsafeMutablePointer<CChar>] = []

  func make(_ string: String) -> UnsafePointer<CChar> {
    let copy = strdup(string)!
    strings.append(copy)
    return UnsafePointer(copy)
  }

  deinit { strings.forEach { free($0) } }
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
