internal import CSQLite
import Dispatch
import Synchronization

/// Checkpoints a database's WAL on a connection and a thread of its own, so that no commit waits for a checkpoint.
///
/// SQLite's automatic checkpoint runs inside the commit that crosses the WAL threshold: that commit (and every write
/// queued behind it on the database's one writer queue) waits while pages are copied into the database file and
/// both files are synced, several milliseconds on a busy disk, every few hundred commits. Here the writer's WAL hook
/// only asks for a checkpoint once the WAL holds ``pagesThreshold`` pages, and a `PASSIVE` checkpoint runs on the
/// checkpointer's own serial queue, at most one per ``minimumInterval``: it copies what no reader still needs, never
/// blocks the writer, and the next writer after a complete checkpoint starts the WAL from the beginning again.
///
/// Durability is unchanged: a commit is in the WAL file (the OS cache) when it returns, as before; the checkpoint
/// only moves pages into the database file.
///
/// Under writes that never pause, no checkpoint finishes (commits land while it copies), and SQLite syncs the database
/// file only in a checkpoint that finishes, before the WAL restarts: the pages copied since the last restart would all
/// be written to the disk in that one sync, inside the writer's own checkpoint (16–19 ms on this project's test
/// disk, every ~4 s at 5 000 job writes a second). So a background checkpoint that copied pages since the last sync
/// syncs the database file itself, off the commit path, and the writer's final sync has little left to write. That
/// sync is only earlier, never instead: SQLite still syncs before it lets the WAL start again.
final class Checkpointer: Sendable {
  /// WAL pages after which a checkpoint is asked for (SQLite's default automatic threshold).
  static let pagesThreshold: Int32 = 1000
  /// WAL pages after which the writer checkpoints itself, once: under writes that never pause, background
  /// checkpoints copy pages but never finish before the next commit, and only a checkpoint with no commit running
  /// beside it lets the WAL start again from the beginning. This keeps the WAL bounded (about 128 MiB) at the cost of
  /// one inline checkpoint per this many pages, instead of one per ``pagesThreshold``. The inline checkpoint (its copy
  /// and two syncs) stalls the commit it runs in and every write queued behind it, milliseconds on a disk, so
  /// the mark is well above what a burst of writes between two pauses reaches: at 8 000 pages a 24 MiB burst of
  /// events crossed it in some runs and doubled the p99 of small events beside it (BackpressureTests, on disk).
  /// Between bursts the background checkpoints catch up and the next commit starts the WAL again anyway. While a
  /// background checkpoint runs, the writer's attempt finds the checkpoint lock taken and returns at once
  /// (`SQLITE_BUSY`; `PASSIVE` never waits), and the next commit tries again: a commit never waits for a background
  /// checkpoint's syncs.
  static let writerPagesThreshold: Int32 = 32 * pagesThreshold

  private let queue = DispatchQueue(label: "meshgate.store.checkpoint")
  /// The checkpointer's connection. Only touched on `queue`, which is serial.
  private nonisolated(unsafe) let connection: Connection
  /// A checkpoint is queued and has not started yet (asks while one waits are folded into it).
  private let pending = Atomic<Bool>(false)
  private let completed = Atomic<Int>(0)
  /// When the last checkpoint started, in `DispatchTime` nanoseconds.
  private let lastStart = Atomic<UInt64>(0)
  /// The shortest time between the starts of two background checkpoints. Under writes that never pause the WAL does
  /// not start again, so every commit past ``pagesThreshold`` asks for a checkpoint: unbounded, they ran back to
  /// back, each syncing the WAL while the writer appended to it (`strace`: an `fdatasync` of the WAL every 2–3 ms
  /// beside 5 000 job writes a second), and that disk traffic set the writes' p99. Each checkpoint copies everything
  /// committed before it starts, so ten a second still keep up; an ask inside the interval waits for its end, so the
  /// last commit before a pause is still checkpointed and the next write can start the WAL again.
  static let minimumInterval: UInt64 = 100_000_000

  /// Frames copied into the database file since it was last synced, as the last background checkpoint left them.
  /// Only touched on `queue`.
  private nonisolated(unsafe) var copiedAtLastSync = 0
  private let databaseSyncs = Atomic<Int>(0)
  /// Checkpoints the writer ran itself (past ``writerPagesThreshold``), counted when they could run.
  fileprivate let writerCheckpoints = Atomic<Int>(0)

  /// Checkpoints run so far.
  var completedCount: Int { completed.load(ordering: .relaxed) }
  /// Times a background checkpoint synced the database file itself, having copied pages since the last sync (tests).
  var databaseSyncCount: Int { databaseSyncs.load(ordering: .relaxed) }
  /// Checkpoints the writer ran itself (tests).
  var writerCheckpointCount: Int { writerCheckpoints.load(ordering: .relaxed) }

  /// Opens the checkpointer's connection to the database at `path` (already created and migrated).
  init(path: String) throws(SQLiteError) {
    connection = try Connection(path: path)
  }

  /// Installs the WAL hook on `writer`, the connection that commits. `self` must outlive the writer's use.
  func watch(_ writer: Connection) {
    writer.setWALHook(Unmanaged.passUnretained(self).toOpaque()) { context, handle, _, pages in
      guard pages >= Checkpointer.pagesThreshold, let context else { return SQLITE_OK }
      let checkpointer = Unmanaged<Checkpointer>.fromOpaque(context).takeUnretainedValue()
      if pages >= Checkpointer.writerPagesThreshold {
        // Most pages are copied and synced already by the background checkpoints: this copies the rest and lets the
        // next commit restart the WAL. Busy (a background one runs): the next commit tries again.
        if let handle, Connection.checkpointPassive(handle) != nil {
          checkpointer.writerCheckpoints.add(1, ordering: .relaxed)
        }
      } else {
        checkpointer.request()
      }
      return SQLITE_OK
    }
  }

  /// Queues one checkpoint unless one is already waiting to start.
  func request() {
    guard pending.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else {
      return
    }
    let now = DispatchTime.now().uptimeNanoseconds
    let earliest = lastStart.load(ordering: .relaxed) &+ Self.minimumInterval
    let start = DispatchTime(uptimeNanoseconds: max(now, earliest))
    queue.asyncAfter(deadline: start) {
      self.pending.store(false, ordering: .releasing)
      self.lastStart.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
      self.checkpoint()
      self.completed.add(1, ordering: .relaxed)
    }
  }

  /// Keeps the checkpointer's queue busy until the returned function is called: no background checkpoint starts
  /// meanwhile (tests: a commit must not wait for it).
  func hold() -> @Sendable () -> Void {
    let release = DispatchSemaphore(value: 0)
    queue.async { release.wait() }
    return { release.signal() }
  }

  /// One background checkpoint, on `queue`. `PASSIVE` never waits for readers or the writer; a busy database just
  /// means a later checkpoint does more. Then, if it copied anything since the last sync, the database file is synced
  /// (type comment). SQLite's answer cannot tell whether it synced the file itself: it compares what it copied with
  /// the WAL's end when the checkpoint began, while SQLite syncs only when nothing was committed meanwhile. When it
  /// did, this sync finds little to write.
  private func checkpoint() {
    guard let copied = connection.checkpointPassive(), copied > 0,
      // After the WAL started again, `copied` counts from zero: anything copied differs from the last mark.
      copied != copiedAtLastSync
    else { return }
    if connection.syncDatabaseFile() { databaseSyncs.add(1, ordering: .relaxed) }
    copiedAtLastSync = copied
  }
}
