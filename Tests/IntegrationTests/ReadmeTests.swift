import Foundation
import MeshgateTestSupport
import Testing

/// The curl examples of the README and the API guide (docs/api.md) must work as written: run them against real nodes.
@Suite(.timeLimit(.minutes(2)))
struct ReadmeTests {
  static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()
  static let readme = root.appendingPathComponent("README.md")
  static let apiGuide = root.appendingPathComponent("docs/api.md")

  /// The shell blocks of the API guide's first steps.
  static func apiExamples() throws -> String {
    try examples(from: "\n## First steps with curl\n", to: "\n## Live events", in: apiGuide)
  }

  /// The shell blocks between two headings of a Markdown file (the README unless told).
  static func examples(from startHeading: String, to endHeading: String, in file: URL = readme) throws -> String {
    let text = try String(contentsOf: file, encoding: .utf8)
    guard let start = text.range(of: startHeading),
      let end = text.range(of: endHeading, range: start.upperBound..<text.endIndex)
    else { throw TestSupportError.unexpectedMessage("\(file.lastPathComponent) has no section \(startHeading)") }
    var script = ""
    var inBlock = false
    for line in text[start.upperBound..<end.lowerBound].split(separator: "\n", omittingEmptySubsequences: false) {
      if line.hasPrefix("```sh") {
        inBlock = true
      } else if line.hasPrefix("```") {
        inBlock = false
      } else if inBlock {
        script += line + "\n"
      }
    }
    return script
  }

  /// Runs `script` with bash and returns its exit status and combined output.
  static func run(_ script: String) throws -> (status: Int32, output: String) {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("readme-\(UUID().uuidString).sh").path
    try script.write(toFile: path, atomically: true, encoding: .utf8)
    defer { try? FileManager.default.removeItem(atPath: path) }
    // The test runner ignores SIGPIPE; a user's shell does not, and ChildProcess restores the default (otherwise
    // `… | head` makes the writer fail with EPIPE instead of ending quietly). Scripts run with `set -eu` but not
    // pipefail, as in an interactive shell, where `… | head` is fine.
    let result = try runCommand("/bin/bash", [path], timeout: .seconds(300), mergeOutput: true)
    return (result.status, result.stdout)
  }

  @Test func meshExamplesRunAgainstTwoRealNodes() async throws {
    let examples = try Self.examples(from: "\n## The mesh:", to: "\n| Route |", in: Self.apiGuide)
    try await withNode { node in
      let portB = try freeLoopbackPort()
      let dataB = FileManager.default.temporaryDirectory.appendingPathComponent("readme-b-\(UUID().uuidString)").path
      defer { try? FileManager.default.removeItem(atPath: dataB) }
      // Node B runs from the debug build, on loopback, without the beacon, so parallel tests stay apart.
      let script =
        "set -eu\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"
        + examples
        .replacingOccurrences(of: ".build/release/meshgate", with: node.binaryPath)
        .replacingOccurrences(of: "--name node-b", with: "--name node-b --bind 127.0.0.1 --discovery static")
        .replacingOccurrences(of: "/tmp/node-b", with: dataB)
        .replacingOccurrences(of: "8081", with: String(portB))
        .replacingOccurrences(of: "8080", with: String(node.port))
      let result = try await onDedicatedThread { try Self.run(script) }
      #expect(result.status == 0, "docs/api.md mesh examples failed:\n\(result.output)")
      for expected in [
        "\"state\":\"linked\"", "\"skills\":\"plumbing\"", "\"verificationCode\"", "\"state\":\"accepted\"",
        "\"state\":\"connected\"", "session.data", "session.event", "invitation.received", "\"transceiving\":true",
        "\"receivedFrom\":{", "\"assignedTo\":{", "\"payment\":\"120.00\"", "\"name\":\"Kitchen crew\"",
        "\"body\":\"I do\"", "\"seq\":2", "hello from alice\n", "\nfrom\n", "\"direction\":\"outgoing\"",
        "\"state\":\"finished\"", "\"sha256\":\"",
      ] {
        #expect(result.output.contains(expected), "docs/api.md mesh output lacks \(expected):\n\(result.output)")
      }
    }
  }

  @Test func apiExamplesRunAgainstARealNode() async throws {
    let examples = try Self.apiExamples()
    #expect(examples.contains("curl"))
    try await withNode { node in
      let script =
        "set -eu\n" + examples.replacingOccurrences(of: "localhost:8080", with: "127.0.0.1:\(node.port)")
      let (status, text) = try await onDedicatedThread { try Self.run(script) }
      #expect(status == 0, "docs/api.md examples failed:\n\(text)")
      #expect(text.contains("\"status\":\"ok\""))
      #expect(text.contains("meshgate_http_requests_total"))
      #expect(text.contains("alice-laptop"))
      #expect(text.contains("event: peer.updated"))
      #expect(text.contains("validation_failed"))
      #expect(text.lowercased().contains("allow: get"))
      #expect(text.hasSuffix("204\n"))
    }
  }

  /// The README's five-minute walkthrough: two peers on one node meet, share a session, a message and a file.
  @Test func readmeWalkthroughRunsAgainstARealNode() async throws {
    let examples = try Self.examples(from: "\n## Five minutes with curl\n", to: "\n## Dashboard")
    #expect(examples.contains("-T /tmp/minutes.txt"))
    try await withNode { node in
      let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("readme-walk-\(UUID().uuidString)")
      try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
      defer { try? FileManager.default.removeItem(at: scratch) }
      let script =
        "set -eu\n"
        + examples.replacingOccurrences(of: "localhost:8080", with: "127.0.0.1:\(node.port)")
        .replacingOccurrences(of: "/tmp/", with: scratch.path + "/")
      let (status, text) = try await onDedicatedThread { try Self.run(script) }
      #expect(status == 0, "README walkthrough failed:\n\(text)")
      for expected in [
        "\"status\":\"ok\"", "\"desk\":\"3\"", "\"state\":\"accepted\"", "\"accepted\":1", "\"state\":\"finished\"",
        "the minutes of the meeting\n", "invitation.received\n", "session.data\n", "transfer.finished\n",
        "event: hello",
      ] {
        #expect(text.contains(expected), "README walkthrough output lacks \(expected):\n\(text)")
      }
    }
  }
}
