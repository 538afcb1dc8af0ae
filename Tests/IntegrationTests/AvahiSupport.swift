import Dispatch
import Foundation
import Glibc
import MeshgateTestSupport
import Synchronization

// An avahi-daemon for the DNS-SD tests. CI runs as root in a clean container without systemd, so nothing runs
// there: the fixture starts the system D-Bus (if its socket does not answer) and avahi-daemon (if `avahi-daemon
// --check` says none runs), and stops exactly what it started, by process id. A daemon that already runs is used
// as it is and left alone.
//
// The daemon it starts publishes on the loopback interface only (`allow-interfaces=lo`): Avahi 0.8 accepts `lo`
// (multicast works there), which is all a loopback-only CI container has, and the tests' nodes bind 127.0.0.1, so
// they register and browse on `lo` too. Nothing leaks onto a real network.

/// Shares one avahi-daemon between the tests that need it; starts it for the first and stops it after the last.
actor AvahiFixture {
  static let shared = AvahiFixture()

  private var users = 0
  private var started: StartedDaemons?

  /// Runs `body` with a reachable avahi-daemon.
  func with<T: Sendable>(_ body: @Sendable () async throws -> T) async throws -> T {
    try await acquire()
    do {
      let result = try await body()
      await release()
      return result
    } catch {
      await release()
      throw error
    }
  }

  private func acquire() async throws {
    users += 1
    guard users == 1 else { return }
    do {
      started = try await onDedicatedThread { try StartedDaemons.ensureRunning() }
    } catch {
      users -= 1
      throw error
    }
  }

  private func release() async {
    users -= 1
    guard users == 0, let started else { return }
    self.started = nil
    _ = try? await onDedicatedThread { started.stop() }
  }
}

/// The daemons this test process started (none when they were already running).
final class StartedDaemons: Sendable {
  static let avahiDaemon = "/usr/sbin/avahi-daemon"
  static let dbusDaemon = "/usr/bin/dbus-daemon"
  static let systemBusSocket = "/run/dbus/system_bus_socket"

  let dbus: ChildProcess?
  let avahi: ChildProcess?
  let directory: String

  private init(dbus: ChildProcess?, avahi: ChildProcess?, directory: String) {
    self.dbus = dbus
    self.avahi = avahi
    self.directory = directory
  }

  /// Starts what is missing and waits until avahi-daemon answers; throws with its log if it does not.
  static func ensureRunning() throws -> StartedDaemons {
    for tool in [avahiDaemon, dbusDaemon, "/usr/bin/avahi-browse"]
    where !FileManager.default.isExecutableFile(atPath: tool) {
      throw TestSupportError.process(
        "\(tool) is missing: the DNS-SD tests need avahi-daemon, avahi-utils and dbus (Docker/packages-build.txt); "
          + "run `make deps`")
    }
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("meshgate-avahi-\(UUID())").path
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    if avahiIsRunning() {
      return StartedDaemons(dbus: nil, avahi: nil, directory: directory)
    }
    var dbus: ChildProcess?
    if !unixSocketAnswers(systemBusSocket) {
      try FileManager.default.createDirectory(atPath: "/run/dbus", withIntermediateDirectories: true)
      try? FileManager.default.removeItem(atPath: systemBusSocket)
      let started = try ChildProcess(dbusDaemon, ["--system", "--nofork", "--nopidfile"], log: directory + "/dbus.log")
      dbus = started
      do {
        try eventually(timeout: .seconds(10), message: "the system D-Bus socket answers") {
          guard started.isRunning else { throw TestSupportError.process("dbus-daemon exited") }
          return unixSocketAnswers(systemBusSocket)
        }
      } catch {
        started.stop()
        throw TestSupportError.process("dbus-daemon did not start: \(error)\n\(tail(directory + "/dbus.log"))")
      }
    }
    let configuration = directory + "/avahi-daemon.conf"
    try """
    [server]
    use-ipv4=yes
    use-ipv6=no
    allow-interfaces=lo
    ratelimit-interval-usec=1000000
    ratelimit-burst=1000
    [wide-area]
    enable-wide-area=no
    [publish]
    publish-hinfo=no
    publish-workstation=no

    """.write(toFile: configuration, atomically: true, encoding: .utf8)
    do {
      let avahi = try ChildProcess(
        avahiDaemon, ["--file", configuration, "--no-chroot", "--no-drop-root", "--no-rlimits"],
        log: directory + "/avahi.log")
      do {
        try eventually(timeout: .seconds(15), message: "avahi-daemon finished starting") {
          guard avahi.isRunning else { throw TestSupportError.process("avahi-daemon exited") }
          return tail(directory + "/avahi.log").contains("Server startup complete")
        }
      } catch {
        avahi.stop()
        throw error
      }
      return StartedDaemons(dbus: dbus, avahi: avahi, directory: directory)
    } catch {
      dbus?.stop()
      throw TestSupportError.process("avahi-daemon did not start: \(error)\n\(tail(directory + "/avahi.log"))")
    }
  }

  /// Stops avahi-daemon, then D-Bus, if this process started them.
  func stop() {
    avahi?.stop()
    dbus?.stop()
    try? FileManager.default.removeItem(atPath: directory)
  }

  // MARK: Helpers

  /// `avahi-daemon --check` exits 0 when a daemon runs (it reads the daemon's pid file).
  static func avahiIsRunning() -> Bool {
    (try? run(avahiDaemon, ["--check"], timeout: .seconds(5)).status) == 0
  }

  static func tail(_ path: String, lines: Int = 30) -> String {
    let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    return text.split(separator: "\n", omittingEmptySubsequences: false).suffix(lines).joined(separator: "\n")
  }

  static func unixSocketAnswers(_ path: String) -> Bool {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
    withUnsafeMutableBytes(of: &address.sun_path) { buffer in
      buffer.copyBytes(from: bytes)
      buffer[bytes.count] = 0
    }
    return withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
      }
    }
  }
}

/// Runs a command to completion (SIGKILLed after `timeout`) and returns its exit status and combined output.
func run(_ executable: String, _ arguments: [String], timeout: Duration) throws -> (status: Int32, output: String) {
  let result = try runCommand(executable, arguments, timeout: timeout, mergeOutput: true)
  return (result.status, result.stdout)
}
