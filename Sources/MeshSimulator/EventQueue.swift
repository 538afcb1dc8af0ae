/// A min-heap of timed events. Events at the same time come out in the order they were scheduled, which keeps a
/// simulation run deterministic and keeps frames on one connection in order.
struct EventQueue<Event> {
  struct Entry {
    var time: UInt64
    var sequence: UInt64
    var event: Event

    func precedes(_ other: Entry) -> Bool {
      time < other.time || (time == other.time && sequence < other.sequence)
    }
  }

  private var heap: [Entry] = []
  private var nextSequence: UInt64 = 0

  var isEmpty: Bool { heap.isEmpty }
  var count: Int { heap.count }
  /// The time of the earliest event.
  var nextTime: UInt64? { heap.first?.time }

  mutating func schedule(_ event: Event, at time: UInt64) {
    heap.append(Entry(time: time, sequence: nextSequence, event: event))
    nextSequence += 1
    var child = heap.count - 1
    while child > 0 {
      let parent = (child - 1) / 2
      guard heap[child].precedes(heap[parent]) else { break }
      heap.swapAt(child, parent)
      child = parent
    }
  }

  mutating func pop() -> Entry? {
    guard !heap.isEmpty else { return nil }
    if heap.count == 1 { return heap.removeLast() }
    let first = heap[0]
    heap[0] = heap.removeLast()
    var parent = 0
    while true {
      let left = 2 * parent + 1
      guard left < heap.count else { break }
      var smallest = left
      if left + 1 < heap.count && heap[left + 1].precedes(heap[left]) { smallest = left + 1 }
      guard heap[smallest].precedes(heap[parent]) else { break }
      heap.swapAt(smallest, parent)
      parent = smallest
    }
    return first
  }
}
