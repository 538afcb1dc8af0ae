/// Event delivery: a peer's live consumers (WebSockets and SSE streams), the one ordered queue every published event
/// goes through, replays paced by the consumer's socket, and the slow-consumer policy.
///
/// Layer 4 (node runtime). ``EventHub`` holds this state and the code that acts on it; its methods take the node
/// (`node: isolated Node`), so they run on the node's executor (the lws service thread) and write to the node's sockets
/// and store without a hop. Features only publish (``EventHub/publish(_:node:)``,
/// ``EventHub/publishInBackground(_:node:)``); the node forwards its socket callbacks here; nothing else touches
/// subscribers.
import Foundation
import LWS
import Logging
import MeshCore

/// The event hub: owned by the node actor and only touched on its executor.
final class EventHub {
  private(set) var subscribers: [Subscriber.Channel: Subscriber] = [:]
  /// The same subscribers by peer (a live event goes to each of its recipients' subscribers without another lookup).
  private(set) var subscribersByPeer: [String: [Subscriber]] = [:]
  /// Every published event, in the one ordered queue drained by one task (``write(_:node:)``).
  let publishing: SerialWork<PublishQueue<PublishWaiter>>
  /// Whether mesh links are not read because the publish queue is over its high-water mark.
  private(set) var meshReadsPaused = false
  /// Events could not be written because the data directory is full or failing: the batches wait in the queue and
  /// the write is tried again every ``EventHub/storageRetryDelay`` (logged once when it starts and once when it ends).
  private var storageFailing = false
  /// Whether local senders are held because the publish queue went over its high-water mark (until it is back under
  /// its low-water mark).
  private(set) var localSendsPaused = false
  /// The local peer whose send is being carried out: what it publishes is counted as that peer's
  /// (``PublishQueue/bytes(of:)``).
  var producer: String?
  /// What the hub counts (`/metrics`).
  private(set) var counters = Counters()
  /// SSE keep-alives every 5 s (which also reveal vanished clients).
  private var keepAliveTimer: (any PortTimer)?
  init() {
    publishing = SerialWork(PublishQueue()) { batches, node in await node.events.write(batches, node: node) }
  }

  /// Whether `peerID` has a live consumer (a WebSocket or an SSE stream).
  func isConnected(_ peerID: String) -> Bool { !(subscribersByPeer[peerID]?.isEmpty ?? true) }

  /// The open SSE streams (`/metrics`).
  var streamCount: Int { subscribers.keys.count { if case .stream = $0 { true } else { false } } }

  /// Bytes of events waiting to be appended to peers' logs (`/metrics`), and those `peerID`'s sends published.
  var queuedBytes: Int { publishing.queue.bytes }
  func queuedBytes(of peerID: String) -> Int { publishing.queue.bytes(of: peerID) }
}

/// Who waits for a publish to be stored (``EventHub/publish(_:node:)``).
typealias PublishWaiter = CheckedContinuation<Void, any Error>

@available(*, unavailable) extension EventHub: Sendable {}

extension EventHub {
  /// The hub's counters on `/metrics`.
  struct Counters {
    /// Events appended to peers' logs, one per recipient.
    var appended = 0
    /// Times mesh links stopped being read because the publish queue was over its high-water mark.
    var meshReadPauses = 0
    var slowConsumerDisconnects = 0
    /// Events whose data broke their documented schema (checked in debug builds only).
    var offSchema = 0
  }
}

/// A live consumer of a peer's events: a WebSocket or an SSE stream.
final class Subscriber {
  enum Channel: Hashable {
    case webSocket(WebSocketID)
    case stream(RequestID)
  }

