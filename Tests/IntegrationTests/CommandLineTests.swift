import Foundation
import MeshgateTestSupport
import Testing

@Suite(.timeLimit(.minutes(2)))
struct CommandLineTests {
  @Test func helpListsEveryOption() throws {
    let result = try NodeProcess.runToCompletion(arguments: ["--help"])
    #expect(result.status == 0)
    for option in ["--port", "--bind", "--data-dir", "--name", "--log-level", "--public-dir", "--max-body-bytes"] {
      #expect(result.stdout.contains(option), "help should mention \(option)")
    }
    #expect(result.stdout.contains("MESHGATE_PORT"))
  }

  @Test func versionPrintsTheVersion() throws {
    let result = try NodeProcess.runToCompletion(arguments: ["--version"])
    #expect(result.status == 0)
    #expect(result.stdout.hasPrefix("meshgate 0."))
  }

  @Test(arguments: [
    (["--port", "nope"], "--port must be a port number"),
    (["--wat"], "unknown option"),
    (["--log-level", "shouty"], "--log-level must be one of"),
  ])
  func badFlagExitsWithStatus2AndOneLine(arguments: [String], expected: String) throws {
    let result = try NodeProcess.runToCompletion(arguments: arguments)
    #expect(result.status == 2)
    let lines = result.stderr.split(separator: "\n")
    #expect(lines.count == 1)
    #expect(lines.first?.hasPrefix("meshgate: error: ") == true)
    #expect(result.stderr.contains(expected))
  }

  @Test func badEnvironmentValueExitsWithStatus2() throws {
    let result = try NodeProcess.runToCompletion(arguments: [], environment: ["MESHGATE_PORT": "99999"])
    #expect(result.status == 2)
    #expect(result.stderr.contains("MESHGATE_PORT must be a port number"))
  }

  @Test func aSignalSentTheMomentTheReadyLineAppearsStopsTheNodeGracefully() async throws {
    // The ready line used to come before SIGTERM was handled: a signal sent at once was ignored (the node ran on)
    // or, a moment earlier, killed it. Each round signals as soon as the line is read.
    let node = try NodeProcess()
    defer { node.cleanup() }
    try await onDedicatedThread {
      for round in 0..<15 {
        if round == 0 { try node.start() } else { try node.restart() }
        let status = try node.stop(signal: SIGTERM, timeout: .seconds(10))
        #expect(status == 0, "round \(round): exit status \(status)")
      }
    }
  }

  @Test func portInUseExitsWithStatus2() async throws {
    try await withNode { node in
      let directory = FileManager.default.temporaryDirectory.appendingPathComponent("mg-\(UUID().uuidString)").path
      defer { try? FileManager.default.removeItem(atPath: directory) }
      let result = try NodeProcess.runToCompletion(
        arguments: ["--port", String(node.port), "--bind", "127.0.0.1", "--data-dir", directory])
      #expect(result.status == 2)
      #expect(result.stderr.contains("cannot listen on 127.0.0.1:\(node.port)"))
      #expect(result.stderr.contains("the port is in use (Address already in use)"))
      #expect(result.stderr.contains("choose another --port"))
      // Exactly one line, and nothing created before the port was checked.
      #expect(result.stderr.split(separator: "\n").count == 1, "stderr:\n\(result.stderr)")
      #expect(result.stdout.isEmpty, "stdout:\n\(result.stdout)")
      #expect(!FileManager.default.fileExists(atPath: directory), "the data dir was created")
    }
  }

  /// Unusable --tls-cert/--tls-key files stop the node with its one error line before anything is created, as a
  /// port in use does: no data directory, database or node certificate is left behind (they were, and stderr held
  /// a warning and a notice before the error).
  @Test func unusableTLSFilesExitWithStatus2BeforeAnythingIsCreated() async throws {
    let base = FileManager.default.temporaryDirectory.appendingPathComponent("mg-tls-\(UUID().uuidString)").path
    let junk = base + ".pem"
    #expect(FileManager.default.createFile(atPath: junk, contents: Data("junk\n".utf8)))
    defer { try? FileManager.default.removeItem(atPath: junk) }
    try await onDedicatedThread {
      let result = try NodeProcess.runToCompletion(
        arguments: [
          "--port", "0", "--bind", "127.0.0.1", "--data-dir", base + "/data", "--tls-cert", junk, "--tls-key", junk,
        ])
      #expect(result.status == 2)
      #expect(result.stderr.hasPrefix("meshgate: error: --tls-cert/--tls-key: "), "stderr:\n\(result.stderr)")
      #expect(result.stderr.split(separator: "\n").count == 1, "stderr:\n\(result.stderr)")
      #expect(!FileManager.default.fileExists(atPath: base + "/data"), "the data dir was created")
    }
  }

  @Test func unwritableDataDirExitsWithStatus2() throws {
    // A regular file where a directory is expected fails even for root, unlike permission bits.
    let file = FileManager.default.temporaryDirectory.appendingPathComponent("mg-file-\(UUID().uuidString)").path
    #expect(FileManager.default.createFile(atPath: file, contents: Data("x".utf8)))
    defer { try? FileManager.default.removeItem(atPath: file) }
    let result = try NodeProcess.runToCompletion(
      arguments: ["--port", "0", "--bind", "127.0.0.1", "--data-dir", file + "/data"])
    #expect(result.status == 2)
    #expect(result.stderr.contains("cannot use data dir \(file)/data"))
    // Which path failed, the errno text, and how to fix it.
    #expect(result.stderr.contains("creating \(file) failed: Not a directory"), "stderr: \(result.stderr)")
    #expect(!result.stderr.contains("NSCocoaErrorDomain"))
    #expect(result.stderr.contains("--data-dir"))
    #expect(result.stderr.split(separator: "\n").count == 1)
  }

