import MeshCore
import Testing

private typealias Scheduler = LinkScheduler<String>

/// Dequeues everything, returning the items in wire order.
private func drain(_ scheduler: inout Scheduler) -> [String] {
  var out: [String] = []
  while let next = scheduler.dequeue() { out.append(next.item) }
  return out
}

@Suite struct LinkSchedulerTests {
  @Test func controlFramesAlwaysGoFirstInOrder() {
    var scheduler = Scheduler()
    scheduler.enqueue("bulk1", bytes: 1000, lane: .bulk("peer:a"))
    scheduler.enqueue("hello", bytes: 50, lane: .control)
    scheduler.enqueue("bulk2", bytes: 1000, lane: .bulk("peer:a"))
    scheduler.enqueue("heartbeat", bytes: 20, lane: .control)
    #expect(scheduler.dequeue()?.item == "hello")
    #expect(scheduler.dequeue()?.item == "heartbeat")
    scheduler.enqueue("ack", bytes: 10, lane: .control)
    #expect(scheduler.dequeue()?.item == "ack")
    #expect(drain(&scheduler) == ["bulk1", "bulk2"])
    #expect(scheduler.isEmpty)
    #expect(scheduler.bulkBytes == 0 && scheduler.controlBytes == 0)
  }

  @Test func aSmallMessageWaitsForAtMostOneLargeFrameOfABurstingProducer() {
    var scheduler = Scheduler()
    for index in 0..<24 { scheduler.enqueue("alice\(index)", bytes: 1 << 20, lane: .bulk("peer:alice")) }
    // The first large frame goes; carol's small message queued meanwhile goes next, not after 23 more.
    #expect(scheduler.dequeue()?.item == "alice0")
    scheduler.enqueue("carol0", bytes: 200, lane: .bulk("peer:carol"))
    #expect(scheduler.dequeue()?.item == "carol0")
    // Even queued behind a large frame that has not earned its turn yet, a small one goes first.
    scheduler.enqueue("carol1", bytes: 200, lane: .bulk("peer:carol"))
    scheduler.enqueue("carol2", bytes: 200, lane: .bulk("peer:carol"))
    let next = drain(&scheduler)
    #expect(Array(next.prefix(2)) == ["carol1", "carol2"])
    #expect(next.filter { $0.hasPrefix("alice") } == (1..<24).map { "alice\($0)" })
  }

  @Test func bulkLanesShareTheLinkByBytes() {
    var scheduler = Scheduler(limits: .init(quantum: 1000))
    // Lane a sends 1000-byte frames, lane b 250-byte frames: per turn, one of a's and four of b's.
    for index in 0..<4 { scheduler.enqueue("a\(index)", bytes: 1000, lane: .bulk("a")) }
    for index in 0..<16 { scheduler.enqueue("b\(index)", bytes: 250, lane: .bulk("b")) }
    let order = drain(&scheduler)
    #expect(Array(order.prefix(10)) == ["a0", "b0", "b1", "b2", "b3", "a1", "b4", "b5", "b6", "b7"])
    #expect(order.count == 20)
  }

  @Test func framesLargerThanTheQuantumStillGoOut() {
    var scheduler = Scheduler(limits: .init(quantum: 10))
    scheduler.enqueue("huge", bytes: 10_000, lane: .bulk("x"))
    #expect(scheduler.dequeue()?.item == "huge")
    #expect(scheduler.dequeue() == nil)
  }

  @Test func eachLaneKeepsItsOwnOrder() {
    var scheduler = Scheduler(limits: .init(quantum: 100))
    for index in 0..<50 {
      scheduler.enqueue("a\(index)", bytes: Int.random(in: 1...300), lane: .bulk("a"))
      scheduler.enqueue("b\(index)", bytes: Int.random(in: 1...300), lane: .bulk("b"))
      if index % 7 == 0 { scheduler.enqueue("c\(index)", bytes: 10, lane: .control) }
    }
    let order = drain(&scheduler)
    #expect(order.filter { $0.hasPrefix("a") } == (0..<50).map { "a\($0)" })
    #expect(order.filter { $0.hasPrefix("b") } == (0..<50).map { "b\($0)" })
    #expect(order.prefix(8).allSatisfy { $0.hasPrefix("c") })
  }

  @Test func roomIsBoundedPerLaneAndPerLink() {
    var scheduler = Scheduler(limits: .init(laneBytes: 3000, linkBytes: 5000, quantum: 1000))
    #expect(scheduler.hasRoom(for: "a"))
    scheduler.enqueue("a0", bytes: 2000, lane: .bulk("a"))
    #expect(scheduler.hasRoom(for: "a"))
    scheduler.enqueue("a1", bytes: 2000, lane: .bulk("a"))
    #expect(!scheduler.hasRoom(for: "a"))
    #expect(scheduler.hasRoom(for: "b"))
    scheduler.enqueue("b0", bytes: 1500, lane: .bulk("b"))
    #expect(!scheduler.hasRoom(for: "b"))  // the link holds 5500 of 5000
    #expect(!scheduler.hasRoom(for: "c"))
    // Control never counts against bulk room.
    scheduler.enqueue("ctl", bytes: 100_000, lane: .control)
    #expect(scheduler.queuedBytes(of: "a") == 4000)
    _ = scheduler.dequeue()  // ctl
    _ = scheduler.dequeue()  // a0 (lane a's turn)
    #expect(scheduler.hasRoom(for: "a"))
    #expect(scheduler.hasRoom(for: "c"))
  }

  @Test func removeAllReturnsEverythingQueuedInLaneOrder() {
    var scheduler = Scheduler()
    scheduler.enqueue("a0", bytes: 10, lane: .bulk("a"))
    scheduler.enqueue("ctl", bytes: 10, lane: .control)
    scheduler.enqueue("b0", bytes: 10, lane: .bulk("b"))
    scheduler.enqueue("a1", bytes: 10, lane: .bulk("a"))
    let items = scheduler.removeAll()
    #expect(items.map(\.item) == ["ctl", "a0", "a1", "b0"])
    #expect(items.map(\.lane) == [.control, .bulk("a"), .bulk("a"), .bulk("b")])
    #expect(scheduler.isEmpty && scheduler.count == 0 && scheduler.bulkBytes == 0)
  }
}

extension LinkSchedulerTests {
  @Test func removeControlLeavesBulkQueued() {
    var scheduler = Scheduler()
    scheduler.enqueue("a0", bytes: 10, lane: .bulk("a"))
    scheduler.enqueue("goodbye", bytes: 10, lane: .control)
    #expect(scheduler.removeControl() == ["goodbye"])
    #expect(scheduler.controlBytes == 0)
    #expect(drain(&scheduler) == ["a0"])
  }
}
