/// Features and the hooks through which the node tells every one of them what happened.
///
/// Layer 4 (node runtime). A feature owns its state in a class stored in the node actor (``Node/features``) and only
/// touched on the node's executor (the lws service thread); its routes live beside it (`Features/<X>/…Routes.swift`).
/// The node calls each hook on every feature, in ``Features/all``'s order, so a peer deletion, a link coming up or
/// going down, or a tick reaches all of them by construction; a feature that has nothing to do keeps the default.
import LWS
import MeshCore

protocol NodeFeature: AnyObject {
  /// A mesh link to `nodeID` came up.
  func nodeLinked(_ nodeID: String, node: isolated Node)
  /// The mesh link to `nodeID` went down.
  func nodeUnlinked(_ nodeID: String, node: isolated Node)
  /// The link to `nodeID` moved to a new connection: frames in flight on the old one may be lost.
  func linkReplaced(_ nodeID: String, node: isolated Node)
  /// Local peer `peerID` was deleted (its token is already revoked).
  func peerRemoved(_ peerID: String, node: isolated Node)
  /// The node's periodic tick (every ``Node/tickInterval``).
  func tick(node: isolated Node)
}

extension NodeFeature {
  func nodeLinked(_ nodeID: String, node: isolated Node) {}
  func nodeUnlinked(_ nodeID: String, node: isolated Node) {}
  func linkReplaced(_ nodeID: String, node: isolated Node) {
    nodeUnlinked(nodeID, node: node)
    nodeLinked(nodeID, node: node)
  }
  func peerRemoved(_ peerID: String, node: isolated Node) {}
  func tick(node: isolated Node) {}
}

/// The node's features. Each is the owner of its state; ``all`` is what the node's hooks iterate.
final class Features {
  let chat: ChatFeature
  let payloads = PayloadsFeature()
  let jobs = JobsFeature()
  let transceive: TransceiveFeature
  let discovery = DiscoveryFeature()

  init(chat: ChatFeature, transceive: TransceiveFeature) {
    self.chat = chat
    self.transceive = transceive
  }

  /// Every feature, in the order hooks reach them.
  var all: [any NodeFeature] { [chat, payloads, jobs, transceive, discovery] }
}

@available(*, unavailable) extension Features: Sendable {}

extension Node {
  /// Tells every feature that the link to `nodeID` came up.
  func featuresNodeLinked(_ nodeID: String) {
    for feature in features.all { feature.nodeLinked(nodeID, node: self) }
  }

  /// Tells every feature that the link to `nodeID` went down.
  func featuresNodeUnlinked(_ nodeID: String) {
    for feature in features.all { feature.nodeUnlinked(nodeID, node: self) }
  }

  /// Tells every feature that the link to `nodeID` moved to a new connection.
  func featuresLinkReplaced(_ nodeID: String) {
    for feature in features.all { feature.linkReplaced(nodeID, node: self) }
  }

  /// Tells every feature that local peer `peerID` is gone.
  func featuresPeerRemoved(_ peerID: String) {
    for feature in features.all { feature.peerRemoved(peerID, node: self) }
  }

  /// Ticks every feature.
  func featuresTick() {
    for feature in features.all { feature.tick(node: self) }
  }
}
