import Foundation
import Glibc
import Synchronization

/// A real `meshgate` server process launched for an integration test.
///
/// `init` locates the executable and prepares a data directory; `start(timeout:)` launches
/// `meshgate --port <port> --bind 127.0.0.1 --data-dir <dir> --log-level debug [--name <name>] <arguments>` and waits
/// for the `meshgate ready key=value ...` line on standard output. Standard output and standard error go to files
/// (`<tmp>/meshgate-test-<uuid>.stdout` / `.stderr`, appended to across restarts) so that a chatty server can never
/// block on a full pipe.
///
/// The binary is `$MESHGATE_BINARY` if set, otherwise `meshgate` (or `debug/meshgate`) next to the test executable or
/// in up to three of its parent directories.
///
/// Thread-safety: all state is behind a mutex, so the object is `Sendable` and its methods may be called from any
/// thread; concurrent `start`/`stop` calls on the same node are still a test bug. `deinit` SIGKILLs a process that is
/// still running, so a node never outlives its test.
public final class NodeProcess: Sendable {
  /// Absolute path of the executable being run.
  public let binaryPath: String
  /// The data directory passed as `--data-dir` (kept across restarts).
  public let dataDirectory: String
  /// File receiving the process's standard output.
  public let stdoutPath: String
  /// File receiving the process's standard error.
  public let stderrPath: String
  /// The `--name` passed to the node, if any.
  public let name: String?
  /// Extra arguments appended after the standard ones on every launch.
  public let arguments: [String]
  /// The command that runs the node (empty: the binary itself).
  public let wrapper: [String]
  /// Variables added to (or overriding) the test process's environment for the node.
  public let environment: [String: String]

  private let ownsDataDirectory: Bool
  private let state: Mutex<State>

  private struct State {
    var process: ChildProcess?
    var requestedPort: Int
    var port: Int
    var nodeID = ""
    var url = ""
    var readyFields: [String: String] = [:]
    var lastCommandLine: [String] = []
    var exitStatus: Int32?
    var cleanedUp = false
  }

  /// Prepares a node without launching it.
  ///
  /// - Parameters:
  ///   - arguments: extra command-line arguments, appended after the standard ones.
  ///   - environment: extra environment variables (the test process's environment is inherited).
  ///   - dataDirectory: the data directory; nil creates a fresh `<tmp>/meshgate-test-<uuid>` that `cleanup()` removes.
  ///   - port: the port to bind; 0 lets the server pick (read it back from `port` after `start`).
  ///   - name: passed as `--name` when given.
  ///   - wrapper: a command that runs the node, e.g. `["prlimit", "--nofile=256:256"]` (it must exec the binary, so
  ///     the process id stays the node's).
  public init(
    arguments: [String] = [], environment: [String: String] = [:], dataDirectory: String? = nil, port: Int = 0,
    name: String? = nil, wrapper: [String] = []
  ) throws {
    self.wrapper = wrapper
    binaryPath = try Self.locateBinary()
    let base = FileManager.default.temporaryDirectory.path + "/meshgate-test-" + UUID().uuidString.lowercased()
    if let dataDirectory {
      self.dataDirectory = dataDirectory
      ownsDataDirectory = false
    } else {
      self.dataDirectory = base
      ownsDataDirectory = true
    }
    do {
      try FileManager.default.createDirectory(atPath: self.dataDirectory, withIntermediateDirectories: true)
    } catch {
      throw TestSupportError.io("cannot create data directory \(self.dataDirectory): \(error)")
    }
    stdoutPath = base + ".stdout"
    stderrPath = base + ".stderr"
    for path in [stdoutPath, stderrPath] where !FileManager.default.createFile(atPath: path, contents: nil) {
      throw TestSupportError.io("cannot create log file \(path)")
    }
    self.name = name
    self.arguments = arguments
    self.environment = environment
    state = Mutex(State(requestedPort: port, port: port))
  }

  deinit {
    // Never leave an orphan server behind, even if the test forgot to stop it.
    let process = state.withLock { $0.process }
    if let process, process.isRunning {
      kill(process.pid, SIGKILL)
      _ = process.waitForExit(timeout: .seconds(5))
    }
  }

  // MARK: Properties

