/// The node's own routes: health, metrics, the OpenAPI document, node information.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import LWS
import MeshCore

enum SystemRoutes {
  static let routes: [Route] = [
    Route(
      .get, "/healthz", "getHealth", access: .open, returns: Schemas.health,
      """
      Liveness: 200 while the node serves requests, its store answers and its data directory is the one it opened.
      200 The node is healthy.
      503 The store does not answer (unavailable), or the data directory or its database file was deleted, moved or replaced while the node ran (data_directory_lost; writes answer the same).
      """
    ) { node, _ in try await node.healthz() },
    Route(
      .get, "/metrics", "getMetrics", access: .open,
      """
      Prometheus text exposition: requests by route and status, open WebSockets, peers, events.
      200 Prometheus text format 0.0.4.
      """
    ) { node, _ in node.metricsResponse() },
    Route(
      .get, "/api/v1/openapi.json", "getOpenAPI", access: .open, returns: ["type": "object"],
      """
      This OpenAPI 3.1 document.
      200 The OpenAPI document.
      """
    ) { node, _ in .json(node.router.openAPIDocument(version: NodeConfiguration.version)) },
    Route(
      .get, "/api/v1/node", "getNode", access: .open, returns: Schemas.node,
      """
      This node's id, name, version, uptime and peer count, and the LAN addresses a phone can open its dashboard by.
      200 Node information.
      """
    ) { node, _ in .json(node.nodeInfoJSON()) },
  ]
}

extension Schemas {
  static let health: JSONValue = [
    "type": "object", "required": ["status"], "properties": ["status": ["type": "string", "enum": ["ok"]]],
  ]
  static let node: JSONValue = [
    "type": "object", "required": ["id", "name", "version", "startedAt", "uptimeSeconds", "peerCount"],
    "properties": [
      "id": ["type": "string"], "name": ["type": "string"], "version": ["type": "string"],
      "startedAt": ["type": "string", "format": "date-time"], "uptimeSeconds": ["type": "number"],
      "peerCount": ["type": "integer"], "openWebSockets": ["type": "integer"],
      "lanAddresses": [
        "type": "array", "items": ["type": "string"],
        "description": .string(
          "GET /api/v1/node only: the addresses other devices on the LAN reach this node by (IPv4 first, then global "
            + "IPv6; no loopback or link-local), [] when it listens on loopback only."),
      ],
    ],
  ]
}
