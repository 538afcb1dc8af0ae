import Foundation

/// A fresh directory for one test's database files; call ``remove()`` in a `defer`.
///
/// A directory rather than a file, because a WAL database is three files (`x.db`, `x.db-wal`, `x.db-shm`).
struct TemporaryDirectory {
  let url: URL

  init() throws {
    self.url = FileManager.default.temporaryDirectory.appendingPathComponent("meshgate-store-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: self.url, withIntermediateDirectories: true)
  }

  /// The path of a database file inside the directory.
  func path(_ name: String = "test.db") -> String { self.url.appendingPathComponent(name).path }

  func remove() { try? FileManager.default.removeItem(at: self.url) }
}
