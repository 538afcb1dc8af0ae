/// A ring of event records in a memory-mapped file, for a durable append with no system call and no thread hop.
///
/// Layer 4 (node runtime), storage. A record copied into the ring is in the page cache at once (`MAP_SHARED`), so it
/// survives the process being killed, `kill -9` included; like SQLite with `synchronous=NORMAL`, only a power loss can
/// lose the newest records. The node appends a small event here on its service thread, delivers it, and lets SQLite
/// catch up in batches (``EventLog/append(_:)``); what SQLite has committed is released, and at start-up
/// what the ring still holds is read back (``records()``) and written to SQLite first
/// (``EventLog/open(ring:mostRecords:)``).
///
/// Layout: a 64-byte header, then records, each 8-byte aligned: `u32` magic, `u32` payload length, `i64` sequence,
/// `u64` checksum (``checksum(sequence:payload:)``), the payload. A record that does not fit before the end leaves a
/// wrap marker and goes to the start. The header is the magic, the capacity and two slots, each holding the newest
/// sequence released, the offset of the oldest record not released, a generation and a checksum of them all: an
/// update writes the slot not in use, so a process killed in the middle of one leaves the other slot, one update
/// older, intact (what that older state names was released, not overwritten: records are overwritten only after a
/// later update). Reading back starts at the oldest record kept and stops at the first record that is torn (bad magic
/// or checksum), released, or not newer than the one before it (a record of an earlier lap).
///
/// Damage is never silent: a header whose slots both fail their checksum or bounds makes the node refuse to start
/// with a message naming the file (``Failure/damagedHeader(path:)``), and valid records past the point where reading
/// back stopped (a record in the middle was overwritten) are counted (``dropped``), for the node to log and to keep
/// its event ids above theirs. The file is fully allocated when it is made, and an existing one is checked: a store
/// into a mapping whose blocks the file system cannot find kills the process (`SIGBUS`) when the disk is full.
///
/// Not thread-safe: one owner appends and releases.
import Foundation

// `@unchecked Sendable`: the ring is read back at start-up, before the node exists, then handed to the event log, which
// uses it from one append at a time (the node's publish queue, on the node's executor: the service thread). Nothing
// uses it from two threads at once.
final class EventRing: @unchecked Sendable {
  struct Record: Equatable {
    let sequence: Int64
    let payload: [UInt8]
  }

  enum Failure: Error, CustomStringConvertible {
    case open(path: String, errno: Int32)
    case map(path: String, errno: Int32)
    case foreign(path: String)
    case space(path: String, bytes: Int, errno: Int32)
    case damagedHeader(path: String)

    var description: String {
      switch self {
      case .open(let path, let code):
        return "could not open or size the event ring \(path): \(String(cString: strerror(code)))"
      case .map(let path, let code):
        return "could not map the event ring \(path) into memory: \(String(cString: strerror(code)))"
      case .foreign(let path):
        return "\(path) is not an event ring of this size (remove it only if the node never ran with it)"
      case .space(let path, let bytes, let code):
        return "could not allocate the \(bytes >> 20) MiB of the event ring \(path) "
          + "(\(String(cString: strerror(code)))); free at least that much space on the data directory's file "
          + "system and start the node again (a ring the disk has no blocks for would crash the node once it fills)"
      case .damagedHeader(let path):
        return "the header of the event ring \(path) is damaged (its checksums or bounds do not hold), so the node "
          + "cannot tell which of its records the store still needs; nothing was changed. Move the file aside "
          + "(mv \(path) \(path).damaged) and start again: the node makes a new ring, events it delivered in the "
          + "moments before it stopped that the store had not yet written are lost from the peers' logs, and new "
          + "event ids continue above every id it may have handed out"
      }
    }
  }

