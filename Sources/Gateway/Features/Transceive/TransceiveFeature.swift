/// `POST /api/v1/transceive`: PeerKit's transceiver and ARKit's MultipeerSession on top of the directory and
/// sessions — advertise, browse, auto-invite and auto-accept everyone on a service type into one session.
///
/// Layer 5 (apps). The rules live in MeshCore's ``TransceiveBook`` (so the simulator runs them too): among the peers
/// transceiving a service type (they advertise it with discovery info `transceive=1`), the one with the smallest peer
/// id leads; it hosts the session and invites every other transceiver it sees, and they accept the invitation of the
/// leader they see automatically, leaving any transceive session they were in before. This file wires the book to the
/// node: reconciliation runs whenever the directory tells a local peer something and once a second, received
/// invitations go to ``TransceiveBook/invitationReceived(_:directory:sessions:now:)``, and a restarted node restores
/// its transceivers from the advertisements it reloads (``Features/init(restoringFrom:)``), so its peers regroup.
import Foundation
import LWS
import MeshCore

/// The transceive feature: which local peers transceive which service type (``TransceiveBook``), reconciled with the
/// mesh when the directory changes and every ten ticks; it accepts its leaders' invitations at once. Owned by the
/// node actor and only touched on its executor.
final class TransceiveFeature: NodeFeature {
  static let discoveryKey = TransceiveBook.discoveryKey

  private var book: TransceiveBook
  private var ticks: UInt64 = 0

  init(book: TransceiveBook) { self.book = book }

  // MARK: - Hooks

  func tick(node: isolated Node) {
    ticks += 1
    if ticks % 10 == 0 && !book.transceivers.isEmpty { reconcile(node: node) }
  }

  /// A deleted peer stops transceiving at once (the book drops transceivers whose peer is gone when it reconciles).
  func peerRemoved(_ peerID: String, node: isolated Node) {
    if book.transceivers.contains(where: { $0.peerID == peerID }) { reconcile(node: node) }
  }

  func directoryChanged(node: isolated Node) {
    if !book.transceivers.isEmpty { reconcile(node: node) }
  }

  /// Accepts transceive invitations for local transceivers at once.
  func invitationReceived(_ invitation: SessionBook.Invitation, node: isolated Node) {
    guard !book.transceivers.isEmpty else { return }
    node.interpret(node.mesh.node.transceiverInvited(invitation, book: &book, now: Node.monotonicMillis()))
  }

  // MARK: - REST

  func start(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let body = try RequestBody(context.request)
    try body.allowOnly(["serviceType"])
    let type: String
    do {
      type = try Validate.serviceType(try body.requiredString("serviceType"))
    } catch let error as ValidationError {
      throw error.apiError
    }
    let peer = context.authenticatedPeer
    var info = node.mesh.node.directory.advertising(of: peer.id)[type] ?? [:]
    info[Self.discoveryKey] = "1"
    try await node.store.setService(
      NodeStore.StoredService(peerID: peer.id, kind: "advertise", serviceType: type, discoveryInfo: info))
    try await node.store.setService(
      NodeStore.StoredService(peerID: peer.id, kind: "browse", serviceType: type, discoveryInfo: [:]))
    guard node.peers[peer.id] != nil else { throw APIError.invalidToken }
    node.feed(.advertisingStarted(peerID: peer.id, serviceType: type, discoveryInfo: info))
    node.feed(.browsingStarted(peerID: peer.id, serviceType: type))
    book.start(Transceiver(peerID: peer.id, serviceType: type))
    reconcile(node: node)
    let session = book.session(of: Transceiver(peerID: peer.id, serviceType: type))
      .flatMap { node.mesh.node.sessions.sessions[$0] }
    return .json([
      "serviceType": .string(type), "transceiving": true,
      "leader": .string(TransceiveBook.leader(of: type, including: peer.id, in: node.mesh.node.directory)),
      "session": session.map(\.json) ?? .null,
    ])
  }

  /// Leaders make sure every transceiver they see is a member or has a pending invitation (``TransceiveBook``).
  func reconcile(node: isolated Node) {
    node.interpret(
      node.mesh.node.reconcile(&book, now: Node.monotonicMillis(), newID: { RecordID.make() }))
  }
}

@available(*, unavailable) extension TransceiveFeature: Sendable {}