  /// The port the node listens on: the one from its ready line once started, otherwise the requested one.
  public var port: Int { state.withLock { $0.port } }
  /// The node id from the ready line (`node.id=`); empty before the first successful `start`.
  public var nodeID: String { state.withLock { $0.nodeID } }
  /// The base URL from the ready line (`url=`), e.g. `http://127.0.0.1:43123/`; empty before `start`.
  public var url: String { state.withLock { $0.url } }
  /// Every `key=value` pair of the latest ready line.
  public var readyFields: [String: String] { state.withLock { $0.readyFields } }
  /// The process id while running (or of the last run), nil if never launched.
  public var pid: Int32? { state.withLock { $0.process?.pid } }
  /// The complete command line of the latest launch.
  public var commandLine: [String] { state.withLock { $0.lastCommandLine } }
  /// Whether the process is currently running.
  public var isRunning: Bool { state.withLock { $0.process?.isRunning ?? false } }
  /// Exit status of the last run once it ended (`128 + n` if killed by signal `n`), nil while running or never run.
  public var exitStatus: Int32? {
    state.withLock { state in
      state.process?.status
    }
  }

  /// An `HTTPClient` for this node (optionally authenticated as a peer).
  public func client(token: String? = nil, timeout: Duration = .seconds(10)) -> HTTPClient {
    HTTPClient(port: port, token: token, timeout: timeout)
  }

  // MARK: Lifecycle

  /// Launches the node and waits until it prints its `meshgate ready ...` line on standard output.
  ///
  /// Throws `TestSupportError.processExited` (with the exit status and the last 40 lines of stderr) if the process
  /// ends first, or `.timeout` (after SIGKILLing it) if it is not ready within `timeout`.
  public func start(timeout: Duration = .seconds(15)) throws {
    let port = state.withLock { $0.requestedPort }
    try launch(port: port, extraArguments: [], timeout: timeout)
  }

  /// Stops the node (if running) and starts it again with the same data directory and the same port it was bound to,
  /// appending `extraArguments` for this launch only.
  public func restart(extraArguments: [String] = [], timeout: Duration = .seconds(15)) throws {
    if isRunning { _ = try stop() }
    let port = state.withLock { $0.port }
    try launch(port: port, extraArguments: extraArguments, timeout: timeout)
  }

  /// Sends `signal` (default SIGTERM) and waits for the process to exit; returns its exit status (`128 + n` if it
  /// died from signal `n`). If it is still running after `timeout`, it is SIGKILLed and `.timeout` is thrown.
  /// Returns the previous status if the process had already exited; throws if it was never started.
  @discardableResult
  public func stop(signal: Int32 = 15, timeout: Duration = .seconds(10)) throws -> Int32 {
    guard let process = state.withLock({ $0.process }) else {
      throw TestSupportError.process("stop() called on a node that was never started (\(binaryPath))")
    }
    if process.isRunning {
      kill(process.pid, signal)
      guard let status = process.waitForExit(timeout: timeout) else {
        let kernelState = process.kernelState
        kill(process.pid, SIGKILL)
        _ = process.waitForExit(timeout: .seconds(5))
        throw TestSupportError.timeout(
          "node \(describe()) did not exit within \(timeout.shortDescription) of signal \(signal) (kernel state "
            + "\(kernelState)); sent SIGKILL. Last lines of stderr:\n\(logTail(lines: 40))")
      }
      return status
    }
    return process.status ?? -1
  }

  /// Kills the process with SIGKILL (if running) and waits up to 5 s for it to be reaped. Never throws.
  public func kill9() {
    guard let process = state.withLock({ $0.process }), process.isRunning else { return }
    kill(process.pid, SIGKILL)
    _ = process.waitForExit(timeout: .seconds(5))
  }

  /// Sends an arbitrary signal without waiting (e.g. SIGSTOP/SIGCONT to simulate a hung node).
  public func send(signal: Int32) {
    state.withLock { $0.process }?.send(signal)
  }

  /// Kills the process if it is still running, then removes the data directory (only if this object created it)
  /// and the log files. Idempotent.
  public func cleanup() {
    kill9()
    let alreadyDone = state.withLock { state in
      defer { state.cleanedUp = true }
      return state.cleanedUp
    }
    guard !alreadyDone else { return }
    if ownsDataDirectory { try? FileManager.default.removeItem(atPath: dataDirectory) }
    try? FileManager.default.removeItem(atPath: stdoutPath)
    try? FileManager.default.removeItem(atPath: stderrPath)
  }

  // MARK: Output

  /// Everything the process (across all launches) wrote to standard output so far.
  public func stdoutText() -> String { Self.readText(stdoutPath) }

  /// Everything the process (across all launches) wrote to standard error so far.
  public func stderrText() -> String { Self.readText(stderrPath) }

  /// The last `lines` lines of standard error (where the server logs).
  public func logTail(lines: Int = 40) -> String { Self.tail(stderrText(), lines: lines) }

