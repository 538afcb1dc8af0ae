/// Sessions (create, list, leave, send data and named events) and invitations.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import LWS
import MeshCore

enum SessionRoutes {
  static let routes: [Route] = [
    Route(
      method: .post, pattern: "/api/v1/sessions", operationID: "createSession",
      summary: "Creates a session (MCSession) with this peer as its first member; defaults: optional, cluster, 64.",
      authenticated: true, requestSchema: Schemas.createSession,
      responses: [(201, "The session.", Schemas.sessionEnvelope), (400, "Invalid field.", Schemas.error)],
      queryParameters: [],
      handler: { node, context in try node.createSession(context) }),
    Route(
      method: .get, pattern: "/api/v1/sessions", operationID: "listSessions",
      summary: "Sessions this peer is a member of, paged.", authenticated: true, requestSchema: nil,
      responses: [(200, "Sessions.", Schemas.sessionList), (400, "Bad limit or cursor.", Schemas.error)],
      queryParameters: [
        ("limit", "Page size, 1–500, default 100.", ["type": "integer", "minimum": 1, "maximum": 500]),
        ("cursor", "The nextCursor of the previous page.", ["type": "string"]),
      ],
      handler: { node, context in try node.listSessions(context) }),
    Route(
      method: .get, pattern: "/api/v1/sessions/{sessionId}", operationID: "getSession",
      summary: "One session with its members and their states.", authenticated: true, requestSchema: nil,
      responses: [(200, "The session.", Schemas.sessionEnvelope), (404, "Not a member.", Schemas.error)],
      queryParameters: [],
      handler: { node, context in try node.getSession(context) }),
    Route(
      method: .delete, pattern: "/api/v1/sessions/{sessionId}/members/me", operationID: "leaveSession",
      summary: "Leaves the session; the others see session.peer.state notConnected.",
      authenticated: true, requestSchema: nil,
      responses: [(204, "Left.", nil), (404, "Not a member.", Schemas.error)], queryParameters: [],
      handler: { node, context in try node.leaveSession(context) }),
    Route(
      method: .post, pattern: "/api/v1/sessions/{sessionId}/data", operationID: "sendData",
      summary:
        "Sends the raw body (≤ 1 MiB) to ?to=id,id (default: every connected member). reliable: once and in order per sender, or session.send.failed; the answer waits while the sender's lane on a mesh link is full (503 link_busy after 10 s); unreliable: never waits, may drop.",
      authenticated: true, requestSchema: nil,
      responses: [
        (202, "Accepted for delivery.", Schemas.sendResult), (404, "Not a member.", Schemas.error),
        (409, "A target is not connected, or the strategy forbids it.", Schemas.error),
        (413, "Body over 1 MiB.", Schemas.error),
        (
          503,
          "link_busy (reliable only): the sender's lane on a mesh link had no room for 10 s (the answer is held "
            + "meanwhile); nothing was sent; retry after Retry-After.", Schemas.error
        ),
      ],
      queryParameters: [
        ("to", "Comma-separated peer ids; default every connected member.", ["type": "string"]),
        ("mode", "reliable (default) or unreliable.", ["type": "string", "enum": ["reliable", "unreliable"]]),
      ],
      handler: { node, context in try await node.sendData(context) }),
    Route(
      method: .post, pattern: "/api/v1/sessions/{sessionId}/events", operationID: "sendEvent",
      summary: "Sends a PeerKit-style named event {event, object, to?} to session members (session.event).",
      authenticated: true, requestSchema: Schemas.namedEvent,
      responses: [
        (202, "Accepted for delivery.", Schemas.sendResult), (404, "Not a member.", Schemas.error),
        (409, "A target is not connected.", Schemas.error),
        (
          503,
          "link_busy: the sender's lane on a mesh link had no room for 10 s (the answer is held meanwhile); nothing "
            + "was sent; retry after Retry-After.", Schemas.error
        ),
      ], queryParameters: [],
      handler: { node, context in try await node.sendNamedEvent(context) }),
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
  static let sessionMember: JSONValue = [
    "type": "object", "required": ["id", "displayName", "nodeId", "state"],
    "properties": [
      "id": ["type": "string"], "displayName": ["type": "string"], "nodeId": ["type": "string"],
      "state": ["type": "string", "enum": ["connecting", "connected", "notConnected"]],
    ],
  ]
  static let session: JSONValue = [
    "type": "object", "required": ["id", "strategy", "encryption", "maxPeers", "hostNodeId", "members"],
    "properties": [
      "id": ["type": "string"], "strategy": ["type": "string", "enum": ["cluster", "star", "pointToPoint"]],
      "encryption": ["type": "string", "enum": ["none", "optional", "required"]],
      "maxPeers": ["type": "integer"], "hostNodeId": ["type": "string"], "creatorPeerId": ["type": "string"],
      "members": ["type": "array", "items": sessionMember],
    ],
  ]
  static let sessionEnvelope: JSONValue = [
    "type": "object", "required": ["session"], "properties": ["session": session],
  ]
  static let sessionList: JSONValue = [
    "type": "object", "required": ["sessions"],
    "properties": ["sessions": ["type": "array", "items": session], "nextCursor": ["type": ["string", "null"]]],
  ]
  static let createSession: JSONValue = [
    "type": "object", "additionalProperties": false,
    "properties": [
      "encryption": ["type": ["string", "null"], "enum": ["none", "optional", "required", nil]],
      "strategy": ["type": ["string", "null"], "enum": ["cluster", "star", "pointToPoint", nil]],
      "maxPeers": [
        "type": ["integer", "null"], "minimum": 2, "maximum": 1024, "default": 64,
        "description": "Members plus pending invitations; pointToPoint sessions are always 2.",
      ],
    ],
  ]
  static let sendResult: JSONValue = [
    "type": "object", "required": ["accepted", "undelivered", "bytes"],
    "properties": [
      "accepted": ["type": "integer"], "undelivered": ["type": "array", "items": ["type": "string"]],
      "bytes": ["type": "integer"],
    ],
  ]
  static let namedEvent: JSONValue = [
    "type": "object", "required": ["event"], "additionalProperties": false,
    "properties": [
      "event": ["type": "string", "minLength": 1], "object": [:],
      "to": ["type": ["array", "null"], "items": ["type": "string"]],
    ],
  ]
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
