/// Per-connection state of the ``Server``. Every type here is confined to the service thread.
internal import CLibWebSockets
import Glibc

/// An immutable outgoing WebSocket message with `LWS_PRE` bytes of headroom in front of the payload,
/// where lws writes the frame header.
///
/// One instance may be queued on many connections (a broadcast): server frames are not masked, so lws
/// never modifies the payload, only the headroom, and only on the service thread.
public final class OutboundMessage: @unchecked Sendable {
  // @unchecked: the storage is written once in init; afterwards only lws writes into the headroom in
  // front of the payload (and masks the payload of a `singleUse` message written by a client connection, which
  // nothing else holds), and lws runs on the single service thread.
  let storage: UnsafeMutableRawPointer
  /// The payload size in bytes.
  public let count: Int
  /// Whether this is a binary (rather than text) message.
  public let isBinary: Bool
  /// Whether the message is queued on one connection only and written once: a client connection then masks it in
  /// place instead of writing a copy (LWS-NOTES pitfall 9).
  public let singleUse: Bool

  /// A message carrying `bytes`.
  public init(bytes: some Collection<UInt8>, binary: Bool) {
    let pre = Int(CLWS_PRE)
    self.count = bytes.count
    self.isBinary = binary
    self.singleUse = false
    self.storage = .allocate(byteCount: pre + max(bytes.count, 1), alignment: 16)
    let payload = (storage + pre).assumingMemoryBound(to: UInt8.self)
    // Contiguous bytes (arrays, the usual case) are copied in one go; this init is generic and called from other
    // modules, where a byte-by-byte loop would run unspecialized.
    let copied: Void? = bytes.withContiguousStorageIfAvailable { buffer in
      if let base = buffer.baseAddress, buffer.count > 0 { payload.update(from: base, count: buffer.count) }
    }
    if copied == nil {
      var index = 0
      for byte in bytes {
        payload[index] = byte
        index += 1
      }
    }
  }

  /// A message of `count` bytes that `fill` writes in place (a file read straight into the frame, without an
  /// intermediate array). Nil when `fill` returns false (its read failed); the storage is then freed. With
  /// `singleUse` the caller promises to queue it on one connection only (see ``singleUse``).
  public static func filled(
    count: Int, binary: Bool, singleUse: Bool = false, _ fill: (UnsafeMutableRawBufferPointer) -> Bool
  ) -> OutboundMessage? {
    let message = OutboundMessage(uninitializedCount: count, binary: binary, singleUse: singleUse)
    return fill(UnsafeMutableRawBufferPointer(start: message.payload, count: count)) ? message : nil
  }

  private init(uninitializedCount count: Int, binary: Bool, singleUse: Bool) {
    self.count = count
    self.isBinary = binary
    self.singleUse = singleUse
    self.storage = .allocate(byteCount: Int(CLWS_PRE) + max(count, 1), alignment: 16)
  }

  /// A text message.
  public convenience init(text: String) {
    self.init(bytes: text.utf8, binary: false)
  }

  var payload: UnsafeMutablePointer<UInt8> {
    (storage + Int(CLWS_PRE)).assumingMemoryBound(to: UInt8.self)
  }

  deinit { storage.deallocate() }
}

/// A first-in first-out queue without per-pop copying. Popped slots are cleared at once, so a queue that never
/// quite empties does not keep the elements it already handed out (large WebSocket messages) alive.
struct FIFO<Element> {
  private var items: [Element?] = []
  private var head = 0

  var isEmpty: Bool { head == items.count }
  var count: Int { items.count - head }
  var first: Element? { isEmpty ? nil : items[head] }

  mutating func append(_ item: Element) { items.append(item) }

  @discardableResult
  mutating func removeFirst() -> Element? {
    guard !isEmpty else { return nil }
    let item = items[head]
    items[head] = nil
    head += 1
    if head == items.count {
      items.removeAll(keepingCapacity: true)
      head = 0
    } else if head > 1024 && head * 2 > items.count {
      items.removeFirst(head)
      head = 0
    }
    return item
  }
}

/// One HTTP request/response exchange on a connection.
final class HTTPExchange {
  let id: RequestID
  let wsi: OpaquePointer
  var head: HTTPRequestHead
  var bodyLimit = 0
  var body: [UInt8] = []
  var awaitingBody = false
  var dispatched = false
  var response: HTTPResponse?
  var headersSent = false
  var bodyOffset = 0
  var closeAfter = false
  /// BODY_COMPLETION callbacks after the request was dispatched (`httpBodyCompleted`).
  var repeatedCompletions = 0
  /// When a pipelined request was first seen behind this one's body (monotonic milliseconds; 0: not yet).
  var pipelinedSince: UInt64 = 0
  /// Streaming response bytes not yet written start at `streamQueueHead` (consumed bytes are dropped in bulk, not per
  /// write, so a deep queue is not moved on every chunk).
  var streamQueue: [UInt8] = []
  var streamQueueHead = 0
  /// Bytes of the stream written so far, and where each queued piece (one ``Server/writeStream(_:_:)``) ends, on the
  /// same scale: the queue can be cut back to whole pieces (``Server/endStream(_:discardingQueued:final:)``).
  var streamWritten = 0
  var streamPieceEnds = FIFO<Int>()
  var streamEnded = false
  /// Streamed request body: delivered piece by piece while `bodyFlowing`; pieces that lws hands over while paused wait
  /// in `pendingBody` (at most one rx buffer, since reading stops).
  var streamsBody = false
  var bodyFlowing = false
  var pendingBody: [[UInt8]] = []
  var bodyEndPending = false
  var bodyEnded = false
  /// When a body byte last arrived (or a paused streamed body was resumed), monotonic milliseconds.
  var lastBodyActivity: UInt64 = 0
  /// The current window of the minimum body rate (``ServerConfiguration/minBodyBytesPerWindow``): when it began
  /// (monotonic ms) and the body bytes that arrived in it.
  var rateWindowStart: UInt64 = 0
  var rateWindowBytes = 0
  /// The open file of a file response, and the bytes of it sent so far.
  var fileDescriptor: Int32 = -1
  var fileSent = 0

