/// Repeating timers on libwebsockets' own timer list (`lws_sul`), for work that belongs on the service thread.
///
/// Layer 2 (thin safe wrapper). lws keeps its scheduled events in one sorted list and bounds its poll wait by the
/// earliest, so a timer here costs nothing between firings and its action runs on the service thread between polls:
/// no dispatch timer, no other thread woken, no `lws_cancel_service` round trip (a `Task.sleep` loop that then hops
/// to the service thread needs all three, ten times a second for the mesh tick).
internal import CLibWebSockets
import Glibc

/// A repeating action on the service thread; made by ``Server/repeating(every:_:)``, stopped by ``cancel()``.
///
/// Service thread only (lws's timer list is not thread-safe). The ``ServiceLoop`` keeps every running timer, and
/// cancels the ones left when it ends, before the server destroys the lws context.
public final class LoopTimer {
  /// The lws list entry, first member of a `clws_sul_t` whose `owner` points back here (unretained: the loop holds
  /// this object while the entry is scheduled).
  fileprivate let entry: UnsafeMutablePointer<clws_sul_t>
  fileprivate let interval: lws_usec_t
  fileprivate let action: @Sendable () -> Void
  fileprivate unowned(unsafe) let loop: ServiceLoop
  /// False once cancelled (by the owner, or by the server stopping).
  private(set) var isRunning = true

  fileprivate init(loop: ServiceLoop, interval: Duration, action: @escaping @Sendable () -> Void) {
    let (seconds, attoseconds) = interval.components
    self.interval = max(1, lws_usec_t(seconds) * 1_000_000 + lws_usec_t(attoseconds / 1_000_000_000_000))
    self.action = action
    self.loop = loop
    entry = .allocate(capacity: 1)
    entry.initialize(to: clws_sul_t())
    entry.pointee.owner = Unmanaged.passUnretained(self).toOpaque()
  }

  deinit {
    entry.deinitialize(count: 1)
    entry.deallocate()
  }

  /// When the action is next due (`lws_now_usecs()` time).
  fileprivate var dueAt: lws_usec_t = 0

  /// Makes the action due one interval from now, and puts the entry on lws's list a little after that.
  ///
  /// lws polls for the time left to its next entry truncated to whole milliseconds, then polls again with no wait
  /// until the rest has run out: an entry due exactly when the action is would leave up to a millisecond of such
  /// polls before every firing (over every socket, ten times a second for the mesh tick). Entered one millisecond
  /// late, the entry makes lws's poll end at or after `dueAt`, and the loop fires the action after that poll
  /// returns (``ServiceLoop/runDueTimers()``). So the entry only bounds lws's wait; it fires itself only if lws serves
  /// it before the loop gets to it.
  fileprivate func schedule() {
    dueAt = lws_now_usecs() + interval
    lws_sul_schedule(loop.context, 0, sulPointer, loopTimerFired, interval + Self.grace)
  }

  private static let grace: lws_usec_t = 1000

  fileprivate var sulPointer: UnsafeMutablePointer<lws_sorted_usec_list_t> {
    UnsafeMutableRawPointer(entry).assumingMemoryBound(to: lws_sorted_usec_list_t.self)
  }

  /// Stops the timer: its action does not run again. Service thread only.
  public func cancel() {
    loop.assertInLoop()
    guard isRunning else { return }
    isRunning = false
    lws_sul_cancel(sulPointer)
    loop.timers.removeAll { $0 === self }
  }

  /// Runs the action and makes it due again one interval later. Called when it is due: by ``ServiceLoop/runDueTimers()``,
  /// or by lws for the entry, which sits after `dueAt`.
  ///
  /// `beforePoll`: called by lws from its timer list, which it serves before it polls. What the action queues for the
  /// service thread must then wake the loop, or it would wait for the next network event (as for lws's timer
  /// callbacks, see `serverCallback`); from the loop it runs in the drain that follows.
  fileprivate func fire(beforePoll: Bool) {
    guard isRunning else { return }
    loop.withWakeForOwnWork(beforePoll, action)
    // Not if the action cancelled the timer.
    if isRunning { schedule() }
  }
}

/// The C callback lws calls with the entry's `lws_sorted_usec_list_t`, which is the `clws_sul_t`'s first member.
private func loopTimerFired(_ sul: UnsafeMutablePointer<lws_sorted_usec_list_t>?) {
  guard let sul else { return }
  let entry = UnsafeMutableRawPointer(sul).assumingMemoryBound(to: clws_sul_t.self)
  guard let owner = entry.pointee.owner else { return }
  Unmanaged<LoopTimer>.fromOpaque(owner).takeUnretainedValue().fire(beforePoll: true)
}

extension ServiceLoop {
  /// Runs `action` on the service thread every `interval` (the first time one interval from now) until the timer is
  /// cancelled or the loop ends. Service thread only.
  func repeating(every interval: Duration, _ action: @escaping @Sendable () -> Void) -> LoopTimer {
    assertInLoop()
    let timer = LoopTimer(loop: self, interval: interval, action: action)
    timers.append(timer)
    timer.schedule()
    return timer
  }

  /// Fires the timers that are due; the loop calls it after every service pass (see `LoopTimer.schedule()`).
  func runDueTimers() {
    guard !timers.isEmpty else { return }
    let now = lws_now_usecs()
    for timer in timers where now >= timer.dueAt { timer.fire(beforePoll: false) }
  }
}
