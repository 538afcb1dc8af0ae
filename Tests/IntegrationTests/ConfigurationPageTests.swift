import Foundation
import MeshgateTestSupport
import Testing

/// The built binary's `--help` and docs/configuration.md's table list the same flags and variables.
struct ConfigurationPageTests {
  static let page = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().appendingPathComponent("docs/configuration.md")

  static func words(_ text: some StringProtocol, where keep: (String) -> Bool) -> Set<String> {
    let separators: Set<Character> = [" ", "`", ",", "(", ")", "|", ";"]
    var found: Set<String> = []
    for word in String(text).split(whereSeparator: { separators.contains($0) }) where keep(String(word)) {
      found.insert(String(word))
    }
    return found
  }

  @Test func helpAndTheConfigurationPageListTheSameFlagsAndVariables() throws {
    let help = try NodeProcess.runToCompletion(arguments: ["--help"])
    #expect(help.status == 0)
    var helpFlags: Set<String> = []
    for line in help.stdout.split(separator: "\n") where line.hasPrefix("  -") {
      let words = line.split(separator: " ")
      helpFlags.insert(String(words[0].trimmingCharacters(in: [","])))
      if words[0].hasSuffix(","), words.count > 1 { helpFlags.insert(String(words[1])) }
    }
    let helpVariables = Self.words(help.stdout) { $0.hasPrefix("MESHGATE_") }

    let text = try String(contentsOf: Self.page, encoding: .utf8)
    let start = try #require(text.range(of: "\n## Flags and variables\n"))
    let section = text[start.upperBound...]
    let table = section[..<(section.range(of: "\n## ")?.lowerBound ?? section.endIndex)]
    var pageFlags: Set<String> = []
    var pageVariables: Set<String> = []
    for row in table.split(separator: "\n") where row.hasPrefix("| `-") {
      // `\|` is a bar inside a cell (`auto\|ask`), not a cell border.
      let cells = row.replacingOccurrences(of: "\\|", with: "/").split(separator: "|", omittingEmptySubsequences: false)
      pageFlags.formUnion(Self.words(cells[1]) { $0.hasPrefix("-") })
      pageVariables.formUnion(Self.words(cells[2]) { $0.hasPrefix("MESHGATE_") })
    }
    #expect(helpFlags.count > 25)
    #expect(
      helpFlags == pageFlags,
      Comment(
        rawValue: "only in --help: \(helpFlags.subtracting(pageFlags).sorted()); "
          + "only in docs/configuration.md: \(pageFlags.subtracting(helpFlags).sorted())"))
    #expect(
      helpVariables == pageVariables,
      Comment(
        rawValue: "only in --help: \(helpVariables.subtracting(pageVariables).sorted()); "
          + "only in docs/configuration.md: \(pageVariables.subtracting(helpVariables).sorted())"))
  }
}
