import Testing

@testable import Gateway

/// Start-up messages for a data directory that cannot be made.
struct DataDirectoryTests {
  /// A directory that cannot be created needs write access to the one it goes in: the advice named the directory
  /// itself, which does not exist yet (`/srv/mg` under a root-owned `/srv` was told to make `/srv/mg` writable).
  @Test func aDirectoryThatCannotBeCreatedNamesItsParentInTheAdvice() throws {
    // sysfs refuses new directories, to root too (EPERM; EACCES for others): the same advice either way.
    let message = try #require(DataDirectory.prepare("/sys/meshgate-test-data/node"))
    let path = "/sys/meshgate-test-data"
    #expect(message.hasPrefix("cannot use data dir \(path)/node: creating \(path) failed: "), "\(message)")
    #expect(
      message.hasSuffix("give this user write access to /sys (chown/chmod) or choose another --data-dir"), "\(message)")
  }
}
