/// The one thread that services the lws context, and the work handed to it: a `SerialExecutor`, an inbox other
/// threads post to, the timers on lws's timer list, and the ids of what the context serves.
///
/// Threading: lws is single-threaded (`LWS_MAX_SMP` is 1 in Debian's build). Every `lws_*` call except
/// `lws_cancel_service` happens on the thread that runs ``serviceUntilStopped()``. Actors whose executor is this loop
/// run their code on that thread. Other threads enqueue jobs under a `Mutex` and wake the loop with
/// `lws_cancel_service`, which lws documents as safe from any thread; the loop drains them on
/// `LWS_CALLBACK_EVENT_WAIT_CANCELLED` and after every service pass. What the service thread enqueues itself runs when
/// the current service pass returns, without a wake-up.
internal import CLibWebSockets
import Glibc
import Synchronization

final class ServiceLoop: @unchecked Sendable {
  // @unchecked: `context` is written once in `init` (lws only touches it on the service thread, apart from the
  // thread-safe `lws_cancel_service`, which `contextAlive` and `wakersInside` order against its destruction). `inbox`
  // is guarded by its Mutex; `loopThread`, `stopRequested` and the counters are atomics; every other `var` is confined
  // to the service thread (checked with `assertInLoop()`).

  let context: OpaquePointer

  private struct Inbox: ~Copyable {
    var open = true
    var jobs: [UnownedJob] = []
    var actions: [@Sendable () -> Void] = []
  }
  private let inbox = Mutex(Inbox())
  /// Whether ``wakeUp()`` may still call `lws_cancel_service` (false once the context is about to be destroyed).
  private let contextAlive = Atomic<Bool>(true)
  /// Threads inside ``wakeUp()`` now; ``close()`` waits for none before the context is destroyed.
  private let wakersInside = Atomic<Int>(0)
  private let loopThread = Atomic<UInt>(0)
  /// `lws_cancel_service` calls made to wake the loop (``ServerStatistics/loopWakeUps``).
  private let wakeUpCount = Atomic<Int>(0)
  private let stopRequested = Atomic<Bool>(false)
  /// Whether work the service thread queues for itself must wake the loop: true inside an lws callback that may run
  /// before lws polls (see `serverCallback`). Service thread only.
  private var wakeForOwnWork = false
  /// Passes of the service loop (``ServerStatistics/servicePasses``).
  private(set) var servicePasses = 0
  /// Timers on lws's timer list now running (``repeating(every:_:)``).
  var timers: [LoopTimer] = []
  private var nextID: UInt64 = 1

  init(context: OpaquePointer) {
    self.context = context
  }

  /// Whether the caller runs on the service thread.
  var inLoop: Bool {
    let owner = loopThread.load(ordering: .acquiring)
    return owner != 0 && owner == UInt(pthread_self())
  }

  func assertInLoop(_ function: StaticString = #function) {
    precondition(inLoop, "\(function) must run on the lws service thread")
  }

  /// `lws_cancel_service` calls made so far.
  var wakeUps: Int { wakeUpCount.load(ordering: .relaxed) }

  /// A new id for a request or a socket: one counter for the whole context, so a socket id names one connection
  /// whichever part of the server owns it. Service thread only.
  func allocateID() -> UInt64 {
    defer { nextID += 1 }
    return nextID
  }

  /// Runs `body` with ``wakeForOwnWork`` set to `wake`, then puts it back (callbacks and timers nest). Service thread
  /// only.
  func withWakeForOwnWork<T>(_ wake: Bool, _ body: () throws -> T) rethrows -> T {
    let previous = wakeForOwnWork
    wakeForOwnWork = wake
    defer { wakeForOwnWork = previous }
    return try body()
  }

