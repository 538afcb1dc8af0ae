/// File I/O for resource transfers, off the lws service thread.
///
/// Layer 4 (node runtime). Each transfer's file (the sender's spool, the receiver's partial file) has a
/// ``TransferFile`` whose serial `DispatchQueue` does every blocking call: writes, reads, hashing, fsync, rename.
/// Completions run on that queue; the node hops back to the service thread with ``Node/onLoop(_:)``. Memory stays
/// bounded because callers keep at most a window of bytes in flight.
import Crypto
import Dispatch
import Foundation
import Glibc
import LWS
import MeshCore

/// A file operation that failed, with the system's reason.
struct TransferIOError: Error, CustomStringConvertible {
  let message: String

  init(_ what: String, errno code: Int32 = errno) {
    message = "\(what): \(String(cString: strerror(code)))"
  }

  var description: String { message }
}

/// One transfer's file, appended to and read at offsets on its own queue.
final class TransferFile: @unchecked Sendable {
  // @unchecked: `descriptor`, `hasher` and `length` are only touched on `queue`; every method dispatches onto it.
  private let queue: DispatchQueue
  private var descriptor: Int32 = -1
  private var hasher = SHA256Hasher()
  private var length: UInt64 = 0
  private var path: String

  init(path: String) {
    self.path = path
    self.queue = DispatchQueue(label: "meshgate.transfer.file")
  }

  deinit {
    if descriptor >= 0 { Glibc.close(descriptor) }
  }

  /// Opens (creating it when missing) and returns its length. With `rehash`, the existing content is fed to the
  /// digest first (a partial file kept across a restart). With `exclusive`, the file must not exist yet (a new
  /// transfer never writes into a file that is already there, nor through a symbolic link).
  func open(
    rehash: Bool, exclusive: Bool = false, completion: @escaping @Sendable (Result<UInt64, TransferIOError>) -> Void
  ) {
    queue.async { [self] in
      let flags = O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (exclusive ? O_EXCL : 0)
      let fd = Glibc.open(path, flags, 0o600)
      guard fd >= 0 else { return completion(.failure(TransferIOError("cannot open \(path)"))) }
      descriptor = fd
      var info = stat()
      guard fstat(fd, &info) == 0 else { return completion(.failure(TransferIOError("cannot stat \(path)"))) }
      length = UInt64(info.st_size)
      if rehash && length > 0 {
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var offset: UInt64 = 0
        while offset < length {
          let got = pread(fd, buffer, Int(min(1 << 20, length - offset)), off_t(offset))
          guard got > 0 else { return completion(.failure(TransferIOError("cannot read \(path)"))) }
          hasher.update(buffer, count: got)
          offset += UInt64(got)
        }
      }
      completion(.success(length))
    }
  }

  /// Appends `bytes` (and feeds them to the digest); returns the new length.
  func append(_ bytes: [UInt8], completion: @escaping @Sendable (Result<UInt64, TransferIOError>) -> Void) {
    queue.async { [self] in
      let result = bytes.withUnsafeBytes { buffer -> Result<UInt64, TransferIOError> in
        var written = 0
        while written < buffer.count {
          let count = pwrite(
            descriptor, buffer.baseAddress! + written, buffer.count - written, off_t(length) + off_t(written))
          if count < 0 && errno == EINTR { continue }
          guard count > 0 else { return .failure(TransferIOError("cannot write \(path)")) }
          written += count
        }
        hasher.update(buffer.baseAddress!, count: buffer.count)
        length += UInt64(buffer.count)
        return .success(length)
      }
      completion(result)
    }
  }

  /// Reads `count` bytes at `offset` into a new outgoing frame right after `prefix` (the frame's first bytes), so
  /// a chunk goes from the page cache to the link without an intermediate copy.
  func readFrame(
    prefix: [UInt8], offset: UInt64, count: Int,
    completion: @escaping @Sendable (Result<OutboundMessage, TransferIOError>) -> Void
  ) {
    queue.async { [self] in
      var failure: TransferIOError?
      // Single use: the frame goes to one link once, so a dialling node masks it in place rather than copy it.
      let frame = OutboundMessage.filled(count: prefix.count + count, binary: true, singleUse: true) { buffer in
        prefix.withUnsafeBytes { buffer.copyMemory(from: $0) }
        let base = buffer.baseAddress! + prefix.count
        var got = 0
        while got < count {
          let n = pread(descriptor, base + got, count - got, off_t(offset) + off_t(got))
          if n < 0 && errno == EINTR { continue }
          guard n > 0 else {
            failure = TransferIOError("cannot read \(path) at \(offset)")
            return false
          }
          got += n
        }
        return true
      }
      if let frame { completion(.success(frame)) } else { completion(.failure(failure!)) }
    }
  }

