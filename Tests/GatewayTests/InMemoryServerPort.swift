import Dispatch
import Synchronization

@testable import Gateway
@testable import LWS

/// A ``ServerPort`` without libwebsockets: no socket, no lws loop. It runs the node's jobs on a serial dispatch queue
/// (its executor, so every `Node` method runs there) and records what the node answers, writes, sends, closes and
/// dials, for tests to wait on.
///
/// Sockets and streaming responses exist once the test opens them (``accept(_:)``) or the node answers a request with
/// a stream; their queues are always empty (the client reads everything at once), so replays and streams never wait
/// for a drain. Dials are recorded and refused (`connect` answers nil), or, on a port that ``startsDials``, get a
/// socket that never connects unless the test says so: a node on this port has no mesh links.
final class InMemoryServerPort: ServerPort {
  /// A WebSocket message the node queued.
  struct Frame: Sendable {
    let bytes: [UInt8]
    let binary: Bool
    /// The node asked for it to be written at once (``Server/send(_:to:writeNow:)``).
    var writeNow = false
    var text: String { String(decoding: bytes, as: UTF8.self) }
  }

  /// A connection the node asked for.
  struct Dial: Sendable, Equatable {
    let host: String
    let port: Int
    let path: String
    let subprotocol: String
    let tls: Bool
  }

  /// Everything the node did through the port.
  struct Recorded: Sendable {
    var responses: [RequestID: HTTPResponse] = [:]
    /// Bytes written to streaming responses, and which of them ended.
    var streams: [RequestID: [UInt8]] = [:]
    var endedStreams: Set<RequestID> = []
    var frames: [WebSocketID: [Frame]] = [:]
    var closes: [WebSocketID: (code: UInt16, reason: String)] = [:]
    var dials: [Dial] = []
    /// The socket each dial got (nil: refused at once).
    var dialSockets: [WebSocketID?] = []
    var openSockets: Set<WebSocketID> = []
  }

  private struct State: ~Copyable {
    var recorded = Recorded()
    /// Each waiter looks at the records after every change; it answers the resumption to run once it is satisfied.
    var waiters: [@Sendable (Recorded) -> (@Sendable () -> Void)?] = []
  }

  let port: Int
  let maxConnections = 64
  private let queue = DispatchQueue(label: "in-memory-server-port")
  private let state = Mutex(State())
  private static let queueKey = DispatchSpecificKey<ObjectIdentifier>()

  /// Whether a dial gets a socket (whose outcome the test then reports to the node) instead of being refused at once.
  let startsDials: Bool

  /// A port that reports `port` as the one it serves (0: none).
  init(port: Int = 0, startsDials: Bool = false) {
    self.port = port
    self.startsDials = startsDials
    queue.setSpecific(key: Self.queueKey, value: ObjectIdentifier(self))
  }

  /// Whether the caller runs on this port's executor.
  var isCurrent: Bool { DispatchQueue.getSpecific(key: Self.queueKey) == ObjectIdentifier(self) }

  /// A copy of what the node did so far.
  var recorded: Recorded { state.withLock { $0.recorded } }

  // MARK: - Executor

