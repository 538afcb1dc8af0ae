/// The feature registry: the one list that names the feature types.
///
/// The node's shell (Node/, Events/, HTTP/, Mesh/) reaches features only through ``NodeFeature``'s hooks, iterated
/// over ``Features/all``, and route handlers reach their own feature through ``Node/features``;
/// `scripts/check-blind-shell.sh` (in `make lint`) keeps it so.
import MeshCore

/// The node's features. Each is the owner of its state; ``all`` is what the node's hooks iterate.
final class Features {
  let sessions = SessionsFeature()
  let chat = ChatFeature()
  let payloads = PayloadsFeature()
  let jobs = JobsFeature()
  let transceive: TransceiveFeature
  let discovery = DiscoveryFeature()
  let invitations = InvitationsFeature()
  let peers = PeersFeature()

  /// `directory`: the restored advertisements (peers that transceived before a restart transceive again).
  /// Every feature, in the order hooks reach them (built once: hooks run for every peer a session event reaches).
  let all: [any NodeFeature]

  init(restoringFrom directory: Directory) {
    let transceive = TransceiveFeature(
      book: TransceiveBook(restoringFrom: directory, maxPeers: SessionsFeature.largestMaxPeers))
    self.transceive = transceive
    self.all = [sessions, chat, payloads, jobs, transceive, discovery, invitations, peers]
  }
}

@available(*, unavailable) extension Features: Sendable {}