  let channel: Channel
  let peerID: String
  /// Removed from the hub (a fan-out already under way skips it).
  var removed = false
  /// The newest event sequence delivered; events at or below it are never sent again.
  var lastSent: Int64 = 0
  /// While replaying from the store, live events are not queued: the replay reads on through the log until it has
  /// caught up with the newest live event (`newestLive`), then the subscriber goes live.
  var replaying = true
  /// Whether `hello` was sent: nothing is replayed before it (a drained socket may ask for more while the node is
  /// still reading the log's newest sequence for `hello`).
  var greeted = false
  var newestLive: Int64 = 0
  /// Events read from the log and not yet queued on the socket (the replay queues them only as the socket drains).
  var replayPage: [StoredEvent] = []
  var replayIndex = 0
  var fetching = false
  /// The last page read was short: the log had nothing more at that moment.
  var replayExhausted = false
  /// Events per log read, adapted to their size so a page holds about ``EventHub/replayPageBytes``.
  var pageLimit = 16
  var pageBytes = 0
  /// A reliable `{"op":"send"}` waits for room: reading is paused and messages that arrive meanwhile wait here.
  var holding = false
  var backlog: [WebSocketMessage] = []

  init(channel: Channel, peerID: String) {
    self.channel = channel
    self.peerID = peerID
  }
}

extension EventHub {
  // MARK: - Timers

  /// Starts the SSE keep-alives (every 5 s, which also reveal vanished clients).
  func start(node: isolated Node) {
    keepAliveTimer = node.server.repeating(every: .seconds(5)) { [weak node] in
      node?.assumeIsolated { $0.events.sendKeepAlives(node: $0) }
    }
  }

  func stop() {
    keepAliveTimer?.cancel()
  }

  // MARK: - Subscribers

  func addSubscriber(_ channel: Subscriber.Channel, peerID: String) -> Subscriber {
    let subscriber = Subscriber(channel: channel, peerID: peerID)
    subscribers[channel] = subscriber
    subscribersByPeer[peerID, default: []].append(subscriber)
    return subscriber
  }

  func removeSubscriber(_ channel: Subscriber.Channel) {
    guard let subscriber = subscribers.removeValue(forKey: channel) else { return }
    subscriber.removed = true
    subscribersByPeer[subscriber.peerID]?.removeAll { $0 === subscriber }
    if subscribersByPeer[subscriber.peerID]?.isEmpty == true {
      subscribersByPeer[subscriber.peerID] = nil
    }
  }

  /// Whether `subscriber` is still the hub's consumer on its channel (not removed, not replaced).
  func isCurrent(_ subscriber: Subscriber) -> Bool { subscribers[subscriber.channel] === subscriber }

  /// A peer's event WebSocket opened: `hello`, the replay after `since`, then live events.
  func webSocketOpened(_ id: WebSocketID, peerID: String, since: Int64?, node: isolated Node) {
    let subscriber = addSubscriber(.webSocket(id), peerID: peerID)
    Task { await node.events.beginDelivery(subscriber, since: since, node: node) }
  }

  /// A socket or stream drained: its replay goes on.
  func drained(_ channel: Subscriber.Channel, node: isolated Node) {
    if let subscriber = subscribers[channel] { pumpReplay(subscriber, node: node) }
  }

  /// Closes every consumer of `peerID` (the peer was deleted) with `code` and `reason`.
  func disconnectAll(of peerID: String, code: UInt16, reason: String, node: isolated Node) {
    for subscriber in subscribersByPeer[peerID] ?? [] where !subscriber.removed {
      disconnect(subscriber, code: code, reason: reason, node: node)
    }
  }

  // MARK: - The event socket

