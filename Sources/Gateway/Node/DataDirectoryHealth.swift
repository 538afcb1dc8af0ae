/// Noticing that the data directory went away under a running node.
///
/// Layer 4 (node runtime). SQLite keeps writing to its open file descriptors after the directory or the database
/// file is deleted (or moved, or replaced by a restore), so every write still "succeeds" into a file nobody will
/// ever open again, and after a restart every token and all data are gone. ``DataDirectoryWatch`` remembers the
/// device and inode of the directory and of the database file the node opened; ``Node`` compares them every second
/// (off the service thread) and after a storage error. Once they differ the node is unhealthy for good: `/healthz`
/// answers `503 data_directory_lost` with the reason, every write request (POST, PUT, PATCH, DELETE) answers the
/// same, reads keep working from what the node holds, and one error line says what happened and what to do.
import Foundation
import Glibc
import Logging

/// The identity (device, inode) of the data directory and its database file, taken when the node opened them.
struct DataDirectoryWatch: Sendable {
  struct Identity: Equatable, Sendable {
    let device: UInt64
    let inode: UInt64
  }

  let directory: String
  let database: String
  let directoryIdentity: Identity?
  let databaseIdentity: Identity?

  init(directory: String, database: String) {
    self.directory = directory
    self.database = database
    self.directoryIdentity = Self.identity(directory)
    self.databaseIdentity = Self.identity(database)
  }

  static func identity(_ path: String) -> Identity? {
    var info = stat()
    guard stat(path, &info) == 0 else { return nil }
    return Identity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
  }

  /// Nil while the directory and database are the ones the node opened; otherwise what happened, in words.
  /// (Something that did not exist at start, as in unit tests without a database file, is not watched.)
  func problem() -> String? {
    if let expected = directoryIdentity {
      guard let now = Self.identity(directory) else { return "the data directory \(directory) was deleted or moved" }
      if now != expected { return "the data directory \(directory) was replaced by another directory" }
    }
    if let expected = databaseIdentity {
      guard let now = Self.identity(database) else { return "the database file \(database) was deleted or moved" }
      if now != expected { return "the database file \(database) was replaced by another file" }
    }
    return nil
  }
}
