/// Outbound scheduling of one mesh link, sans I/O.
///
/// Frames wait here, not in the socket, until the socket can take the next one; the runtime asks for it with
/// ``dequeue()`` each time the link's socket is writable, so at most one frame is ever waiting inside the socket
/// layer. What comes out next is decided by two classes:
///
/// - **Control** (handshake, heartbeats, directory, invitations, session membership and state, acknowledgements,
///   transfer and stream control): always first, in the order queued, never refused. Control frames are small and
///   paced by the protocol itself (a link whose heartbeats cannot get through is declared lost within seconds).
/// - **Bulk**, one lane per producer (a local sender peer's session data, one file transfer's chunks, one stream's
///   bytes, chat): deficit round-robin across the lanes with non-empty queues. Each turn a lane earns
///   ``Limits/quantum`` bytes of credit and sends its frames while they fit its credit; a frame larger than the
///   quantum waits for enough turns. So a small frame of one producer waits behind at most one quantum (or one large
///   frame) of each other busy producer, however much those have queued.
///
/// Bounds: the scheduler never refuses a frame itself. Producers ask ``hasRoom(for:)`` before they queue bulk
/// frames and wait (reliable data, file chunks, stream bytes) or drop and count (unreliable data) when it is false:
/// a lane may hold ``Limits/laneBytes`` and all bulk lanes together ``Limits/linkBytes``; a producer that asked in
/// time may overshoot by its one frame.
public struct LinkScheduler<Item> {
  /// Which class and lane a frame belongs to.
  public enum Lane: Hashable, Sendable {
    /// Protocol control, always first.
    case control
    /// Bulk data of one producer (any stable key, e.g. `peer:<id>`, `transfer:<id>`).
    case bulk(String)
  }

  /// The scheduler's bounds and round-robin quantum.
  public struct Limits: Sendable, Equatable {
    /// Bytes one bulk lane may hold before ``hasRoom(for:)`` says no.
    public var laneBytes: Int
    /// Bytes all bulk lanes together may hold before ``hasRoom(for:)`` says no.
    public var linkBytes: Int
    /// Credit a bulk lane earns per round-robin turn.
    public var quantum: Int

    public init(laneBytes: Int = 4 << 20, linkBytes: Int = 16 << 20, quantum: Int = 64 << 10) {
      precondition(laneBytes > 0 && linkBytes > 0 && quantum > 0, "LinkScheduler.Limits: bounds must be positive")
      self.laneBytes = laneBytes
      self.linkBytes = linkBytes
      self.quantum = quantum
    }
  }

  struct Entry {
    var item: Item
    var bytes: Int
  }

  struct BulkLane {
    var entries = FIFO<Entry>()
    var bytes = 0
    var deficit = 0
    /// Whether this lane already earned its quantum in the current turn.
    var credited = false

    var first: Entry? { entries.first }

    mutating func append(_ entry: Entry) {
      entries.append(entry)
      bytes += entry.bytes
    }

    mutating func removeFirst() -> Entry {
      let entry = entries.removeFirst()!
      bytes -= entry.bytes
      return entry
    }
  }

  public let limits: Limits
  var control = FIFO<Entry>()
  var lanes: [String: BulkLane] = [:]
  /// Lanes with queued frames, in round-robin order (the first is the one whose turn it is).
  var active: [String] = []
  /// Bytes queued in control.
  public private(set) var controlBytes = 0
  /// Bytes queued in all bulk lanes.
  public private(set) var bulkBytes = 0

  public init(limits: Limits = Limits()) {
    self.limits = limits
  }

  /// Whether nothing is queued.
  public var isEmpty: Bool { control.isEmpty && active.isEmpty }

  /// Frames queued, all classes.
  public var count: Int { control.count + lanes.values.reduce(0) { $0 + $1.entries.count } }

  /// Bytes queued in bulk lane `producer`.
  public func queuedBytes(of producer: String) -> Int { lanes[producer]?.bytes ?? 0 }

  /// Whether bulk lane `producer` may queue another frame now: the lane and the link are both under their bounds.
  public func hasRoom(for producer: String) -> Bool {
    queuedBytes(of: producer) < limits.laneBytes && bulkBytes < limits.linkBytes
  }

  /// Queues `item` (`bytes` long) in `lane`. Never refuses; bulk producers check ``hasRoom(for:)`` first.
  public mutating func enqueue(_ item: Item, bytes: Int, lane: Lane) {
    let entry = Entry(item: item, bytes: max(bytes, 1))
    switch lane {
    case .control:
      control.append(entry)
      controlBytes += entry.bytes
    case .bulk(let producer):
      var queue = lanes[producer] ?? BulkLane()
      if queue.first == nil { active.append(producer) }
      queue.append(entry)
      lanes[producer] = queue
      bulkBytes += entry.bytes
    }
  }

  /// The next frame to write and its lane: control first, then bulk lanes by deficit round-robin. Nil when empty.
  public mutating func dequeue() -> (item: Item, lane: Lane)? {
    if let entry = control.removeFirst() {
      controlBytes -= entry.bytes
      return (entry.item, .control)
    }
    // Each pass either sends the head of the lane whose turn it is or ends that lane's turn with more credit; a frame
    // of n bytes is sent within n / quantum + 1 turns of its lane, so the loop ends.
    while let producer = active.first, var queue = lanes[producer], let head = queue.first {
      if !queue.credited {
        queue.deficit += limits.quantum
        queue.credited = true
      }
      if head.bytes <= queue.deficit {
        let entry = queue.removeFirst()
        queue.deficit -= entry.bytes
        bulkBytes -= entry.bytes
        if queue.first == nil {
          active.removeFirst()
          lanes[producer] = nil
        } else {
          lanes[producer] = queue
        }
        return (entry.item, .bulk(producer))
      }
      queue.credited = false
      lanes[producer] = queue
      active.removeFirst()
      active.append(producer)
    }
    return nil
  }

  /// Removes and returns the queued control frames, in order (a link about to close sends them and nothing else).
  public mutating func removeControl() -> [Item] {
    let items = control.elements.map(\.item)
    control.removeAll()
    controlBytes = 0
    return items
  }

  /// Empties the scheduler (the link closed) and returns what was queued, control first, then each bulk lane in
  /// round-robin order with its frames in order.
  public mutating func removeAll() -> [(item: Item, lane: Lane)] {
    var items: [(item: Item, lane: Lane)] = control.elements.map { ($0.item, .control) }
    for producer in active {
      guard let queue = lanes[producer] else { continue }
      items += queue.entries.elements.map { ($0.item, .bulk(producer)) }
    }
    self = LinkScheduler(limits: limits)
    return items
  }
}

extension LinkScheduler: Sendable where Item: Sendable {}
extension LinkScheduler.Entry: Sendable where Item: Sendable {}
extension LinkScheduler.BulkLane: Sendable where Item: Sendable {}
