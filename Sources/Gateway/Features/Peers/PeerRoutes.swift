/// Peers: create one (its token), read, rename and delete yourself.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import LWS
import MeshCore

enum PeerRoutes {
  static let routes: [Route] = [
    Route(
      .post, "/api/v1/peers", "createPeer", access: .open, body: Schemas.createPeer, returns: Schemas.createdPeer,
      links: .id(at: "/peer/id", as: "peerId", to: ["removeAlwaysAccept"]),
      """
      Creates a peer hosted on this node and returns its bearer token (shown only once).
      201 The peer and its token.
      400 Invalid display name or discovery info.
      409 The node already hosts --max-peers peers (peer_limit_reached).
      413 Body too large.
      415 Not JSON, or no Content-Type.
      429 Over the client address's peer creation rate (--peer-create-rate); see Retry-After.
      503 The node's data directory is lost or failing.
      """
    ) { node, context in try await node.features.peers.create(context, node: node) },
    Route(
      .get, "/api/v1/peers/me", "getMe", returns: Schemas.peerEnvelope,
      """
      The peer the bearer token belongs to.
      200 The peer.
      401 Missing or unknown token.
      """
    ) { node, context in .json(["peer": node.peerJSON(context.authenticatedPeer)]) },
    Route(
      .patch, "/api/v1/peers/me", "updateMe", body: Schemas.updatePeer, returns: Schemas.peerEnvelope,
      """
      Changes the peer's display name or discovery info; pushes peer.updated to its clients.
      200 The updated peer.
      400 Invalid field.
      401 Missing or unknown token.
      """
    ) { node, context in try await node.features.peers.updateMe(context, node: node) },
    Route(
      .delete, "/api/v1/peers/me", "deleteMe",
      """
      Deletes the peer, its token and its event log; its open WebSockets close with 4401.
      204 Deleted.
      401 Missing or unknown token.
      """
    ) { node, context in try await node.features.peers.deleteMe(context, node: node) },
  ]
}

extension Schemas {
  static let peerEnvelope = envelope("peer", peer)
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
