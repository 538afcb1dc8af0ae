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
/// the link stays up (a hostile node gains nothing by being cut off and re-linking).
import Crypto
import Foundation
import LWS
import Logging
import MeshCore

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
    for (reason, count) in chat.book.refusals { counts[reason, default: 0] += count }
    return counts
  }

  /// Whether a decoded frame's ids are all well-formed; counts and answers the refusal otherwise.
  func frameIDsAreWellFormed(_ message: MeshMessage, on connection: LinkManager.ConnectionID) -> Bool {
    guard let problem = WireIDs.check(message) else { return true }
    let nodeID = mesh.links.nodeID(on: connection)
    refuseFrame("invalid_id", from: nodeID, problem.description)
    if let nodeID { answerRefusedFrame(message, to: nodeID, because: problem.description) }
    return false
  }

  /// Tells the sender of a refused offer that it was refused, so that nothing waits for an answer that never comes.
  /// The ids are echoed only through the codec (a string field), never used.
  func answerRefusedFrame(_ message: MeshMessage, to nodeID: String, because reason: String) {
    switch message {
    case .transferOffer(let offer):
      sendTransferFrame(
        .transferReject(transferID: offer.transferID, code: .refused, message: "refused: \(reason)"), to: nodeID)
    case .streamOpen(let offer):
      sendStreamFrame(.streamClose(streamID: offer.streamID, reason: "refused: \(reason)"), to: nodeID)
    default:
      break
    }
  }

  /// Whether `message` from `nodeID` speaks only for that node's own peers and names this node's peers only as
  /// hosted here.
  func frameSpeaksForItsOwnPeers(_ message: MeshMessage, from nodeID: String) -> Bool {
    var senders: [String] = []
    var members: [SessionMember] = []
    switch message {
    case .sessionData(_, let fromPeerID, _, _, _), .sessionEvent(_, let fromPeerID, _, _, _, _):
      senders = [fromPeerID]
    case .invite(let offer):
      senders = [offer.fromPeerID]
      members = offer.session.members
    case .transferOffer(let offer):
      senders = [offer.fromPeerID]
    case .streamOpen(let offer):
      senders = [offer.fromPeerID]
    case .sessionState(let description):
      members = description.members
    case .sessionJoin(_, let member):
      members = [member]
    case .peerSnapshot(let announcements):
      if let local = announcements.first(where: { peers[$0.peerID] != nil }) {
        return refuseSpoof(nodeID, "a peer snapshot claims local peer \(local.peerID)")
      }
    case .peerUpdated(let announcement):
      if peers[announcement.peerID] != nil {
        return refuseSpoof(nodeID, "a peer update claims local peer \(announcement.peerID)")
      }
    default:
      return true
    }
    for sender in senders where mesh.directory.peer(sender)?.nodeID != nodeID {
      guards.spoofedFrames += 1
      return refuseSpoof(nodeID, "the sending peer \(sender) is not a peer of the sending node")
    }
    for member in members where peers[member.peerID] != nil && member.nodeID != self.nodeID {
      return refuseSpoof(nodeID, "local peer \(member.peerID) named as a peer of node \(member.nodeID)")
    }
    return true
  }

  private func refuseSpoof(_ nodeID: String, _ detail: String) -> Bool {
    refuseFrame("not_own_peer", from: nodeID, detail)
    meshLogger.warning(
      "Dropped a mesh frame that speaks for peers the sending node does not host.",
      ["node.id": nodeID, "refusal.detail": detail])
    return false
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

  /// An invitation may only be for a peer hosted here.
  func inviteIsForALocalPeer(_ message: MeshMessage, from nodeID: String) -> Bool {
    guard case .invite(let offer) = message else { return true }
    if peers[offer.toPeerID] != nil { return true }
    refuseFrame("unknown_peer", from: nodeID, "an invitation for \(offer.toPeerID), which is not a peer of this node")
    return false
  }
}
