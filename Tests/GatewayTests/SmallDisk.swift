import Foundation
import Glibc

/// A small tmpfs mounted for one test, to fill up and free again: a full disk under a store or an event ring.
///
/// Mounting needs root with CAP_SYS_ADMIN (a dev VM: yes; a default container: no); tests that use it are skipped,
/// saying why, where it is not allowed (``available``). Call ``unmount()`` in a `defer`.
final class SmallDisk {
  let path: String
  private var filler: String { path + "/filler" }

  /// Whether this process may mount a tmpfs.
  static let available: Bool = {
    guard geteuid() == 0, let probe = try? SmallDisk(bytes: 64 << 10) else { return false }
    probe.unmount()
    return true
  }()

  /// Mounts a tmpfs of `bytes` on a new directory.
  init(bytes: Int) throws {
    path = FileManager.default.temporaryDirectory.appendingPathComponent("meshgate-disk-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    guard mount("tmpfs", path, "tmpfs", 0, "size=\(bytes),mode=0700") == 0 else {
      let reason = String(cString: strerror(errno))
      try? FileManager.default.removeItem(atPath: path)
      throw CocoaError(.fileWriteUnknown, userInfo: [NSLocalizedDescriptionKey: "mount tmpfs on \(path): \(reason)"])
    }
  }

  /// Fills the file system to the last byte with one file.
  func fill() throws {
    let fd = open(filler, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw CocoaError(.fileWriteUnknown) }
    defer { close(fd) }
    var chunk = 1 << 20
    let zeros = [UInt8](repeating: 0, count: chunk)
    while chunk > 0 {
      if zeros.withUnsafeBytes({ write(fd, $0.baseAddress, chunk) }) < 0 { chunk /= 2 }
    }
  }

  /// Frees what ``fill()`` took.
  func free() { unlink(filler) }

  /// Bytes free on the file system.
  var freeBytes: Int {
    var info = statvfs()
    guard statvfs(path, &info) == 0 else { return 0 }
    return Int(info.f_bavail) * Int(info.f_frsize)
  }

  func unmount() {
    umount2(path, Int32(MNT_DETACH))
    try? FileManager.default.removeItem(atPath: path)
  }
}
