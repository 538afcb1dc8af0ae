/// The node's defences and their state: the admin token, limits and their counters, and the watch on the data
/// directory. Owned by the node actor.
import MeshCore

final class NodeSafety {
  /// Admin token hash, limits and their counters (Admin.swift, Limits.swift).
  var guards: SecurityState
  /// The data directory and database file the node opened, and why they are lost once they are (DataDirectoryHealth).
  let dataWatch: DataDirectoryWatch
  var dataDirectoryLost: String?
  var dataWatchTask: Task<Void, Never>?

  init(guards: SecurityState, dataWatch: DataDirectoryWatch) {
    self.guards = guards
    self.dataWatch = dataWatch
  }
}

@available(*, unavailable) extension NodeSafety: Sendable {}

extension Node {
  var dataWatch: DataDirectoryWatch { safety.dataWatch }
  var guards: SecurityState {
    get { safety.guards }
    _modify { yield &safety.guards }
  }
  var dataDirectoryLost: String? {
    get { safety.dataDirectoryLost }
    set { safety.dataDirectoryLost = newValue }
  }
  var dataWatchTask: Task<Void, Never>? {
    get { safety.dataWatchTask }
    set { safety.dataWatchTask = newValue }
  }
}
