/// The server side of a ``Server``: what it serves on its port. HTTP exchanges (heads, collected and streamed bodies,
/// plain, file and streaming responses, the body timeouts) and accepted WebSockets (upgrade, reassembly, the send
/// queue with coalesced writes), behind the admission checks (``ConnectionAdmission``).
///
/// Everything here runs on the service thread, inside lws callbacks (routed here by `serverCallback`) or ``Server``
/// calls made there. Returning non-zero from a callback makes lws close the connection. Per-connection state lives in
/// dictionaries keyed by `wsi`, removed on `LWS_CALLBACK_WSI_DESTROY`, which lws always delivers (unlike
/// `CLOSED_HTTP`).
internal import CLibWebSockets
import Glibc
import Logging

final class ServerSide: @unchecked Sendable {
  // @unchecked: confined to the service thread. Other threads never touch it: it is captured only by work that the
  // loop runs on that thread (`loop.execute`, its timers).
  let configuration: ServerConfiguration
  let logger: Logger
  unowned let loop: ServiceLoop
  weak var delegate: (any ServerDelegate)?
  /// The connection cap and the request-head limit, checked before a request or upgrade reaches the delegate.
  let admission: ConnectionAdmission
  /// HTTP exchanges by wsi (lws callbacks) and by id (the delegate's answers).
  var exchanges: [OpaquePointer: HTTPExchange] = [:]
  var exchangesByID: [RequestID: HTTPExchange] = [:]
  /// Accepted WebSockets by wsi and by id, and the heads of upgrades accepted but not yet established.
  var sockets: [OpaquePointer: WebSocketConnection] = [:]
  var socketsByID: [WebSocketID: WebSocketConnection] = [:]
  var pendingUpgrades: [OpaquePointer: HTTPRequestHead] = [:]
  /// Each connection's peer address, once asked (``remoteAddress(of:)``); removed on `WSI_DESTROY`.
  var remoteAddresses: [OpaquePointer: String] = [:]
  /// Counters for ``ServerStatistics``.
  var messagesOut = 0
  var messagesIn = 0
  /// Writes that carried several queued WebSocket frames at once.
  var coalescedWrites = 0
  var bodyTimeouts = 0
  var slowBodies = 0
  /// Where responses, frames and refusals are put together before they are written: `LWS_PRE` bytes of headroom,
  /// then ``scratchSize``.
  let scratch: UnsafeMutableRawPointer
  let scratchSize = 64 * 1024
  /// Set once the server shuts down: a WebSocket established from now on is closed with 1001 at once.
  var closing = false

  init(configuration: ServerConfiguration, logger: Logger, loop: ServiceLoop, listenSocket: Int32) {
    self.configuration = configuration
    self.logger = logger
    self.loop = loop
    self.admission = ConnectionAdmission(configuration: configuration, logger: logger, listenSocket: listenSocket)
    self.scratch = .allocate(byteCount: Int(CLWS_PRE) + scratchSize, alignment: 16)
  }

  deinit { scratch.deallocate() }

  /// No WebSocket is open and no request is being answered: none handed to the delegate waits for its answer or is
  /// being written, streams included (what a shutdown waits for, within its grace). A request whose body is still
  /// coming in is not waited for.
  var isIdle: Bool {
    sockets.isEmpty && !exchanges.values.contains { $0.dispatched || $0.response != nil || $0.isStreaming }
  }

  /// Closes every WebSocket with 1001 and ends every streaming response (the server is shutting down).
  func closeAll() {
    closing = true
    for connection in sockets.values {
      connection.requestClose(code: 1001, reason: "node shutting down", discardingQueued: false)
    }
    for exchange in exchanges.values where exchange.isStreaming {
      endStream(exchange.id, discardingQueued: false, final: [])
    }
  }

  /// Forgets every connection once the context is destroyed.
  func forgetAll() {
    exchanges.removeAll()
    exchangesByID.removeAll()
    sockets.removeAll()
    socketsByID.removeAll()
    remoteAddresses.removeAll()
  }

  /// The WebSocket `id`, if it is an accepted one.
  func connection(_ id: WebSocketID) -> WebSocketConnection? { socketsByID[id] }

  /// Whether accepted WebSocket `id` runs over TLS and the certificate the client presented.
  func transportSecurity(of id: WebSocketID) -> TransportSecurity? {
    guard let connection = socketsByID[id] else { return nil }
    guard lws_is_ssl(connection.wsi) != 0 else { return TransportSecurity(encrypted: false, peerCertificate: nil) }
    var der: UnsafeMutablePointer<UInt8>?
    let length = clws_peer_certificate_der(connection.wsi, &der)
    defer { clws_free(der) }
    guard length > 0, let der else { return TransportSecurity(encrypted: true, peerCertificate: nil) }
    return TransportSecurity(
      encrypted: true, peerCertificate: Array(UnsafeBufferPointer(start: der, count: Int(length))))
  }

