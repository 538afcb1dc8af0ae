import Foundation
import Testing

@testable import Gateway

struct RecordIDTests {
  /// The bits land where a UUID puts them, with the version and variant set, in lowercase.
  @Test func formatsBitsAsAVersion4UUID() {
    #expect(RecordID.format(high: 0, low: 0) == "00000000-0000-4000-8000-000000000000")
    #expect(RecordID.format(high: .max, low: .max) == "ffffffff-ffff-4fff-bfff-ffffffffffff")
    #expect(
      RecordID.format(high: 0x0123_4567_89AB_CDEF, low: 0xFEDC_BA98_7654_3210)
        == "01234567-89ab-4def-bedc-ba9876543210")
  }

  /// Identifiers are what Foundation reads as version-4 UUIDs, lowercase, and do not repeat.
  @Test func newIdentifiersAreDistinctVersion4UUIDs() throws {
    var seen = Set<String>()
    for _ in 0..<2_000 {
      let id = RecordID.make()
      let uuid = try #require(UUID(uuidString: id), "\(id)")
      #expect(uuid.uuidString.lowercased() == id)
      #expect(uuid.uuid.6 >> 4 == 4 && uuid.uuid.8 >> 6 == 2, "\(id)")
      seen.insert(id)
    }
    #expect(seen.count == 2_000)
  }
}
