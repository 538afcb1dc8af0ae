/// A peer's event log: pages, Server-Sent Events and the browser WebSocket.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import LWS
import MeshCore

enum EventRoutes {
  static let routes: [Route] = [
    Route(
      .get, "/api/v1/events", "listEvents", returns: Schemas.eventPage,
      query: [
        QueryParameter(
          "since", "Return events after this cursor (an event id); default 0, the start of the log.",
          .numericCursor),
        QueryParameter("cursor", "Alias of since, for the generic ?limit=&cursor= paging.", .numericCursor),
        .limit(max: 1000),
      ],
      """
      The peer's durable event log after a cursor, oldest first.
      200 A page of events.
      400 Bad cursor or limit.
      401 Missing or unknown token.
      503 storage_unavailable: events delivered in the last moments (durable in the node's event ring) are written to SQLite before the log is read, and that write met an I/O error; retry after Retry-After.
      507 storage_full: that write found the data directory's disk full; free space there and retry.
      """
    ) { node, context in try await node.events.list(context, node: node) },
    Route(
      .get, "/api/v1/events/stream", "streamEvents", kind: .eventStream,
      query: [
        QueryParameter("since", "Replay events after this cursor.", .numericCursor),
        QueryParameter("token", "The peer token, for clients that cannot set headers."),
      ],
      """
      Server-Sent Events: replays events after since (or Last-Event-ID), then pushes new ones live. The token may be passed as ?token=.
      200 text/event-stream
      401 Missing or unknown token.
      """
    ) { _, context in try EventHub.streamResponse(context) },
    Route(
      .get, "/api/v1/ws", "openWebSocket", kind: .webSocket,
      query: [
        QueryParameter("since", "Replay events after this cursor.", .numericCursor),
        QueryParameter("token", "The peer token, for browsers."),
      ],
      upgrade: eventSocket,
      """
      WebSocket upgrade: a hello event, the replay after since, then live events. The token may be passed as ?token=.
      101 Switching protocols.
      401 Missing or unknown token.
      426 Not a WebSocket upgrade request.
      """
    ) { _, context in throw WebSocketUpgrade.required(context) },
  ]
}

extension EventRoutes {
  /// `/api/v1/ws`: a peer's event socket (a hello, the replay after `since`, then live events).
  static let eventSocket = WebSocketUpgrade(
    connection: .events,
    accept: { _, head, _ in
      do throws(APIError) {
        _ = try EventHub.parseCursor(head.query["since"], name: "since")
        return .accept
      } catch {
        return .reject(error.response)
      }
    },
    opened: { node, id, head, peer in
      guard let peer else { return }
      let since = (try? EventHub.parseCursor(head.query["since"], name: "since")) ?? nil
      node.events.webSocketOpened(id, peerID: peer.id, since: since, node: node)
    })
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
