import Foundation
import Testing

@testable import Gateway

/// The memory-mapped event ring: what was appended and not released is read back after the process ends (here: the
/// ring is dropped without any release and opened again, which is what a killed process leaves in the page cache).
@Suite struct EventRingTests {
  private func withRingFile(_ body: (String) throws -> Void) throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("event-ring-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    try body(directory.appendingPathComponent("events.ring").path)
  }

  private func payload(_ sequence: Int64, _ size: Int) -> [UInt8] {
    (0..<size).map { UInt8(truncatingIfNeeded: Int(sequence) &* 31 &+ $0) }
  }

  @Test func whatWasAppendedIsReadBackAfterAReopen() throws {
    try withRingFile { path in
      do {
        let ring = try EventRing(path: path, capacity: 64 << 10)
        for sequence in Int64(1)...3 { #expect(ring.append(sequence: sequence, payload: payload(sequence, 100))) }
      }
      let ring = try EventRing(path: path, capacity: 64 << 10)
      #expect(ring.records() == (Int64(1)...3).map { EventRing.Record(sequence: $0, payload: payload($0, 100)) })
      #expect(ring.newestSequence == 3)
    }
  }

  @Test func releasedRecordsAreNotReadBack() throws {
    try withRingFile { path in
      do {
        let ring = try EventRing(path: path, capacity: 64 << 10)
        for sequence in Int64(1)...5 { #expect(ring.append(sequence: sequence, payload: payload(sequence, 10))) }
        ring.release(through: 3)
      }
      #expect(try EventRing(path: path, capacity: 64 << 10).records().map(\.sequence) == [4, 5])
      do {
        let ring = try EventRing(path: path, capacity: 64 << 10)
        ring.release(through: 5)
      }
      // Everything released: the old records still in the file are not read back.
      let ring = try EventRing(path: path, capacity: 64 << 10)
      #expect(ring.records().isEmpty)
      #expect(ring.append(sequence: 6, payload: payload(6, 10)))
    }
  }

  @Test func aTornRecordEndsWhatIsReadBack() throws {
    try withRingFile { path in
      do {
        let ring = try EventRing(path: path, capacity: 64 << 10)
        for sequence in Int64(1)...3 { #expect(ring.append(sequence: sequence, payload: payload(sequence, 40))) }
      }
      // One byte of the third record's payload changed, as if the write had been cut short.
      let third = EventRing.headerBytes + 2 * (EventRing.recordHeaderBytes + 40) + EventRing.recordHeaderBytes + 7
      let file = try #require(FileHandle(forUpdatingAtPath: path))
      try file.seek(toOffset: UInt64(third))
      try file.write(contentsOf: [0xFF])
      try file.close()
      #expect(try EventRing(path: path, capacity: 64 << 10).records().map(\.sequence) == [1, 2])
    }
  }

  /// Every single changed byte changes the checksum, in whole words and in the padded last one, and so does the
  /// sequence or the length (a payload with a trailing zero byte is not the same record).
  @Test func everyChangedByteChangesTheChecksum() {
    for length in 0...19 {
      let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
      let original = bytes.withUnsafeBytes { EventRing.checksum(sequence: 9, payload: $0) }
      for index in 0..<length {
        var changed = bytes
        changed[index] ^= 0x40
        #expect(changed.withUnsafeBytes { EventRing.checksum(sequence: 9, payload: $0) } != original)
      }
      #expect(bytes.withUnsafeBytes { EventRing.checksum(sequence: 10, payload: $0) } != original)
      #expect((bytes + [0]).withUnsafeBytes { EventRing.checksum(sequence: 9, payload: $0) } != original)
    }
  }

  @Test func aFullRingRefusesUntilRecordsAreReleased() throws {
    try withRingFile { path in
      let ring = try EventRing(path: path, capacity: 4096)
      var sequence: Int64 = 0
      while ring.append(sequence: sequence + 1, payload: payload(sequence + 1, 200)) { sequence += 1 }
      #expect(sequence == Int64((4096 - EventRing.headerBytes) / (EventRing.recordHeaderBytes + 200)))
      ring.release(through: 2)
      #expect(ring.append(sequence: sequence + 1, payload: payload(sequence + 1, 200)))
      #expect(ring.records().first?.sequence == 3)
    }
  }

  @Test func aFileThatIsNotARingOfThisSizeIsRefused() throws {
    try withRingFile { path in
      #expect(FileManager.default.createFile(atPath: path, contents: Data(repeating: 7, count: 4096)))
      #expect(throws: EventRing.Failure.self) { try EventRing(path: path, capacity: 4096) }
      #expect(throws: EventRing.Failure.self) { try EventRing(path: path, capacity: 8192) }
    }
  }

  /// Appends, releases and reopens at random in a small ring, so that it wraps many times, against a list of what
  /// must be kept: every reopen reads back exactly that list, in order.
  @Test(arguments: [1, 2, 3]) func randomUseReadsBackExactlyWhatIsKept(seed: UInt64) throws {
    try withRingFile { path in
      var random = SplitMix(seed: seed)
      var ring = try EventRing(path: path, capacity: 4096)
      var kept: [EventRing.Record] = []
      var next: Int64 = 1
      var (refusals, reopens) = (0, 0)
      for _ in 0..<3000 {
        switch random.next() % 10 {
        case 0..<7:
          let record = EventRing.Record(sequence: next, payload: payload(next, Int(random.next() % 300)))
          if ring.append(sequence: record.sequence, payload: record.payload) {
            kept.append(record)
            next += 1
          } else {
            // Refused for want of room: once everything is released it fits.
            refusals += 1
            #expect(!kept.isEmpty)
            if let newest = kept.last { ring.release(through: newest.sequence) }
            kept = []
            #expect(ring.append(sequence: record.sequence, payload: record.payload))
            kept.append(record)
            next += 1
          }
        case 7..<9:
          if !kept.isEmpty {
            // A few at a time, as batches commit, so the ring also fills up.
            let count = Int(random.next() % UInt64(min(kept.count, 4))) + 1
            ring.release(through: kept[count - 1].sequence)
            kept.removeFirst(count)
          }
        default:
          ring = try EventRing(path: path, capacity: 4096)
          reopens += 1
          #expect(ring.records() == kept)
        }
      }
      // About 250 KiB went through the 4 KiB ring: it wrapped many times, filled up and was reopened in between.
      #expect(
        next > 1000 && refusals > 10 && reopens > 100, "\(next) records, \(refusals) refusals, \(reopens) reopens")
      ring = try EventRing(path: path, capacity: 4096)
      #expect(ring.records() == kept)
    }
  }
}

/// A small deterministic generator for the random test.
private struct SplitMix {
  var state: UInt64
  init(seed: UInt64) { state = seed }
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var value = state
    value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
    value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
    return value ^ (value >> 31)
  }
}