  static let headerBytes = 64
  static let recordHeaderBytes = 24
  /// The largest sequence a record may carry: event ids have at most 18 digits (docs/events.md).
  static let maxSequence: Int64 = 999_999_999_999_999_999
  private static let fileMagic: UInt64 = 0x4D47_5249_4E47_3032  // "MGRING02"
  /// The layout before the header had slots: the oldest record's offset at 16, the newest released sequence at 24,
  /// no checksum. Read (with bounds checks) and rewritten as the current layout.
  private static let firstFileMagic: UInt64 = 0x4D47_5249_4E47_3031  // "MGRING01"
  private static let recordMagic: UInt32 = 0x4D47_5631  // "MGV1"
  private static let wrapMagic: UInt32 = 0x4D47_5752  // "MGWR"
  /// Where the header's two slots start, and their fields: released (`i64`), tail (`u32`), generation (`u32`),
  /// checksum (`u64`).
  private static let slotOffsets = [16, 40]

  let capacity: Int
  private let base: UnsafeMutableRawPointer
  private let fd: Int32
  /// Records appended and not released, oldest first: where each starts and how many bytes it takes.
  private var kept: [(sequence: Int64, offset: Int, size: Int)] = []
  private var keptStart = 0
  /// Where the next record goes.
  private var head: Int
  /// Bytes taken by kept records and the wrap gap they span.
  private(set) var usedBytes = 0
  /// Records up to this sequence were released: never read back.
  private(set) var releasedThrough: Int64 = 0
  /// The offset of the oldest record kept, as the header names it.
  private var tail: Int
  /// The header slot written last, and its generation.
  private var slot = 0
  private var generation: UInt32 = 0
  /// The file was empty (made now): nothing could be read back, whatever the node handed out before.
  let wasEmpty: Bool
  /// Valid records found past the point where reading back stopped (a record before them was overwritten or the
  /// header named the wrong place): they are not read back, since what comes after a damaged record cannot be trusted
  /// to be this ring's. Their count and newest sequence, for the node to log and to keep its ids above.
  private(set) var dropped: (count: Int, newest: Int64) = (0, 0)

