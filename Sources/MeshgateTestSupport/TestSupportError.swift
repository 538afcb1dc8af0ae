/// Every failure raised by the test-support helpers.
///
/// Each case carries enough context (what was being done, against which address, what was received) for a failing
/// test to be diagnosed from its log alone. `description` renders a one-paragraph human message.
public enum TestSupportError: Error, CustomStringConvertible, Sendable, Equatable {
  /// An operation did not finish before its deadline. The message says which operation and what was seen so far.
  case timeout(String)
  /// A TCP connection could not be established (refused, unreachable, name lookup failed, ...).
  case connectionFailed(String)
  /// The peer closed the connection before the expected data arrived.
  case connectionClosed(String)
  /// A socket or file system call failed; the message names the call and `errno`.
  case io(String)
  /// The peer sent bytes that violate HTTP/1.1, chunked encoding, Server-Sent Events or RFC 6455.
  case protocolViolation(String)
  /// The server answered with an unexpected HTTP status (for example a WebSocket handshake answered with `401`
  /// instead of `101`). Carries the status code and the response body as text.
  case httpStatus(Int, String)
  /// The WebSocket was closed (by a close frame or by the connection dropping) while a message was expected.
  case webSocketClosed(code: UInt16?, reason: String)
  /// A WebSocket message of the wrong kind arrived (for example binary while text was expected).
  case unexpectedMessage(String)
  /// A response body could not be parsed as the requested JSON shape.
  case invalidJSON(String)
  /// The `meshgate` executable could not be found. Lists every path that was tried.
  case binaryNotFound(tried: [String])
  /// A launched process exited before it became ready. Carries its exit status (`128 + n` for signal `n`) and the
  /// tail of its standard error.
  case processExited(status: Int32, stderrTail: String)
  /// A process could not be launched, stopped or inspected.
  case process(String)
  /// An `eventually` condition never became true.
  case conditionNotMet(String)

  /// The HTTP status code carried by `.httpStatus`, or `nil` for every other case.
  public var httpStatusCode: Int? {
    if case .httpStatus(let code, _) = self { return code }
    return nil
  }

  /// The message carried by the case, without the category prefix that `description` adds.
  var message: String {
    switch self {
    case .timeout(let message), .connectionFailed(let message), .connectionClosed(let message), .io(let message),
      .protocolViolation(let message), .unexpectedMessage(let message), .invalidJSON(let message),
      .process(let message), .conditionNotMet(let message):
      message
    default: description
    }
  }

  /// A human-readable explanation of the failure.
  public var description: String {
    switch self {
    case .timeout(let message): "timed out: \(message)"
    case .connectionFailed(let message): "connection failed: \(message)"
    case .connectionClosed(let message): "connection closed by peer: \(message)"
    case .io(let message): "I/O error: \(message)"
    case .protocolViolation(let message): "protocol violation: \(message)"
    case .httpStatus(let code, let body): "unexpected HTTP status \(code); body: \(body.isEmpty ? "<empty>" : body)"
    case .webSocketClosed(let code, let reason):
      "WebSocket closed (code \(code.map(String.init) ?? "none"), reason \"\(reason)\")"
    case .unexpectedMessage(let message): "unexpected WebSocket message: \(message)"
    case .invalidJSON(let message): "invalid JSON: \(message)"
    case .binaryNotFound(let tried):
      "meshgate executable not found (set MESHGATE_BINARY to override); tried:\n  " + tried.joined(separator: "\n  ")
    case .processExited(let status, let tail):
      "process exited early with status \(status); last lines of stderr:\n\(tail.isEmpty ? "<empty>" : tail)"
    case .process(let message): "process error: \(message)"
    case .conditionNotMet(let message): "condition not met: \(message)"
    }
  }
}
