/// Event delivery: a peer's live consumers (WebSockets and SSE streams), the one ordered queue every published event
/// goes through, replays paced by the consumer's socket, and the slow-consumer policy.
///
/// Layer 4 (node runtime). The hub's state lives here; the code that acts on it runs on the node's executor (the lws
/// service thread) as `Node` methods in this file, because it writes to the node's sockets and store. Features only
/// publish (``Node/publish(_:)``, ``Node/publishInBackground(_:)``); nothing else touches subscribers.
import Foundation
import LWS
import Logging
import MeshCore

/// The event hub's state, owned by the node actor and only touched on its executor.
final class EventHub {
  var subscribers: [Subscriber.Channel: Subscriber] = [:]
  /// The same subscribers by peer (a live event goes to each of its recipients' subscribers without another lookup).
  var subscribersByPeer: [String: [Subscriber]] = [:]
  var queue = PublishQueue<CheckedContinuation<Void, any Error>>()
  var publishing = false
  /// Whether mesh links are not read because the publish queue is over its high-water mark.
  var meshReadsPaused = false
  /// Events could not be written because the data directory is full or failing: the batches wait in the queue and
  /// the write is tried again every ``Node/storageRetryDelay`` (logged once when it starts and once when it ends).
  var storageFailing = false
  /// Whether local senders are held because the publish queue went over its high-water mark (until it is back under
  /// its low-water mark).
  var localSendsPaused = false
  /// The local peer whose send is being carried out: what it publishes is counted as that peer's
  /// (``PublishQueue/bytes(of:)``).
  var producer: String?
  /// SSE keep-alives every 5 s (which also reveal vanished clients).
  var keepAliveTimer: (any PortTimer)?
  /// Where small events are made durable on the service thread before they are delivered, SQLite getting them in
  /// batches behind.
  let ring: EventRing

  init(ring: EventRing) {
    self.ring = ring
  }
}

@available(*, unavailable) extension EventHub: Sendable {}

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
  /// Events per log read, adapted to their size so a page holds about ``Node/replayPageBytes``.
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

extension Node {
  // MARK: - Subscribers and event delivery

  func addSubscriber(_ channel: Subscriber.Channel, peerID: String) -> Subscriber {
    let subscriber = Subscriber(channel: channel, peerID: peerID)
    events.subscribers[channel] = subscriber
    events.subscribersByPeer[peerID, default: []].append(subscriber)
    return subscriber
  }

  func removeSubscriber(_ channel: Subscriber.Channel) {
    guard let subscriber = events.subscribers.removeValue(forKey: channel) else { return }
    subscriber.removed = true
    events.subscribersByPeer[subscriber.peerID]?.removeAll { $0 === subscriber }
    if events.subscribersByPeer[subscriber.peerID]?.isEmpty == true {
      events.subscribersByPeer[subscriber.peerID] = nil
    }
  }

  /// Bytes a replay keeps queued on a socket (it queues more only as the socket drains), and the target size of one
  /// read from the event log.
  static let replayHighWater = 1 << 20
  static let replayPageBytes = 8 << 20

  /// Sends `hello`, replays the log after `since` (if given), then switches the subscriber to live delivery.
  ///
  /// The replay is paced by the socket: it reads the log a page at a time and queues events only while less than
  /// ``replayHighWater`` waits on the socket, going on when the socket drains. So a client reading at full speed
  /// catches up with any backlog the log holds in one connection, and a slow one is never cut off by its replay.
  func beginDelivery(_ subscriber: Subscriber, since: Int64?) async {
    do {
      let latest = try await store.latestSequence(peerID: subscriber.peerID)
      guard events.subscribers[subscriber.channel] === subscriber, let peer = peers[subscriber.peerID] else { return }
      let hello: JSONValue = [
        "type": "hello",
        "data": ["peer": peerJSON(peer), "node": nodeJSON(), "cursor": .string(String(latest))],
      ]
      #if DEBUG
        checkDocumented("hello", hello.objectValue?["data"] ?? .null)
      #endif
      sendFrame(hello, to: subscriber, eventName: "hello")
      subscriber.lastSent = since ?? latest
      subscriber.greeted = true
      pumpReplay(subscriber)
    } catch {
      replayFailed(subscriber, error)
    }
  }

