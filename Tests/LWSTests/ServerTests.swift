import Foundation
import LWS
import MeshgateTestSupport
import Synchronization
import Testing

/// A delegate with fixed routes for exercising the wrapper. Service-thread only, like every delegate.
final class EchoDelegate: ServerDelegate {
  unowned(unsafe) var server: Server!
  let receivedBodySizes = Mutex<[Int]>([])
  /// Requests for `GET /held`, waiting for ``answerHeld(_:)``.
  let held = Mutex<[RequestID]>([])

  /// Answers every held request with `bytes` (from any thread).
  func answerHeld(_ bytes: [UInt8]) {
    let server = self.server!
    for id in held.withLock({ $0 }) {
      server.execute { server.respond(to: id, with: LWS.HTTPResponse(status: 200, body: bytes)) }
    }
  }

  /// Streamed bodies of `POST /upload`, by request (service thread only).
  var uploads: [RequestID: [UInt8]] = [:]

  func bodyPolicy(for head: HTTPRequestHead) -> RequestBodyPolicy {
    head.path == "/upload" ? RequestBodyPolicy(limit: 4 << 20, streamed: true) : RequestBodyPolicy(limit: 1000)
  }

  func requestBodyReceived(_ id: RequestID, _ bytes: [UInt8]) {
    uploads[id, default: []] += bytes
    // Pause after every piece and resume a moment later from another thread, as a slow consumer would.
    server.setBodyFlow(id, enabled: false)
    let server = self.server!
    DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(1)) {
      server.execute { server.setBodyFlow(id, enabled: true) }
    }
  }

  func requestBodyEnded(_ id: RequestID) {
    server.respond(to: id, with: LWS.HTTPResponse(status: 200, body: uploads.removeValue(forKey: id) ?? []))
  }

  func handle(_ request: HTTPRequest) {
    receivedBodySizes.withLock { $0.append(request.body.count) }
    let head = request.head
    switch (head.method, head.path) {
    case (.get, "/hello"):
      server.respond(
        to: request.id, with: LWS.HTTPResponse(status: 200, contentType: "text/plain", body: Array("hi".utf8)))
    case (.get, "/query"):
      let text = head.query.items.map { "\($0.name)=\($0.value)" }.joined(separator: ";")
      server.respond(to: request.id, with: LWS.HTTPResponse(status: 200, body: Array(text.utf8)))
    case (.post, "/echo"), (.put, "/echo"), (.patch, "/echo"):
      server.respond(to: request.id, with: LWS.HTTPResponse(status: 200, body: request.body))
    case (.get, "/big"):
      let body = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
      server.respond(to: request.id, with: LWS.HTTPResponse(status: 200, body: body))
    case (.get, "/stream"):
      server.respond(to: request.id, with: LWS.HTTPResponse(status: 200, contentType: "text/plain", isStream: true))
      for part in ["one\n", "two\n", "three\n"] { _ = server.writeStream(request.id, Array(part.utf8)) }
      server.endStream(request.id)
    case (.post, "/upload"):
      if head.query["reject"] != nil {
        // Answered before reading any of the body.
        server.respond(to: request.id, with: LWS.HTTPResponse(status: 409, body: Array("no".utf8)))
        return
      }
      // Nothing is read until the flow is enabled, a little later (`?hold=` milliseconds).
      uploads[request.id] = []
      let server = self.server!
      let id = request.id
      let hold = Int(head.query["hold"] ?? "") ?? 20
      DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(hold)) {
        server.execute { server.setBodyFlow(id, enabled: true) }
      }
    case (.get, "/file"), (.head, "/file"):
      var response = LWS.HTTPResponse(status: 206, contentType: "application/octet-stream")
      response.file = HTTPFileBody(
        path: head.query["path"] ?? "", offset: Int(head.query["offset"] ?? "") ?? 0,
        length: Int(head.query["length"] ?? "") ?? 0)
      response.omitBody = head.method == .head
      server.respond(to: request.id, with: response)
    case (.get, "/held"):
      // Answered when the test says so (``answerHeld(_:)``).
      held.withLock { $0.append(request.id) }
    case (.get, "/later"):
      // Answer from another thread, handing the work back to the service thread.
      let server = self.server!
      let id = request.id
      DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(30)) {
        server.execute { server.respond(to: id, with: LWS.HTTPResponse(status: 202, body: Array("later".utf8))) }
      }
    default:
      server.respond(to: request.id, with: LWS.HTTPResponse(status: 404))
    }
  }

  func requestClosed(_ id: RequestID) {}

  func shouldAccept(webSocket head: HTTPRequestHead) -> WebSocketDecision {
    head.path == "/ws"
      ? .accept : .reject(LWS.HTTPResponse(status: 403, contentType: "text/plain", body: Array("no".utf8)))
  }

  func webSocketOpened(_ id: WebSocketID, head: HTTPRequestHead) {
    _ = server.send(OutboundMessage(text: "welcome \(head.query["name"] ?? "")"), to: id)
  }

  func webSocketReceived(_ id: WebSocketID, _ message: LWS.WebSocketMessage) {
    switch message {
    case .text(let bytes) where bytes == Array("flood".utf8):
      // Three 30 KB messages in one turn of the loop against a 64 KiB queue: the third cannot fit.
      let results = (0..<3).map { _ in
        server.send(OutboundMessage(bytes: [UInt8](repeating: 7, count: 30_000), binary: true), to: id)
      }
      _ = server.send(OutboundMessage(text: "\(results)"), to: id)
    case .text(let bytes) where bytes == Array("burst".utf8):
      // Many frames queued in one turn of the loop, with both header sizes a coalesced frame can have (7-bit and 16-bit
      // lengths; larger messages go out one by one): the writable callback frames them together.
      let sizes = [0, 1, 125, 126, 200, 4_000, 30_000] + Array(repeating: 10, count: 100)
      for (index, size) in sizes.enumerated() {
        let payload = [UInt8](repeating: UInt8(truncatingIfNeeded: index), count: size)
        _ = server.send(OutboundMessage(bytes: payload, binary: index % 2 == 0), to: id)
      }
      _ = server.send(OutboundMessage(text: "end of burst"), to: id)
    case .text(let bytes) where bytes == Array("now".utf8):
      // Written at once on an idle socket; then behind what is queued, never before it.
      let before = server.statistics().webSocketMessagesOut
      _ = server.send(OutboundMessage(text: "first"), to: id, writeNow: true)
      let wroteAtOnce = server.statistics().webSocketMessagesOut == before + 1
      for index in 0..<3 {
        _ = server.send(OutboundMessage(bytes: [UInt8](repeating: UInt8(index), count: 20_000), binary: true), to: id)
      }
      _ = server.send(OutboundMessage(text: "last, written at once before: \(wroteAtOnce)"), to: id, writeNow: true)
    case .text(let bytes) where bytes == Array("stats".utf8):
      _ = server.send(OutboundMessage(text: "coalesced \(server.statistics().coalescedWrites > 0)"), to: id)
    case .text(let bytes) where bytes == Array("bye".utf8):
      server.close(id, code: 4000, reason: "asked to leave")
    case .text(let bytes):
      _ = server.send(OutboundMessage(bytes: bytes, binary: false), to: id)
    case .binary(let bytes):
      _ = server.send(OutboundMessage(bytes: bytes, binary: true), to: id)
    }
  }

  func webSocketClosed(_ id: WebSocketID) {}

  func webSocketConnected(_ id: WebSocketID) {}

  func webSocketConnectFailed(_ id: WebSocketID, reason: String) {}

  func errorResponse(status: Int, message: String, head: HTTPRequestHead) -> LWS.HTTPResponse {
    LWS.HTTPResponse(status: status, contentType: "text/plain", body: Array(message.utf8))
  }
}

