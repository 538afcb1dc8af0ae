/// Peers: create one (its token), read, rename and delete yourself.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import LWS
import MeshCore

enum PeerRoutes {
  static let routes: [Route] = [
    Route(
      method: .post, pattern: "/api/v1/peers", operationID: "createPeer",
      summary: "Creates a peer hosted on this node and returns its bearer token (shown only once).",
      authenticated: false, requestSchema: Schemas.createPeer,
      responses: [
        (201, "The peer and its token.", Schemas.createdPeer),
        (400, "Invalid display name or discovery info.", Schemas.error),
        (409, "The node already hosts --max-peers peers (peer_limit_reached).", Schemas.error),
        (413, "Body too large.", Schemas.error), (415, "Not JSON, or no Content-Type.", Schemas.error),
        (429, "Over the client address's peer creation rate (--peer-create-rate); see Retry-After.", Schemas.error),
        (503, "The node's data directory is lost or failing.", Schemas.error),
      ], queryParameters: [],
      handler: { node, context in try await node.createPeer(context) }),
    Route(
      method: .get, pattern: "/api/v1/peers/me", operationID: "getMe",
      summary: "The peer the bearer token belongs to.", authenticated: true, requestSchema: nil,
      responses: [(200, "The peer.", Schemas.peerEnvelope), (401, "Missing or unknown token.", Schemas.error)],
      queryParameters: [],
      handler: { node, context in .json(["peer": node.peerJSON(context.authenticatedPeer)]) }),
    Route(
      method: .patch, pattern: "/api/v1/peers/me", operationID: "updateMe",
      summary: "Changes the peer's display name or discovery info; pushes peer.updated to its clients.",
      authenticated: true, requestSchema: Schemas.updatePeer,
      responses: [
        (200, "The updated peer.", Schemas.peerEnvelope), (400, "Invalid field.", Schemas.error),
        (401, "Missing or unknown token.", Schemas.error),
      ], queryParameters: [],
      handler: { node, context in try await node.updateMe(context) }),
    Route(
      method: .delete, pattern: "/api/v1/peers/me", operationID: "deleteMe",
      summary: "Deletes the peer, its token and its event log; its open WebSockets close with 4401.",
      authenticated: true, requestSchema: nil,
      responses: [(204, "Deleted.", nil), (401, "Missing or unknown token.", Schemas.error)], queryParameters: [],
      handler: { node, context in try await node.deleteMe(context) }),
  ]
}

extension Schemas {
  static let peerEnvelope: JSONValue = ["type": "object", "required": ["peer"], "properties": ["peer": peer]]
  static let createdPeer: JSONValue = [
    "type": "object", "required": ["peer", "token"], "properties": ["peer": peer, "token": ["type": "string"]],
  ]
  static let createPeer: JSONValue = [
    "type": "object", "required": ["displayName"], "additionalProperties": false,
    "properties": ["displayName": displayName, "discoveryInfo": optionalDiscoveryInfo],
  ]
  static let updatePeer: JSONValue = [
    "type": "object", "additionalProperties": false, "minProperties": 1,
    "properties": ["displayName": displayName, "discoveryInfo": optionalDiscoveryInfo],
  ]
}