  init(id: RequestID, wsi: OpaquePointer, head: HTTPRequestHead) {
    self.id = id
    self.wsi = wsi
    self.head = head
  }

  var isStreaming: Bool { response?.isStream == true }

  /// Queued streaming bytes not yet written.
  var streamQueuedCount: Int { streamQueue.count - streamQueueHead }
}

/// One WebSocket connection, accepted (``ServerSide``) or dialled (``DialledLinks``): its bounded outbound queue (or,
/// in pull mode, the delegate's next message), its close request, and the TCP socket under it.
final class WebSocketConnection {
  let id: WebSocketID
  let wsi: OpaquePointer
  var established = true
  var queue = FIFO<OutboundMessage>()
  var queuedBytes = 0
  var receiveBuffer: [UInt8] = []
  var receivingBinary = false
  var closeRequest: (code: UInt16, reason: String)?
  /// Pull mode: when its queue is empty and the socket is writable, the connection asks the delegate for its next
  /// message (``ServerDelegate/webSocketNextMessage(_:)``), so the owner decides what goes next at the last moment.
  var pulls = false

  init(id: WebSocketID, wsi: OpaquePointer) {
    self.id = id
    self.wsi = wsi
  }

  /// Queues `message` behind what waits, unless the connection is closing or its queue would pass `limit` bytes.
  func enqueue(_ message: OutboundMessage, limit: Int) -> SendResult {
    guard closeRequest == nil else { return .closed }
    guard queuedBytes + message.count <= limit else { return .queueFull }
    let wasEmpty = queue.isEmpty
    queue.append(message)
    queuedBytes += message.count
    if wasEmpty && established { lws_callback_on_writable(wsi) }
    return .queued
  }

  /// Asks for a close frame after what is queued (see ``Server/close(_:code:reason:discardingQueued:)``).
  func requestClose(code: UInt16, reason: String, discardingQueued: Bool) {
    if closeRequest == nil {
      closeRequest = (code, String(reason.utf8.prefix(120)) ?? "")
    }
    if discardingQueued {
      queue = FIFO()
      queuedBytes = 0
      lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, Int32(Server.abandonAfterSeconds))
    }
    lws_callback_on_writable(wsi)
  }

  /// Asks for a writable callback (pull mode: the owner has a message for an idle connection).
  func wantsToWrite() {
    guard established else { return }
    lws_callback_on_writable(wsi)
  }

  /// Writes queued messages with `write`, at most `budget` of them, while the socket takes more; in pull mode an empty
  /// queue asks `delegate` for the next message. Returns how many were written and whether more waits (a queued
  /// message, or a pulling connection the delegate did not run dry), or nil when a write failed.
  func writeQueued(
    budget: Int, delegate: (any ServerDelegate)?, write: (OutboundMessage) -> Bool
  ) -> (written: Int, more: Bool)? {
    var written = 0
    var pulledDry = false
    while written < budget {
      if pulls && queue.isEmpty && closeRequest == nil {
        guard let next = delegate?.webSocketNextMessage(id) else {
          pulledDry = true
          break
        }
        queue.append(next)
        queuedBytes += next.count
      }
      guard let message = queue.first else { break }
      guard write(message) else { return nil }
      queue.removeFirst()
      queuedBytes -= message.count
      written += 1
      // lws_send_pipe_choked polls the socket (a syscall): only ask when there is more to write.
      if (!queue.isEmpty || pulls) && lws_send_pipe_choked(wsi) != 0 { break }
    }
    return (written, !queue.isEmpty || (pulls && !pulledDry && closeRequest == nil))
  }

  /// The TCP socket under the connection; nil when lws has none for it.
  private var socket: Int32? {
    let fd = lws_get_socket_fd(wsi)
    return fd >= 0 ? fd : nil
  }

  /// Sets Linux `TCP_NOTSENT_LOWAT` (see ``Server/limitUnsentBytes(_:to:)``); false when the kernel refused.
  func limitUnsentBytes(to bytes: Int) -> Bool {
    guard let fd = socket else { return true }
    var value = Int32(clamping: bytes)
    return setsockopt(fd, Int32(IPPROTO_TCP), TCP_NOTSENT_LOWAT, &value, socklen_t(MemoryLayout<Int32>.size)) == 0
  }

  /// What the kernel received on the TCP connection (`TCP_INFO`).
  func receiveStatus() -> TCPReceiveStatus? {
    socket.flatMap { TCPReceiveStatus(socket: $0) }
  }

  /// The local and remote TCP ports of the connection.
  func socketPorts() -> (local: UInt16, remote: UInt16)? {
    guard let fd = socket else { return nil }
    func port(_ name: (Int32, UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32) -> UInt16? {
      var storage = sockaddr_storage()
      var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
      let ok = withUnsafeMutablePointer(to: &storage) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { name(fd, $0, &length) == 0 }
      }
      guard ok else { return nil }
      switch Int32(storage.ss_family) {
      case AF_INET:
        return withUnsafePointer(to: &storage) {
          $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
        }
      case AF_INET6:
        return withUnsafePointer(to: &storage) {
          $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) }
        }
      default:
        return nil
      }
    }
    guard let local = port(getsockname), let remote = port(getpeername) else { return nil }
    return (local, remote)
  }
}
