import MeshCore

/// One event for one or more local peers. A fan-out (one session message to fifty members) names every recipient
/// once and travels as one value from the code that built it to the store, which writes it as one body: nothing is
/// copied, compared or hashed once per recipient on the way but the recipient's id.
struct EventFanOut {
  var peerIDs: [String]
  var type: String
  var data: JSONValue

  init(peerIDs: [String], type: String, data: JSONValue) {
    self.peerIDs = peerIDs
    self.type = type
    self.data = data
  }

  /// An event for one peer.
  init(_ entry: (peerID: String, type: String, data: JSONValue)) {
    self.init(peerIDs: [entry.peerID], type: entry.type, data: entry.data)
  }
}

/// Events waiting to be appended to peers' logs, and the choice of what goes into the next store transaction.
///
/// Every publish goes through this queue, drained by ``SerialWork`` one store transaction a turn, so that each peer's
/// log keeps the order in which its events were published.
/// Across peers no order is owed (each peer reads only its own log), and that freedom is what keeps small events fast
/// while large ones are written: a burst of 1 MiB session messages to one peer becomes 2.4 MB events, and a store
/// transaction holding several of them takes tens of milliseconds. ``next()`` therefore alternates between two kinds
/// of transaction when both have work:
///
/// - **small**: every waiting batch of at most ``smallBytes`` whose peers have nothing earlier still waiting;
/// - **large**: the first waiting batch that is large (with the small ones eligible beside it, up to ``largeBudget``).
///
/// So a small event for one peer waits for at most one large transaction, however many large events for other peers
/// are queued, and large events are never starved by a stream of small ones. A batch that names a peer with an
/// earlier batch still waiting is never taken before it (per-peer FIFO, also for fan-outs naming many peers).
///
/// The queue's bytes are bounded by its owner: past ``highWater`` the node stops reading its mesh links (TCP pushes
/// back on the senders, whose reliable sends wait for room) and holds its local senders (REST and WebSocket session
/// sends wait, then get `503 event_queue_full`) until the queue is back under ``lowWater``; a local sender is also held
/// while its own events in the queue exceed ``senderHighWater``.
struct PublishQueue<Waiter>: SerialQueue {
  /// One `publish` call: entries appended together, and who waits for them.
  struct Batch {
    let entries: [EventFanOut]
    let waiter: Waiter?
    /// About how many bytes the entries' data serializes to.
    let bytes: Int
    /// When the entries were published (their events' `at`).
    let at: String
    /// The local peer whose send published the entries (nil: the node, a mesh link).
    let producer: String?
  }

  /// Batches up to this many bytes are small.
  static var smallBytes: Int { EventLog.smallBytes }
  /// A large transaction takes its large batch plus small ones up to this many bytes in all.
  static var largeBudget: Int { 1 << 20 }
  /// Queued bytes above which the node stops reading mesh links.
  static var highWater: Int { 64 << 20 }
  /// Queued bytes under which it reads them again: close to ``highWater``, so a pause (which holds up every producer
  /// on the links, small ones too) lasts a few large writes, not the whole backlog.
  static var lowWater: Int { 56 << 20 }
  /// Queued bytes of one local sender's events above which its next sends wait (``bytes(of:)``).
  static var senderHighWater: Int { 8 << 20 }

  private(set) var batches: [Batch] = []
  /// Bytes of all waiting batches.
  private(set) var bytes = 0
  /// Bytes of waiting batches by the local peer that published them (only producers with bytes waiting).
  private var bytesByProducer: [String: Int] = [:]
  /// Whether the last transaction was a small one (the next goes to large work if there is any).
  private var lastWasSmall = false

  var isEmpty: Bool { batches.isEmpty }

  /// Bytes of waiting batches published by local peer `producer`.
  func bytes(of producer: String) -> Int { bytesByProducer[producer] ?? 0 }

  mutating func append(
    _ entries: [(peerID: String, type: String, data: JSONValue)], waiter: Waiter?, at: String = Timestamp.now()
  ) {
    append(
      fanOuts: entries.map(EventFanOut.init), waiter: waiter, at: at)
  }

  mutating func append(
    fanOuts entries: [EventFanOut], waiter: Waiter?, at: String = Timestamp.now(), producer: String? = nil
  ) {
    // The entries of one publish share one data value (a fan-out); count it once.
    let recipients = entries.reduce(0) { $0 + $1.peerIDs.count }
    let size = entries.first.map { $0.data.approximateSize + 64 * recipients } ?? 0
    batches.append(Batch(entries: entries, waiter: waiter, bytes: size, at: at, producer: producer))
    bytes += size
    if let producer { bytesByProducer[producer, default: 0] += size }
  }

  /// Removes and returns the batches of the next store transaction, in publish order.
  mutating func next() -> [Batch] {
    guard !batches.isEmpty else { return [] }
    let small = select(large: false)
    let takeLarge = small.isEmpty || lastWasSmall
    let chosen = takeLarge ? select(large: true) : small
    // A large pick found nothing eligible (cannot happen: the first batch is always eligible) falls back to small.
    let picked = chosen.isEmpty ? small : chosen
    lastWasSmall = !takeLarge || chosen.isEmpty
    var taken: [Batch] = []
    taken.reserveCapacity(picked.count)
    var remaining: [Batch] = []
    remaining.reserveCapacity(batches.count - picked.count)
    var pickedIndex = 0
    for (index, batch) in batches.enumerated() {
      if pickedIndex < picked.count && picked[pickedIndex] == index {
        taken.append(batch)
        bytes -= batch.bytes
        if let producer = batch.producer {
          let left = (bytesByProducer[producer] ?? 0) - batch.bytes
          bytesByProducer[producer] = left > 0 ? left : nil
        }
        pickedIndex += 1
      } else {
        remaining.append(batch)
      }
    }
    batches = remaining
    return taken
  }

  /// Puts batches taken by ``next()`` back in front, in their order, to be taken again (their write failed). Each
  /// peer's order holds: ``next()`` takes a peer's batches only from the front of that peer's waiting ones.
  mutating func putBack(_ taken: [Batch]) {
    guard !taken.isEmpty else { return }
    batches.insert(contentsOf: taken, at: 0)
    bytes += taken.reduce(0) { $0 + $1.bytes }
  }

  /// Indexes of the batches one transaction would take: small ones only, or the first large one with small ones.
  private func select(large: Bool) -> [Int] {
    var picked: [Int] = []
    var blocked: Set<String> = []
    var budget = Self.largeBudget
    var tookLarge = false
    for (index, batch) in batches.enumerated() {
      let free = blocked.isEmpty || batch.entries.allSatisfy { $0.peerIDs.allSatisfy { !blocked.contains($0) } }
      let isSmall = batch.bytes <= Self.smallBytes
      var take = false
      if free {
        if isSmall {
          take = !large || batch.bytes <= budget
        } else if large && !tookLarge {
          take = true
          tookLarge = true
        }
      }
      if take {
        picked.append(index)
        budget -= batch.bytes
      } else {
        for entry in batch.entries { blocked.formUnion(entry.peerIDs) }
        if large && tookLarge && budget <= 0 { break }
      }
    }
    return picked
  }
}