  /// Once a second (on the service thread), closes connections whose request body has not moved for
  /// ``ServerConfiguration/bodyIdleTimeoutSeconds``, or moves slower than ``ServerConfiguration/minBodyBytesPerWindow``.
  func startBodyTimer() {
    guard configuration.bodyIdleTimeoutSeconds > 0 || configuration.minBodyBytesPerWindow > 0 else { return }
    _ = loop.repeating(every: .seconds(1)) { [weak self] in self?.closeIdleBodies() }
  }
}

// MARK: - Reading request heads

extension ServerSide {
  func header(_ wsi: OpaquePointer, _ token: lws_token_indexes) -> String? {
    let length = Int(lws_hdr_total_length(wsi, token))
    guard length > 0 else { return nil }
    var buffer = [CChar](repeating: 0, count: length + 1)
    let copied = lws_hdr_copy(wsi, &buffer, Int32(length + 1), token)
    guard copied >= 0 else { return nil }
    return buffer.withUnsafeBytes { String(decoding: $0.prefix(Int(copied)), as: UTF8.self) }
  }

  func customHeader(_ wsi: OpaquePointer, _ nameWithColon: String) -> String? {
    let nameLength = Int32(nameWithColon.utf8.count)
    let length = Int(lws_hdr_custom_length(wsi, nameWithColon, nameLength))
    guard length > 0 else { return nil }
    var buffer = [CChar](repeating: 0, count: length + 1)
    let copied = lws_hdr_custom_copy(wsi, &buffer, Int32(length + 1), nameWithColon, nameLength)
    guard copied >= 0 else { return nil }
    return buffer.withUnsafeBytes { String(decoding: $0.prefix(Int(copied)), as: UTF8.self) }
  }

  func queryFragments(_ wsi: OpaquePointer) -> [String] {
    var fragments: [String] = []
    var index: Int32 = 0
    while index < 64 {
      let length = Int(lws_hdr_fragment_length(wsi, WSI_TOKEN_HTTP_URI_ARGS, index))
      guard length > 0 else { break }
      var buffer = [CChar](repeating: 0, count: length + 1)
      let copied = lws_hdr_copy_fragment(wsi, &buffer, Int32(length + 1), WSI_TOKEN_HTTP_URI_ARGS, index)
      guard copied >= 0 else { break }
      fragments.append(buffer.withUnsafeBytes { String(decoding: $0.prefix(Int(copied)), as: UTF8.self) })
      index += 1
    }
    return fragments
  }

  /// The request headers a head carries, with lws's token for each (built once, not per request).
  private static let headTokens: [(String, lws_token_indexes)] = [
    ("authorization", WSI_TOKEN_HTTP_AUTHORIZATION), ("content-type", WSI_TOKEN_HTTP_CONTENT_TYPE),
    ("content-length", WSI_TOKEN_HTTP_CONTENT_LENGTH), ("accept", WSI_TOKEN_HTTP_ACCEPT),
    ("if-none-match", WSI_TOKEN_HTTP_IF_NONE_MATCH), ("host", WSI_TOKEN_HOST), ("range", WSI_TOKEN_HTTP_RANGE),
    ("origin", WSI_TOKEN_ORIGIN), ("user-agent", WSI_TOKEN_HTTP_USER_AGENT),
    ("transfer-encoding", WSI_TOKEN_HTTP_TRANSFER_ENCODING), ("sec-websocket-protocol", WSI_TOKEN_PROTOCOL),
  ]

  func makeHead(_ wsi: OpaquePointer, method: HTTPMethod, path: String) -> HTTPRequestHead {
    var headers = HTTPHeaders()
    for (name, token) in Self.headTokens {
      if let value = header(wsi, token) { headers.add(name, value) }
    }
    for name in ["last-event-id:", "x-request-id:"] {
      if let value = customHeader(wsi, name) { headers.add(String(name.dropLast()), value) }
    }
    let contentLength = headers["content-length"].flatMap { Int($0.trimmingSpaces()) }
    return HTTPRequestHead(
      method: method, path: path, query: QueryItems(fragments: queryFragments(wsi)), headers: headers,
      contentLength: contentLength, remoteAddress: remoteAddress(of: wsi), isTLS: lws_is_ssl(wsi) != 0)
  }

  /// The connection's peer address, asked of the kernel (`getpeername`) once per connection rather than once per
  /// request on a kept-alive one; forgotten when the connection is destroyed.
  func remoteAddress(of wsi: OpaquePointer) -> String {
    if let known = remoteAddresses[wsi] { return known }
    var address = [CChar](repeating: 0, count: 64)
    let remote = lws_get_peer_simple(wsi, &address, address.count).map { String(cString: $0) } ?? ""
    remoteAddresses[wsi] = remote
    return remote
  }
}

extension String {
  func trimmingSpaces() -> Substring {
    var view = self[...]
    while view.first == " " { view.removeFirst() }
    while view.last == " " { view.removeLast() }
    return view
  }
}