/// Runs a server on a free loopback port for the duration of `body`; `configure` adjusts its configuration.
func withServer(
  configure: (inout ServerConfiguration) -> Void = { _ in }, _ body: (Server, Int) async throws -> Void
) async throws {
  var configuration = ServerConfiguration(
    bindAddress: "127.0.0.1", port: 0, maxWebSocketMessageBytes: 100_000, maxQueuedBytesPerWebSocket: 64 * 1024)
  configure(&configuration)
  let server = try Server(configuration: configuration)
  let delegate = EchoDelegate()
  delegate.server = server
  server.delegate = delegate
  let finished = DispatchSemaphore(value: 0)
  let thread = Thread {
    server.run()
    finished.signal()
  }
  thread.start()
  defer {
    server.stop()
    finished.wait()
    withExtendedLifetime(delegate) {}
  }
  try await body(server, server.port)
}

@Suite(.timeLimit(.minutes(1)))
struct ServerTests {
  @Test func servesRequestsOnOneKeepAliveConnection() async throws {
    try await withServer { _, port in
      let connection = try HTTPConnection(port: port)
      defer { connection.close() }
      for _ in 0..<3 {
        let response = try connection.send(method: "GET", path: "/hello")
        #expect(response.status == 200)
        #expect(response.text == "hi")
        #expect(response.header("content-type") == "text/plain")
      }
    }
  }

