/// Routes libwebsockets' own log lines into the structured logger (component `lws`).
///
/// Repeated lines are rate-limited: the same text is logged at most once per ``quietSeconds``, and the next time it
/// is logged it carries how many copies were suppressed. lws's `accept: errno 24` (out of file descriptors) also
/// triggers ``AcceptGuard/acceptFailed()``, which stops lws from spinning on the listening socket.
internal import CLibWebSockets
import Glibc
import Logging
import Synchronization

enum LWSLogBridge {
  private static let installed = Atomic<Bool>(false)
  /// Seconds during which a repeated line is suppressed.
  static let quietSeconds: UInt64 = 10

  private struct Seen {
    var loggedAt: UInt64
    var suppressed: Int
  }
  private static let recent = Mutex<[String: Seen]>([:])

  /// Installs the process-wide lws log hook once; errors and warnings only (lws is chatty below that).
  static func install() {
    guard !installed.exchange(true, ordering: .acquiringAndReleasing) else { return }
    let levels = LLL_ERR | LLL_WARN
    lws_set_log_level(levels) { level, line in
      guard let line else { return }
      var text = String(cString: line)
      while text.last == "\n" || text.last == " " { text.removeLast() }
      LWSLogBridge.received(text, isError: level & LLL_ERR != 0)
    }
  }

  static func received(_ text: String, isError: Bool) {
    let outOfDescriptors = text == "accept: errno \(EMFILE)" || text == "accept: errno \(ENFILE)"
    if outOfDescriptors { AcceptGuard.acceptFailed() }
    guard let suppressed = admit(text) else { return }
    let logger = Logger(component: "lws")
    if outOfDescriptors {
      logger.error(
        "Out of file descriptors: pending connections were closed. Raise the open-file limit (ulimit -n) or lower "
          + "--max-connections.", ["lws.message": text, "lws.repeats.suppressed": suppressed])
    } else if isError {
      logger.warning("libwebsockets reported an error.", ["lws.message": text, "lws.repeats.suppressed": suppressed])
    } else {
      logger.debug("libwebsockets warning.", ["lws.message": text, "lws.repeats.suppressed": suppressed])
    }
  }

  /// nil when `text` was logged less than ``quietSeconds`` ago (it is counted); else the copies suppressed since.
  private static func admit(_ text: String) -> Int? {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    let seconds = UInt64(now.tv_sec)
    return recent.withLock { recent -> Int? in
      if var seen = recent[text], seconds < seen.loggedAt + quietSeconds {
        seen.suppressed += 1
        recent[text] = seen
        return nil
      }
      let suppressed = recent[text]?.suppressed ?? 0
      if recent.count > 256 { recent.removeAll(keepingCapacity: true) }
      recent[text] = Seen(loggedAt: seconds, suppressed: 0)
      return suppressed
    }
  }
}
