import Foundation
import Glibc
import Synchronization

/// A child process started with `posix_spawn` and reaped with `waitpid(pid, WNOHANG)` by this object alone.
///
/// Not Foundation's `Process`. That one learns that a child exited when a socket the child inherits closes, and then
/// reaps it with a blocking `waitpid` on one thread shared by every `Process` of the test run: a child that closes
/// the socket early (daemons close all inherited descriptors at start) or one whose socket another child still holds
/// keeps that thread blocked or blind, and no other child is seen to exit meanwhile, so a node killed with SIGKILL
/// could look alive for many seconds. Here nothing is shared: each object polls its own pid.
///
/// The child gets no descriptor beyond stdin (`/dev/null`), stdout and stderr, an empty signal mask (threads of the
/// Swift concurrency pool block most signals, and posix_spawn would pass that mask on, leaving a server deaf to
/// SIGTERM) and default SIGPIPE handling (the test runner ignores SIGPIPE, and that would be inherited too).
public final class ChildProcess: Sendable {
  /// The child's process id.
  public let pid: Int32
  private let exitStatus = Mutex<Int32?>(nil)

  /// Starts `executable` with `arguments`; stdout and stderr go to the given descriptors (nil: `/dev/null`).
  /// `environment` entries are added to (or override) the test process's environment.
  public init(
    _ executable: String, _ arguments: [String], environment: [String: String] = [:], stdout: Int32?,
    stderr: Int32?
  ) throws {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    for (source, target) in [(stdout, Int32(1)), (stderr, Int32(2))] {
      if let source {
        posix_spawn_file_actions_adddup2(&actions, source, target)
      } else {
        posix_spawn_file_actions_addopen(&actions, target, "/dev/null", O_WRONLY, 0)
      }
    }
    // Nothing else is inherited (glibc ≥ 2.34 has closefrom for spawn, but Swift's Glibc module does not import
    // it: look it up at run time).
    if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") {
      typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
      _ = unsafeBitCast(symbol, to: CloseFrom.self)(&actions, 3)
    }
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var mask = sigset_t()
    sigemptyset(&mask)
    posix_spawnattr_setsigmask(&attributes, &mask)
    var defaults = sigset_t()
    sigemptyset(&defaults)
    sigaddset(&defaults, SIGPIPE)
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    let merged = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
    let argv = ([executable] + arguments).map { strdup($0) } + [nil]
    let envp = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
      argv.forEach { free($0) }
      envp.forEach { free($0) }
    }
    var pid = pid_t()
    let result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
    guard result == 0 else {
      throw TestSupportError.process("cannot start \(executable): \(String(cString: strerror(result)))")
    }
    self.pid = pid
  }

  /// Starts `executable` with stdout and stderr both appended to `log` (or written to `outputFD`; neither:
  /// `/dev/null`).
  public convenience init(_ executable: String, _ arguments: [String], log: String? = nil, outputFD: Int32? = nil)
    throws
  {
    var output = outputFD
    var opened: Int32?
    if outputFD == nil, let log {
      let fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
      guard fd >= 0 else { throw TestSupportError.io("cannot open \(log): \(String(cString: strerror(errno)))") }
      output = fd
      opened = fd
    }
    defer { if let opened { close(opened) } }
    try self.init(executable, arguments, stdout: output, stderr: output)
  }

  deinit {
    // Never leave a zombie (or a live child) behind.
    if isRunning {
      kill(pid, SIGKILL)
      _ = waitForExit(timeout: .seconds(5))
    }
  }

  /// Whether the child has not exited yet (reaps it if it has).
  public var isRunning: Bool { status == nil }

  /// The exit status (128 + n after signal n), nil while running.
  public var status: Int32? {
    exitStatus.withLock { saved in
      if let saved { return saved }
      var raw: Int32 = 0
      guard waitpid(pid, &raw, WNOHANG) == pid else { return nil }
      let signal = raw & 0x7F
      saved = signal == 0 ? (raw >> 8) & 0xFF : 128 + signal
      return saved
    }
  }

  /// Sends `signal` unless the child was already reaped (a reaped pid may belong to another process by now).
  public func send(_ signal: Int32) {
    if isRunning { kill(pid, signal) }
  }

  /// Waits until the child has exited and returns its status, or nil if `timeout` passes first.
  public func waitForExit(timeout: Duration) -> Int32? {
    let deadline = Deadline(timeout)
    while true {
      if let status { return status }
      if deadline.hasPassed { return nil }
      sleep(for: .milliseconds(10))
    }
  }

  /// The kernel's one-letter state of the child (`R`, `S`, `D`, `Z`…) from `/proc/<pid>/stat`, for messages.
  public var kernelState: String {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
      let close = stat.lastIndex(of: ")")
    else { return "gone" }
    return String(stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).prefix(1))
  }

  /// SIGTERM, then SIGKILL if it is still running after `grace`; waits until it is reaped.
  public func stop(grace: Duration = .seconds(5)) {
    guard isRunning else { return }
    kill(pid, SIGTERM)
    if waitForExit(timeout: grace) == nil {
      kill(pid, SIGKILL)
      _ = waitForExit(timeout: .seconds(5))
    }
  }
}

/// The outcome of ``runCommand(_:_:timeout:mergeOutput:)``.
public struct CommandResult: Sendable {
  /// Exit status (128 + n after signal n; -1 if it had to be killed and was never reaped).
  public var status: Int32
  /// Standard output (with `mergeOutput`, standard error too).
  public var stdout: String
  /// Standard error (empty with `mergeOutput`).
  public var stderr: String
}

/// Runs a command to completion as a ``ChildProcess`` (SIGKILLed after `timeout`), blocking the calling thread;
/// call it from a dedicated thread in async tests (``onDedicatedThread(_:)``). Tests use this rather than
/// Foundation's `Process`, whose shared reaping thread one misbehaving child can stall for every other.
public func runCommand(
  _ executable: String, _ arguments: [String], timeout: Duration = .seconds(60), mergeOutput: Bool = false
) throws -> CommandResult {
  let base = FileManager.default.temporaryDirectory.appendingPathComponent("meshgate-run-\(UUID())").path
  let outPath = base + ".out"
  let errPath = base + ".err"
  defer {
    try? FileManager.default.removeItem(atPath: outPath)
    try? FileManager.default.removeItem(atPath: errPath)
  }
  func create(_ path: String) throws -> Int32 {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard fd >= 0 else { throw TestSupportError.io("cannot open \(path): \(String(cString: strerror(errno)))") }
    return fd
  }
  let out = try create(outPath)
  defer { close(out) }
  let err = mergeOutput ? out : try create(errPath)
  defer { if !mergeOutput { close(err) } }
  let child = try ChildProcess(executable, arguments, stdout: out, stderr: err)
  var status = child.waitForExit(timeout: timeout)
  if status == nil {
    kill(child.pid, SIGKILL)
    status = child.waitForExit(timeout: .seconds(5))
  }
  let read = { (path: String) in (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
  return CommandResult(status: status ?? -1, stdout: read(outPath), stderr: mergeOutput ? "" : read(errPath))
}
