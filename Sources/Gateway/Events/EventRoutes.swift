/// A peer's event log: pages, Server-Sent Events and the browser WebSocket.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import LWS
import MeshCore

enum EventRoutes {
  static let routes: [Route] = [
    Route(
      method: .get, pattern: "/api/v1/events", operationID: "listEvents",
      summary: "The peer's durable event log after a cursor, oldest first.", authenticated: true, requestSchema: nil,
      responses: [
        (200, "A page of events.", Schemas.eventPage), (400, "Bad cursor or limit.", Schemas.error),
        (401, "Missing or unknown token.", Schemas.error),
      ],
      queryParameters: [
        (
          "since", "Return events after this cursor (an event id); default 0, the start of the log.",
          Schemas.cursorQuery
        ),
        ("cursor", "Alias of since, for the generic ?limit=&cursor= paging.", Schemas.cursorQuery),
        ("limit", "Page size, 1–1000, default 100.", ["type": "integer", "minimum": 1, "maximum": 1000]),
      ],
      handler: { node, context in try await node.listEvents(context) }),
    Route(
      method: .get, pattern: "/api/v1/events/stream", operationID: "streamEvents",
      summary:
        "Server-Sent Events: replays events after since (or Last-Event-ID), then pushes new ones live. The token may be passed as ?token=.",
      authenticated: true, requestSchema: nil,
      responses: [(200, "text/event-stream", nil), (401, "Missing or unknown token.", Schemas.error)],
      queryParameters: [
        ("since", "Replay events after this cursor.", Schemas.cursorQuery),
        ("token", "The peer token, for clients that cannot set headers.", ["type": "string"]),
      ], acceptsQueryToken: true, opensEventStream: true,
      handler: { node, context in try node.eventStreamResponse(context) }),
    Route(
      method: .get, pattern: "/api/v1/ws", operationID: "openWebSocket",
      summary:
        "WebSocket upgrade: a hello event, the replay after since, then live events. The token may be passed as ?token=.",
      authenticated: true, requestSchema: nil,
      responses: [
        (101, "Switching protocols.", nil), (401, "Missing or unknown token.", Schemas.error),
        (426, "Not a WebSocket upgrade request.", Schemas.error),
      ],
      queryParameters: [
        ("since", "Replay events after this cursor.", Schemas.cursorQuery),
        ("token", "The peer token, for browsers.", ["type": "string"]),
      ], acceptsQueryToken: true, isWebSocket: true,
      handler: { node, context in throw node.upgradeRequired(context, url: "ws://host:port/api/v1/ws?token=<token>") }),
  ]
}

extension Schemas {
  static let eventPage: JSONValue = [
    "type": "object", "required": ["events", "nextCursor", "truncated"],
    "properties": [
      "events": ["type": "array", "items": ["$ref": "#/components/schemas/Event"]], "nextCursor": cursor,
      "truncated": [
        "type": "boolean", "description": "True when events after the cursor were already dropped by retention.",
      ],
    ],
  ]
}
