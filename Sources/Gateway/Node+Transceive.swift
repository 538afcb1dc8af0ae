/// `POST /api/v1/transceive`: PeerKit's transceiver and ARKit's MultipeerSession on top of the directory and
/// sessions — advertise, browse, auto-invite and auto-accept everyone on a service type into one session.
///
/// Layer 5 (apps). Convergence rule: among the peers transceiving a service type (they advertise it with
/// discovery info `transceive=1`), the one with the smallest peer id leads. The leader hosts the session and
/// invites every other transceiver it sees; the others accept invitations whose context is
/// `transceive:<serviceType>` automatically and leave any transceive session they led before. When the leader
/// leaves, the next smallest id takes over with a new session. Reconciliation runs whenever the directory
/// changes and once a second.
import Foundation
import LWS
import MeshCore

/// A local peer's transceiver for one service type.
struct Transceiver: Hashable {
  let peerID: String
  let serviceType: String
}

extension Node {
  static let transceiveKey = "transceive"

  func startTransceive(_ context: RequestContext) async throws -> HTTPResponse {
    let body = try RequestBody(context.request)
    try body.allowOnly(["serviceType"])
    let type: String
    do {
      type = try Validate.serviceType(try body.requiredString("serviceType"))
    } catch let error as ValidationError {
      throw error.apiError
    }
    let peer = context.authenticatedPeer
    var info = mesh.directory.advertising(of: peer.id)[type] ?? [:]
    info[Self.transceiveKey] = "1"
    try await store.setService(
      NodeStore.StoredService(peerID: peer.id, kind: "advertise", serviceType: type, discoveryInfo: info))
    try await store.setService(
      NodeStore.StoredService(peerID: peer.id, kind: "browse", serviceType: type, discoveryInfo: [:]))
    guard peers[peer.id] != nil else { throw APIError.invalidToken }
    apply(mesh.directory.startAdvertising(peer.id, serviceType: type, discoveryInfo: info))
    apply(mesh.directory.startBrowsing(peer.id, serviceType: type))
    transceivers.insert(Transceiver(peerID: peer.id, serviceType: type))
    reconcileTransceivers()
    let session = transceiveSessions[Transceiver(peerID: peer.id, serviceType: type)]
      .flatMap { mesh.sessions.sessions[$0] }
    return .json([
      "serviceType": .string(type), "transceiving": true,
      "leader": .string(leader(of: type, including: peer.id)),
      "session": session.map(sessionJSON) ?? .null,
    ])
  }

  /// The smallest peer id among `serviceType`'s transceivers that `peerID` can see (itself included).
  func leader(of serviceType: String, including peerID: String) -> String {
    let others = mesh.directory.advertisers(of: serviceType, excluding: peerID)
      .filter { $0.discoveryInfo[Self.transceiveKey] == "1" }.map(\.peer.peerID)
    return (others + [peerID]).min()!
  }

  /// Leaders make sure every transceiver they see is a member or has a pending invitation.
  func reconcileTransceivers() {
    let now = Self.monotonicMillis()
    for transceiver in transceivers.sorted(by: { ($0.peerID, $0.serviceType) < ($1.peerID, $1.serviceType) }) {
      guard let peer = peers[transceiver.peerID] else {
        transceivers.remove(transceiver)
        continue
      }
      guard leader(of: transceiver.serviceType, including: peer.id) == peer.id else { continue }
      var sessionID = transceiveSessions[transceiver]
      if sessionID == nil || mesh.sessions.sessions[sessionID!] == nil {
        let session = mesh.sessions.createSession(
          UUID().uuidString.lowercased(), creator: member(for: peer), strategy: .cluster, encryption: .optional,
          maxPeers: Self.largestMaxPeers)
        sessionID = session.sessionID
        transceiveSessions[transceiver] = session.sessionID
      }
      guard let session = mesh.sessions.sessions[sessionID!] else { continue }
      let pending = Set(
        mesh.sessions.invitations(of: peer.id).filter {
          $0.state == .pending && $0.offer.session.sessionID == session.sessionID
        }.map(\.offer.toPeerID))
      for advertiser in mesh.directory.advertisers(of: transceiver.serviceType, excluding: peer.id)
      where advertiser.discoveryInfo[Self.transceiveKey] == "1" {
        let target = advertiser.peer
        if pending.contains(target.peerID) { continue }
        if let member = session.members.first(where: { $0.peerID == target.peerID }), member.state != .notConnected {
          continue
        }
        let invited = try? mesh.sessions.invite(
          UUID().uuidString.lowercased(), from: peer.id,
          to: SessionMember(
            peerID: target.peerID, displayName: target.displayName, nodeID: target.nodeID, state: .connecting),
          sessionID: session.sessionID, context: Array("\(Self.transceiveKey):\(transceiver.serviceType)".utf8),
          timeoutMillis: 30_000, now: now)
        if let invited { apply(invited.1) }
      }
    }
  }

  /// Accepts transceive invitations for local transceivers at once.
  func autoAccept(_ invitation: SessionBook.Invitation) {
    let context = String(decoding: invitation.offer.context, as: UTF8.self)
    guard context.hasPrefix("\(Self.transceiveKey):") else { return }
    let type = String(context.dropFirst(Self.transceiveKey.count + 1))
    let transceiver = Transceiver(peerID: invitation.offer.toPeerID, serviceType: type)
    guard transceivers.contains(transceiver) else { return }
    // Join the leader's session and leave the one this peer led before, if any.
    if let previous = transceiveSessions.removeValue(forKey: transceiver),
      previous != invitation.offer.session.sessionID
    {
      apply((try? mesh.sessions.leave(previous, peerID: transceiver.peerID)) ?? [])
    }
    apply(
      (try? mesh.sessions.answer(invitation.id, by: transceiver.peerID, accept: true, now: Self.monotonicMillis()))
        ?? [])
    transceiveSessions[transceiver] = invitation.offer.session.sessionID
  }
}