  /// The last `lines` lines of standard output.
  public func stdoutTail(lines: Int = 40) -> String { Self.tail(stdoutText(), lines: lines) }

  /// `name`, node id, port and pid in one short string, for messages.
  public func describe() -> String {
    let (port, nodeID, pid) = state.withLock { ($0.port, $0.nodeID, $0.process?.pid) }
    return
      "\(name ?? "meshgate")(port \(port), id \(nodeID.isEmpty ? "?" : nodeID), pid \(pid.map(String.init) ?? "-"))"
  }

  // MARK: One-shot runs

  /// Runs `meshgate <arguments>` (nothing added) to completion, for CLI tests such as `--help` or bad flags.
  /// Returns the exit status (`128 + n` if killed by signal `n`) and the captured output; SIGKILLs the process and
  /// throws `.timeout` if it runs longer than `timeout`.
  public static func runToCompletion(
    arguments: [String], environment: [String: String] = [:], timeout: Duration = .seconds(15)
  ) throws -> (status: Int32, stdout: String, stderr: String) {
    let binary = try locateBinary()
    let base = FileManager.default.temporaryDirectory.path + "/meshgate-run-" + UUID().uuidString.lowercased()
    let outPath = base + ".stdout"
    let errPath = base + ".stderr"
    defer {
      try? FileManager.default.removeItem(atPath: outPath)
      try? FileManager.default.removeItem(atPath: errPath)
    }
    let process = try spawn(
      binary: binary, arguments: arguments, environment: environment, stdoutPath: outPath, stderrPath: errPath)
    guard let status = process.waitForExit(timeout: timeout) else {
      kill(process.pid, SIGKILL)
      _ = process.waitForExit(timeout: .seconds(5))
      throw TestSupportError.timeout(
        "`\(([binary] + arguments).joined(separator: " "))` still running after \(timeout.shortDescription); killed. "
          + "stdout:\n\(tail(readText(outPath), lines: 20))\nstderr:\n\(tail(readText(errPath), lines: 20))")
    }
    return (status, readText(outPath), readText(errPath))
  }

  // MARK: Internals

  private func launch(port: Int, extraArguments: [String], timeout: Duration) throws {
    let deadline = Deadline(timeout)
    if isRunning { throw TestSupportError.process("node \(describe()) is already running") }
    var args = ["--port", String(port), "--bind", "127.0.0.1", "--data-dir", dataDirectory, "--log-level", "debug"]
    if let name { args += ["--name", name] }
    // Tests run in parallel: unless a test asks for discovery, nodes must not find other tests' nodes by beacon.
    if !(arguments + extraArguments).contains(where: { $0 == "--discovery" || $0.hasPrefix("--discovery=") }) {
      args += ["--discovery", "static"]
    }
    args += arguments + extraArguments
    let stdoutOffset = Self.fileSize(stdoutPath)
    Self.appendLine("=== meshgate-test: launching \(([binaryPath] + args).joined(separator: " "))", to: stderrPath)

    let process = try Self.spawn(
      binary: binaryPath, arguments: args, environment: environment, stdoutPath: stdoutPath, stderrPath: stderrPath,
      wrapper: wrapper)
    state.withLock { state in
      state.process = process
      state.lastCommandLine = [binaryPath] + args
    }

    while true {
      let output = Self.readText(stdoutPath, from: stdoutOffset)
      // Only complete (newline-terminated) lines: the ready line may still be half-written.
      let complete = output.lastIndex(of: "\n").map { output[..<$0] } ?? ""
      if let line = complete.split(separator: "\n").first(where: { $0.hasPrefix("meshgate ready ") }) {
        try applyReadyLine(String(line))
        return
      }
      if !process.isRunning {
        let status = process.waitForExit(timeout: .seconds(5)) ?? -1
        var tail = logTail(lines: 40)
        let out = Self.tail(output, lines: 20)
        if !out.isEmpty { tail += "\n--- stdout (last lines) ---\n" + out }
        throw TestSupportError.processExited(status: status, stderrTail: tail)
      }
      if deadline.hasPassed {
        kill(process.pid, SIGKILL)
        _ = process.waitForExit(timeout: .seconds(5))
        throw TestSupportError.timeout(
          "node \(describe()) printed no `meshgate ready` line within \(timeout.shortDescription); killed it. "
            + "Command: \(([binaryPath] + args).joined(separator: " "))\nLast lines of stderr:\n\(logTail(lines: 40))"
            + "\nstdout:\n\(Self.tail(output, lines: 20))")
      }
      sleep(for: .milliseconds(20))
    }
  }

