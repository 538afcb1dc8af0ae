import Foundation
import Testing

@testable import Gateway

/// `meshgate --help`, the parser's flags and docs/configuration.md list the same flags and variables, paired the same
/// way, and the man page made from `--help` (scripts/manpage.py) lists them all.
struct ConfigurationDocsTests {
  static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

  /// The flags the help text's option list starts its lines with (`-h, --help` gives both).
  static func helpFlags() -> Set<String> {
    var flags: Set<String> = []
    for line in NodeConfiguration.helpText.split(separator: "\n") where line.hasPrefix("  -") {
      let words = line.split(separator: " ")
      flags.insert(String(words[0].trimmingCharacters(in: [","])))
      if words[0].hasSuffix(","), words.count > 1 { flags.insert(String(words[1])) }
    }
    return flags
  }

  static func variables(in text: some StringProtocol) -> Set<String> {
    var found: Set<String> = []
    var rest = Substring(text)
    while let range = rest.range(of: "MESHGATE_") {
      let name = rest[range.lowerBound...].prefix { $0.isUppercase || $0 == "_" || $0.isNumber }
      found.insert(String(name))
      rest = rest[range.upperBound...]
    }
    return found
  }

  /// The rows of the "Flags and variables" table: the flags of the first cell, the variables of the second.
  static func documentedRows() throws -> [(flags: Set<String>, variables: Set<String>)] {
    let text = try String(contentsOf: root.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
    let start = try #require(text.range(of: "\n## Flags and variables\n"), "docs/configuration.md lost its table")
    let section = text[start.upperBound...]
    let end = section.range(of: "\n## ")?.lowerBound ?? section.endIndex
    var rows: [(Set<String>, Set<String>)] = []
    for line in section[..<end].split(separator: "\n") where line.hasPrefix("| `-") {
      // `\|` is a bar inside a cell (`auto\|ask`), not a cell border.
      let cells = line.replacingOccurrences(of: "\\|", with: "/").split(
        separator: "|", omittingEmptySubsequences: false)
      guard cells.count > 3 else { continue }
      var flags: Set<String> = []
      for word in cells[1].split(whereSeparator: { " `,".contains($0) }) where word.hasPrefix("-") {
        flags.insert(String(word))
      }
      rows.append((flags, variables(in: cells[2])))
    }
    return rows
  }

  static let parserFlags = Set(NodeConfiguration.settings.map(\.flag)).union(["-h", "--help", "--version"])

  @Test func theHelpTextListsExactlyTheParsersFlagsAndVariables() {
    let help = Self.helpFlags()
    #expect(
      help == Self.parserFlags,
      Comment(
        rawValue: "only in --help: \(help.subtracting(Self.parserFlags).sorted()); "
          + "only in the parser: \(Self.parserFlags.subtracting(help).sorted())"))
    let variables = Self.variables(in: NodeConfiguration.helpText)
    let parsed = Set(NodeConfiguration.settings.map(\.env))
    #expect(
      variables == parsed,
      Comment(
        rawValue: "only in --help: \(variables.subtracting(parsed).sorted()); "
          + "only in the parser: \(parsed.subtracting(variables).sorted())"))
  }

  @Test func theConfigurationPageDocumentsExactlyTheParsersFlagsWithTheirVariables() throws {
    let rows = try Self.documentedRows()
    let documented = rows.reduce(into: Set<String>()) { $0.formUnion($1.flags) }
    #expect(
      documented == Self.parserFlags,
      Comment(
        rawValue: "only in docs/configuration.md: "
          + "\(documented.subtracting(Self.parserFlags).sorted()); not in it: \(Self.parserFlags.subtracting(documented).sorted())"
      ))
    for setting in NodeConfiguration.settings {
      #expect(
        rows.contains { $0.flags.contains(setting.flag) && $0.variables.contains(setting.env) },
        "docs/configuration.md has no row giving \(setting.flag) with \(setting.env)")
    }
    let variables = rows.reduce(into: Set<String>()) { $0.formUnion($1.variables) }
    #expect(variables == Set(NodeConfiguration.settings.map(\.env)))
  }

  /// The parser knows each listed flag (it asks for the flag's value) and refuses a flag it does not list.
  @Test func theParserTakesEveryListedFlagAndRefusesOthers() {
    for setting in NodeConfiguration.settings {
      #expect(throws: ConfigurationError("\(setting.flag) needs a value; run meshgate --help for the options")) {
        try NodeConfiguration.parse(arguments: [setting.flag], environment: [:])
      }
    }
    #expect(throws: ConfigurationError("unknown option \"--colour\"; run meshgate --help for the options")) {
      try NodeConfiguration.parse(arguments: ["--colour"], environment: [:])
    }
  }

  @Test func theManPageMadeFromTheHelpTextListsEveryFlagAndVariable() throws {
    let helpFile = FileManager.default.temporaryDirectory.appendingPathComponent("help-\(UUID().uuidString).txt")
    try NodeConfiguration.helpText.write(to: helpFile, atomically: true, encoding: .utf8)
    defer { try? FileManager.default.removeItem(at: helpFile) }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = [
      "python3", Self.root.appendingPathComponent("scripts/manpage.py").path, "--help-text", helpFile.path,
      NodeConfiguration.version,
    ]
    let output = Pipe()
    process.standardOutput = output
    try process.run()
    let page = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    #expect(process.terminationStatus == 0)
    let options = page.components(separatedBy: ".SH ENVIRONMENT").first ?? ""
    let entries = options.split(separator: "\n").filter { $0.hasPrefix(".B ") }
    let listed = Set(
      entries.flatMap { $0.dropFirst(3).split(whereSeparator: { $0 == " " || $0 == "," }) }.map(String.init))
    for flag in Self.parserFlags {
      #expect(listed.contains(flag.replacingOccurrences(of: "-", with: "\\-")), "the man page lacks \(flag)")
    }
    for variable in NodeConfiguration.settings.map(\.env) {
      #expect(page.contains(".B " + variable), "the man page's ENVIRONMENT lacks \(variable)")
    }
  }
}

/// The readiness message of a `Type=notify` unit: one datagram to `NOTIFY_SOCKET`, nothing without it.
struct SystemdNotifyTests {
  @Test func theStateGoesToTheNotifySocketAsOneDatagram() throws {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("n-\(UUID().uuidString.prefix(8))").path
    let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
    try #require(fd >= 0)
    defer {
      close(fd)
      unlink(path)
    }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { buffer in
      for (index, byte) in path.utf8.enumerated() { buffer[index] = byte }
    }
    let bound = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    try #require(bound == 0)
    #expect(SystemdNotify.send("READY=1\nSTATUS=Serving on port 8080", environment: ["NOTIFY_SOCKET": path]))
    var buffer = [UInt8](repeating: 0, count: 256)
    let count = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
    #expect(count > 0)
    #expect(String(decoding: buffer.prefix(max(count, 0)), as: UTF8.self) == "READY=1\nSTATUS=Serving on port 8080")
  }

  @Test func withoutANotifySocketNothingIsSent() {
    #expect(!SystemdNotify.send("READY=1", environment: [:]))
    #expect(!SystemdNotify.send("READY=1", environment: ["NOTIFY_SOCKET": "relative/path"]))
  }
}
