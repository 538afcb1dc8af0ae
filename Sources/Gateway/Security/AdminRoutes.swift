/// Admin-token routes: node settings and certificate pins, with their handlers.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import LWS
import Logging
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
    ) { node, _ in .json(AdminRoutes.settings(node: node)) },
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
    ) { node, context in try AdminRoutes.updateSettings(context, node: node) },
    Route(
      .delete, "/api/v1/mesh/pins/{nodeId}", "deleteMeshPin", access: .admin,
      """
      Forgets the pinned certificate of a node (after it was replaced on purpose); its next TLS link pins anew. Needs the admin token.
      204 Pin removed.
      401 Missing or unknown admin token.
      403 A peer token, not the admin token.
      404 No pin for that node.
      """
    ) { node, context in try await AdminRoutes.deletePin(context, node: node) },
  ]

  /// `GET /api/v1/node/settings`: the limits, the event retention and the features' settings in force.
  static func settings(node: isolated Node) -> JSONValue {
    guard case .object(var object) = node.safety.guards.limits.json else { return .null }
    object["eventRetention"] = .int(Int64(node.store.eventLog.retention))
    for feature in node.features.all { feature.settings(into: &object, node: node) }
    return ["settings": .object(object)]
  }

  /// `PATCH /api/v1/node/settings`: changes limits at run time (until the node restarts).
  static func updateSettings(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    let body = try RequestBody(context.request)
    let names =
      [
        "requestsPerSecond", "webSocketMessagesPerSecond", "webSocketMaxMessageBytes", "peerCreationsPerSecond",
        "maxPeers", "eventRetention",
      ] + node.features.all.flatMap(\.settingNames)
    try body.allowOnly(Set(names))
    guard !body.object.keys.isEmpty else {
      throw APIError.badRequest("send at least one of \(names.joined(separator: ", "))")
    }
    func integer(_ key: String, _ range: ClosedRange<Int>) throws(APIError) -> Int? {
      guard let value = body.object[key] else { return nil }
      guard case .int(let number) = value, range.contains(Int(number)) else {
        throw .badRequest("\(key) must be an integer from \(range.lowerBound) to \(range.upperBound)")
      }
      return Int(number)
    }
    var limits = node.safety.guards.limits
    limits.requestsPerSecond = try integer("requestsPerSecond", 0...10_000_000) ?? limits.requestsPerSecond
    limits.webSocketMessagesPerSecond =
      try integer("webSocketMessagesPerSecond", 0...10_000_000) ?? limits.webSocketMessagesPerSecond
    limits.webSocketMaxMessageBytes =
      try integer("webSocketMaxMessageBytes", 64...Limits.webSocketHardLimit) ?? limits.webSocketMaxMessageBytes
    limits.peerCreationsPerSecond =
      try integer("peerCreationsPerSecond", 0...1_000_000) ?? limits.peerCreationsPerSecond
    limits.maxPeers = try integer("maxPeers", 1...Limits.maxPeersHardLimit) ?? limits.maxPeers
    let retention = try integer("eventRetention", 10...10_000_000)
    for feature in node.features.all { try feature.checkSettings(body, node: node) }
    node.safety.guards.limits = limits
    if let retention { node.store.eventLog.retention = retention }
    for feature in node.features.all { feature.applySettings(body, node: node) }
    node.logger.notice("Node settings changed.", ["settings": settings(node: node).serializedString()])
    return .json(settings(node: node))
  }

  /// `DELETE /api/v1/mesh/pins/{nodeId}`: forgets a pin so the node's next TLS link pins its new certificate.
  /// Needs the admin token (the route says so): a pin guards against impersonation.
  static func deletePin(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let nodeID = context.parameters["nodeId"] ?? ""
    let remote = context.request.head.remoteAddress
    let existed = node.mesh.node.links.pins[nodeID] != nil
    guard existed else {
      throw APIError.notFound("no certificate is pinned for node \(nodeID); see GET /api/v1/mesh/nodes")
    }
    _ = node.mesh.node.unpin(nodeID)
    _ = try await node.store.deletePin(nodeID: nodeID)
    node.links.forgetRefusals(of: nodeID)
    node.meshLogger.notice("Removed a certificate pin.", ["node.id": nodeID, "http.remote": remote])
    return HTTPResponse(status: 204, contentType: "application/json", body: [])
  }
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