  /// A message on a peer's event socket (`/api/v1/ws`): `ping`, or `send` into a session.
  func received(_ message: WebSocketMessage, on id: WebSocketID, node: isolated Node) {
    guard let subscriber = subscribers[.webSocket(id)] else { return }
    if subscriber.holding {
      subscriber.backlog.append(message)
      return
    }
    let size: Int
    switch message {
    case .binary(let bytes), .text(let bytes): size = bytes.count
    }
    if let refusal = node.safety.checkSocketMessage(id, size: size) {
      sendFrame(refusal.reply, to: subscriber, writeNow: true, node: node)
      if refusal.close {
        removeSubscriber(.webSocket(id))
        node.server.close(id, code: 1009, reason: "message too large")
      }
      return
    }
    let reply: JSONValue
    switch message {
    case .binary:
      reply = EventHub.socketError(
        "binary_not_supported", "this socket takes JSON text messages such as {\"op\":\"ping\"}")
    case .text(let bytes):
      let parsed: JSONValue
      do {
        parsed = try JSONValue.parse(bytes)
      } catch {
        reply = EventHub.socketError(
          error.isLimit ? "json_limit_exceeded" : "malformed_message",
          "\(error); send a JSON object with an \"op\" member, e.g. {\"op\":\"ping\"}")
        break
      }
      guard case .object(let object) = parsed, let op = object["op"]?.stringValue else {
        reply = EventHub.socketError(
          "malformed_message", "send a JSON object with an \"op\" member, e.g. {\"op\":\"ping\"}")
        break
      }
      switch op {
      case "ping":
        reply = ["type": "pong", "data": ["cursor": .string(String(subscriber.lastSent))]]
      default:
        // Other ops (`send`) are the features'.
        switch node.features.eventSocketOp(op, object, subscriber: subscriber, socket: id, node: node) {
        case .reply(let answer): reply = answer
        case .later: return
        case nil:
          reply = EventHub.socketError(
            "unknown_op", "unknown op \(op.debugDescription); this node supports: ping, send")
        }
      }
    }
    sendFrame(reply, to: subscriber, writeNow: true, node: node)
  }

  // MARK: - Replay

  /// Bytes a replay keeps queued on a socket (it queues more only as the socket drains), and the target size of one
  /// read from the event log.
  static let replayHighWater = 1 << 20
  static let replayPageBytes = 8 << 20

  /// Sends `hello`, replays the log after `since` (if given), then switches the subscriber to live delivery.
  ///
  /// The replay is paced by the socket: it reads the log a page at a time and queues events only while less than
  /// ``replayHighWater`` waits on the socket, going on when the socket drains. So a client reading at full speed
  /// catches up with any backlog the log holds in one connection, and a slow one is never cut off by its replay.
  func beginDelivery(_ subscriber: Subscriber, since: Int64?, node: isolated Node) async {
    do {
      let latest = try await node.store.eventLog.latestSequence(peerID: subscriber.peerID)
      guard isCurrent(subscriber), let peer = node.peers[subscriber.peerID] else { return }
      let hello: JSONValue = [
        "type": "hello",
        "data": ["peer": node.peerJSON(peer), "node": node.nodeJSON(), "cursor": .string(String(latest))],
      ]
      #if DEBUG
        checkDocumented("hello", hello.objectValue?["data"] ?? .null, node: node)
      #endif
      sendFrame(hello, to: subscriber, eventName: "hello", node: node)
      subscriber.lastSent = since ?? latest
      subscriber.greeted = true
      pumpReplay(subscriber, node: node)
    } catch {
      replayFailed(subscriber, error, node: node)
    }
  }

  /// Queues replayed events while the socket has room; reads the next page when this one is queued; goes live once
  /// the log has nothing newer than what was sent.
  func pumpReplay(_ subscriber: Subscriber, node: isolated Node) {
    guard subscriber.greeted, subscriber.replaying, isCurrent(subscriber) else { return }
    while subscriber.replayIndex < subscriber.replayPage.count {
      guard let queued = queuedBytes(subscriber, node: node) else { return }
      guard queued < Self.replayHighWater else { return }
      let event = subscriber.replayPage[subscriber.replayIndex]
      subscriber.replayIndex += 1
      deliver(event, to: subscriber, node: node)
      subscriber.pageBytes += max(0, (queuedBytes(subscriber, node: node) ?? queued) - queued)
      guard isCurrent(subscriber) else { return }
    }
    if !subscriber.replayPage.isEmpty {
      // Adapt the next read to the size of these events (large session.data events come a few at a time).
      let average = max(1, subscriber.pageBytes / subscriber.replayPage.count)
      subscriber.pageLimit = max(1, min(500, Self.replayPageBytes / average))
      subscriber.replayPage = []
      subscriber.replayIndex = 0
      subscriber.pageBytes = 0
    }
    guard !subscriber.fetching else { return }
    if subscriber.replayExhausted && subscriber.newestLive <= subscriber.lastSent {
      subscriber.replaying = false
      return
    }
    subscriber.fetching = true
    Task { await node.events.readReplayPage(subscriber, node: node) }
  }

