/// Admin-token routes: node settings and certificate pins.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import LWS
import MeshCore

enum AdminRoutes {
  static let routes: [Route] = [
    Route(
      .get, "/api/v1/node/settings", "getNodeSettings", access: .admin, returns: Schemas.settingsEnvelope,
      """
      The node's limits and event retention. Needs the admin token.
      200 The settings.
      401 Missing or unknown admin token.
      403 A peer token, not the admin token.
      """
    ) { node, _ in .json(node.settingsJSON()) },
    Route(
      .patch, "/api/v1/node/settings", "updateNodeSettings", access: .admin, body: Schemas.settingsPatch,
      returns: Schemas.settingsEnvelope,
      """
      Changes limits and event retention at run time (until the node restarts). Needs the admin token.
      200 The settings now in force.
      400 Invalid field.
      401 Missing or unknown admin token.
      403 A peer token, not the admin token.
      """
    ) { node, context in try node.updateSettings(context) },
    Route(
      .delete, "/api/v1/mesh/pins/{nodeId}", "deleteMeshPin", access: .admin,
      """
      Forgets the pinned certificate of a node (after it was replaced on purpose); its next TLS link pins anew. Needs the admin token.
      204 Pin removed.
      401 Missing or unknown admin token.
      403 A peer token, not the admin token.
      404 No pin for that node.
      """
    ) { node, context in try await node.deletePin(context) },
  ]
}

extension Schemas {
  static let settings: JSONValue = [
    "type": "object",
    "required": [
      "requestsPerSecond", "webSocketMessagesPerSecond", "webSocketMaxMessageBytes", "peerCreationsPerSecond",
      "maxPeers", "eventRetention", "fileConsent", "fileConsentTimeout",
    ],
    "properties": [
      "requestsPerSecond": ["type": "integer", "minimum": 0],
      "webSocketMessagesPerSecond": ["type": "integer", "minimum": 0],
      "webSocketMaxMessageBytes": ["type": "integer", "minimum": 64],
      "peerCreationsPerSecond": ["type": "integer", "minimum": 0],
      "maxPeers": ["type": "integer", "minimum": 1],
      "eventRetention": ["type": "integer", "minimum": 10],
      "fileConsent": [
        "type": "string", "enum": ["auto", "ask"],
        "description":
          "auto: incoming files are accepted at once; ask: each waits for the recipient's Accept or Decline.",
      ],
      "fileConsentTimeout": [
        "type": "integer", "minimum": 1, "maximum": 86_400,
        "description": "Seconds an incoming file waits for the recipient's answer before it fails.",
      ],
    ],
  ]
  static let settingsEnvelope = envelope("settings", settings)
  static let settingsPatch: JSONValue = [
    "type": "object", "additionalProperties": false, "minProperties": 1,
    "properties": [
      "requestsPerSecond": ["type": "integer", "minimum": 0, "maximum": 10_000_000],
      "webSocketMessagesPerSecond": ["type": "integer", "minimum": 0, "maximum": 10_000_000],
      "webSocketMaxMessageBytes": ["type": "integer", "minimum": 64, "maximum": 16_777_216],
      "peerCreationsPerSecond": ["type": "integer", "minimum": 0, "maximum": 1_000_000],
      "maxPeers": ["type": "integer", "minimum": 1, "maximum": 50_000],
      "eventRetention": ["type": "integer", "minimum": 10, "maximum": 10_000_000],
      "fileConsent": ["type": "string", "enum": ["auto", "ask"]],
      "fileConsentTimeout": ["type": "integer", "minimum": 1, "maximum": 86_400],
    ],
  ]
}