  /// Opens the ring at `path`, creating it with `capacity` bytes (a multiple of 8, at least 4 KiB) if it is new, and
  /// reads back what it holds.
  init(path: String, capacity: Int) throws {
    precondition(capacity >= 4096 && capacity % 8 == 0, "an event ring needs at least 4 KiB, in 8-byte units")
    let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw Failure.open(path: path, errno: errno) }
    var info = stat()
    guard fstat(fd, &info) == 0 else {
      let code = errno
      close(fd)
      throw Failure.open(path: path, errno: code)
    }
    guard info.st_size == 0 || info.st_size == off_t(capacity) else {
      close(fd)
      throw Failure.foreign(path: path)
    }
    let empty = info.st_size == 0
    // Every block is allocated before the file is mapped: a store into a page the file system has no block for kills
    // the process (SIGBUS) when the disk is full. `ftruncate` would make the file sparse, so there is no fallback: a
    // ring that cannot be allocated is refused. An existing ring with fewer blocks than its size (made sparse by an
    // older version on a nearly full disk, or copied without its holes) is allocated now, or refused the same way.
    if empty || Int(info.st_blocks) * 512 < capacity {
      let code = posix_fallocate(fd, 0, off_t(capacity))
      guard code == 0 else {
        // A new file is left empty, to be made again at the next start.
        if empty { _ = ftruncate(fd, 0) }
        close(fd)
        throw Failure.space(path: path, bytes: capacity, errno: code)
      }
    }
    guard let mapped = mmap(nil, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), mapped != MAP_FAILED else {
      let code = errno
      close(fd)
      throw Failure.map(path: path, errno: code)
    }
    let magic = mapped.load(fromByteOffset: 0, as: UInt64.self)
    // A file the node allocated and was killed before it wrote the header holds zeros: it is new.
    let fresh = empty || (magic == 0 && mapped.load(fromByteOffset: 8, as: UInt64.self) == 0)
    var state: HeaderState?
    if !fresh {
      // Checked before the ring exists: once every stored property is set, a throw runs `deinit`, which unmaps and
      // closes again (a second `close` of the number could close a file another thread opened meanwhile).
      guard magic == Self.fileMagic || magic == Self.firstFileMagic,
        mapped.load(fromByteOffset: 8, as: UInt64.self) == UInt64(capacity)
      else {
        munmap(mapped, capacity)
        close(fd)
        throw Failure.foreign(path: path)
      }
      state = Self.readHeader(mapped, capacity: capacity, firstLayout: magic == Self.firstFileMagic)
      guard state != nil else {
        munmap(mapped, capacity)
        close(fd)
        throw Failure.damagedHeader(path: path)
      }
    }
    self.fd = fd
    self.base = mapped
    self.capacity = capacity
    self.head = Self.headerBytes
    self.tail = Self.headerBytes
    self.wasEmpty = fresh
    if let state {
      releasedThrough = state.released
      slot = state.slot
      generation = state.generation
      recover(from: state.tail)
      if magic == Self.firstFileMagic {
        // The slot the old layout's fields do not overlap first, then the magic that makes it the one read.
        slot = 0
        writeHeader()
        base.storeBytes(of: Self.fileMagic, toByteOffset: 0, as: UInt64.self)
      }
    } else {
      // The slot and the capacity before the magic: a file killed before the magic is still all zeros up front.
      writeHeader()
      mapped.storeBytes(of: UInt64(capacity), toByteOffset: 8, as: UInt64.self)
      mapped.storeBytes(of: Self.fileMagic, toByteOffset: 0, as: UInt64.self)
    }
  }

  deinit {
    munmap(base, capacity)
    close(fd)
  }

  /// Copies a record into the ring. False when the ring has no room for it (release what SQLite committed first).
  func append(sequence: Int64, payload: [UInt8]) -> Bool {
    if let last = kept.last, keptStart < kept.count { precondition(sequence > last.sequence, "sequences must grow") }
    precondition(sequence > releasedThrough, "a sequence at or below the released ones")
    let size = Self.size(payload: payload.count)
    let empty = keptStart == kept.count
    if empty { head = Self.headerBytes }
    var at = head
    var gap = 0
    if at + size > capacity {
      // No room before the end: a wrap marker (when one fits there) and the record at the start.
      gap = capacity - at
      at = Self.headerBytes
    }
    guard usedBytes + gap + size <= capacity - Self.headerBytes else { return false }
    if gap >= 4 { base.storeBytes(of: Self.wrapMagic, toByteOffset: head, as: UInt32.self) }
    // An empty ring starts over at the front; the header names it before the record is there, so a process killed in
    // between leaves nothing to read back there but released records (stopped at by their sequence).
    if empty && tail != at {
      tail = at
      writeHeader()
    }
    let record = base + at
    payload.withUnsafeBytes { source in
      if let start = source.baseAddress {
        (record + Self.recordHeaderBytes).copyMemory(from: start, byteCount: source.count)
      }
      record.storeBytes(of: UInt32(truncatingIfNeeded: source.count), toByteOffset: 4, as: UInt32.self)
      record.storeBytes(of: sequence, toByteOffset: 8, as: Int64.self)
      record.storeBytes(of: Self.checksum(sequence: sequence, payload: source), toByteOffset: 16, as: UInt64.self)
    }
    // The magic last: a record cut short before it is not read back as one.
    record.storeBytes(of: Self.recordMagic, toByteOffset: 0, as: UInt32.self)
    // The gap before a wrapped record counts as used until that record is released.
    kept.append((sequence, at, size + gap))
    usedBytes += size + gap
    head = at + size
    return true
  }

  /// Frees the records up to `sequence` (SQLite has committed them).
  func release(through sequence: Int64) {
    guard sequence > releasedThrough else { return }
    while keptStart < kept.count, kept[keptStart].sequence <= sequence {
      usedBytes -= kept[keptStart].size
      keptStart += 1
    }
    releasedThrough = sequence
    if keptStart == kept.count {
      kept.removeAll(keepingCapacity: true)
      keptStart = 0
      usedBytes = 0
      tail = head
    } else {
      tail = kept[keptStart].offset
      if keptStart > 1024 && keptStart * 2 > kept.count {
        kept.removeFirst(keptStart)
        keptStart = 0
      }
    }
    writeHeader()
  }

  /// The records kept (appended and not released), oldest first.
  func records() -> [Record] {
    kept[keptStart...].map { entry in
      let length = Int(base.load(fromByteOffset: entry.offset + 4, as: UInt32.self))
      let start = base + entry.offset + Self.recordHeaderBytes
      return Record(sequence: entry.sequence, payload: Array(UnsafeRawBufferPointer(start: start, count: length)))
    }
  }

  /// Bytes free for records (a record takes ``size(payload:)``, and one that wraps also the gap it leaves, which is
  /// smaller than itself).
  var freeBytes: Int { capacity - Self.headerBytes - usedBytes }

  /// The bytes a record with a payload of `count` bytes takes in the ring.
  static func size(payload count: Int) -> Int { recordHeaderBytes + (count + 7) & ~7 }

  /// The most records a ring of `capacity` bytes can hold at once: no more events can have been handed out past
  /// SQLite's last commit and be only in a ring that was lost.
  static func mostRecords(capacity: Int) -> Int64 { Int64((capacity - headerBytes) / recordHeaderBytes) }

  /// The newest sequence kept, if any.
  var newestSequence: Int64? { keptStart < kept.count ? kept.last?.sequence : nil }

  // MARK: - Header

  struct HeaderState: Equatable {
    var released: Int64
    var tail: Int
    var slot: Int
    var generation: UInt32
  }

  /// Writes `releasedThrough` and `tail` into the slot not written last: a process killed in the middle leaves the
  /// other slot as it was.
  private func writeHeader() {
    slot ^= 1
    generation &+= 1
    let at = Self.slotOffsets[slot]
    let tail = UInt32(truncatingIfNeeded: self.tail)
    // The checksum first: until the fields match it, the slot is invalid and the other one is read.
    base.storeBytes(of: 0, toByteOffset: at + 16, as: UInt64.self)
    base.storeBytes(of: releasedThrough, toByteOffset: at, as: Int64.self)
    base.storeBytes(of: tail, toByteOffset: at + 8, as: UInt32.self)
    base.storeBytes(of: generation, toByteOffset: at + 12, as: UInt32.self)
    base.storeBytes(
      of: Self.slotChecksum(
        slot: slot, capacity: capacity, released: releasedThrough, tail: tail, generation: generation),
      toByteOffset: at + 16, as: UInt64.self)
  }

  private static func slotChecksum(slot: Int, capacity: Int, released: Int64, tail: UInt32, generation: UInt32)
    -> UInt64
  {
    withUnsafeBytes(of: (UInt64(slot), UInt64(capacity), released, UInt64(tail) << 32 | UInt64(generation))) {
      checksum(sequence: 0x4D47_4844, payload: $0)
    }
  }

  /// The header's state, or nil when it is damaged: no slot has a matching checksum and values in bounds (a tail
  /// inside the file on a record boundary, a released sequence of at most 18 digits).
  static func readHeader(_ base: UnsafeRawPointer, capacity: Int, firstLayout: Bool) -> HeaderState? {
    func inBounds(released: Int64, tail: UInt64) -> Bool {
      released >= 0 && released <= maxSequence && tail >= UInt64(headerBytes) && tail < UInt64(capacity)
        && tail % 8 == 0
    }
    if firstLayout {
      let tail = base.load(fromByteOffset: 16, as: UInt64.self)
      let released = base.load(fromByteOffset: 24, as: Int64.self)
      guard inBounds(released: released, tail: tail) else { return nil }
      return HeaderState(released: released, tail: Int(tail), slot: 1, generation: 0)
    }
    let valid = slotOffsets.indices.compactMap { slot -> HeaderState? in
      let at = slotOffsets[slot]
      let released = base.load(fromByteOffset: at, as: Int64.self)
      let tail = base.load(fromByteOffset: at + 8, as: UInt32.self)
      let generation = base.load(fromByteOffset: at + 12, as: UInt32.self)
      let checksum = slotChecksum(
        slot: slot, capacity: capacity, released: released, tail: tail, generation: generation)
      guard base.load(fromByteOffset: at + 16, as: UInt64.self) == checksum,
        inBounds(released: released, tail: UInt64(tail))
      else { return nil }
      return HeaderState(released: released, tail: Int(tail), slot: slot, generation: generation)
    }
    // Both valid: the newer is the one written after the other (generations wrap).
    guard valid.count == 2 else { return valid.first }
    return Int32(bitPattern: valid[0].generation &- valid[1].generation) > 0 ? valid[0] : valid[1]
  }

  // MARK: - Reading back

  /// Reads the kept records back from the oldest one the header names, after the process that wrote them ended; then
  /// counts valid records that reading back did not reach (``dropped``).
  private func recover(from tail: Int) {
    self.tail = tail
    var at = tail
    var gap = 0
    var wrapped = false
    var previous = releasedThrough
    while true {
      if at + Self.recordHeaderBytes > capacity || base.load(fromByteOffset: at, as: UInt32.self) == Self.wrapMagic {
        guard !wrapped, at >= tail else { break }
        wrapped = true
        gap = capacity - at
        at = Self.headerBytes
        continue
      }
      // After the wrap, this lap's records end before the oldest kept one.
      guard !wrapped || at < tail, let size = recordSize(at: at, after: previous),
        !wrapped || at + size <= tail
      else { break }
      let sequence = base.load(fromByteOffset: at + 8, as: Int64.self)
      kept.append((sequence, at, size + gap))
      usedBytes += size + gap
      gap = 0
      previous = sequence
      at += size
    }
    head = kept.isEmpty ? tail : at
    countDropped()
  }

  /// The size of a whole, valid record at `at` with a sequence above `after` (and of at most 18 digits), or nil.
  private func recordSize(at: Int, after: Int64) -> Int? {
    guard at + Self.recordHeaderBytes <= capacity, base.load(fromByteOffset: at, as: UInt32.self) == Self.recordMagic
    else { return nil }
    let length = Int(base.load(fromByteOffset: at + 4, as: UInt32.self))
    let sequence = base.load(fromByteOffset: at + 8, as: Int64.self)
    let size = Self.recordHeaderBytes + (length + 7) & ~7
    guard sequence > after, sequence <= Self.maxSequence, at + size <= capacity,
      base.load(fromByteOffset: at + 16, as: UInt64.self)
        == Self.checksum(
          sequence: sequence, payload: UnsafeRawBufferPointer(start: base + at + Self.recordHeaderBytes, count: length))
    else { return nil }
    return size
  }

  /// Counts the valid records not released and not read back, outside the records read back (a record's payload is
  /// not searched: it may hold anything). In a sound ring there are none: every record above the released sequence is
  /// one reading back reaches.
  private func countDropped() {
    // A record's own bytes (a kept entry's size also counts the wrap gap before it, at the end of the file).
    var covered = kept.map { entry in
      (
        start: entry.offset,
        end: entry.offset + Self.size(payload: Int(base.load(fromByteOffset: entry.offset + 4, as: UInt32.self)))
      )
    }.sorted { $0.start < $1.start }
    covered.append((capacity, capacity))
    var next = 0
    var at = Self.headerBytes
    while at + Self.recordHeaderBytes <= capacity {
      while covered[next].end <= at && covered[next].start < capacity { next += 1 }
      if covered[next].start <= at && at < covered[next].end {
        at = covered[next].end
        continue
      }
      if let size = recordSize(at: at, after: releasedThrough) {
        dropped.count += 1
        dropped.newest = max(dropped.newest, base.load(fromByteOffset: at + 8, as: Int64.self))
        at += size
      } else {
        at += 8
      }
    }
  }

  /// FNV-1a, 64 bits, taken a word at a time (8 bytes, little-endian, the last one padded with zeros) over the
  /// sequence, the length and the payload, then mixed so every input bit reaches every output bit. It catches a torn
  /// or overwritten record; it is no defence against a forged one (the file is the node's own).
  static func checksum(sequence: Int64, payload: UnsafeRawBufferPointer) -> UInt64 {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    func mix(_ word: UInt64) {
      hash ^= word
      hash = hash &* 0x0000_0100_0000_01b3
    }
    mix(UInt64(bitPattern: sequence))
    mix(UInt64(payload.count))
    let whole = payload.count & ~7
    var offset = 0
    while offset < whole {
      mix(UInt64(littleEndian: payload.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
      offset += 8
    }
    if offset < payload.count {
      var last: UInt64 = 0
      for (shift, byte) in payload[offset...].enumerated() { last |= UInt64(byte) << (8 * shift) }
      mix(last)
    }
    hash ^= hash >> 33
    hash = hash &* 0xff51_afd7_ed55_8ccd
    return hash ^ (hash >> 33)
  }
}
