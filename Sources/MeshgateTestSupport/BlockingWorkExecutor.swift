import Foundation
import Synchronization

/// Threads of their own for integration tests' blocking work.
///
/// The helpers in this module block the thread that calls them: HTTP requests, WebSocket reads, `eventually`'s
/// pauses, waits for a process. Called from an async test, that thread is one of Swift's shared pool, which has one
/// thread per core (two on the test machines). A few integration tests waiting on sockets held the whole pool, and
/// every other suite of the run waited for a thread: the beacon and in-process node tests, whose own work takes a
/// second, passed after 37–75 s against a 60 s limit, and failed in some runs. ``withNodes(count:arguments:perNodeArguments:environment:names:dataDirectories:seeds:linked:startTimeout:isolation:_:)``
/// runs its body on these threads instead (a task-executor preference): blocking there holds one of them, and the
/// shared pool stays free for everything else.
public final class BlockingWorkExecutor: TaskExecutor {
  /// Four: twice the shared pool, so integration tests get about the same share of the machine as before (more
  /// would start more nodes at once on two cores), without holding anyone else's threads.
  public static let shared = BlockingWorkExecutor(threads: 4)

  private let jobs = Mutex<[UnownedJob]>([])
  private let ready = DispatchSemaphore(value: 0)

  init(threads: Int) {
    for index in 0..<threads {
      let thread = Thread { [self] in serve() }
      thread.name = "meshgate-test-blocking-\(index)"
      thread.start()
    }
  }

  public func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    jobs.withLock { $0.append(job) }
    ready.signal()
  }

  private func serve() {
    // Named for gdb and perf (a thread started from a pool thread inherits the pool's name otherwise).
    try? "mg-test-block".write(toFile: "/proc/thread-self/comm", atomically: false, encoding: .utf8)
    while true {
      ready.wait()
      guard let job = jobs.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) else { continue }
      job.runSynchronously(on: asUnownedTaskExecutor())
    }
  }
}
