import Foundation
import MeshgateTestSupport
import Testing

/// The README's curl examples must work as written: run them against a real node.
@Suite(.timeLimit(.minutes(2)))
struct ReadmeTests {
  static let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().appendingPathComponent("README.md")

  /// The shell blocks of the README's API section.
  static func apiExamples() throws -> String {
    let text = try String(contentsOf: readme, encoding: .utf8)
    guard let start = text.range(of: "\n## API\n"),
      let end = text.range(of: "\n### Live events", range: start.upperBound..<text.endIndex)
    else { throw TestSupportError.unexpectedMessage("README.md has no API section") }
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

  @Test func apiExamplesRunAgainstARealNode() async throws {
    let examples = try Self.apiExamples()
    #expect(examples.contains("curl"))
    try await withNode { node in
      let script =
        "set -euo pipefail\n" + examples.replacingOccurrences(of: "localhost:8080", with: "127.0.0.1:\(node.port)")
      let path = FileManager.default.temporaryDirectory.appendingPathComponent("readme-\(UUID().uuidString).sh").path
      try script.write(toFile: path, atomically: true, encoding: .utf8)
      defer { try? FileManager.default.removeItem(atPath: path) }
      let process = Process()
      process.executableURL = URL(fileURLWithPath: "/bin/bash")
      process.arguments = [path]
      let output = Pipe()
      process.standardOutput = output
      process.standardError = output
      try process.run()
      let data = output.fileHandleForReading.readDataToEndOfFile()
      process.waitUntilExit()
      let text = String(decoding: data, as: UTF8.self)
      #expect(process.terminationStatus == 0, "README examples failed:\n\(text)")
      #expect(text.contains("\"status\":\"ok\""))
      #expect(text.contains("meshgate_http_requests_total"))
      #expect(text.contains("alice-laptop"))
      #expect(text.contains("event: peer.updated"))
      #expect(text.contains("validation_failed"))
      #expect(text.lowercased().contains("allow: get"))
      #expect(text.hasSuffix("204\n"))
    }
  }
}