  func readReplayPage(_ subscriber: Subscriber, node: isolated Node) async {
    let limit = subscriber.pageLimit
    do {
      let page = try await node.store.eventLog.events(
        peerID: subscriber.peerID, after: subscriber.lastSent, limit: limit)
      guard isCurrent(subscriber) else { return }
      subscriber.fetching = false
      subscriber.replayExhausted = page.events.count < limit
      subscriber.replayPage = page.events
      subscriber.replayIndex = 0
      pumpReplay(subscriber, node: node)
    } catch {
      replayFailed(subscriber, error, node: node)
    }
  }

  func replayFailed(_ subscriber: Subscriber, _ error: any Error, node: isolated Node) {
    guard isCurrent(subscriber) else { return }
    node.logger.warning("Event replay failed.", ["peer.id": subscriber.peerID, "error": String(describing: error)])
    disconnect(subscriber, code: 1011, reason: "event log unavailable; reconnect with since", node: node)
  }

  /// Bytes waiting on the subscriber's socket or stream; nil when it is gone.
  func queuedBytes(_ subscriber: Subscriber, node: isolated Node) -> Int? {
    switch subscriber.channel {
    case .webSocket(let id): node.server.queuedBytes(id)
    case .stream(let id): node.server.streamQueuedBytes(id)
    }
  }

  // MARK: - Publishing

