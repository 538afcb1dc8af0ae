/// The payloads feature: file transfers and byte streams, their live state owned by the node actor and only touched
/// on its executor (the code that moves the bytes is in Node+Transfers.swift and Node+Streams.swift).
import LWS
import MeshCore

final class PayloadsFeature: NodeFeature {
  var transfers = TransferRuntime()
  var streams = StreamRuntime()

  func nodeLinked(_ nodeID: String, node: isolated Node) { node.transfersLinkUp(nodeID) }
  func nodeUnlinked(_ nodeID: String, node: isolated Node) { node.transfersLinkDown(nodeID) }
  func tick(node: isolated Node) { node.transferTick() }
}

@available(*, unavailable) extension PayloadsFeature: Sendable {}

extension Node {
  var transfers: TransferRuntime {
    get { features.payloads.transfers }
    _modify { yield &features.payloads.transfers }
  }

  var streams: StreamRuntime {
    get { features.payloads.streams }
    _modify { yield &features.payloads.streams }
  }
}