  @Test func emptyBodiesKeepTheConnectionInStep() async throws {
    try await withServer { _, port in
      let connection = try HTTPConnection(port: port)
      defer { connection.close() }
      for method in ["POST", "PUT", "PATCH", "POST"] {
        let empty = try connection.send(method: method, path: "/echo", body: [])
        #expect(empty.status == 200)
        #expect(empty.body.isEmpty)
        let full = try connection.send(method: "POST", path: "/echo", body: Array("after \(method)".utf8))
        #expect(full.text == "after \(method)")
        #expect(try connection.send(method: "GET", path: "/hello").text == "hi")
      }
    }
  }

  @Test func decodesQueryParameters() async throws {
    try await withServer { _, port in
      let response = try HTTPClient.get(port: port, path: "/query?a=1&b=x%20y&flag")
      #expect(response.text == "a=1;b=x y;flag=")
    }
  }

  @Test func collectsRequestBodies() async throws {
    try await withServer { _, port in
      for method in ["POST", "PUT", "PATCH"] {
        let body = Array("payload for \(method)".utf8)
        let response = try HTTPClient.request(port: port, method: method, path: "/echo", body: body)
        #expect(response.status == 200)
        #expect(response.body == body)
      }
    }
  }

  @Test func answersOversizeBodiesWith413BeforeReadingThem() async throws {
    try await withServer { _, port in
      let response = try HTTPClient.request(
        port: port, method: "POST", path: "/echo", body: [UInt8](repeating: 1, count: 5000))
      #expect(response.status == 413)
      #expect(response.text.contains("limit here is 1000 bytes"))
    }
  }

  @Test func refusesChunkedBodiesWith411() async throws {
    try await withServer { _, port in
      let response = try HTTPClient.request(
        port: port, method: "POST", path: "/echo", headers: [("Transfer-Encoding", "chunked")],
        body: HTTPClient.chunkedEncode([Array("abc".utf8)]))
      #expect(response.status == 411)
    }
  }

  @Test func treatsAPostWithoutContentLengthAsEmpty() async throws {
    try await withServer { _, port in
      let response = try HTTPClient.request(
        port: port, method: "POST", path: "/echo", headers: [("Content-Length", "")])
      #expect(response.status == 200)
      #expect(response.body.isEmpty)
    }
  }

  @Test func writesLargeBodiesInPieces() async throws {
    try await withServer { _, port in
      let response = try HTTPClient.get(port: port, path: "/big")
      #expect(response.body == (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
    }
  }

  @Test func streamsUntilTheHandlerEndsTheStream() async throws {
    try await withServer { _, port in
      let response = try HTTPClient.get(port: port, path: "/stream")
      #expect(response.status == 200)
      #expect(response.text == "one\ntwo\nthree\n")
      #expect(response.header("content-length") == nil)
    }
  }