  /// Appends events to peers' logs (in one transaction) and pushes them to live subscribers.
  ///
  /// Every append goes through one queue drained by one task, so each peer's events keep the order in which they
  /// were published: two tasks awaiting the store directly could reach it in either order. What goes into each
  /// transaction is ``PublishQueue``'s choice (small events are not held up behind large ones for other peers).
  func publish(_ entries: [(peerID: String, type: String, data: JSONValue)], node: isolated Node) async throws {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
      enqueue(entries.map(EventFanOut.init), waiter: continuation, node: node)
    }
  }

  /// Publishes from a synchronous context, in order with every other publish.
  func publishInBackground(_ entries: [(peerID: String, type: String, data: JSONValue)], node: isolated Node) {
    enqueue(entries.map(EventFanOut.init), waiter: nil, node: node)
  }

  /// Publishes events that each name all their recipients (a fan-out is stored and sent as one event).
  func publishInBackground(fanOuts: [EventFanOut], node: isolated Node) {
    enqueue(fanOuts, waiter: nil, node: node)
  }

  private func enqueue(_ entries: [EventFanOut], waiter: CheckedContinuation<Void, any Error>?, node: isolated Node) {
    // Every type a peer can see is documented (EventCatalog, docs/events.md, OpenAPI); debug builds check it.
    assert(
      entries.allSatisfy { EventCatalog.loggedTypes.contains($0.type) },
      "an event type missing from EventCatalog: \(entries.map(\.type))")
    #if DEBUG
      for entry in entries { checkDocumented(entry.type, entry.data, node: node) }
    #endif
    let producer = producer
    publishing.enqueue(node: node) { $0.append(fanOuts: entries, waiter: waiter, producer: producer) }
    if publishing.queue.bytes > PublishQueue<PublishWaiter>.highWater {
      pauseMeshReads(true, node: node)
      localSendsPaused = true
    }
  }

  /// One turn of the publish queue: one transaction, one hop to the database queue and back for many events
  /// (fan-outs queue many batches while a write is in flight), chosen so that small events are not stuck behind large
  /// ones (``PublishQueue/next()``).
  func write(_ batches: [PublishQueue<PublishWaiter>.Batch], node: isolated Node) async {
    // Peers deleted meanwhile get nothing (their log is gone). Looked up by key only: no peer record is copied.
    let hosted = node.peers.byID
    func isHosted(_ peerID: String) -> Bool { hosted.index(forKey: peerID) != nil }
    var entries: [(EventFanOut, at: String)] = []
    for batch in batches {
      for var entry in batch.entries {
        if !entry.peerIDs.allSatisfy(isHosted) { entry.peerIDs.removeAll { !isHosted($0) } }
        if !entry.peerIDs.isEmpty { entries.append((entry, batch.at)) }
      }
    }
    do {
      if !entries.isEmpty {
        pushLive(try await node.store.eventLog.append(entries), node: node)
      }
      for batch in batches { batch.waiter?.resume() }
      if storageFailing {
        storageFailing = false
        node.logger.notice("The event log can be written again; the events that waited are stored and delivered.")
      }
    } catch let error where APIError.storage(error) != nil {
      // A full or failing disk: nothing was stored or delivered. What a caller waits for is refused to it (it answers
      // 507 or 503: nothing was accepted); the rest was accepted already (session data answered 202, events of the
      // node's own) and is kept, in order, and written and delivered once the disk takes it.
      for batch in batches { batch.waiter?.resume(throwing: error) }
      publishing.update { $0.putBack(batches.filter { $0.waiter == nil }) }
      if !storageFailing {
        storageFailing = true
        node.logger.error(
          "Could not write events to the event log: the data directory is full or failing. The events are kept and "
            + "written every \(Self.storageRetryDelay) until it works; free disk space in the data directory.",
          ["error": String(describing: error), "queue.bytes": publishing.queue.bytes])
      }
      try? await Task.sleep(for: Self.storageRetryDelay)
    } catch {
      node.logger.error("Could not append events.", ["error": String(describing: error)])
      for batch in batches { batch.waiter?.resume(throwing: error) }
    }
    if publishing.queue.bytes < PublishQueue<PublishWaiter>.lowWater {
      if meshReadsPaused { pauseMeshReads(false, node: node) }
      localSendsPaused = false
    }
    // Local senders held for room in the queue go on as it drains (in order, up to the bounds again).
    for feature in node.features.all { feature.eventQueueRoomFreed(node: node) }
  }

  /// How long events that could not be written for want of disk space wait before the write is tried again.
  static let storageRetryDelay = Duration.seconds(1)

  /// Stops (or resumes) reading every mesh link while the event log is far behind what the links bring in: the
  /// senders' TCP windows fill and their reliable sends wait for room, instead of this node's memory growing.
  func pauseMeshReads(_ paused: Bool, node: isolated Node) {
    guard meshReadsPaused != paused else { return }
    meshReadsPaused = paused
    counters.meshReadPauses += paused ? 1 : 0
    node.logger.info(
      paused ? "Event log behind; pausing mesh reads." : "Event log caught up; resuming mesh reads.",
      ["queue.bytes": publishing.queue.bytes])
    for socket in node.mesh.connectionBySocket.keys { node.server.setReceiveFlow(socket, enabled: !paused) }
  }

  // MARK: - Delivery

  func pushLive(_ appended: [AppendedEvent], node: isolated Node) {
    // A lone event goes to idle sockets at once (no extra pass of the loop); several from one transaction (a busy
    // publisher) are queued, so each socket gets them framed together in one write.
    let writeNow = appended.count == 1
    for event in appended {
      counters.appended += event.peerIDs.count
      // The recipients of one fan-out share the event (same sequence, same envelope): it is serialized once, and the
      // same WebSocket message, or the same SSE frame, goes to every socket.
      var frames = LiveFrames(event)
      for peerID in event.peerIDs {
        for subscriber in subscribersByPeer[peerID] ?? [] where !subscriber.removed {
          if subscriber.replaying {
            subscriber.newestLive = max(subscriber.newestLive, event.sequence)
            continue
          }
          guard event.sequence > subscriber.lastSent else { continue }
          subscriber.lastSent = event.sequence
          switch subscriber.channel {
          case .webSocket(let id):
            send(frames.message(), to: id, of: subscriber, writeNow: writeNow, node: node)
          case .stream(let id):
            if !node.server.writeStream(id, frames.serverSentEvent()) { slowConsumer(subscriber, node: node) }
          }
        }
      }
    }
  }

  /// One live event's frames, each made at most once for all its recipients: the envelope serialized, then the
  /// WebSocket message and the SSE frame built on those bytes.
  struct LiveFrames {
    let event: AppendedEvent
    private var envelope: [UInt8]?
    private var webSocket: OutboundMessage?
    private var stream: [UInt8]?

    init(_ event: AppendedEvent) { self.event = event }

    private mutating func serialized() -> [UInt8] {
      if let envelope { return envelope }
      let bytes = event.envelope.serialized()
      envelope = bytes
      return bytes
    }

    mutating func message() -> OutboundMessage {
      if let webSocket { return webSocket }
      let message = OutboundMessage(bytes: serialized(), binary: false)
      webSocket = message
      return message
    }

    mutating func serverSentEvent() -> [UInt8] {
      if let stream { return stream }
      var frame = Array("id: \(event.sequence)\nevent: \(event.type)\ndata: ".utf8)
      frame += serialized()
      frame += Array("\n\n".utf8)
      stream = frame
      return frame
    }
  }

  func deliver(_ event: StoredEvent, to subscriber: Subscriber, node: isolated Node) {
    guard event.sequence > subscriber.lastSent else { return }
    subscriber.lastSent = event.sequence
    sendFrame(event.envelope, to: subscriber, eventName: event.type, eventID: String(event.sequence), node: node)
  }

  /// Queues `message` on the subscriber's WebSocket `id`; a full queue makes it a slow consumer.
  func send(
    _ message: OutboundMessage, to id: WebSocketID, of subscriber: Subscriber, writeNow: Bool = false,
    node: isolated Node
  ) {
    switch node.server.send(message, to: id, writeNow: writeNow) {
    case .queued, .closed: break
    case .queueFull: slowConsumer(subscriber, node: node)
    }
  }

  /// Sends `value` to the subscriber: a WebSocket message, or an SSE event named `eventName` with id `eventID`.
  /// `writeNow` (WebSocket replies to what the client sent) writes it at once to an idle socket, as a live event is
  /// (``Server/send(_:to:writeNow:)``), instead of waiting for the loop's next pass and the socket's writable callback.
  func sendFrame(
    _ value: JSONValue, to subscriber: Subscriber, eventName: String? = nil, eventID: String? = nil,
    writeNow: Bool = false, node: isolated Node
  ) {
    switch subscriber.channel {
    case .webSocket(let id):
      send(
        OutboundMessage(bytes: value.serialized(), binary: false), to: id, of: subscriber, writeNow: writeNow,
        node: node)
    case .stream(let id):
      var text = ""
      if let eventID { text += "id: \(eventID)\n" }
      if let eventName { text += "event: \(eventName)\n" }
      text += "data: \(value.serializedString())\n\n"
      if !node.server.writeStream(id, Array(text.utf8)) { slowConsumer(subscriber, node: node) }
    }
  }

  /// The largest number of event bytes that may wait in the node for one WebSocket or SSE client (docs/api.md).
  static let slowConsumerBytes = 8 << 20

  /// Cuts off a client that let more than ``slowConsumerBytes`` of events pile up: what it has not started to receive
  /// is dropped (it is in the log), and it gets a close frame `4008` (WebSocket) or a final `error` event (SSE) right
  /// after what its socket already holds, so it knows to reconnect with `since` / `Last-Event-ID`.
  func slowConsumer(_ subscriber: Subscriber, node: isolated Node) {
    guard isCurrent(subscriber) else { return }
    counters.slowConsumerDisconnects += 1
    node.logger.notice(
      "Disconnecting a slow event consumer.", ["peer.id": subscriber.peerID, "cursor": subscriber.lastSent])
    removeSubscriber(subscriber.channel)
    let message =
      "client too slow: over \(Self.slowConsumerBytes >> 20) MiB of events unread; reconnect with since=<last event id>"
    switch subscriber.channel {
    case .webSocket(let id):
      node.server.close(id, code: 4008, reason: message, discardingQueued: true)
    case .stream(let id):
      let final: JSONValue = EventHub.socketError("slow_consumer", message + " (Last-Event-ID)")
      node.server.endStream(
        id, discardingQueued: true, final: Array("event: error\ndata: \(final.serializedString())\n\n".utf8))
    }
  }

  func disconnect(_ subscriber: Subscriber, code: UInt16, reason: String, node: isolated Node) {
    removeSubscriber(subscriber.channel)
    switch subscriber.channel {
    case .webSocket(let id): node.server.close(id, code: code, reason: reason)
    case .stream(let id): node.server.endStream(id)
    }
  }

  func sendKeepAlives(node: isolated Node) {
    for channel in subscribers.keys {
      if case .stream(let id) = channel { _ = node.server.writeStream(id, Array(": keep-alive\n\n".utf8)) }
    }
  }

  // MARK: - Routes

  /// `GET /api/v1/events`: a page of the peer's log after a cursor.
  func list(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let query = context.request.head.query
    let since =
      try EventHub.parseCursor(query["since"] ?? query["cursor"], name: query["since"] != nil ? "since" : "cursor") ?? 0
    let limit = try query.limit(maximum: 1000)
    let peer = context.authenticatedPeer
    let page = try await node.store.eventLog.events(peerID: peer.id, after: since, limit: limit)
    let next = page.events.last?.sequence ?? since
    return .json([
      "events": .array(page.events.map(\.envelope)), "nextCursor": .string(String(next)),
      "truncated": .bool(page.truncated),
    ])
  }

  /// `GET /api/v1/events/stream`: the head of a Server-Sent Events response (the route then starts the stream).
  static func streamResponse(_ context: RequestContext) throws -> HTTPResponse {
    _ = try EventHub.parseCursor(context.request.head.query["since"], name: "since")
    return HTTPResponse(
      status: 200, contentType: "text/event-stream",
      headers: [("cache-control", "no-store"), ("x-accel-buffering", "no")], isStream: true)
  }

  /// Answers an SSE request with `response` and starts its stream: `hello`, the replay, then live events.
  func startStream(_ request: HTTPRequest, _ response: HTTPResponse, _ context: RequestContext, node: isolated Node) {
    guard let peer = context.peer else { return }
    node.surface.respond(request, response)
    let since =
      (try? EventHub.parseCursor(request.head.query["since"] ?? request.head.headers["last-event-id"], name: "since"))
      ?? nil
    let subscriber = addSubscriber(.stream(request.id), peerID: peer.id)
    _ = node.server.writeStream(request.id, Array("retry: 2000\n\n".utf8))
    Task { await node.events.beginDelivery(subscriber, since: since, node: node) }
  }

  // MARK: - Documentation checks

  /// Debug builds: logs and counts an event whose data does not match its documented schema.
  func checkDocumented(_ type: String, _ data: JSONValue, node: isolated Node) {
    guard let kind = EventCatalog.kind(type) else { return }
    let problems = EventCatalog.violations(data, against: kind.data)
    guard !problems.isEmpty else { return }
    counters.offSchema += 1
    node.logger.error(
      "Event data does not match its documented schema (docs/events.md).",
      ["event.type": type, "violations": problems.prefix(5).joined(separator: "; ")])
  }
}

extension EventHub {
  /// An `error` message on an event socket.
  static func socketError(_ code: String, _ message: String) -> JSONValue {
    ["type": "error", "data": ["code": .string(code), "message": .string(message)]]
  }

  /// Parses an event cursor: a non-negative decimal integer.
  static func parseCursor(_ text: String?, name: String) throws(APIError) -> Int64? {
    guard let text, !text.isEmpty else { return nil }
    guard text.count <= 18, text.allSatisfy(\.isASCII), text.allSatisfy(\.isNumber), let value = Int64(text) else {
      throw .badRequest(
        "\(name) must be an event id (a non-negative integer) from a previous event, not \(text.debugDescription)")
    }
    return value
  }
}
