import Foundation
import Glibc

/// Runs blocking `body` on a fresh dedicated thread (never on the Swift concurrency pool) and resumes with its result.
///
/// Use it to call the synchronous helpers from async tests without starving the cooperative thread pool.
public func onDedicatedThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
  try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
    let thread = Thread {
      continuation.resume(with: Result { try body() })
    }
    thread.name = "meshgate-test-support"
    thread.start()
  }
}

/// Polls `condition` every `interval` until it returns true, or throws `TestSupportError.conditionNotMet` once
/// `timeout` has passed. Errors thrown by `condition` count as "not yet" (the last one is reported on timeout), so it
/// can wrap calls that fail while a server is still starting.
public func eventually(
  timeout: Duration, interval: Duration = .milliseconds(50), message: @autoclosure () -> String = "",
  fileID: String = #fileID, line: Int = #line, _ condition: () throws -> Bool
) throws {
  var polling = Polling(timeout: timeout, interval: interval)
  while !polling.held(Result { try condition() }) {
    guard let pause = polling.nextPause else { throw polling.failure(message(), fileID, line) }
    if pause > .zero { sleep(for: pause) }
  }
}

/// The async variant of `eventually`: the condition may await, and waiting uses `Task.sleep`.
public func eventuallyAsync(
  timeout: Duration, interval: Duration = .milliseconds(50), message: @autoclosure () -> String = "",
  fileID: String = #fileID, line: Int = #line, isolation: isolated (any Actor)? = #isolation,
  _ condition: () async throws -> Bool
) async throws {
  var polling = Polling(timeout: timeout, interval: interval)
  while true {
    let outcome: Result<Bool, any Error>
    do { outcome = .success(try await condition()) } catch { outcome = .failure(error) }
    if polling.held(outcome) { return }
    guard let pause = polling.nextPause else { throw polling.failure(message(), fileID, line) }
    if pause > .zero { try await Task.sleep(for: pause) }
  }
}

/// What `eventually` and `eventuallyAsync` keep between attempts: the deadline, the count and the last error.
private struct Polling {
  let interval: Duration
  let deadline: Deadline
  var attempts = 0
  var lastError: (any Error)?

  init(timeout: Duration, interval: Duration) {
    self.interval = interval
    self.deadline = Deadline(timeout)
  }

  /// Counts one attempt; true when the condition held. A throw is remembered, a plain `false` forgets it.
  mutating func held(_ outcome: Result<Bool, any Error>) -> Bool {
    attempts += 1
    switch outcome {
    case .success(let held):
      if held { return true }
      lastError = nil
    case .failure(let error):
      lastError = error
    }
    return false
  }

  /// How long to wait before the next attempt (zero or more), or nil once the timeout has passed.
  var nextPause: Duration? {
    deadline.hasPassed ? nil : min(interval, deadline.instant - ContinuousClock.now)
  }

  func failure(_ message: String, _ fileID: String, _ line: Int) -> TestSupportError {
    var text = message.isEmpty ? "condition" : "\"\(message)\""
    text += " (\(fileID):\(line)) still false after \(deadline.timeout.shortDescription) and \(attempts) attempts"
    if let lastError { text += "; last attempt threw: \(lastError)" }
    return .conditionNotMet(text)
  }
}

/// Blocks the current thread for `duration`.
func sleep(for duration: Duration) {
  let (seconds, attoseconds) = duration.components
  var request = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
  var remaining = timespec()
  while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
}

/// Returns a TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, read back, closed).
///
/// Another process may grab it before you use it, so prefer letting the server bind port 0 where possible.
public func freeLoopbackPort() throws -> Int {
  let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
  guard fd >= 0 else { throw TestSupportError.io(errnoMessage("socket")) }
  defer { close(fd) }
  var address = sockaddr_in()
  address.sin_family = sa_family_t(AF_INET)
  address.sin_port = 0
  address.sin_addr.s_addr = inet_addr("127.0.0.1")
  let bound = withUnsafePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
  }
  guard bound == 0 else { throw TestSupportError.io(errnoMessage("bind(127.0.0.1:0)")) }
  var length = socklen_t(MemoryLayout<sockaddr_in>.size)
  let named = withUnsafeMutablePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
  }
  guard named == 0 else { throw TestSupportError.io(errnoMessage("getsockname")) }
  return Int(UInt16(bigEndian: address.sin_port))
}
