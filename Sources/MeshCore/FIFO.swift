/// A first-in, first-out queue with amortised O(1) operations: removal advances a head index, and the consumed
/// prefix is dropped once it is at least half of the storage. The link scheduler's lanes, the simulator's queues and
/// the chat feature's batches use it.
public struct FIFO<Element> {
  private var storage: [Element] = []
  private var head = 0

  public init() {}

  public var isEmpty: Bool { head == storage.count }
  public var count: Int { storage.count - head }
  /// The element ``removeFirst()`` returns next.
  public var first: Element? { head < storage.count ? storage[head] : nil }
  /// The queued elements, oldest first.
  public var elements: ArraySlice<Element> { storage[head...] }

  public mutating func append(_ element: Element) { storage.append(element) }

  /// Changes the newest queued element; false when the queue is empty.
  public mutating func updateLast(_ change: (inout Element) -> Void) -> Bool {
    guard !isEmpty else { return false }
    change(&storage[storage.count - 1])
    return true
  }

  public mutating func removeFirst() -> Element? {
    guard head < storage.count else { return nil }
    let element = storage[head]
    head += 1
    if head == storage.count {
      storage.removeAll(keepingCapacity: true)
      head = 0
    } else if head >= 32 && head * 2 >= storage.count {
      storage.removeFirst(head)
      head = 0
    }
    return element
  }

  public mutating func removeAll() {
    storage.removeAll()
    head = 0
  }
}

extension FIFO: Sendable where Element: Sendable {}
