/// Invitations: create, list, read, accept, decline and cancel them (MultipeerConnectivity's invitePeer and its
/// handler), over ``SessionBook`` through the node's ``MeshNode``; the invitee's consent is what puts a peer in a
/// session.
import Foundation
import LWS
import MeshCore

/// The invitations feature: the invitation routes' commands, and the one way anything on this node invites a peer
/// (``invite(_:displayName:nodeID:from:into:context:timeoutSeconds:node:)``, also used by job sending). Its state is
/// the mesh core's session book.
final class InvitationsFeature: NodeFeature {
  func create(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    let body = try RequestBody(context.request)
    try body.allowOnly(["to", "session", "context", "timeoutSeconds"])
    let toID = try body.requiredString("to")
    let sessionID = try body.requiredString("session")
    let contextText = try body.optionalString("context") ?? ""
    do {
      try Validate.context(contextText.utf8.count)
    } catch {
      throw error.apiError
    }
    let timeout = try body.timeoutSeconds()
    let inviter = context.authenticatedPeer
    guard let target = node.mesh.node.directory.peer(toID) else {
      throw APIError.notFound("no peer \(toID) in the mesh; browse with PUT /api/v1/browsing/{serviceType}")
    }
    let (invitation, effects): (SessionBook.Invitation, [MeshEffect])
    do {
      (invitation, effects) = try invite(
        target.peerID, displayName: target.displayName, nodeID: target.nodeID, from: inviter.id, into: sessionID,
        context: Array(contextText.utf8), timeoutSeconds: timeout, node: node)
    } catch {
      throw APIError(error)
    }
    node.interpret(effects)
    return .json(["invitation": invitation.json(node: node)], status: 201)
  }

  /// Invites peer `peerID` (on node `nodeID`) from local peer `inviter` into a session: the one way both the
  /// invitations API and job sending invite. The caller carries out the effects once it has noted the invitation.
  func invite(
    _ peerID: String, displayName: String, nodeID: String, from inviter: String, into sessionID: String,
    context: [UInt8], timeoutSeconds: Int, node: isolated Node
  ) throws(MeshFailure) -> (SessionBook.Invitation, [MeshEffect]) {
    try node.mesh.node.invite(
      RecordID.make(), from: inviter,
      to: SessionMember(peerID: peerID, displayName: displayName, nodeID: nodeID, state: .connecting),
      sessionID: sessionID, context: context, timeoutMillis: UInt32(timeoutSeconds) * 1000,
      now: Node.monotonicMillis())
  }

  func list(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    let peerID = context.authenticatedPeer.id
    let direction = context.request.head.query["direction"]
    guard direction == nil || direction == "incoming" || direction == "outgoing" else {
      throw APIError.badRequest("direction must be incoming or outgoing, not \(direction!.debugDescription)")
    }
    let list = node.mesh.node.sessions.invitations(of: peerID).filter { invitation in
      switch direction {
      case "incoming": invitation.offer.toPeerID == peerID
      case "outgoing": invitation.offer.fromPeerID == peerID
      default: true
      }
    }
    let page = try Page(list, id: \.id, query: context.request.head.query)
    return .json(["invitations": .array(page.items.map { $0.json(node: node) }), "nextCursor": page.nextCursorJSON])
  }

  func ownInvitation(_ context: RequestContext, node: isolated Node) throws(APIError) -> SessionBook.Invitation {
    let id = context.parameters["invitationId"] ?? ""
    let peerID = context.authenticatedPeer.id
    guard let invitation = node.mesh.node.sessions.invitations[id],
      invitation.offer.toPeerID == peerID || invitation.offer.fromPeerID == peerID
    else {
      throw APIError.notFound("no invitation \(id) for this peer; see GET /api/v1/invitations")
    }
    return invitation
  }

  func get(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    .json(["invitation": try ownInvitation(context, node: node).json(node: node)])
  }

  func answer(_ context: RequestContext, accept: Bool, node: isolated Node) throws -> HTTPResponse {
    let invitation = try ownInvitation(context, node: node)
    guard invitation.offer.toPeerID == context.authenticatedPeer.id else {
      throw APIError(
        status: 403, code: "forbidden", message: "only the invited peer can accept or decline; the inviter can cancel")
    }
    do {
      node.interpret(
        try node.mesh.node.answer(
          invitation.id, by: context.authenticatedPeer.id, accept: accept, now: Node.monotonicMillis()))
    } catch {
      throw APIError(error)
    }
    return .json(["invitation": node.mesh.node.sessions.invitations[invitation.id]!.json(node: node)])
  }

  func cancel(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    let invitation = try ownInvitation(context, node: node)
    guard invitation.offer.fromPeerID == context.authenticatedPeer.id else {
      throw APIError(status: 403, code: "forbidden", message: "only the inviter can cancel; the invitee can decline")
    }
    do {
      node.interpret(try node.mesh.node.cancel(invitation.id, by: context.authenticatedPeer.id))
    } catch {
      throw APIError(error)
    }
    return .json(["invitation": node.mesh.node.sessions.invitations[invitation.id]!.json(node: node)])
  }
}

@available(*, unavailable) extension InvitationsFeature: Sendable {}
