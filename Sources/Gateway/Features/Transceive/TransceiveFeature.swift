/// The transceive feature: which local peers transceive which service type (``TransceiveBook``), reconciled with the
/// mesh every ten ticks. Owned by the node actor.
import MeshCore

final class TransceiveFeature: NodeFeature {
  var book: TransceiveBook
  var ticks: UInt64 = 0

  init(book: TransceiveBook) { self.book = book }

  func tick(node: isolated Node) {
    ticks += 1
    if ticks % 10 == 0 && !node.transceivers.isEmpty { node.reconcileTransceivers() }
  }
}

@available(*, unavailable) extension TransceiveFeature: Sendable {}

extension Node {
  var transceive: TransceiveBook {
    get { features.transceive.book }
    _modify { yield &features.transceive.book }
  }
}
