/// The Job Manager feature's live state: jobs offered through an invitation and jobs sent as a named event, waiting
/// for their answer. Owned by the node actor; the jobs themselves are in the store.
import MeshCore

final class JobsFeature: NodeFeature {
  /// Jobs handed to an invitation, by invitation id.
  var pendingSends: [String: PendingJobSend] = [:]
  /// Jobs sent as a named event and not yet known to have failed, by session id.
  var delivering: [String: PendingJobSend] = [:]
}

@available(*, unavailable) extension JobsFeature: Sendable {}

extension Node {
  var pendingJobSends: [String: PendingJobSend] {
    get { features.jobs.pendingSends }
    _modify { yield &features.jobs.pendingSends }
  }

  var deliveringJobs: [String: PendingJobSend] {
    get { features.jobs.delivering }
    _modify { yield &features.jobs.delivering }
  }
}
