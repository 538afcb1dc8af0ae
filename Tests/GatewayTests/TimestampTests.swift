import Foundation
import Testing

@testable import Gateway

/// Event and record times: RFC 3339 in UTC with milliseconds, zero-padded (the formatter writes the digits itself).
struct TimestampTests {
  @Test func formatsUTCWithMillisecondsZeroPadded() {
    #expect(Timestamp.format(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00.000Z")
    #expect(Timestamp.format(Date(timeIntervalSince1970: 1_796_324_593.0456)) == "2026-12-03T19:03:13.045Z")
    #expect(Timestamp.format(Date(timeIntervalSince1970: 951_782_399.25)) == "2000-02-28T23:59:59.250Z")
    #expect(Timestamp.format(Date(timeIntervalSince1970: 951_868_800.5)) == "2000-03-01T00:00:00.500Z")
  }
}
