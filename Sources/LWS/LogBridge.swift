/// Routes libwebsockets' own log lines into the structured logger (component `lws`).
internal import CLibWebSockets
import Logging
import Synchronization

enum LWSLogBridge {
  private static let installed = Atomic<Bool>(false)

  /// Installs the process-wide lws log hook once; errors and warnings only (lws is chatty below that).
  static func install() {
    guard !installed.exchange(true, ordering: .acquiringAndReleasing) else { return }
    let levels = LLL_ERR | LLL_WARN
    lws_set_log_level(levels) { level, line in
      guard let line else { return }
      var text = String(cString: line)
      while text.last == "\n" || text.last == " " { text.removeLast() }
      let logger = Logger(component: "lws")
      if level & LLL_ERR != 0 {
        logger.warning("libwebsockets reported an error.", ["lws.message": text])
      } else {
        logger.debug("libwebsockets warning.", ["lws.message": text])
      }
    }
  }
}