  /// Services the context on the calling thread until ``stop()``; `started` runs first, on this thread.
  func serviceUntilStopped(_ started: () -> Void) {
    loopThread.store(UInt(pthread_self()), ordering: .releasing)
    started()
    while !stopRequested.load(ordering: .acquiring) {
      if lws_service(context, 0) < 0 { break }
      servicePasses += 1
      runDueTimers()
      // What this thread queued during the pass (a handler starting a task) runs now, before the next poll: no
      // `lws_cancel_service` round trip (an eventfd write, a poll return and a read) for work that never left it.
      drainInbox()
    }
    // Run what was queued while stopping, then close the inbox so nobody wakes a destroyed context.
    drainInbox()
    for timer in timers { timer.cancel() }
    inbox.withLock { $0.open = false }
    // No wake-up may touch the context from here on: refuse new ones, wait for any already inside (a few µs).
    contextAlive.store(false, ordering: .sequentiallyConsistent)
    while wakersInside.load(ordering: .sequentiallyConsistent) != 0 { sched_yield() }
  }

  /// Ends ``serviceUntilStopped(_:)`` after the current pass; safe from any thread.
  func stop() {
    stopRequested.store(true, ordering: .releasing)
    wakeUp()
  }

  /// Ends ``serviceUntilStopped(_:)`` after the current pass, from the service thread (no wake-up needed).
  func stopAfterThisPass() {
    stopRequested.store(true, ordering: .releasing)
  }

  /// Runs `action` on the service thread; safe from any thread.
  func execute(_ action: @escaping @Sendable () -> Void) {
    let fromLoop = inLoop && !wakeForOwnWork
    let wake = inbox.withLock { inbox -> Bool in
      guard inbox.open else { return false }
      inbox.actions.append(action)
      return !fromLoop && inbox.actions.count + inbox.jobs.count == 1
    }
    if wake { wakeUp() }
  }

  private func wakeUp() {
    // lws_cancel_service is the one lws call documented as safe from any thread. It runs outside the inbox lock (a
    // write to lws's event pipe, during which the service thread would otherwise block on the lock to drain the
    // inbox); the two counters order it against the context's destruction instead: the loop clears `contextAlive`,
    // then waits until no thread is inside. Both sides use sequentially consistent operations, so a waker that still
    // sees the context alive is seen inside by the loop.
    wakersInside.add(1, ordering: .sequentiallyConsistent)
    defer { wakersInside.subtract(1, ordering: .sequentiallyConsistent) }
    wakeUpCount.add(1, ordering: .relaxed)
    if contextAlive.load(ordering: .sequentiallyConsistent) { lws_cancel_service(context) }
  }

  /// Runs everything queued, including what the queued work queues in turn.
  func drainInbox() {
    while true {
      let (jobs, actions) = inbox.withLock { inbox -> ([UnownedJob], [@Sendable () -> Void]) in
        defer {
          inbox.jobs.removeAll(keepingCapacity: true)
          inbox.actions.removeAll(keepingCapacity: true)
        }
        return (inbox.jobs, inbox.actions)
      }
      if jobs.isEmpty && actions.isEmpty { return }
      for action in actions { action() }
      for job in jobs { job.runSynchronously(on: asUnownedSerialExecutor()) }
    }
  }
}

extension ServiceLoop: SerialExecutor {
  func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    let fromLoop = inLoop && !wakeForOwnWork
    let wake = inbox.withLock { inbox -> Bool in
      inbox.jobs.append(job)
      return !fromLoop && inbox.open && inbox.actions.count + inbox.jobs.count == 1
    }
    // Only the empty → non-empty transition wakes the loop: it swaps the whole inbox out. What the service thread
    // enqueues while lws serves sockets, or while the loop drains, needs no wake-up: the loop drains after every pass,
    // before the next poll (a job another thread adds meanwhile finds the inbox non-empty and is drained with it).
    // Inside a callback lws may make from its timers, before the poll, it wakes the loop (`wakeForOwnWork`).
    if wake { wakeUp() }
  }

  func asUnownedSerialExecutor() -> UnownedSerialExecutor {
    UnownedSerialExecutor(ordinary: self)
  }

  func checkIsolated() {
    precondition(inLoop, "Expected to be on the lws service thread")
  }
}