  @Test func acceptsResponsesHandedOverFromOtherThreads() async throws {
    try await withServer { _, port in
      let response = try HTTPClient.get(port: port, path: "/later")
      #expect(response.status == 202)
      #expect(response.text == "later")
    }
  }

  @Test func echoesWebSocketMessagesAndReassemblesFragments() async throws {
    try await withServer { _, port in
      let socket = try WebSocketClient(port: port, path: "/ws?name=tester")
      defer { socket.close() }
      #expect(try socket.receiveText() == "welcome tester")
      try socket.send(text: "hello")
      #expect(try socket.receiveText() == "hello")
      try socket.send(binary: [1, 2, 3])
      #expect(try socket.receiveBinary() == [1, 2, 3])
      try socket.sendFrame(opcode: .text, payload: Array("frag".utf8), fin: false)
      try socket.sendFrame(opcode: .continuation, payload: Array("mented".utf8), fin: true)
      #expect(try socket.receiveText() == "fragmented")
    }
  }

  @Test func sendsBurstsOfQueuedFramesIntactAndInOrder() async throws {
    try await withServer { _, port in
      let socket = try WebSocketClient(port: port, path: "/ws")
      defer { socket.close() }
      _ = try socket.receiveText()
      try socket.send(text: "burst")
      let sizes = [0, 1, 125, 126, 200, 4_000, 30_000] + Array(repeating: 10, count: 100)
      for (index, size) in sizes.enumerated() {
        let expected = [UInt8](repeating: UInt8(truncatingIfNeeded: index), count: size)
        if index % 2 == 0 {
          #expect(try socket.receiveBinary() == expected, "frame \(index)")
        } else {
          #expect(try socket.receiveText() == String(decoding: expected, as: UTF8.self), "frame \(index)")
        }
      }
      #expect(try socket.receiveText() == "end of burst")
      try socket.send(text: "stats")
      #expect(try socket.receiveText() == "coalesced true")
    }
  }

  @Test func messagesWrittenAtOnceKeepTheirPlaceBehindQueuedOnes() async throws {
    try await withServer { _, port in
      let socket = try WebSocketClient(port: port, path: "/ws")
      defer { socket.close() }
      _ = try socket.receiveText()
      try socket.send(text: "now")
      #expect(try socket.receiveText() == "first")
      for index in 0..<3 {
        #expect(try socket.receiveBinary() == [UInt8](repeating: UInt8(index), count: 20_000))
      }
      #expect(try socket.receiveText() == "last, written at once before: true")
    }
  }

  @Test func closesOnOversizeWebSocketMessageWith1009() async throws {
    try await withServer { _, port in
      let socket = try WebSocketClient(port: port, path: "/ws")
      defer { socket.close() }
      _ = try socket.receiveText()
      try socket.send(binary: [UInt8](repeating: 0, count: 150_000))
      let message = try socket.receive(timeout: .seconds(5))
      guard case .close(let code, _)? = message else {
        Issue.record("expected a close frame, got \(String(describing: message))")
        return
      }
      #expect(code == 1009)
    }
  }

  @Test func reportsAFullSendQueue() async throws {
    try await withServer { _, port in
      let socket = try WebSocketClient(port: port, path: "/ws")
      defer { socket.close() }
      _ = try socket.receiveText()
      try socket.send(text: "flood")
      #expect(try socket.receiveBinary().count == 30_000)
      #expect(try socket.receiveBinary().count == 30_000)
      #expect(try socket.receiveText() == "[LWS.SendResult.queued, LWS.SendResult.queued, LWS.SendResult.queueFull]")
    }
  }

  @Test func closesWithTheRequestedCode() async throws {
    try await withServer { _, port in
      let socket = try WebSocketClient(port: port, path: "/ws")
      defer { socket.close() }
      _ = try socket.receiveText()
      try socket.send(text: "bye")
      guard case .close(let code, let reason)? = try socket.receive(timeout: .seconds(5)) else {
        Issue.record("expected a close frame")
        return
      }
      #expect(code == 4000)
      #expect(reason == "asked to leave")
    }
  }

