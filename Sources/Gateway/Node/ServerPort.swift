/// The server a ``Node`` runs on: exactly the calls the node and its features make on LWS's ``Server``.
///
/// Layer 4 (node runtime). The port is also the node's serial executor: every `Node` method runs on it, and the
/// loop-only calls below are made from there (for ``Server``, the lws service thread). A running node gets the
/// libwebsockets ``Server`` (NodeRuntime.swift); tests get an in-memory port that records what the node answers and
/// sends, so route handlers and event delivery run in process without a socket or an lws loop.
///
/// Requests and sockets are named by ``RequestID`` and ``WebSocketID``; a call for an id that is gone is ignored (or
/// answers `nil` / `false` / `.closed`), as lws does when the client has left.
import LWS

protocol ServerPort: SerialExecutor {
  /// The HTTP port the node serves (announced to other nodes; 0 when it serves none).
  var port: Int { get }
  /// Connections served at once (`--max-connections`, for `/metrics`).
  var maxConnections: Int { get }
  /// Runs `action` on the port's executor; safe from any thread.
  func execute(_ action: @escaping @Sendable () -> Void)
  /// Counters for `/metrics`.
  func statistics() -> ServerStatistics
  /// Runs `action` on the port's executor every `interval`, the first time one interval from now, until the timer is
  /// cancelled. Loop only.
  func repeating(every interval: Duration, _ action: @escaping @Sendable () -> Void) -> any PortTimer

  // MARK: HTTP requests and streaming responses

  /// Sends the answer to request `id`; false when the request is gone.
  @discardableResult func respond(to id: RequestID, with response: HTTPResponse) -> Bool
  /// Appends to a streaming response; false when its queue is full or the request is gone.
  func writeStream(_ id: RequestID, _ bytes: [UInt8]) -> Bool
  /// Bytes waiting on a streaming response; nil when it is gone.
  func streamQueuedBytes(_ id: RequestID) -> Int?
  /// Ends a streaming response after what is queued (or instead of it), with `final` as the last bytes.
  func endStream(_ id: RequestID, discardingQueued: Bool, final: [UInt8])
  /// Pauses or resumes reading a streamed request body.
  func setBodyFlow(_ id: RequestID, enabled: Bool)

  // MARK: WebSockets

  /// Queues a message on a socket; with `writeNow`, writes it at once when nothing waits before it (a live event).
  func send(_ message: OutboundMessage, to id: WebSocketID, writeNow: Bool) -> SendResult
  /// Caps what lws may hold unsent for a socket.
  func limitUnsentBytes(_ id: WebSocketID, to bytes: Int)
  /// What the kernel received on the socket's TCP connection (`TCP_INFO`); nil when unknown.
  func receiveStatus(_ id: WebSocketID) -> TCPReceiveStatus?
  /// The socket's local and remote TCP ports (for log lines); nil when unknown.
  func socketPorts(_ id: WebSocketID) -> (local: UInt16, remote: UInt16)?
  /// Pauses or resumes reading a socket.
  func setReceiveFlow(_ id: WebSocketID, enabled: Bool)
  /// Bytes waiting on a socket; nil when it is gone.
  func queuedBytes(_ id: WebSocketID) -> Int?
  /// Closes a socket with `code` and `reason`, after what is queued unless `discardingQueued`.
  @discardableResult func close(_ id: WebSocketID, code: UInt16, reason: String, discardingQueued: Bool) -> Bool
  /// Marks a socket as one whose frames are pulled from the delegate when it is writable (mesh links).
  func setPulling(_ id: WebSocketID)
  /// Asks for a writable callback on a pulling socket.
  func wantsToWrite(_ id: WebSocketID)
  /// Dials another node; nil when the connection cannot even be started.
  func connect(host: String, port: Int, path: String, subprotocol: String, tls: Bool) -> WebSocketID?
  /// Whether a socket is encrypted and the certificate its remote end presented.
  func transportSecurity(of id: WebSocketID) -> TransportSecurity?
}

extension ServerPort {
  /// Queues a message on a socket.
  func send(_ message: OutboundMessage, to id: WebSocketID) -> SendResult { send(message, to: id, writeNow: false) }

  /// Ends a streaming response after what is queued.
  func endStream(_ id: RequestID) { endStream(id, discardingQueued: false, final: []) }

  /// Closes a socket after what is queued.
  @discardableResult func close(_ id: WebSocketID, code: UInt16, reason: String) -> Bool {
    close(id, code: code, reason: reason, discardingQueued: false)
  }
}

/// A periodic action of a ``ServerPort``; cancelled from the port's executor.
protocol PortTimer: AnyObject {
  func cancel()
}

/// The libwebsockets server: what a running node is served by.
extension Server: ServerPort {
  var maxConnections: Int { configuration.maxConnections }

  func repeating(every interval: Duration, _ action: @escaping @Sendable () -> Void) -> any PortTimer {
    repeating(every: interval, action) as LoopTimer
  }
}

/// Its timers run on lws's own timer list, between polls (LoopTimer.swift).
extension LoopTimer: PortTimer {}