  /// Queues replayed events while the socket has room; reads the next page when this one is queued; goes live once
  /// the log has nothing newer than what was sent.
  func pumpReplay(_ subscriber: Subscriber) {
    guard subscriber.greeted, subscriber.replaying, events.subscribers[subscriber.channel] === subscriber else {
      return
    }
    while subscriber.replayIndex < subscriber.replayPage.count {
      guard let queued = queuedBytes(subscriber) else { return }
      guard queued < Self.replayHighWater else { return }
      let event = subscriber.replayPage[subscriber.replayIndex]
      subscriber.replayIndex += 1
      deliver(event, to: subscriber)
      subscriber.pageBytes += max(0, (queuedBytes(subscriber) ?? queued) - queued)
      guard events.subscribers[subscriber.channel] === subscriber else { return }
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
    Task { await self.readReplayPage(subscriber) }
  }

  func readReplayPage(_ subscriber: Subscriber) async {
    let limit = subscriber.pageLimit
    do {
      let page = try await store.events(peerID: subscriber.peerID, after: subscriber.lastSent, limit: limit)
      guard events.subscribers[subscriber.channel] === subscriber else { return }
      subscriber.fetching = false
      subscriber.replayExhausted = page.events.count < limit
      subscriber.replayPage = page.events
      subscriber.replayIndex = 0
      pumpReplay(subscriber)
    } catch {
      replayFailed(subscriber, error)
    }
  }

  func replayFailed(_ subscriber: Subscriber, _ error: any Error) {
    guard events.subscribers[subscriber.channel] === subscriber else { return }
    logger.warning("Event replay failed.", ["peer.id": subscriber.peerID, "error": String(describing: error)])
    disconnect(subscriber, code: 1011, reason: "event log unavailable; reconnect with since")
  }

  /// Bytes waiting on the subscriber's socket or stream; nil when it is gone.
  func queuedBytes(_ subscriber: Subscriber) -> Int? {
    switch subscriber.channel {
    case .webSocket(let id): server.queuedBytes(id)
    case .stream(let id): server.streamQueuedBytes(id)
    }
  }

  /// Appends events to peers' logs (in one transaction) and pushes them to live events.subscribers.
  ///
  /// Every append goes through one queue drained by one task, so each peer's events keep the order in which they
  /// were published: two tasks awaiting the store directly could reach it in either order. What goes into each
  /// transaction is ``PublishQueue``'s choice (small events are not held up behind large ones for other peers).
  func publish(_ entries: [(peerID: String, type: String, data: JSONValue)]) async throws {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
      enqueuePublish(entries, waiter: continuation)
    }
  }

  /// Publishes from a synchronous context, in order with every other publish.
  func publishInBackground(_ entries: [(peerID: String, type: String, data: JSONValue)]) {
    enqueuePublish(entries, waiter: nil)
  }

  /// Publishes events that each name all their recipients (a fan-out is stored and sent as one event).
  func publishInBackground(fanOuts: [EventFanOut]) {
    enqueuePublish(fanOuts, waiter: nil)
  }

  func enqueuePublish(
    _ entries: [(peerID: String, type: String, data: JSONValue)], waiter: CheckedContinuation<Void, any Error>?
  ) {
    enqueuePublish(entries.map(EventFanOut.init), waiter: waiter)
  }

