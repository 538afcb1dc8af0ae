/// `POST /api/v1/transceive`: PeerKit's transceiver and ARKit's MultipeerSession on top of the directory and
/// sessions — advertise, browse, auto-invite and auto-accept everyone on a service type into one session.
///
/// Layer 5 (apps). The rules live in MeshCore's ``TransceiveBook`` (so the simulator runs them too): among the peers
/// transceiving a service type (they advertise it with discovery info `transceive=1`), the one with the smallest peer
/// id leads; it hosts the session and invites every other transceiver it sees, and they accept the invitation of the
/// leader they see automatically, leaving any transceive session they were in before. This file wires the book to the
/// node: reconciliation runs whenever the directory tells a local peer something and once a second, received
/// invitations go to ``TransceiveBook/invitationReceived(_:directory:sessions:now:)``, and a restarted node restores
/// its transceivers from the advertisements it reloads (`Node.init`), so its peers regroup.
import Foundation
import LWS
import MeshCore

extension Node {
  static let transceiveKey = TransceiveBook.discoveryKey

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
    feed(.advertisingStarted(peerID: peer.id, serviceType: type, discoveryInfo: info))
    feed(.browsingStarted(peerID: peer.id, serviceType: type))
    transceive.start(Transceiver(peerID: peer.id, serviceType: type))
    reconcileTransceivers()
    let session = transceive.session(of: Transceiver(peerID: peer.id, serviceType: type))
      .flatMap { mesh.sessions.sessions[$0] }
    return .json([
      "serviceType": .string(type), "transceiving": true,
      "leader": .string(leader(of: type, including: peer.id)),
      "session": session.map(sessionJSON) ?? .null,
    ])
  }

  /// The smallest peer id among `serviceType`'s transceivers that `peerID` can see (itself included).
  func leader(of serviceType: String, including peerID: String) -> String {
    TransceiveBook.leader(of: serviceType, including: peerID, in: mesh.directory)
  }

  /// Local transceivers (``TransceiveBook/transceivers``).
  var transceivers: Set<Transceiver> { transceive.transceivers }

  /// Leaders make sure every transceiver they see is a member or has a pending invitation (``TransceiveBook``).
  func reconcileTransceivers() {
    interpret(
      mesh.node.reconcile(&transceive, now: Self.monotonicMillis(), newID: { RecordID.make() }))
  }

  /// Accepts transceive invitations for local transceivers at once.
  func autoAccept(_ invitation: SessionBook.Invitation) {
    interpret(mesh.node.transceiverInvited(invitation, book: &transceive, now: Self.monotonicMillis()))
  }
}