  @Test func rejectsUpgradesWithTheDelegatesStatus() async throws {
    try await withServer { _, port in
      #expect {
        _ = try WebSocketClient(port: port, path: "/elsewhere")
      } throws: { error in
        "\(error)".contains("403")
      }
    }
  }

  /// A server with an ``EchoDelegate`` running on a thread of its own; `finished` is signalled when its loop ends.
  private static func runningServer() throws -> (Server, EchoDelegate, DispatchSemaphore) {
    let server = try Server(configuration: ServerConfiguration(bindAddress: "127.0.0.1", port: 0))
    let delegate = EchoDelegate()
    delegate.server = server
    server.delegate = delegate
    let finished = DispatchSemaphore(value: 0)
    Thread {
      server.run()
      finished.signal()
    }.start()
    return (server, delegate, finished)
  }

  @Test func shutdownClosesWebSocketsWith1001AndStopsTheLoop() async throws {
    let (server, delegate, finished) = try Self.runningServer()
    let socket = try WebSocketClient(port: server.port, path: "/ws")
    _ = try socket.receiveText()
    server.shutdown(grace: .seconds(5))
    guard case .close(let code, _)? = try socket.receive(timeout: .seconds(5)) else {
      Issue.record("expected a close frame")
      return
    }
    #expect(code == 1001)
    socket.close()
    #expect(finished.wait(timeout: .now() + 5) == .success)
    withExtendedLifetime(delegate) {}
  }

  /// A request the node was answering when the shutdown began gets its whole answer (within the grace): the loop
  /// used to stop as soon as no WebSocket or stream was left, cutting a response mid-body (a browser reloading during
  /// a restart saw `ERR_CONTENT_LENGTH_MISMATCH`).
  @Test func shutdownLetsAnAnswerInProgressFinish() async throws {
    let (server, delegate, finished) = try Self.runningServer()
    let port = server.port
    let answer = Task.detached { try HTTPClient.get(port: port, path: "/held") }
    try await eventuallyAsync(timeout: .seconds(10), message: "the request reached the delegate") {
      !delegate.held.withLock { $0.isEmpty }
    }
    server.shutdown(grace: .seconds(10))
    let body = (0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 13) }
    delegate.answerHeld(body)
    let response = try await answer.value
    #expect(response.status == 200)
    #expect(response.body == body, "the answer was cut at \(response.body.count) of \(body.count) bytes")
    #expect(finished.wait(timeout: .now() + 10) == .success)
    withExtendedLifetime(delegate) {}
  }

  @Test func refusesAPortInUse() async throws {
    try await withServer { _, port in
      #expect(throws: LWSError.self) {
        _ = try Server(configuration: ServerConfiguration(bindAddress: "127.0.0.1", port: port))
      }
    }
  }

  @Test func actorsPinnedToTheServerRunOnTheServiceThread() async throws {
    try await withServer { server, _ in
      let probe = LoopProbe(server: server)
      #expect(await probe.onServiceThread())
    }
  }

  /// Work the service thread queues for itself (a handler starting a task, a task resuming another) runs after the
  /// current pass without waking the loop through lws's event pipe: each wake-up is a write, a poll return and a read.
  @Test func tasksStartedOnTheServiceThreadNeedNoWakeUp() async throws {
    // No body timer: its once-a-second wake-ups would count in a slow run.
    try await withServer(configure: { $0.bodyIdleTimeoutSeconds = 0 }) { server, _ in
      let probe = LoopProbe(server: server)
      let (wakeUps, hops) = await probe.wakeUpsForChainedTasks(200)
      #expect(hops == 200)
      // Each task used to wake the loop (201 here); now at most the caller's own return to the actor does.
      #expect(wakeUps <= 1)
    }
  }
}

