/// Invitations: invite a peer into a session, list and read them, accept, decline or cancel.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import LWS
import MeshCore

enum InvitationRoutes {
  static let routes: [Route] = [
    Route(
      .post, "/api/v1/invitations", "createInvitation", body: Schemas.createInvitation,
      returns: Schemas.invitationEnvelope,
      links: .id(at: "/invitation/id", as: "invitationId", to: ["getInvitation", "cancelInvitation"]),
      """
      Invites a peer anywhere in the mesh into a session (invitePeer(_:to:withContext:timeout:)); both sides see the same verificationCode.
      201 The pending invitation.
      400 Invalid field.
      404 Unknown peer or session.
      409 Strategy, capacity or duplicate invitation.
      """
    ) { node, context in try node.features.invitations.create(context, node: node) },
    Route(
      .get, "/api/v1/invitations", "listInvitations", returns: Schemas.invitationList,
      query: [
        QueryParameter("direction", "incoming or outgoing; default both.", .oneOf(["incoming", "outgoing"])),
        .limit(max: 500), .cursor,
      ],
      """
      Invitations this peer sent or received, newest first.
      200 Invitations.
      400 Bad direction.
      """
    ) { node, context in try node.features.invitations.list(context, node: node) },
    Route(
      .get, "/api/v1/invitations/{invitationId}", "getInvitation", returns: Schemas.invitationEnvelope,
      """
      One invitation.
      200 The invitation.
      404 Unknown.
      """
    ) { node, context in try node.features.invitations.get(context, node: node) },
    Route(
      .post, "/api/v1/invitations/{invitationId}/accept", "acceptInvitation", returns: Schemas.invitationEnvelope,
      """
      The invitee accepts: it joins the session. Late accepts are 409.
      200 Accepted.
      403 Not the invitee.
      409 Already accepted, declined, expired or canceled.
      """
    ) { node, context in try node.features.invitations.answer(context, accept: true, node: node) },
    Route(
      .post, "/api/v1/invitations/{invitationId}/decline", "declineInvitation", returns: Schemas.invitationEnvelope,
      """
      The invitee declines.
      200 Declined.
      403 Not the invitee.
      409 No longer pending.
      """
    ) { node, context in try node.features.invitations.answer(context, accept: false, node: node) },
    Route(
      .post, "/api/v1/invitations/{invitationId}/cancel", "cancelInvitation", returns: Schemas.invitationEnvelope,
      """
      The inviter withdraws a pending invitation.
      200 Canceled.
      403 Not the inviter.
      409 No longer pending.
      """
    ) { node, context in try node.features.invitations.cancel(context, node: node) },
  ]
}

extension Schemas {
  static let invitation: JSONValue = [
    "type": "object", "required": ["id", "state", "session", "from", "to", "verificationCode", "timeoutSeconds"],
    "properties": [
      "id": ["type": "string"],
      "state": ["type": "string", "enum": ["pending", "accepted", "declined", "expired", "canceled"]],
      "session": ["type": "object"], "from": peerRef, "to": peerRef, "context": ["type": ["string", "null"]],
      "verificationCode": ["type": "string", "pattern": "^[0-9]{6}$"], "timeoutSeconds": ["type": "number"],
      "expiresAt": ["type": "string", "format": "date-time"],
    ],
  ]
  static let invitationEnvelope = envelope("invitation", invitation)
  static let invitationList = page("invitations", of: invitation)
  static let createInvitation: JSONValue = [
    "type": "object", "required": ["to", "session"], "additionalProperties": false,
    "properties": [
      "to": ["type": "string"], "session": ["type": "string"],
      "context": ["type": "string", "description": "At most 4 KiB of UTF-8."],
      "timeoutSeconds": [
        "type": "integer", "minimum": 1, "maximum": 300, "default": 30,
        "description": .string(
          "Seconds the invitee has to answer. For an invitee on another node the inviter's node waits one grace "
            + "second more for an answer in flight (its expiresAt includes it); a later answer is 409."),
      ],
    ],
  ]
}