  /// Two processes on one data directory would be two nodes with one identity (node id, TLS key, tokens) and one
  /// database, each with its own view of the live state. The second one used to start and serve.
  @Test func aSecondNodeOnADataDirInUseExitsWithStatus2() async throws {
    let node = try NodeProcess()
    defer { node.cleanup() }
    try await onDedicatedThread {
      try node.start()
      let pid = try #require(node.pid)
      let second = try NodeProcess.runToCompletion(
        arguments: ["--port", "0", "--bind", "127.0.0.1", "--data-dir", node.dataDirectory])
      #expect(second.status == 2, "stdout:\n\(second.stdout)\nstderr:\n\(second.stderr)")
      #expect(
        second.stderr.contains(
          "cannot use data dir \(node.dataDirectory): another meshgate (pid \(pid)) is using it; stop it or choose"
            + " another --data-dir"), "stderr: \(second.stderr)")
      #expect(second.stderr.split(separator: "\n").count == 1, "stderr:\n\(second.stderr)")
      #expect(second.stdout.isEmpty, "stdout:\n\(second.stdout)")
      // The first node is untouched, and the directory is free again once it is gone, even after a kill -9.
      #expect(try HTTPClient.get(port: node.port, path: "/healthz").status == 200)
      node.kill9()
      try node.restart()
      #expect(try HTTPClient.get(port: node.port, path: "/healthz").status == 200)
    }
  }

  /// The admin token is printed once, on the first start. A first start that failed after the token was stored (a
  /// `--tls-cert` file it cannot use) used to keep the token it never printed, so no later start printed one and the
  /// admin routes stayed locked for good. (Unusable TLS files are now refused before anything is created, and the
  /// token is stored only once nothing can fail; this checks what a user sees either way.)
  @Test func aFailedFirstStartLeavesTheAdminTokenToTheFirstStartThatSucceeds() async throws {
    let node = try NodeProcess()
    defer { node.cleanup() }
    let certificate = node.dataDirectory + ".bad.pem"
    #expect(FileManager.default.createFile(atPath: certificate, contents: Data("junk\n".utf8)))
    defer { try? FileManager.default.removeItem(atPath: certificate) }
    try await onDedicatedThread {
      let failed = try NodeProcess.runToCompletion(
        arguments: [
          "--port", "0", "--bind", "127.0.0.1", "--data-dir", node.dataDirectory, "--discovery", "off",
          "--tls-cert", certificate, "--tls-key", certificate,
        ])
      #expect(failed.status == 2, "stdout:\n\(failed.stdout)\nstderr:\n\(failed.stderr)")
      #expect(failed.stderr.contains("meshgate: error: --tls-cert/--tls-key:"), "stderr:\n\(failed.stderr)")
      #expect(!failed.stdout.contains("admin-token"), "stdout:\n\(failed.stdout)")

      try node.start()
      let admin = try node.adminToken()
      let settings = try HTTPClient.get(port: node.port, path: "/api/v1/node/settings", token: admin)
      #expect(settings.status == 200, "\(settings)")
      // Shown once: a restart prints no other token, and the first one still works.
      try node.restart()
      let printed = node.stdoutText().components(separatedBy: "meshgate admin-token=").count - 1
      #expect(printed == 1, "stdout:\n\(node.stdoutText())")
      #expect(try HTTPClient.get(port: node.port, path: "/api/v1/node/settings", token: admin).status == 200)
    }
  }

  /// The dashboard's last default, "next to the binary", was looked up from `argv[0]`: a shell that finds meshgate on
  /// `PATH` passes a bare `meshgate`, so the node looked in its working directory and served no dashboard.
  @Test func theDashboardNextToTheBinaryIsFoundWhenTheShellFindsItOnPATH() async throws {
    let root = FileManager.default.temporaryDirectory.appendingPathComponent("mg-path-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: root) }
    let manager = FileManager.default
    try manager.createDirectory(atPath: root + "/bin/Public", withIntermediateDirectories: true)
    try manager.createDirectory(atPath: root + "/work", withIntermediateDirectories: true)
    #expect(manager.createFile(atPath: root + "/bin/Public/index.html", contents: Data("next-to-the-binary".utf8)))
    // The wrapper gets the test binary's path as $1: it puts a copy in bin/ and starts it by its bare name.
    let script = #"cd "$0" && cp "$1" ../bin/meshgate && shift && PATH="$PWD/../bin:$PATH" exec meshgate "$@""#
    let node = try NodeProcess(wrapper: ["/bin/sh", "-c", script, root + "/work"])
    defer { node.cleanup() }
    try await onDedicatedThread {
      try node.start()
      let page = try HTTPClient.get(port: node.port, path: "/")
      #expect(page.status == 200, "\(page)")
      #expect(page.text.contains("next-to-the-binary"), "\(page.text.prefix(200))")
    }
  }

  @Test func sigtermShutsDownGracefully() async throws {
    let node = try NodeProcess()
    defer { node.cleanup() }
    try node.start()
    let peer = try node.createPeer("leaver")
    let (socket, _) = try node.openEvents(peer)
    defer { socket.close() }
    let status = try node.stop(signal: SIGTERM)
    #expect(status == 0)
    guard case .close(let code, _)? = try socket.receive(timeout: .seconds(5)) else {
      Issue.record("expected a close frame on shutdown")
      return
    }
    #expect(code == 1001)
    #expect(node.logTail().contains("Node stopped."))
  }
}