@Suite(.timeLimit(.minutes(1)))
struct LoopTimerTests {
  @Test func firesOnTheServiceThreadUntilCancelled() async throws {
    try await withServer(configure: { $0.bodyIdleTimeoutSeconds = 0 }) { server, _ in
      let probe = LoopProbe(server: server)
      let (firings, onLoop) = await probe.fire(every: .milliseconds(5), times: 5)
      #expect(firings == 5)
      #expect(onLoop)
      // The action cancelled its timer on its fifth run: twenty more intervals bring no sixth.
      try await Task.sleep(for: .milliseconds(100))
      #expect(await probe.firings == 5)
    }
  }

  /// lws polls for the time to its next timer truncated to whole milliseconds, then polls with no wait until the
  /// rest runs out. A timer due at its lws entry's time cost up to a millisecond of such polls per firing (over every
  /// socket); an idle loop now wakes about once per firing.
  @Test func anIdleLoopWakesAboutOncePerFiring() async throws {
    try await withServer(configure: { $0.bodyIdleTimeoutSeconds = 0 }) { server, _ in
      let probe = LoopProbe(server: server)
      let (firings, passes) = await probe.passesWhileFiring(every: .milliseconds(10), times: 20)
      #expect(firings == 20)
      #expect(passes <= 2 * firings + 5, "\(passes) service passes for \(firings) firings")
    }
  }

  /// lws runs its timers before it polls. What a timer's action queues for the service thread (a task it starts)
  /// must wake the loop; otherwise it waits in the inbox for the next network event or timer, here a second away.
  @Test func whatATimerStartsRunsWithoutWaitingForTheNextEvent() async throws {
    try await withServer(configure: { $0.bodyIdleTimeoutSeconds = 0 }) { server, _ in
      let probe = LoopProbe(server: server)
      let delay = await probe.delayOfATaskStartedByATimer(every: .seconds(1))
      #expect(delay < .milliseconds(500), "the task waited \(delay)")
    }
  }
}

actor LoopProbe {
  nonisolated let server: Server
  nonisolated var unownedExecutor: UnownedSerialExecutor { server.asUnownedSerialExecutor() }

  init(server: Server) { self.server = server }

  func onServiceThread() -> Bool { server.inLoop }

  /// Starts `count` tasks one after another from the service thread, each from the one before: how many times the
  /// loop was woken meanwhile, and how many of the tasks ran on the service thread.
  func wakeUpsForChainedTasks(_ count: Int) async -> (wakeUps: Int, hops: Int) {
    let before = server.statistics().loopWakeUps
    let hops = await withCheckedContinuation { continuation in chain(count, hops: 0, continuation) }
    return (server.statistics().loopWakeUps - before, hops)
  }

  private(set) var firings = 0
  private var allOnLoop = true
  private var timer: LoopTimer?
  private var started: ContinuousClock.Instant?
  private var firstPasses = 0

  /// Starts a timer that cancels itself after `times` runs; returns its runs and whether each was on the loop.
  func fire(every interval: Duration, times: Int) async -> (firings: Int, onLoop: Bool) {
    await withCheckedContinuation { (done: CheckedContinuation<(firings: Int, onLoop: Bool), Never>) in
      timer = server.repeating(every: interval) { [self] in
        assumeIsolated { probe in
          probe.firings += 1
          probe.allOnLoop = probe.allOnLoop && probe.server.inLoop
          if probe.firings == times {
            probe.timer?.cancel()
            done.resume(returning: (probe.firings, probe.allOnLoop))
          }
        }
      }
    }
  }

  /// Service passes from a timer's first firing to its last (`times` firings in all).
  func passesWhileFiring(every interval: Duration, times: Int) async -> (firings: Int, passes: Int) {
    firings = 0
    let total = await withCheckedContinuation { (done: CheckedContinuation<Int, Never>) in
      timer = server.repeating(every: interval) { [self] in
        assumeIsolated { probe in
          probe.firings += 1
          let passes = probe.server.statistics().servicePasses
          if probe.firings == 1 { probe.firstPasses = passes }
          if probe.firings == times {
            probe.timer?.cancel()
            done.resume(returning: passes - probe.firstPasses)
          }
        }
      }
    }
    return (firings, total)
  }

  /// How long a task that a timer's action starts on the service thread waits before it runs (the timer keeps
  /// running until then, so a task left waiting runs at its next firing at the latest).
  func delayOfATaskStartedByATimer(every interval: Duration) async -> Duration {
    await withCheckedContinuation { (done: CheckedContinuation<Duration, Never>) in
      timer = server.repeating(every: interval) { [self] in
        assumeIsolated { probe in
          guard probe.started == nil else { return }
          probe.started = .now
          // Isolated to the probe (it captures it): the task is a job on the service thread's inbox.
          Task { probe.taskRan(done) }
        }
      }
    }
  }

  private func taskRan(_ done: CheckedContinuation<Duration, Never>) {
    timer?.cancel()
    done.resume(returning: ContinuousClock.now - started!)
  }

  private func chain(_ remaining: Int, hops: Int, _ done: CheckedContinuation<Int, Never>) {
    guard remaining > 0 else { return done.resume(returning: hops) }
    Task { self.chain(remaining - 1, hops: hops + (self.onServiceThread() ? 1 : 0), done) }
  }
}

