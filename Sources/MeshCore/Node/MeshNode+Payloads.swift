/// Payload frames in ``MeshNode``: transfer and stream frames from linked nodes, admitted by the frame guard, go
/// into the payload book once; what it decides comes out as ``MeshEffect/payload(_:)``.
extension MeshNode {
  mutating func payloadReceived(_ message: MeshMessage, from nodeID: String, into effects: inout [MeshEffect]) {
    absorb(payloads.received(message, from: nodeID), into: &effects)
  }

  /// The runtime restored its transfers: offers held meanwhile are judged (``PayloadBook/recordsRestored()``).
  public mutating func payloadRecordsRestored() -> [MeshEffect] {
    var effects: [MeshEffect] = []
    absorb(payloads.recordsRestored(), into: &effects)
    return effects
  }

  /// The book's refusals join the frame guard's (``MeshEffect/frameRefused(_:)``); the rest is the runtime's.
  private func absorb(_ payloadEffects: [PayloadEffect], into effects: inout [MeshEffect]) {
    for effect in payloadEffects {
      if case .refused(let refusal) = effect {
        effects.append(.frameRefused(refusal))
      } else {
        effects.append(.payload(effect))
      }
    }
  }

  /// A payload frame between two peers of this node (it crosses no link): decided like one from a linked node.
  public mutating func localPayload(_ message: MeshMessage, from nodeID: String) -> [MeshEffect] {
    var effects: [MeshEffect] = []
    payloadReceived(message, from: nodeID, into: &effects)
    return effects
  }
}