  func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    queue.async { job.runSynchronously(on: self.asUnownedSerialExecutor()) }
  }

  func asUnownedSerialExecutor() -> UnownedSerialExecutor {
    UnownedSerialExecutor(ordinary: self)
  }

  func checkIsolated() {
    precondition(isCurrent, "Expected to be on the in-memory port's queue")
  }

  func execute(_ action: @escaping @Sendable () -> Void) {
    queue.async(execute: action)
  }

  /// A timer whose action runs on the port's queue every `interval` until it is cancelled.
  final class Timer: PortTimer, Sendable {
    let task: Task<Void, Never>
    init(_ task: Task<Void, Never>) { self.task = task }
    func cancel() { task.cancel() }
  }

  func repeating(every interval: Duration, _ action: @escaping @Sendable () -> Void) -> any PortTimer {
    Timer(
      Task { [queue] in
        while (try? await Task.sleep(for: interval)) != nil { queue.async(execute: action) }
      })
  }

  // MARK: - What tests do

  /// Opens socket `id` (an accepted WebSocket), before the node hears of it.
  func accept(_ id: WebSocketID) {
    record { $0.openSockets.insert(id) }
  }

  /// The client of socket `id` went away.
  func drop(_ id: WebSocketID) {
    record { $0.openSockets.remove(id) }
  }

  /// Waits until `match` finds something in the records, and returns it.
  ///
  /// The wait ends with an error when its task is cancelled (a suite's time limit cancels the test) or after `bound`,
  /// so a record that never comes fails the test instead of hanging the test process: a test blocked here on a socket
  /// the node had closed once held a whole CI run until it was killed.
  func wait<T: Sendable>(
    within bound: Duration = .seconds(60), for match: @escaping @Sendable (Recorded) -> T?
  ) async throws -> T {
    let waiter = Waiter<T>()
    return try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        waiter.start(continuation)
        let found = state.withLock { state -> T? in
          if let value = match(state.recorded) { return value }
          state.waiters.append { recorded in
            guard let value = match(recorded) else { return nil }
            return { waiter.finish(.success(value)) }
          }
          return nil
        }
        if let found { waiter.finish(.success(found)) }
        waiter.expire(after: bound)
      }
    } onCancel: {
      waiter.finish(.failure(CancellationError()))
    }
  }

  /// One wait's continuation, resumed once: by the record it waits for, by cancellation, or when its bound passes.
  /// (A satisfied or abandoned waiter left in the port's list answers nothing more: its resumption runs no second time.)
  private final class Waiter<T: Sendable>: Sendable {
    private let continuation = Mutex<CheckedContinuation<T, any Error>?>(nil)
    private let finished = Atomic<Bool>(false)

    func start(_ continuation: CheckedContinuation<T, any Error>) {
      self.continuation.withLock { $0 = continuation }
      if finished.load(ordering: .acquiring) { resume(.failure(CancellationError())) }
    }

    func finish(_ result: Result<T, any Error>) {
      guard finished.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
      else { return }
      resume(result)
    }

    func expire(after bound: Duration) {
      Task { [weak self] in
        try? await Task.sleep(for: bound)
        self?.finish(.failure(InProcessFailure("waited \(bound) for the node to do what the test expects")))
      }
    }

    private func resume(_ result: Result<T, any Error>) {
      continuation.withLock { $0.take() }?.resume(with: result)
    }
  }

  /// The answer to request `id`, once the node sends it.
  func response(to id: RequestID) async throws -> HTTPResponse {
    try await wait { $0.responses[id] }
  }

  private func record(_ change: (inout Recorded) -> Void) {
    let ready = state.withLock { state -> [@Sendable () -> Void] in
      change(&state.recorded)
      var ready: [@Sendable () -> Void] = []
      let recorded = state.recorded
      state.waiters.removeAll { waiter in
        guard let resume = waiter(recorded) else { return false }
        ready.append(resume)
        return true
      }
      return ready
    }
    for resume in ready { resume() }
  }

  // MARK: - ServerPort

  func statistics() -> ServerStatistics {
    ServerStatistics(
      openWebSockets: state.withLock { $0.recorded.openSockets.count }, openRequests: 0, webSocketMessagesOut: 0,
      webSocketMessagesIn: 0)
  }

  func respond(to id: RequestID, with response: HTTPResponse) -> Bool {
    record {
      $0.responses[id] = response
      if response.isStream { $0.streams[id] = [] }
    }
    return true
  }

  func writeStream(_ id: RequestID, _ bytes: [UInt8]) -> Bool {
    var open = false
    record {
      open = $0.streams[id] != nil && !$0.endedStreams.contains(id)
      if open { $0.streams[id]?.append(contentsOf: bytes) }
    }
    return open
  }

  func streamQueuedBytes(_ id: RequestID) -> Int? {
    state.withLock { $0.recorded.streams[id] != nil && !$0.recorded.endedStreams.contains(id) ? 0 : nil }
  }

  func endStream(_ id: RequestID, discardingQueued: Bool, final: [UInt8]) {
    record {
      guard $0.streams[id] != nil else { return }
      $0.streams[id]?.append(contentsOf: final)
      $0.endedStreams.insert(id)
    }
  }

  func setBodyFlow(_ id: RequestID, enabled: Bool) {}

  func send(_ message: OutboundMessage, to id: WebSocketID, writeNow: Bool) -> SendResult {
    let frame = Frame(
      bytes: Array(UnsafeBufferPointer(start: message.payload, count: message.count)), binary: message.isBinary,
      writeNow: writeNow)
    var result = SendResult.closed
    record {
      guard $0.openSockets.contains(id) else { return }
      $0.frames[id, default: []].append(frame)
      result = .queued
    }
    return result
  }

  func limitUnsentBytes(_ id: WebSocketID, to bytes: Int) {}

  func receiveStatus(_ id: WebSocketID) -> TCPReceiveStatus? { nil }
  func socketPorts(_ id: WebSocketID) -> (local: UInt16, remote: UInt16)? { nil }

  func setReceiveFlow(_ id: WebSocketID, enabled: Bool) {}

  func queuedBytes(_ id: WebSocketID) -> Int? {
    state.withLock { $0.recorded.openSockets.contains(id) ? 0 : nil }
  }

  func close(_ id: WebSocketID, code: UInt16, reason: String, discardingQueued: Bool) -> Bool {
    var open = false
    record {
      open = $0.openSockets.remove(id) != nil
      if open { $0.closes[id] = (code, reason) }
    }
    return open
  }

  func setPulling(_ id: WebSocketID) {}

  func wantsToWrite(_ id: WebSocketID) {}

  func connect(host: String, port: Int, path: String, subprotocol: String, tls: Bool) -> WebSocketID? {
    let socket = startsDials ? WebSocketID(1 << 40 + UInt64(state.withLock { $0.recorded.dials.count })) : nil
    record {
      $0.dials.append(Dial(host: host, port: port, path: path, subprotocol: subprotocol, tls: tls))
      $0.dialSockets.append(socket)
    }
    return socket
  }

  func transportSecurity(of id: WebSocketID) -> TransportSecurity? { nil }
}
