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

  // MARK: - Allocation

  /// On a disk without room for the ring, the node does not start with a sparse file (whose first store into a page
  /// with no block would kill it with SIGBUS once the disk fills): the ring is refused with a message that names the
  /// file and what to do, and the file is left empty, to be made again at the next start.
  @Test(.enabled(if: SmallDisk.available, "needs root and permission to mount a tmpfs (CAP_SYS_ADMIN)"))
  func aRingTheDiskHasNoRoomForIsRefused() throws {
    let disk = try SmallDisk(bytes: 2 << 20)
    defer { disk.unmount() }
    let path = disk.path + "/events.ring"
    #expect {
      try EventRing(path: path, capacity: 4 << 20)
    } throws: { error in
      guard case .space = error as? EventRing.Failure else { return false }
      let text = String(describing: error)
      return text.contains(path) && text.contains("free at least")
    }
    #expect((try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) == 0)
  }

  /// A ring file with fewer blocks than its size (made sparse by an older version, or copied without its holes) is
  /// allocated when it is opened, and keeps its records.
  @Test func aSparseRingIsAllocatedWhenOpened() throws {
    try withRingFile { path in
      try writeSparseCopy(of: { ring in #expect(ring.append(sequence: 1, payload: payload(1, 100))) }, to: path)
      #expect(try allocatedBytes(path) < 64 << 10, "the copy is sparse")
      let ring = try EventRing(path: path, capacity: 64 << 10)
      #expect(ring.records().map(\.sequence) == [1])
      #expect(try allocatedBytes(path) >= 64 << 10)
    }
  }

  /// A sparse ring the disk has no room to allocate is refused, not used.
  @Test(.enabled(if: SmallDisk.available, "needs root and permission to mount a tmpfs (CAP_SYS_ADMIN)"))
  func aSparseRingTheDiskCannotAllocateIsRefused() throws {
    let disk = try SmallDisk(bytes: 1 << 20)
    defer { disk.unmount() }
    let path = disk.path + "/events.ring"
    try writeSparseCopy(of: { _ in }, to: path, capacity: 4 << 20)
    #expect {
      try EventRing(path: path, capacity: 4 << 20)
    } throws: { error in
      guard case .space = error as? EventRing.Failure else { return false }
      return String(describing: error).contains(path)
    }
  }

  /// Writes a sparse copy of a ring of `capacity` bytes that `fill` wrote: its first page only, the rest a hole.
  private func writeSparseCopy(of fill: (EventRing) -> Void, to path: String, capacity: Int = 64 << 10) throws {
    let source = FileManager.default.temporaryDirectory.appendingPathComponent("ring-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: source) }
    do { fill(try EventRing(path: source, capacity: capacity)) }
    let page = try #require(FileManager.default.contents(atPath: source)).prefix(4096)
    let fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    try #require(fd >= 0)
    defer { close(fd) }
    try #require(ftruncate(fd, off_t(capacity)) == 0)
    try #require(page.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) } == page.count)
  }

  private func allocatedBytes(_ path: String) throws -> Int {
    var info = stat()
    try #require(stat(path, &info) == 0)
    return Int(info.st_blocks) * 512
  }

  // MARK: - Damage

  /// A ring file in the layout before the header had slots and checksums (the oldest record's offset at 16, the
  /// newest released sequence at 24), holding `records` one after the other from the front. Returns where each starts.
  @discardableResult
  private func writeFirstLayoutRing(
    _ path: String, capacity: Int = 64 << 10, tail: UInt64 = 64, released: Int64 = 0, records: [Int64] = []
  ) -> [Int] {
    var bytes = [UInt8](repeating: 0, count: capacity)
    func put<T: FixedWidthInteger>(_ value: T, at offset: Int) {
      withUnsafeBytes(of: value.littleEndian) { bytes.replaceSubrange(offset..<offset + $0.count, with: $0) }
    }
    put(UInt64(0x4D47_5249_4E47_3031), at: 0)
    put(UInt64(capacity), at: 8)
    put(tail, at: 16)
    put(released, at: 24)
    var offsets: [Int] = []
    var at = EventRing.headerBytes
    for sequence in records {
      let body = payload(sequence, 40)
      offsets.append(at)
      put(UInt32(0x4D47_5631), at: at)
      put(UInt32(body.count), at: at + 4)
      put(sequence, at: at + 8)
      put(body.withUnsafeBytes { EventRing.checksum(sequence: sequence, payload: $0) }, at: at + 16)
      bytes.replaceSubrange(at + 24..<at + 24 + body.count, with: body)
      at += EventRing.size(payload: body.count)
    }
    FileManager.default.createFile(atPath: path, contents: Data(bytes))
    return offsets
  }

  private func overwrite(_ path: String, at offset: Int, with bytes: [UInt8]) throws {
    let file = try #require(FileHandle(forUpdatingAtPath: path))
    try file.seek(toOffset: UInt64(offset))
    try file.write(contentsOf: bytes)
    try file.close()
  }

  /// A ring of the first layout is read back as it was, and rewritten in the current one.
  @Test func aRingOfTheFirstLayoutIsReadBackAndRewritten() throws {
    try withRingFile { path in
      let second = UInt64(EventRing.headerBytes + EventRing.size(payload: 40))
      writeFirstLayoutRing(path, tail: second, released: 1, records: [1, 2, 3])
      #expect(try EventRing(path: path, capacity: 64 << 10).records().map(\.sequence) == [2, 3])
      let ring = try EventRing(path: path, capacity: 64 << 10)
      #expect(ring.records().map(\.sequence) == [2, 3])
      #expect(ring.releasedThrough == 1)
    }
  }

  /// A header whose values cannot be (an offset past the file or off a record boundary, a released sequence past 18
  /// digits or below zero) is refused, with a message naming the file and what to do: never a trap, never ids of 19
  /// digits, never records dropped in silence.
  @Test(arguments: [
    (UInt64(1) << 63, Int64(0)), (UInt64.max, Int64(0)), (UInt64(0), Int64(0)), (UInt64(68), Int64(0)),
    (UInt64(64 << 10), Int64(0)), (UInt64(64), Int64.max), (UInt64(64), Int64(-1)),
    (UInt64(64), EventRing.maxSequence + 1),
  ])
  func aHeaderWithImpossibleValuesIsRefusedNamingTheFile(tail: UInt64, released: Int64) throws {
    try withRingFile { path in
      writeFirstLayoutRing(path, tail: tail, released: released, records: [1, 2])
      #expect {
        try EventRing(path: path, capacity: 64 << 10)
      } throws: { error in
        guard case .damagedHeader = error as? EventRing.Failure else { return false }
        let text = String(describing: error)
        return text.contains(path) && text.contains("mv \(path) \(path).damaged") && text.contains("lost")
      }
    }
  }

  /// Records past a damaged one (a header naming the middle of a record, bytes overwritten after the header, a record
  /// whose length lies) are not read back, and are counted, with the newest sequence among them.
  @Test func recordsPastADamagedOneAreCounted() throws {
    try withRingFile { path in
      // The oldest record's offset points into the middle of the first record.
      writeFirstLayoutRing(path, tail: 72, records: [1, 2, 3, 4, 5])
      var ring = try EventRing(path: path, capacity: 64 << 10)
      #expect(ring.records().isEmpty)
      #expect(ring.dropped == (5, 5))

      // Garbage over the first record.
      let offsets = writeFirstLayoutRing(path, records: [1, 2, 3, 4, 5])
      try overwrite(path, at: offsets[0], with: [UInt8](repeating: 0xA5, count: offsets[1] - offsets[0]))
      ring = try EventRing(path: path, capacity: 64 << 10)
      #expect(ring.records().isEmpty)
      #expect(ring.dropped == (4, 5))

      // The second record's length lies (longer than it is).
      writeFirstLayoutRing(path, records: [1, 2, 3, 4, 5])
      try overwrite(path, at: offsets[1] + 4, with: [200, 0, 0, 0])
      ring = try EventRing(path: path, capacity: 64 << 10)
      #expect(ring.records().map(\.sequence) == [1])
      #expect(ring.dropped == (3, 5))

      // A record cut short at the head (the process was killed while writing it) is no damage: nothing is counted.
      writeFirstLayoutRing(path, records: [1, 2, 3])
      try overwrite(path, at: offsets[2] + 30, with: [0xFF])
      ring = try EventRing(path: path, capacity: 64 << 10)
      #expect(ring.records().map(\.sequence) == [1, 2])
      #expect(ring.dropped == (0, 0))
    }
  }

  /// The header keeps two slots and an update writes the one not in use: a process killed in the middle of an update
  /// (here: either slot spoilt) leaves the other, and nothing kept is lost. Both spoilt is damage, refused.
  @Test func aSpoiltHeaderSlotFallsBackToTheOtherAndBothAreRefused() throws {
    try withRingFile { path in
      for spoilt in [[16], [40], [16, 40]] {
        try? FileManager.default.removeItem(atPath: path)
        do {
          let ring = try EventRing(path: path, capacity: 64 << 10)
          for sequence in Int64(1)...6 { #expect(ring.append(sequence: sequence, payload: payload(sequence, 30))) }
          ring.release(through: 2)
          ring.release(through: 3)
        }
        for slot in spoilt { try overwrite(path, at: slot + 8, with: [0x5A]) }
        if spoilt.count == 2 {
          #expect(throws: EventRing.Failure.self) { try EventRing(path: path, capacity: 64 << 10) }
          continue
        }
        let ring = try EventRing(path: path, capacity: 64 << 10)
        let sequences = ring.records().map(\.sequence)
        #expect(sequences.suffix(3) == [4, 5, 6] && sequences.count <= 4, "\(sequences)")
        #expect(ring.dropped.count == 0)
      }
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
          // A sound ring has no valid record past what is read back: nothing is counted as dropped.
          #expect(ring.dropped.count == 0)
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
