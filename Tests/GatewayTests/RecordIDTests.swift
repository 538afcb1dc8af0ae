import Foundation
import Testing

@testable import Gateway

struct RecordIDTests {
  /// The time, then the random bits, land where a version 7 UUID puts them, with the version and variant set, in
  /// lowercase.
  @Test func formatsTimeAndBitsAsAVersion7UUID() {
    #expect(RecordID.format(milliseconds: 0, high: 0, low: 0) == "00000000-0000-7000-8000-000000000000")
    #expect(RecordID.format(milliseconds: .max, high: .max, low: .max) == "ffffffff-ffff-7fff-bfff-ffffffffffff")
    #expect(
      RecordID.format(milliseconds: 0x0193_8F2A_6B4C, high: 0xABC, low: 0xFEDC_BA98_7654_3210)
        == "01938f2a-6b4c-7abc-bedc-ba9876543210")
  }

  /// Identifiers are what Foundation reads as version 7 UUIDs, lowercase, carry the time they were made, do not
  /// repeat, and those made in a later millisecond sort after.
  @Test func newIdentifiersAreDistinctTimeOrderedVersion7UUIDs() throws {
    let before = UInt64(Date().timeIntervalSince1970 * 1000)
    var ids: [String] = []
    for _ in 0..<2_000 {
      let id = RecordID.make()
      let uuid = try #require(UUID(uuidString: id), "\(id)")
      #expect(uuid.uuidString.lowercased() == id)
      #expect(uuid.uuid.6 >> 4 == 7 && uuid.uuid.8 >> 6 == 2, "\(id)")
      ids.append(id)
    }
    let after = UInt64(Date().timeIntervalSince1970 * 1000)
    #expect(Set(ids).count == ids.count)
    for id in [ids.first!, ids.last!] {
      let milliseconds = try #require(UInt64(id.prefix(13).replacingOccurrences(of: "-", with: ""), radix: 16))
      #expect((before...after).contains(milliseconds), "\(id) made between \(before) and \(after)")
    }
    let later = ids.indices.dropFirst().filter { ids[$0].prefix(13) != ids[$0 - 1].prefix(13) }
    #expect(later.allSatisfy { ids[$0] > ids[$0 - 1] }, "an id from a later millisecond sorts after")
  }
}
