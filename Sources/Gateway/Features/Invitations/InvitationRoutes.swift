/// Invitations: invite a peer into a session, list and read them, accept, decline or cancel.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import LWS
import MeshCore

enum InvitationRoutes {
  static let routes: [Route] = [
    Route(
      method: .post, pattern: "/api/v1/invitations", operationID: "createInvitation",
      summary:
        "Invites a peer anywhere in the mesh into a session (invitePeer(_:to:withContext:timeout:)); both sides see the same verificationCode.",
      authenticated: true, requestSchema: Schemas.createInvitation,
      responses: [
        (201, "The pending invitation.", Schemas.invitationEnvelope), (400, "Invalid field.", Schemas.error),
        (404, "Unknown peer or session.", Schemas.error),
        (409, "Strategy, capacity or duplicate invitation.", Schemas.error),
      ], queryParameters: [],
      handler: { node, context in try node.createInvitation(context) }),
    Route(
      method: .get, pattern: "/api/v1/invitations", operationID: "listInvitations",
      summary: "Invitations this peer sent or received, newest first.", authenticated: true, requestSchema: nil,
      responses: [(200, "Invitations.", Schemas.invitationList), (400, "Bad direction.", Schemas.error)],
      queryParameters: [
        ("direction", "incoming or outgoing; default both.", ["type": "string", "enum": ["incoming", "outgoing"]]),
        ("limit", "Page size, 1–500, default 100.", ["type": "integer", "minimum": 1, "maximum": 500]),
        ("cursor", "The nextCursor of the previous page.", ["type": "string"]),
      ],
      handler: { node, context in try node.listInvitations(context) }),
    Route(
      method: .get, pattern: "/api/v1/invitations/{invitationId}", operationID: "getInvitation",
      summary: "One invitation.", authenticated: true, requestSchema: nil,
      responses: [(200, "The invitation.", Schemas.invitationEnvelope), (404, "Unknown.", Schemas.error)],
      queryParameters: [],
      handler: { node, context in try node.getInvitation(context) }),
    Route(
      method: .post, pattern: "/api/v1/invitations/{invitationId}/accept", operationID: "acceptInvitation",
      summary: "The invitee accepts: it joins the session. Late accepts are 409.",
      authenticated: true, requestSchema: nil,
      responses: [
        (200, "Accepted.", Schemas.invitationEnvelope), (403, "Not the invitee.", Schemas.error),
        (409, "Already accepted, declined, expired or canceled.", Schemas.error),
      ], queryParameters: [],
      handler: { node, context in try node.answerInvitation(context, accept: true) }),
    Route(
      method: .post, pattern: "/api/v1/invitations/{invitationId}/decline", operationID: "declineInvitation",
      summary: "The invitee declines.", authenticated: true, requestSchema: nil,
      responses: [
        (200, "Declined.", Schemas.invitationEnvelope), (403, "Not the invitee.", Schemas.error),
        (409, "No longer pending.", Schemas.error),
      ], queryParameters: [],
      handler: { node, context in try node.answerInvitation(context, accept: false) }),
    Route(
      method: .post, pattern: "/api/v1/invitations/{invitationId}/cancel", operationID: "cancelInvitation",
      summary: "The inviter withdraws a pending invitation.", authenticated: true,
      requestSchema: nil,
      responses: [
        (200, "Canceled.", Schemas.invitationEnvelope), (403, "Not the inviter.", Schemas.error),
        (409, "No longer pending.", Schemas.error),
      ], queryParameters: [],
      handler: { node, context in try node.cancelInvitation(context) }),
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
  static let invitationEnvelope: JSONValue = [
    "type": "object", "required": ["invitation"], "properties": ["invitation": invitation],
  ]
  static let invitationList: JSONValue = [
    "type": "object", "required": ["invitations"],
    "properties": [
      "invitations": ["type": "array", "items": invitation], "nextCursor": ["type": ["string", "null"]],
    ],
  ]
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
