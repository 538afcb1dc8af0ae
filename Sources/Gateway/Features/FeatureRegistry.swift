/// The feature registry: the one list that names the feature types.
///
/// The node's shell (Node/, Events/, HTTP/, Mesh/) reaches features only through ``NodeFeature``'s hooks, iterated
/// over ``Features/all``, and route handlers reach their own feature through ``Node/features``;
/// `scripts/check-blind-shell.sh` (in `make lint`) keeps it so.
import MeshCore

/// The node's features. Each is the owner of its state; ``all`` is what the node's hooks iterate.
final class Features {
  let chat = ChatFeature()
  let payloads = PayloadsFeature()
  let jobs = JobsFeature()
  let transceive: TransceiveFeature
  let discovery = DiscoveryFeature()

  /// `directory`: the restored advertisements (peers that transceived before a restart transceive again).
  init(restoringFrom directory: Directory) {
    self.transceive = TransceiveFeature(
      book: TransceiveBook(restoringFrom: directory, maxPeers: Node.largestMaxPeers))
  }

  /// Every feature, in the order hooks reach them.
  var all: [any NodeFeature] { [chat, payloads, jobs, transceive, discovery] }
}

@available(*, unavailable) extension Features: Sendable {}