  func enqueuePublish(_ entries: [EventFanOut], waiter: CheckedContinuation<Void, any Error>?) {
    // Every type a peer can see is documented (EventCatalog, docs/events.md, OpenAPI); debug builds check it.
    assert(
      entries.allSatisfy { EventCatalog.loggedTypes.contains($0.type) },
      "an event type missing from EventCatalog: \(entries.map(\.type))")
    #if DEBUG
      for entry in entries { checkDocumented(entry.type, entry.data) }
    #endif
    events.queue.append(fanOuts: entries, waiter: waiter, producer: events.producer)
    if events.queue.bytes > PublishQueue<CheckedContinuation<Void, any Error>>.highWater {
      pauseMeshReads(true)
      events.localSendsPaused = true
    }
    guard !events.publishing else { return }
    events.publishing = true
    // Started after the current service-loop pass, not at once (`Task.immediate`): what the same pass publishes
    // (several mesh frames read together) goes into one transaction, and a small event published in the pass does
    // not wait behind a large one that left alone first (the timing test's small messages beside a 24 MiB burst).
    Task { await self.drainPublishQueue() }
  }

  func drainPublishQueue() async {
    while !events.queue.isEmpty {
      // One transaction per turn: one hop to the database queue and back for many events (fan-outs queue many
      // batches while a write is in flight), chosen so that small events are not stuck behind large ones.
      let batches = events.queue.next()
      // Peers deleted meanwhile get nothing (their log is gone). Looked up by key only: no peer record is copied.
      let hosted = peerTable.byID
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
          pushLive(try await appendDurably(entries))
        }
        for batch in batches { batch.waiter?.resume() }
        if events.storageFailing {
          events.storageFailing = false
          logger.notice("The event log can be written again; the events that waited are stored and delivered.")
        }
      } catch let error where APIError.storage(error) != nil {
        // A full or failing disk: nothing was stored or delivered. What a caller waits for is refused to it (it answers
        // 507 or 503: nothing was accepted); the rest was accepted already (session data answered 202, events of the
        // node's own) and is kept, in order, and written and delivered once the disk takes it.
        for batch in batches { batch.waiter?.resume(throwing: error) }
        events.queue.putBack(batches.filter { $0.waiter == nil })
        if !events.storageFailing {
          events.storageFailing = true
          logger.error(
            "Could not write events to the event log: the data directory is full or failing. The events are kept and "
              + "written every \(Self.storageRetryDelay) until it works; free disk space in the data directory.",
            ["error": String(describing: error), "queue.bytes": events.queue.bytes])
        }
        try? await Task.sleep(for: Self.storageRetryDelay)
      } catch {
        logger.error("Could not append events.", ["error": String(describing: error)])
        for batch in batches { batch.waiter?.resume(throwing: error) }
      }
      if events.queue.bytes < PublishQueue<CheckedContinuation<Void, any Error>>.lowWater {
        if events.meshReadsPaused { pauseMeshReads(false) }
        events.localSendsPaused = false
      }
      // Local senders held for room in the queue go on as it drains (in order, up to the bounds again).
      admitHeldSends()
    }
    events.publishing = false
  }

  /// How long events that could not be written for want of disk space wait before the write is tried again.
  static let storageRetryDelay = Duration.seconds(1)

  /// Makes `entries` durable and returns them numbered, as they are to be delivered.
  ///
  /// Small events (each at most ``PublishQueue/smallBytes``) are written into the event ring here, on the service
  /// thread, with no system call and no hop, and staged for SQLite, which gets them in one transaction per
  /// ``NodeStore/stagedFlushDelay`` (or sooner when many bytes wait); a record in the ring survives `kill -9` and is
  /// written to SQLite at the next start. Large events, and small ones while the ring has no room (SQLite a ring's
  /// length behind), wait for their SQLite commit on the store's queue, with everything staged before them: that wait
  /// is the back-pressure, the publish queue growing behind it.
  func appendDurably(_ entries: [(EventFanOut, at: String)]) async throws -> [AppendedEvent] {
    guard
      entries.allSatisfy({ $0.0.data.approximateSize <= PublishQueue<CheckedContinuation<Void, any Error>>.smallBytes })
    else { return try await store.appendEvents(fanOuts: entries) }
    let ring = events.ring
    var bodies = NodeStore.bodies(entries)
    // A record holds no sequence number (the ring's record header does), so it is built before they are handed out.
    let records = bodies.map(\.ringRecord)
    let sizes = records.map { EventRing.size(payload: $0.count) }
    let bytes = sizes.reduce(0, +)
    ring.release(through: store.ingestedThrough)
    // A record that wraps leaves a gap smaller than itself at the end: with room for the largest one more, every
    // record fits.
    guard bytes + (sizes.max() ?? 0) <= ring.freeBytes else {
      metrics.eventRingFull += 1
      return try await store.appendEvents(fanOuts: entries)
    }
    let flush = store.stageEvents(&bodies, bytes: bytes)
    var inRing = true
    for (body, record) in zip(bodies, records) where inRing {
      inRing = ring.append(sequence: body.sequence, payload: record)
    }
    guard inRing else {
      // Cannot happen with the room checked above; should it, SQLite has the events before anyone sees them.
      assertionFailure("the event ring had no room for a batch it was checked to have room for")
      try await store.flushStagedEvents()
      return bodies
    }
    switch flush {
    case .none: break
    case .later: flushStagedEvents(after: NodeStore.stagedFlushDelay)
    case .now: flushStagedEvents(after: nil)
    }
    return bodies
  }

  /// Writes the staged events to SQLite after `delay`, on a task off the service thread. A failure is logged and
  /// tried again a second later (the events stay staged, and in the ring), unless another flush was scheduled or
  /// wrote them meanwhile.
  nonisolated func flushStagedEvents(after delay: Duration?) {
    let (store, logger) = (store, logger)
    Task.detached {
      if let delay { try? await Task.sleep(for: delay) }
      while true {
        do {
          try await store.flushStagedEvents()
          if store.stagedFlushFailing(false) {
            logger.notice("Staged events are written to the store again.")
          }
          return
        } catch {
          // Once per episode, not once a second for as long as the disk stays full.
          if !store.stagedFlushFailing(true) {
            logger.error(
              "Could not write staged events to the store; they are kept in the event ring and tried again every "
                + "second until it works.", ["error": String(describing: error)])
          }
          try? await Task.sleep(for: .seconds(1))
          guard store.claimStagedFlush() else { return }
        }
      }
    }
  }

  /// Stops (or resumes) reading every mesh link while the event log is far behind what the links bring in: the
  /// senders' TCP windows fill and their reliable sends wait for room, instead of this node's memory growing.
  func pauseMeshReads(_ paused: Bool) {
    guard events.meshReadsPaused != paused else { return }
    events.meshReadsPaused = paused
    metrics.meshReadPauses += paused ? 1 : 0
    logger.info(
      paused ? "Event log behind; pausing mesh reads." : "Event log caught up; resuming mesh reads.",
      ["queue.bytes": events.queue.bytes])
    for socket in mesh.connectionBySocket.keys { server.setReceiveFlow(socket, enabled: !paused) }
  }

  func pushLive(_ appended: [AppendedEvent]) {
    // A lone event goes to idle sockets at once (no extra pass of the loop); several from one transaction (a busy
    // publisher) are queued, so each socket gets them framed together in one write.
    let writeNow = appended.count == 1
    for event in appended {
      metrics.eventsAppended += event.peerIDs.count
      // The recipients of one fan-out share the event (same sequence, same envelope): its WebSocket frame is built
      // once and the same message is queued on every socket.
      var frame: OutboundMessage?
      for peerID in event.peerIDs {
        for subscriber in events.subscribersByPeer[peerID] ?? [] where !subscriber.removed {
          if subscriber.replaying {
            subscriber.newestLive = max(subscriber.newestLive, event.sequence)
          } else if case .webSocket(let id) = subscriber.channel {
            guard event.sequence > subscriber.lastSent else { continue }
            subscriber.lastSent = event.sequence
            let shared = frame ?? OutboundMessage(bytes: event.envelope.serialized(), binary: false)
            frame = shared
            send(shared, to: id, of: subscriber, writeNow: writeNow)
          } else {
            deliver(event.stored(for: peerID), to: subscriber)
          }
        }
      }
    }
  }

  func deliver(_ event: StoredEvent, to subscriber: Subscriber) {
    guard event.sequence > subscriber.lastSent else { return }
    subscriber.lastSent = event.sequence
    sendFrame(event.envelope, to: subscriber, eventName: event.type, eventID: String(event.sequence))
  }

  /// Queues `message` on the subscriber's WebSocket `id`; a full queue makes it a slow consumer.
  func send(_ message: OutboundMessage, to id: WebSocketID, of subscriber: Subscriber, writeNow: Bool = false) {
    switch server.send(message, to: id, writeNow: writeNow) {
    case .queued, .closed: break
    case .queueFull: slowConsumer(subscriber)
    }
  }

  /// Sends `value` to the subscriber: a WebSocket message, or an SSE event named `eventName` with id `eventID`.
  /// `writeNow` (WebSocket replies to what the client sent) writes it at once to an idle socket, as a live event is
  /// (``Server/send(_:to:writeNow:)``), instead of waiting for the loop's next pass and the socket's writable callback.
  func sendFrame(
    _ value: JSONValue, to subscriber: Subscriber, eventName: String? = nil, eventID: String? = nil,
    writeNow: Bool = false
  ) {
    switch subscriber.channel {
    case .webSocket(let id):
      send(OutboundMessage(bytes: value.serialized(), binary: false), to: id, of: subscriber, writeNow: writeNow)
    case .stream(let id):
      var text = ""
      if let eventID { text += "id: \(eventID)\n" }
      if let eventName { text += "event: \(eventName)\n" }
      text += "data: \(value.serializedString())\n\n"
      if !server.writeStream(id, Array(text.utf8)) { slowConsumer(subscriber) }
    }
  }

  /// The largest number of event bytes that may wait in the node for one WebSocket or SSE client (docs/api.md).
  static let slowConsumerBytes = 8 << 20

  /// Cuts off a client that let more than ``slowConsumerBytes`` of events pile up: what it has not started to receive
  /// is dropped (it is in the log), and it gets a close frame `4008` (WebSocket) or a final `error` event (SSE) right
  /// after what its socket already holds, so it knows to reconnect with `since` / `Last-Event-ID`.
  func slowConsumer(_ subscriber: Subscriber) {
    guard events.subscribers[subscriber.channel] === subscriber else { return }
    metrics.slowConsumerDisconnects += 1
    logger.notice(
      "Disconnecting a slow event consumer.", ["peer.id": subscriber.peerID, "cursor": subscriber.lastSent])
    removeSubscriber(subscriber.channel)
    let message =
      "client too slow: over \(Self.slowConsumerBytes >> 20) MiB of events unread; reconnect with since=<last event id>"
    switch subscriber.channel {
    case .webSocket(let id):
      server.close(id, code: 4008, reason: message, discardingQueued: true)
    case .stream(let id):
      let final: JSONValue = Self.socketError("slow_consumer", message + " (Last-Event-ID)")
      server.endStream(
        id, discardingQueued: true, final: Array("event: error\ndata: \(final.serializedString())\n\n".utf8))
    }
  }

  func disconnect(_ subscriber: Subscriber, code: UInt16, reason: String) {
    removeSubscriber(subscriber.channel)
    switch subscriber.channel {
    case .webSocket(let id): server.close(id, code: code, reason: reason)
    case .stream(let id): server.endStream(id)
    }
  }

  func sendKeepAlives() {
    for channel in events.subscribers.keys {
      if case .stream(let id) = channel { _ = server.writeStream(id, Array(": keep-alive\n\n".utf8)) }
    }
  }

  func startStream(_ request: HTTPRequest, _ response: HTTPResponse, _ context: RequestContext) {
    guard let peer = context.peer else { return }
    surface.respond(request, response)
    let since =
      (try? Self.parseCursor(request.head.query["since"] ?? request.head.headers["last-event-id"], name: "since"))
      ?? nil
    let subscriber = addSubscriber(.stream(request.id), peerID: peer.id)
    _ = server.writeStream(request.id, Array("retry: 2000\n\n".utf8))
    Task { await self.beginDelivery(subscriber, since: since) }
  }

}
