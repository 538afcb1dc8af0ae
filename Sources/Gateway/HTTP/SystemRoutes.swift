/// The node's own routes: health, metrics, the OpenAPI document, node information.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import LWS
import MeshCore

enum SystemRoutes {
  static let routes: [Route] = [
    Route(
      method: .get, pattern: "/healthz", operationID: "getHealth",
      summary:
        "Liveness: 200 while the node serves requests, its store answers and its data directory is the one it opened.",
      authenticated: false, requestSchema: nil,
      responses: [
        (200, "The node is healthy.", Schemas.health),
        (
          503,
          "The store does not answer (unavailable), or the data directory or its database file was deleted, "
            + "moved or replaced while the node ran (data_directory_lost; writes answer the same).", Schemas.error
        ),
      ],
      queryParameters: [],
      handler: { node, _ in try await node.healthz() }),
    Route(
      method: .get, pattern: "/metrics", operationID: "getMetrics",
      summary: "Prometheus text exposition: requests by route and status, open WebSockets, peers, events.",
      authenticated: false, requestSchema: nil, responses: [(200, "Prometheus text format 0.0.4.", nil)],
      queryParameters: [],
      handler: { node, _ in node.metricsResponse() }),
    Route(
      method: .get, pattern: "/api/v1/openapi.json", operationID: "getOpenAPI",
      summary: "This OpenAPI 3.1 document.", authenticated: false, requestSchema: nil,
      responses: [(200, "The OpenAPI document.", ["type": "object"])], queryParameters: [],
      handler: { node, _ in .json(node.router.openAPIDocument(version: NodeConfiguration.version)) }),
    Route(
      method: .get, pattern: "/api/v1/node", operationID: "getNode",
      summary: "This node's id, name, version, uptime and peer count.", authenticated: false, requestSchema: nil,
      responses: [(200, "Node information.", Schemas.node)], queryParameters: [],
      handler: { node, _ in .json(node.nodeJSON()) }),
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
    ],
  ]
}
