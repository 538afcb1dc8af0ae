/// The accept guard of a ``Server``: how many accepted connections it serves at once, the overflow answered `503`, the
/// request-head limit, and the listening socket registered with ``AcceptGuard`` for the out-of-descriptors fallback.
///
/// Service thread only (inside lws callbacks), apart from `listenSocket`, written once.
internal import CLibWebSockets
import Logging

final class ConnectionAdmission {
  private let configuration: ServerConfiguration
  private let logger: Logger
  /// The listening socket's descriptor (found after lws bound it), for the out-of-descriptors fallback.
  let listenSocket: Int32
  /// Accepted connections (by wsi) and those of them accepted over the cap, to be answered 503.
  private var open: Set<OpaquePointer> = []
  private var overCapacity: Set<OpaquePointer> = []
  /// Set by FILTER_NETWORK_CONNECTION for the adoption that immediately follows it.
  private var nextAcceptIsOverCapacity = false
  /// Connections refused (answered 503 or closed at once) and heads answered 431, for ``ServerStatistics``.
  private(set) var refusedConnections = 0
  private(set) var oversizedHeads = 0
  /// The connection-limit warning: when it was last written (monotonic seconds) and the copies suppressed since.
  private var connectionLimitLoggedAt: UInt64?
  private var connectionLimitSuppressed = 0

  init(configuration: ServerConfiguration, logger: Logger, listenSocket: Int32) {
    self.configuration = configuration
    self.logger = logger
    self.listenSocket = listenSocket
  }

  /// Accepted connections open now.
  var openConnections: Int { open.count }

  /// lws destroys `wsi`: it no longer counts.
  func forget(_ wsi: OpaquePointer) {
    open.remove(wsi)
    overCapacity.remove(wsi)
  }

  /// Why a request (or WebSocket upgrade) on `wsi` is refused before it reaches the delegate: its head is over
  /// ``ServerConfiguration/maxRequestHeadBytes`` (431), or its connection was accepted over
  /// ``ServerConfiguration/maxConnections`` (503 with `Retry-After`). Nil when it may proceed.
  func refusal(_ wsi: OpaquePointer, path: String) -> (
    status: Int, message: String, headers: [(String, String)]
  )? {
    let limit = min(configuration.maxRequestHeadBytes, Server.headerBufferBytes - 1)
    var total = 0
    var cut = false
    for index in 0..<WSI_TOKEN_COUNT.rawValue {
      let length = Int(lws_hdr_total_length(wsi, lws_token_indexes(rawValue: index)))
      total += length
      // lws stops storing a header at the limit (token_limits), so one that reached it was longer.
      if length >= limit { cut = true }
    }
    if cut || total > limit {
      oversizedHeads += 1
      return (
        431,
        "the request head is larger than \(configuration.maxRequestHeadBytes) bytes; send fewer or shorter headers "
          + "(cookies for this host count too)", []
      )
    }
    if overCapacity.contains(wsi) && !configuration.alwaysServedPaths.contains(path) {
      refusedConnections += 1
      return (
        503,
        "this node serves \(configuration.maxConnections) connections at once and all are in use; retry in a moment",
        [("Retry-After", "1")]
      )
    }
    return nil
  }

  /// A new connection was accepted on the listening socket. Returns non-zero (lws closes it) when even the overflow
  /// slots are taken; otherwise notes whether it is over the cap for the adoption that follows.
  func accepted() -> Int32 {
    let open = open.count
    if open >= configuration.maxConnections + configuration.overflowConnections {
      refusedConnections += 1
      logConnectionLimit(open: open)
      return 1
    }
    nextAcceptIsOverCapacity = open >= configuration.maxConnections
    return 0
  }

  /// The warning for a connection closed at the limit, at most once per ``LWSLogBridge/quietSeconds`` (a client
  /// looping connect/close would otherwise write a line per connection); the next line carries the count suppressed.
  private func logConnectionLimit(open: Int) {
    let seconds = ServerSide.monotonicMilliseconds() / 1000
    if let last = connectionLimitLoggedAt, seconds < last + LWSLogBridge.quietSeconds {
      connectionLimitSuppressed += 1
      return
    }
    logger.warning(
      "Connection closed at once: the connection limit is reached.",
      [
        "connections.open": open, "connections.max": configuration.maxConnections,
        "connections.overflow": configuration.overflowConnections, "repeats.suppressed": connectionLimitSuppressed,
      ])
    connectionLimitLoggedAt = seconds
    connectionLimitSuppressed = 0
  }

  /// The connection ``accepted()`` let in was adopted as `wsi`.
  func adopted(_ wsi: OpaquePointer) {
    open.insert(wsi)
    if nextAcceptIsOverCapacity { overCapacity.insert(wsi) }
    nextAcceptIsOverCapacity = false
  }
}
