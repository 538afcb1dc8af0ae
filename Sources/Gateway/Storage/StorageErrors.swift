/// What a full or failing disk looks like to a client.
///
/// Layer 6. SQLite reports a full disk as SQLITE_FULL (13) and failed reads and writes as SQLITE_IOERR (10, with
/// extended codes). Those become `507 storage_full` and `503 storage_unavailable` with a message that says what to
/// do, instead of an anonymous 500; the write did not happen, so the client may retry once space is freed.
import Store

extension APIError {
  /// The response for a storage failure, or nil when `error` is something else.
  static func storage(_ error: any Error) -> APIError? {
    guard let error = error as? SQLiteError else { return nil }
    switch error.code & 0xFF {
    case 13:
      return APIError(
        status: 507, code: "storage_full",
        message: "the node's data directory is full, so nothing was stored; free disk space there and retry")
    case 10:
      return APIError(
        status: 503, code: "storage_unavailable",
        message: "the node could not read or write its data directory (I/O error), so nothing was stored; "
          + "check the disk and retry", headers: [("retry-after", "5")])
    default:
      return nil
    }
  }
}
