/// Checks on frames from other nodes before anything acts on them (docs/security.md, "What a linked node may do").
///
/// Layer 4 (node runtime). A linked node is trusted with nothing it cannot prove from this node's own state:
/// - every id in a frame is well-formed (``WireIDs``: UUIDs, or short tokens for chat), so none can become a path
///   outside the data directory or an odd key; a frame with a bad id is refused whole (reason `invalid_id`);
/// - it speaks only for the peers it hosts: a frame whose sending peer (`from`) is not one of its peers in this
///   node's directory is refused (reason `not_own_peer`), and no frame may name one of this node's peers as hosted
///   elsewhere (the same reason);
/// - local peers it names must have agreed (``SessionBook`` and the transfer, stream and chat handlers check that,
///   reason `not_agreed`), and it may announce only so much (``MeshLimits``, reasons `too_many_peers`,
///   `too_many_nodes`).
/// Every refusal is counted in `meshgate_mesh_frames_refused_total{reason}` and logged at debug level, once per frame;
/// the link stays up (a hostile node gains nothing by being cut off and re-linking). The id and peer checks are the
/// mesh core's (``MeshNode``, pure); this file counts, logs and answers what it refuses.
import Crypto
import Foundation
import LWS
import Logging
package import MeshCore

extension Node {
  /// The reasons `meshgate_mesh_frames_refused_total` always shows (at 0 until one happens).
  static let frameRefusalReasons = [
    "invalid_id", "not_own_peer", "not_agreed", "not_host", "not_member", "unknown_peer", "invalid_peer",
    "too_many_peers", "too_many_nodes", "too_many_invitations", "gossip_mismatch",
  ]

  /// Counts and logs one refused frame.
  func refuseFrame(_ reason: String, from nodeID: String?, _ detail: String) {
    guards.refusedFrames[reason, default: 0] += 1
    meshLogger.debug(
      "Refused a mesh frame.", ["node.id": nodeID ?? "?", "refusal.reason": reason, "refusal.detail": detail])
  }

  /// Refusals counted by the state machines (sessions, chat, directory, links) and by this file, by reason.
  var frameRefusals: [String: Int] {
    var counts = guards.refusedFrames
    for (reason, count) in mesh.sessions.refusals { counts[reason, default: 0] += count }
    for (reason, count) in mesh.directory.refusals { counts[reason, default: 0] += count }
    for (reason, count) in mesh.links.refusals { counts[reason, default: 0] += count }
    for (reason, count) in mesh.chat.refusals { counts[reason, default: 0] += count }
    return counts
  }

  /// A frame refused by the mesh core's frame guard (``MeshNode``): counted, logged, and handed to the features (the
  /// one whose offer it was tells the sender, so that nothing waits for an answer that never comes).
  package func frameRefused(_ refusal: FrameRefusal) {
    refuseFrame(refusal.reason, from: refusal.nodeID, refusal.detail)
    if refusal.spoofedSender { guards.spoofedFrames += 1 }
    if refusal.reason == "not_own_peer" {
      meshLogger.warning(
        "Dropped a mesh frame that speaks for peers the sending node does not host.",
        ["node.id": refusal.nodeID ?? "?", "refusal.detail": refusal.detail])
    }
    for feature in features.all { feature.meshEffect(.frameRefused(refusal), node: self) }
  }

  /// Whether a request carries this node's admin token (without counting a denial: for routes that show more to the
  /// admin, such as the addresses in `GET /api/v1/mesh/nodes`).
  func carriesAdminToken(_ head: HTTPRequestHead) -> Bool {
    guard let header = head.headers["authorization"] else { return false }
    let parts = header.split(separator: " ", maxSplits: 1)
    guard parts.count == 2, parts[0].lowercased() == "bearer" else { return false }
    let token = String(parts[1]).trimmingCharacters(in: .whitespaces)
    return !token.isEmpty && Crypto.sha256Hex(token) == guards.adminTokenHash
  }
}
