/// Payload frames in ``MeshNode``: transfer and stream frames from linked nodes, admitted by the frame guard, go
/// into the payload book once; what it decides comes out as ``MeshEffect/payload(_:)``.
extension MeshNode {
  mutating func payloadReceived(_ message: MeshMessage, from nodeID: String, into effects: inout [MeshEffect]) {
    for effect in payloads.received(message, from: nodeID) { effects.append(.payload(effect)) }
  }

  /// A payload frame between two peers of this node (it crosses no link): decided like one from a linked node.
  public mutating func localPayload(_ message: MeshMessage, from nodeID: String) -> [MeshEffect] {
    var effects: [MeshEffect] = []
    payloadReceived(message, from: nodeID, into: &effects)
    return effects
  }
}