@Suite(.timeLimit(.minutes(1)))
struct StreamedBodyTests {
  @Test func streamedBodiesArriveWholeThroughPausesAndResumes() async throws {
    try await withServer { _, port in
      for size in [0, 1, 70_000, 1_000_003] {
        let body = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 9) }
        let response = try HTTPClient.post(port: port, path: "/upload", body: body)
        #expect(response.status == 200, "size \(size)")
        #expect(response.body == body, "size \(size): got \(response.body.count) bytes")
      }
    }
  }

  @Test func keepAliveContinuesAfterAStreamedBody() async throws {
    try await withServer { _, port in
      let connection = try HTTPConnection(port: port)
      defer { connection.close() }
      let first = try connection.send(method: "POST", path: "/upload", body: Array("abc".utf8))
      #expect(first.text == "abc")
      let second = try connection.send(method: "GET", path: "/hello")
      #expect(second.text == "hi")
    }
  }

  @Test func aStreamedBodyOverTheLimitIs413AndAnEarlyAnswerArrives() async throws {
    try await withServer { _, port in
      let tooLarge = try HTTPClient.post(port: port, path: "/upload", body: [UInt8](repeating: 1, count: (4 << 20) + 1))
      #expect(tooLarge.status == 413)
      let early = try HTTPClient.post(port: port, path: "/upload?reject=1", body: [UInt8](repeating: 2, count: 200_000))
      #expect(early.status == 409)
      #expect(early.text == "no")
    }
  }

  @Test func fileResponsesSendTheRequestedRange() async throws {
    let path = NSTemporaryDirectory() + "lws-file-\(UUID().uuidString)"
    let bytes = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
    try Data(bytes).write(to: URL(fileURLWithPath: path))
    defer { try? FileManager.default.removeItem(atPath: path) }
    try await withServer { _, port in
      for (offset, length) in [(0, 200_000), (10, 100), (65_530, 70_000), (5, 0)] {
        let response = try HTTPClient.get(port: port, path: "/file?path=\(path)&offset=\(offset)&length=\(length)")
        #expect(response.status == 206)
        #expect(response.header("content-length") == String(length))
        #expect(response.body == Array(bytes[offset..<(offset + length)]), "\(offset)+\(length)")
      }
      let head = try HTTPClient.request(port: port, method: "HEAD", path: "/file?path=\(path)&offset=0&length=1000")
      #expect(head.header("content-length") == "1000")
      #expect(head.body.isEmpty)
      let missing = try HTTPClient.get(port: port, path: "/file?path=/nonexistent/x&offset=0&length=10")
      #expect(missing.status == 500)
    }
  }
}