  private func applyReadyLine(_ line: String) throws {
    var fields: [String: String] = [:]
    for token in line.dropFirst("meshgate ready ".count).split(separator: " ") {
      guard let equals = token.firstIndex(of: "=") else { continue }
      fields[String(token[..<equals])] = String(token[token.index(after: equals)...])
    }
    guard let portText = fields["port"], let port = Int(portText), port > 0 else {
      kill9()
      throw TestSupportError.process("ready line has no valid port=: \"\(line)\"")
    }
    guard let nodeID = fields["node.id"], !nodeID.isEmpty else {
      kill9()
      throw TestSupportError.process("ready line has no node.id=: \"\(line)\"")
    }
    state.withLock { state in
      state.port = port
      state.nodeID = nodeID
      state.url = fields["url"] ?? "http://127.0.0.1:\(port)/"
      state.readyFields = fields
    }
  }

  /// Launches `binary` with stdin from /dev/null and stdout/stderr appended to files (see ``ChildProcess``).
  private static func spawn(
    binary: String, arguments: [String], environment: [String: String], stdoutPath: String, stderrPath: String,
    wrapper: [String] = []
  ) throws -> ChildProcess {
    let out = try openForAppend(stdoutPath)
    let err = try openForAppend(stderrPath)
    defer {
      try? out.close()
      try? err.close()
    }
    if let launcher = wrapper.first {
      let path = launcher.hasPrefix("/") ? launcher : "/usr/bin/" + launcher
      return try ChildProcess(
        path, Array(wrapper.dropFirst()) + [binary] + arguments, environment: environment,
        stdout: out.fileDescriptor, stderr: err.fileDescriptor)
    }
    return try ChildProcess(
      binary, arguments, environment: environment, stdout: out.fileDescriptor, stderr: err.fileDescriptor)
  }

  private static func openForAppend(_ path: String) throws -> FileHandle {
    let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
    guard fd >= 0 else { throw TestSupportError.io(errnoMessage("open(\(path))")) }
    return FileHandle(fileDescriptor: fd, closeOnDealloc: true)
  }

  private static func readText(_ path: String, from offset: Int = 0) -> String {
    guard let data = FileManager.default.contents(atPath: path), data.count > offset else { return "" }
    return String(decoding: data.dropFirst(offset), as: UTF8.self)
  }

  private static func fileSize(_ path: String) -> Int {
    (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
  }

  private static func appendLine(_ line: String, to path: String) {
    guard let handle = try? openForAppend(path) else { return }
    try? handle.write(contentsOf: Data((line + "\n").utf8))
    try? handle.close()
  }

  static func tail(_ text: String, lines: Int) -> String {
    text.split(separator: "\n", omittingEmptySubsequences: false).suffix(lines + 1).joined(separator: "\n")
      .trimmingASCIIWhitespace()
  }

  /// Finds the `meshgate` executable; see the type documentation for the search order.
  static func locateBinary() throws -> String {
    let fileManager = FileManager.default
    func isExecutable(_ path: String) -> Bool {
      var isDirectory: ObjCBool = false
      return fileManager.fileExists(atPath: path, isDirectory: &isDirectory) && !isDirectory.boolValue
        && fileManager.isExecutableFile(atPath: path)
    }
    if let explicit = ProcessInfo.processInfo.environment["MESHGATE_BINARY"], !explicit.isEmpty {
      if isExecutable(explicit) { return explicit }
      throw TestSupportError.binaryNotFound(tried: ["$MESHGATE_BINARY=\(explicit) (missing or not executable)"])
    }
    var starts: [String] = []
    if let argument0 = CommandLine.arguments.first, !argument0.isEmpty {
      let absolute = argument0.hasPrefix("/") ? argument0 : fileManager.currentDirectoryPath + "/" + argument0
      starts.append(URL(fileURLWithPath: absolute).deletingLastPathComponent().standardizedFileURL.path)
    }
    if let executable = Bundle.main.executablePath {
      starts.append(URL(fileURLWithPath: executable).deletingLastPathComponent().standardizedFileURL.path)
    }
    var tried: [String] = []
    for start in starts {
      var directory = URL(fileURLWithPath: start)
      for _ in 0...3 {
        for candidate in [
          directory.appendingPathComponent("meshgate").path,
          directory.appendingPathComponent("debug/meshgate").path,
        ] where !tried.contains(candidate) {
          tried.append(candidate)
          if isExecutable(candidate) { return candidate }
        }
        directory = directory.deletingLastPathComponent()
      }
    }
    throw TestSupportError.binaryNotFound(tried: tried)
  }
}
