/// Sessions (create, list, leave, send data and named events) and invitations.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import LWS
import MeshCore

enum SessionRoutes {
  static let routes: [Route] = [
    Route(
      .post, "/api/v1/sessions", "createSession", body: Schemas.createSession, returns: Schemas.sessionEnvelope,
      links: .id(
        at: "/session/id", as: "sessionId",
        to: ["getSession", "leaveSession", "sendData", "sendEvent", "sendResource", "openStream"]),
      """
      Creates a session (MCSession) with this peer as its first member; defaults: optional, cluster, 64.
      201 The session.
      400 Invalid field.
      """
    ) { node, context in try node.features.sessions.createSession(context, node: node) },
    Route(
      .get, "/api/v1/sessions", "listSessions", returns: Schemas.sessionList, query: [.limit(max: 500), .cursor],
      """
      Sessions this peer is a member of, paged.
      200 Sessions.
      400 Bad limit or cursor.
      """
    ) { node, context in try node.features.sessions.listSessions(context, node: node) },
    Route(
      .get, "/api/v1/sessions/{sessionId}", "getSession", returns: Schemas.sessionEnvelope,
      """
      One session with its members and their states.
      200 The session.
      404 Not a member.
      """
    ) { node, context in try node.features.sessions.getSession(context, node: node) },
    Route(
      .delete, "/api/v1/sessions/{sessionId}/members/me", "leaveSession",
      """
      Leaves the session; the others see session.peer.state notConnected.
      204 Left.
      404 Not a member.
      """
    ) { node, context in try node.features.sessions.leaveSession(context, node: node) },
    Route(
      .post, "/api/v1/sessions/{sessionId}/data", "sendData", returns: Schemas.sendResult,
      query: [
        QueryParameter("to", "Comma-separated peer ids; default every connected member."),
        QueryParameter("mode", "reliable (default) or unreliable.", .oneOf(["reliable", "unreliable"])),
      ],
      """
      Sends the raw body (≤ 1 MiB) to ?to=id,id (default: every connected member). reliable: once and in order per sender, or session.send.failed; the answer waits while the sender's lane on a mesh link is full (503 link_busy after 10 s); unreliable: never waits for a link, may drop. Both modes wait while the node's event queue is over 64 MiB (until 56 MiB remain) or this sender's events in it over 8 MiB (503 event_queue_full after 10 s).
      202 Accepted for delivery.
      404 Not a member.
      409 A target is not connected, or the strategy forbids it.
      413 Body over 1 MiB.
      503 link_busy (reliable only): the sender's lane on a mesh link had no room for 10 s; or event_queue_full: the node's event queue (64 MiB) or this sender's share of it (8 MiB) had no room for 10 s. The answer is held meanwhile; nothing was sent; retry after Retry-After, and send more slowly.
      """
    ) { node, context in try await node.features.sessions.sendData(context, node: node) },
    Route(
      .post, "/api/v1/sessions/{sessionId}/events", "sendEvent", body: Schemas.namedEvent, returns: Schemas.sendResult,
      """
      Sends a PeerKit-style named event {event, object, to?} to session members (session.event).
      202 Accepted for delivery.
      404 Not a member.
      409 A target is not connected.
      503 link_busy: the sender's lane on a mesh link had no room for 10 s; or event_queue_full: the node's event queue (64 MiB) or this sender's share of it (8 MiB) had no room for 10 s. The answer is held meanwhile; nothing was sent; retry after Retry-After.
      """
    ) { node, context in try await node.features.sessions.sendNamedEvent(context, node: node) },
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
  static let sessionEnvelope = envelope("session", session)
  static let sessionList = page("sessions", of: session)
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
}