  /// Flushes to disk and returns the SHA-256 of everything appended (and rehashed).
  func finish(completion: @escaping @Sendable (Result<[UInt8], TransferIOError>) -> Void) {
    queue.async { [self] in
      guard fsync(descriptor) == 0 else { return completion(.failure(TransferIOError("cannot flush \(path)"))) }
      completion(.success(hasher.finalize()))
    }
  }

  /// Moves the file to `destination` (creating its directory), and hard-links it to `alsoAt` when given. Both must
  /// resolve inside `root` (the data directory), and neither may exist yet: nothing is ever moved over a file.
  func move(
    to destination: String, alsoAt: String? = nil, within root: String,
    completion: @escaping @Sendable (TransferIOError?) -> Void
  ) {
    queue.async { [self] in
      if let error = Self.makeDirectories(for: [destination] + (alsoAt.map { [$0] } ?? []), within: root) {
        return completion(error)
      }
      // link + unlink rather than rename: link fails (EEXIST) where rename would replace an existing file.
      guard link(path, destination) == 0 else { return completion(TransferIOError("cannot move \(path)")) }
      unlink(path)
      path = destination
      if let alsoAt, link(destination, alsoAt) != 0 {
        return completion(TransferIOError("cannot link \(alsoAt)"))
      }
      completion(nil)
    }
  }

  /// Hard-links the file at each of `destinations` (creating their directories): one file on disk, one name per
  /// recipient of a group send. Each must resolve inside `root` (the data directory), and none may exist yet.
  func hardLink(
    to destinations: [String], within root: String, completion: @escaping @Sendable (TransferIOError?) -> Void
  ) {
    queue.async { [self] in
      if let error = Self.makeDirectories(for: destinations, within: root) { return completion(error) }
      for target in destinations {
        guard link(path, target) == 0 else { return completion(TransferIOError("cannot link \(target)")) }
      }
      completion(nil)
    }
  }

  /// Creates the directory of each of `targets`, refusing any that does not resolve inside `root`.
  private static func makeDirectories(for targets: [String], within root: String) -> TransferIOError? {
    for target in targets {
      let directory = (target as NSString).deletingLastPathComponent
      try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
      guard resolves(directory, inside: root) else {
        return TransferIOError("refusing to write \(target): it is outside the data directory", errno: EPERM)
      }
    }
    return nil
  }

  /// Closes the file; with `remove`, deletes it (partial data of a canceled or failed transfer).
  func close(remove: Bool) {
    queue.async { [self] in
      if descriptor >= 0 {
        Glibc.close(descriptor)
        descriptor = -1
      }
      if remove { unlink(path) }
    }
  }

  /// Whether `directory` (which exists) resolves, symbolic links followed, to `root` or a directory inside it.
  static func resolves(_ directory: String, inside root: String) -> Bool {
    guard let resolved = realpath(directory, nil) else { return false }
    defer { free(resolved) }
    guard let resolvedRoot = realpath(root, nil) else { return false }
    defer { free(resolvedRoot) }
    let path = String(cString: resolved)
    let base = String(cString: resolvedRoot)
    return path == base || path.hasPrefix(base.hasSuffix("/") ? base : base + "/")
  }

  /// Free bytes for unprivileged users on the file system holding `directory`, or nil when unknown.
  static func freeBytes(in directory: String) -> UInt64? {
    var info = statvfs()
    guard statvfs(directory, &info) == 0 else { return nil }
    return UInt64(info.f_bavail) * UInt64(info.f_frsize)
  }
}

extension TransferFile {
  /// A file name that is safe to create in a directory: the last path component, without control characters or
  /// leading dots and spaces, at most 255 UTF-8 bytes. Nil when nothing usable remains.
  static func sanitizedFileName(_ raw: String) -> String? {
    let lastComponent = raw.split(whereSeparator: { $0 == "/" || $0 == "\\" }).last.map(String.init) ?? ""
    var scalars = String.UnicodeScalarView()
    for scalar in lastComponent.unicodeScalars {
      let value = scalar.value
      if value < 0x20 || value == 0x7F || (0x80...0x9F).contains(value) || value == 0x2028 || value == 0x2029 {
        continue
      }
      scalars.append(scalar)
    }
    var name = String(scalars)
    while let first = name.first, first == "." || first == " " { name.removeFirst() }
    while let last = name.last, last == " " { name.removeLast() }
    while name.utf8.count > 255 { name.removeLast() }
    return name.isEmpty ? nil : name
  }

  /// A path component for `id`: the id itself when it is a token (`A-Z a-z 0-9 - _`), else `id-` + a digest.
  static func pathComponent(_ id: String) -> String {
    WireIDs.isToken(id) ? id : "id-" + String(Crypto.sha256Hex(id).prefix(32))
  }
}
