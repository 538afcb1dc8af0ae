/// A ring of event records in a memory-mapped file, for a durable append with no system call and no thread hop.
///
/// Layer 4 (node runtime), storage. A record copied into the ring is in the page cache at once (`MAP_SHARED`), so it
/// survives the process being killed, `kill -9` included; like SQLite with `synchronous=NORMAL`, only a power loss can
/// lose the newest records. The node appends a small event here on its service thread, delivers it, and lets SQLite
/// catch up in batches (``NodeStore/stageEvents(_:bytes:)``); what SQLite has committed is released, and at start-up
/// what the ring still holds is read back (``records()``) and written to SQLite first
/// (``NodeStore/openEventLog(recovering:ringReleasedThrough:)``).
///
/// Layout: a 64-byte header (magic, capacity, the offset of the oldest record not released, the newest sequence
/// released), then records, each 8-byte aligned: `u32` magic, `u32` payload length, `i64` sequence, `u64` checksum
/// (``checksum(sequence:payload:)``), the payload. A record that does not fit before the end leaves a wrap
/// marker and goes to the start. Reading back starts at the oldest record kept and stops at the first record that is
/// torn (bad magic or checksum), released, or not newer than the one before it (a record of an earlier lap).
///
/// Not thread-safe: one owner appends and releases.
import Foundation

// `@unchecked Sendable`: the ring is read back at start-up, before the node exists, then handed to the node, whose
// event hub alone uses it, on the node's executor (the service thread). Nothing uses it from two threads at once.
final class EventRing: @unchecked Sendable {
  struct Record: Equatable {
    let sequence: Int64
    let payload: [UInt8]
  }

  enum Failure: Error, CustomStringConvertible {
    case open(path: String, errno: Int32)
    case map(path: String, errno: Int32)
    case foreign(path: String)

    var description: String {
      switch self {
      case .open(let path, let code):
        return "could not open or size the event ring \(path): \(String(cString: strerror(code)))"
      case .map(let path, let code):
        return "could not map the event ring \(path) into memory: \(String(cString: strerror(code)))"
      case .foreign(let path):
        return "\(path) is not an event ring of this size (remove it only if the node never ran with it)"
      }
    }
  }

  static let headerBytes = 64
  static let recordHeaderBytes = 24
  private static let fileMagic: UInt64 = 0x4D47_5249_4E47_3031  // "MGRING01"
  private static let recordMagic: UInt32 = 0x4D47_5631  // "MGV1"
  private static let wrapMagic: UInt32 = 0x4D47_5752  // "MGWR"

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
    let fresh = info.st_size == 0
    if fresh {
      // The blocks are allocated now, so a later store into the mapping never waits for the file system to find space.
      guard posix_fallocate(fd, 0, off_t(capacity)) == 0 || ftruncate(fd, off_t(capacity)) == 0 else {
        let code = errno
        close(fd)
        throw Failure.open(path: path, errno: code)
      }
    }
    guard let mapped = mmap(nil, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), mapped != MAP_FAILED else {
      let code = errno
      close(fd)
      throw Failure.map(path: path, errno: code)
    }
    if fresh {
      mapped.storeBytes(of: Self.fileMagic, toByteOffset: 0, as: UInt64.self)
      mapped.storeBytes(of: UInt64(capacity), toByteOffset: 8, as: UInt64.self)
    } else {
      // Checked before the ring exists: once every stored property is set, a throw runs `deinit`, which unmaps and
      // closes again (a second `close` of the number could close a file another thread opened meanwhile).
      guard mapped.load(fromByteOffset: 0, as: UInt64.self) == Self.fileMagic,
        mapped.load(fromByteOffset: 8, as: UInt64.self) == UInt64(capacity)
      else {
        munmap(mapped, capacity)
        close(fd)
        throw Failure.foreign(path: path)
      }
    }
    self.fd = fd
    self.base = mapped
    self.capacity = capacity
    self.head = Self.headerBytes
    if fresh { setTail(Self.headerBytes) } else { recover() }
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
    if empty { setTail(at) }
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
    base.storeBytes(of: sequence, toByteOffset: 24, as: Int64.self)
    if keptStart == kept.count {
      kept.removeAll(keepingCapacity: true)
      keptStart = 0
      usedBytes = 0
      setTail(head)
    } else {
      setTail(kept[keptStart].offset)
      if keptStart > 1024 && keptStart * 2 > kept.count {
        kept.removeFirst(keptStart)
        keptStart = 0
      }
    }
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

  /// The newest sequence kept, if any.
  var newestSequence: Int64? { keptStart < kept.count ? kept.last?.sequence : nil }

  private func setTail(_ offset: Int) {
    base.storeBytes(of: UInt64(offset), toByteOffset: 16, as: UInt64.self)
  }

  /// Reads the kept records back from the oldest one the header names, after the process that wrote them ended.
  private func recover() {
    releasedThrough = base.load(fromByteOffset: 24, as: Int64.self)
    let tail = Int(base.load(fromByteOffset: 16, as: UInt64.self))
    guard tail >= Self.headerBytes, tail < capacity, tail % 8 == 0 else {
      setTail(Self.headerBytes)
      return
    }
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
      guard !wrapped || at < tail, base.load(fromByteOffset: at, as: UInt32.self) == Self.recordMagic else { break }
      let length = Int(base.load(fromByteOffset: at + 4, as: UInt32.self))
      let sequence = base.load(fromByteOffset: at + 8, as: Int64.self)
      let size = Self.recordHeaderBytes + (length + 7) & ~7
      // A record of an earlier lap (older than the one before it, or released) or a torn one ends what is kept.
      guard sequence > previous, at + size <= capacity, !wrapped || at + size <= tail,
        base.load(fromByteOffset: at + 16, as: UInt64.self)
          == Self.checksum(
            sequence: sequence,
            payload: UnsafeRawBufferPointer(start: base + at + Self.recordHeaderBytes, count: length))
      else { break }
      kept.append((sequence, at, size + gap))
      usedBytes += size + gap
      gap = 0
      previous = sequence
      at += size
    }
    head = kept.isEmpty ? tail : at
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
