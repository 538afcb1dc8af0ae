import Foundation
import Synchronization

/// Severity of a log line, lowest first.
public enum LogLevel: Int, Sendable, Comparable, CaseIterable, CustomStringConvertible {
  case trace, debug, info, notice, warning, error

  /// Parses `trace|debug|info|notice|warning|error` (and `warn`), case-insensitively.
  public init?(name: String) {
    let name = name.lowercased()
    guard let level = name == "warn" ? .warning : Self.allCases.first(where: { $0.description == name }) else {
      return nil
    }
    self = level
  }

  public var description: String {
    switch self {
    case .trace: "trace"
    case .debug: "debug"
    case .info: "info"
    case .notice: "notice"
    case .warning: "warning"
    case .error: "error"
    }
  }

  public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Where formatted log lines go. The default writes to standard error.
public protocol LogSink: Sendable {
  /// Writes one already formatted line (without the trailing newline).
  func write(_ line: String)
}

/// Writes lines to standard error with one `write(2)` per line, so lines from threads never interleave.
public struct StandardErrorSink: LogSink {
  public init() {}

  public func write(_ line: String) {
    var bytes = Array(line.utf8)
    bytes.append(0x0A)
    bytes.withUnsafeBytes { buffer in
      var offset = 0
      while offset < buffer.count {
        let written = Foundation.write(2, buffer.baseAddress! + offset, buffer.count - offset)
        if written <= 0 { return }
        offset += written
      }
    }
  }
}

/// Process-wide logging configuration: the minimum level and the sink.
///
/// Set once at start-up by the executable; library code only reads it.
public enum LogConfiguration {
  private static let state = Mutex<(level: LogLevel, sink: any LogSink)>((.info, StandardErrorSink()))

  /// The minimum level that is written.
  public static var level: LogLevel {
    get { state.withLock { $0.level } }
    set { state.withLock { $0.level = newValue } }
  }

  /// Replaces the sink (tests capture lines this way).
  public static func setSink(_ sink: any LogSink) {
    state.withLock { $0.sink = sink }
  }

  static func snapshot() -> (level: LogLevel, sink: any LogSink) {
    state.withLock { $0 }
  }
}

/// A structured logger for one component.
///
/// Lines are logfmt: `ts=… level=info component=http msg="Request served." http.status=200`.
/// Metadata keys are dotted (`peer.id`, `ws.connection.id`); never log tokens or payloads.
public struct Logger: Sendable {
  /// The component name printed on every line, e.g. `http`, `store`, `node`.
  public let component: String

  public init(component: String) {
    self.component = component
  }

  /// Whether a line at `level` would be written.
  public func isEnabled(_ level: LogLevel) -> Bool {
    level >= LogConfiguration.level
  }

  public func trace(
    _ message: @autoclosure () -> String, _ metadata: @autoclosure () -> KeyValuePairs<String, Any> = [:]
  ) {
    log(.trace, message(), metadata())
  }

  public func debug(
    _ message: @autoclosure () -> String, _ metadata: @autoclosure () -> KeyValuePairs<String, Any> = [:]
  ) {
    log(.debug, message(), metadata())
  }

  public func info(
    _ message: @autoclosure () -> String, _ metadata: @autoclosure () -> KeyValuePairs<String, Any> = [:]
  ) {
    log(.info, message(), metadata())
  }

  public func notice(
    _ message: @autoclosure () -> String, _ metadata: @autoclosure () -> KeyValuePairs<String, Any> = [:]
  ) {
    log(.notice, message(), metadata())
  }

  public func warning(
    _ message: @autoclosure () -> String, _ metadata: @autoclosure () -> KeyValuePairs<String, Any> = [:]
  ) {
    log(.warning, message(), metadata())
  }

  public func error(
    _ message: @autoclosure () -> String, _ metadata: @autoclosure () -> KeyValuePairs<String, Any> = [:]
  ) {
    log(.error, message(), metadata())
  }

  /// Formats and writes one line when `level` is enabled.
  public func log(_ level: LogLevel, _ message: @autoclosure () -> String, _ metadata: KeyValuePairs<String, Any> = [:])
  {
    let (minimum, sink) = LogConfiguration.snapshot()
    guard level >= minimum else { return }
    var line = "ts=\(Self.timestamp()) level=\(level) component=\(component) msg=\(Self.quote(message()))"
    for (key, value) in metadata {
      line += " \(key)=\(Self.quote(String(describing: value)))"
    }
    sink.write(line)
  }

  /// Quotes a logfmt value when it contains spaces, quotes, `=` or control characters.
  static func quote(_ value: String) -> String {
    let needsQuotes =
      value.isEmpty || value.unicodeScalars.contains { $0 == " " || $0 == "\"" || $0 == "=" || $0.value < 0x20 }
    guard needsQuotes else { return value }
    var out = "\""
    for scalar in value.unicodeScalars {
      switch scalar {
      case "\"": out += "\\\""
      case "\\": out += "\\\\"
      case "\n": out += "\\n"
      case "\r": out += "\\r"
      case "\t": out += "\\t"
      default:
        if scalar.value < 0x20 {
          out += "\\u{\(String(scalar.value, radix: 16))}"
        } else {
          out.unicodeScalars.append(scalar)
        }
      }
    }
    return out + "\""
  }

  private static func timestamp() -> String {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    var seconds = time_t(now.tv_sec)
    var parts = tm()
    gmtime_r(&seconds, &parts)
    let millis = Int(now.tv_nsec) / 1_000_000
    return String(
      format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
      Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), millis)
  }
}
