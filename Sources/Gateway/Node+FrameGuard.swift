/// Checks on session frames from other nodes that the sans-I/O core cannot make alone.
///
/// Layer 4 (node runtime). A linked node may speak only for the peers it hosts: session data and named events
/// whose sender is not a peer of the sending node (per this node's directory, which the same ordered link keeps
/// up to date before any traffic of a new peer) are dropped and counted, never shown with a forged `from`.
import Logging
import MeshCore

extension Node {
  /// Whether `message` from `nodeID` may be handed to the session book.
  func sessionFrameIsAuthentic(_ message: MeshMessage, from nodeID: String) -> Bool {
    let sender: String
    switch message {
    case .sessionData(_, let fromPeerID, _, _, _): sender = fromPeerID
    case .sessionEvent(_, let fromPeerID, _, _, _, _): sender = fromPeerID
    default: return true
    }
    if mesh.directory.peer(sender)?.nodeID == nodeID { return true }
    guards.spoofedFrames += 1
    meshLogger.warning(
      "Dropped a session frame whose sender is not a peer of the sending node.",
      ["node.id": nodeID, "peer.id": sender])
    return false
  }
}
