import MeshCore

/// The one ordered async queue of the node: work taken one turn at a time, in order, by one task on the node's
/// executor.
///
/// Layer 4 (node runtime). Producers change the queue (``enqueue(node:_:)``); the first change that leaves work starts
/// a task, after the current pass of the service loop, that takes the queue's next turn and awaits its handler, turn
/// after turn, until the queue is empty; the next change starts another. So what the handler awaits (a store write, a
/// sleep before a retry) never lets a later turn overtake an earlier one, and no two turns run at once.
///
/// What a turn is comes from the queue (``SerialQueue``): the oldest item (``FIFO``: the chat feature's batches) or
/// the publish queue's choice of batches for one store transaction (``PublishQueue``). The queue also carries the
/// bound: its owner reads it (``queue``) after each change to hold or refuse producers, and a handler may change it
/// (a failed write puts its batches back).
final class SerialWork<Queue: SerialQueue> {
  private(set) var queue: Queue
  /// A task is draining the queue.
  private(set) var running = false
  private let handler: (Queue.Turn, isolated Node) async -> Void

  /// A queue drained by `handler`, which gets each turn on the node's executor. It reaches its owner through the
  /// node (it must not capture it: the owner holds this work).
  init(_ queue: Queue, handler: @escaping (Queue.Turn, isolated Node) async -> Void) {
    self.queue = queue
    self.handler = handler
  }

  /// Changes the queue (appends work) and starts draining it if no task does.
  func enqueue(node: isolated Node, _ change: (inout Queue) -> Void) {
    change(&queue)
    guard !running, !queue.isEmpty else { return }
    running = true
    // After the current service-loop pass, not at once (`Task.immediate`): what the same pass enqueues (several mesh
    // frames read together) is there for the first turn to take.
    Task { await self.drain(node: node) }
  }

  /// Changes the queue without starting a drain (a handler putting work back, during its turn).
  func update(_ change: (inout Queue) -> Void) {
    change(&queue)
  }

  private func drain(node: isolated Node) async {
    while !queue.isEmpty {
      let turn = queue.next()
      await handler(turn, node)
    }
    running = false
  }
}

@available(*, unavailable) extension SerialWork: Sendable {}

/// What ``SerialWork`` drains: whether work waits, and the next turn of it.
protocol SerialQueue {
  associatedtype Turn
  var isEmpty: Bool { get }
  /// Removes and returns the next turn's work; called only when the queue is not empty.
  mutating func next() -> Turn
}

/// Items taken one at a time, oldest first (the chat feature's batches).
///
/// Unbounded by itself: its producers are (the chat feature's batches come from mesh frames, read no faster than the
/// links deliver them, and from requests, one batch per request).
extension FIFO: SerialQueue {
  mutating func next() -> Element { removeFirst()! }
}
