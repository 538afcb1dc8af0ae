import Logging
import Testing

@Suite struct LogLevelTests {
  @Test func parsesEveryLevelByItsNameInAnyCaseAndWarn() {
    #expect(LogLevel.allCases.map(\.description) == ["trace", "debug", "info", "notice", "warning", "error"])
    for level in LogLevel.allCases {
      #expect(LogLevel(name: level.description) == level)
      #expect(LogLevel(name: level.description.uppercased()) == level)
    }
    #expect(LogLevel(name: "warn") == .warning)
    #expect(LogLevel(name: "Warn") == .warning)
    #expect(LogLevel(name: "loud") == nil)
    #expect(LogLevel(name: "") == nil)
  }
}
