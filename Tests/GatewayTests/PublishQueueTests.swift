import MeshCore
import Testing

@testable import Gateway

/// The choice of what each event-log transaction takes: per-peer order always, small events for other peers never
/// behind a queue of large ones, large ones never starved, and the queue's byte count (its bound) kept exactly.
struct PublishQueueTests {
  typealias Queue = PublishQueue<Int>

  static func big(_ peer: String) -> [(peerID: String, type: String, data: JSONValue)] {
    [(peer, "session.data", ["text": .string(String(repeating: "x", count: 1 << 20))])]
  }

  static func small(_ peers: String...) -> [(peerID: String, type: String, data: JSONValue)] {
    peers.map { ($0, "session.data", ["text": "hi"]) }
  }

  /// The waiters of each transaction until the queue is empty.
  static func transactions(_ queue: inout Queue) -> [[Int]] {
    var result: [[Int]] = []
    while !queue.isEmpty { result.append(queue.next().compactMap(\.waiter)) }
    return result
  }

  @Test func aSmallEventForAnotherPeerPassesQueuedLargeOnes() {
    var queue = Queue()
    for index in 0..<5 { queue.append(Self.big("bob"), waiter: index) }
    queue.append(Self.small("dave"), waiter: 5)
    // Small work first, then one large event per transaction; dave's event never waits for bob's five.
    #expect(Self.transactions(&queue) == [[5], [0], [1], [2], [3], [4]])
  }

  @Test func eachPeersEventsKeepTheirOrder() {
    var queue = Queue()
    queue.append(Self.big("bob"), waiter: 0)
    queue.append(Self.small("bob"), waiter: 1)
    queue.append(Self.small("dave"), waiter: 2)
    queue.append(Self.small("dave", "bob"), waiter: 3)  // a fan-out naming bob waits for bob's earlier events
    queue.append(Self.small("erin"), waiter: 4)
    let order = Self.transactions(&queue)
    #expect(order == [[2, 4], [0], [1, 3]])
    let flat = order.flatMap { $0 }
    #expect(flat.firstIndex(of: 0)! < flat.firstIndex(of: 1)!)
    #expect(flat.firstIndex(of: 1)! < flat.firstIndex(of: 3)!)
  }

  /// A fan-out entry (one event naming many recipients) is held back by an earlier event for any one of them.
  @Test func aFanOutEntryWaitsForEachOfItsPeersEarlierEvents() {
    var queue = Queue()
    queue.append(Self.big("bob"), waiter: 0)
    queue.append(
      fanOuts: [EventFanOut(peerIDs: ["dave", "bob"], type: "session.data", data: ["text": "hi"])], waiter: 1)
    queue.append(
      fanOuts: [EventFanOut(peerIDs: ["erin", "frank"], type: "session.data", data: ["text": "hi"])], waiter: 2)
    #expect(Self.transactions(&queue) == [[2], [0], [1]])
  }

  @Test func largeEventsAreNotStarvedBySmallOnes() {
    var queue = Queue()
    queue.append(Self.big("bob"), waiter: 0)
    queue.append(Self.small("dave"), waiter: 1)
    #expect(queue.next().compactMap(\.waiter) == [1])
    // Small events keep coming; the large one still gets the next turn (alone: its budget is spent).
    queue.append(Self.small("dave"), waiter: 2)
    #expect(queue.next().compactMap(\.waiter) == [0])
    #expect(queue.next().compactMap(\.waiter) == [2])
  }

  @Test func aLargeTransactionTakesOneLargeEvent() {
    var queue = Queue()
    queue.append(Self.big("bob"), waiter: 0)
    queue.append(Self.big("carol"), waiter: 1)
    #expect(queue.next().compactMap(\.waiter) == [0])
    #expect(queue.next().compactMap(\.waiter) == [1])
  }

  @Test func countsTheBytesWaiting() {
    var queue = Queue()
    #expect(queue.bytes == 0)
    queue.append(Self.big("bob"), waiter: 0)
    queue.append(Self.small("dave", "erin"), waiter: 1)
    #expect(queue.bytes > 1 << 20 && queue.bytes < (1 << 20) + 1024)
    _ = queue.next()
    #expect(queue.bytes > 1 << 20)
    _ = queue.next()
    #expect(queue.bytes == 0 && queue.isEmpty)
  }
}
