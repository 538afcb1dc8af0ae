/// Peers: create one (its token), read, rename and delete yourself; the admin's list and delete.
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

  /// The admin's peer routes (list, delete), listed in the OpenAPI document with the other admin-token routes.
  static let adminRoutes: [Route] = [
    Route(
      .get, "/api/v1/admin/peers", "listPeersAsAdmin", access: .admin, returns: Schemas.adminPeerList,
      query: [.limit(max: 500), .cursor],
      """
      Every peer this node hosts, oldest first: id, displayName, createdAt, lastUsedAt (null: its token was never used since it was created; kept to the hour) and whether it has a live WebSocket or event stream. Needs the admin token.
      200 A page of peers.
      400 Invalid limit or cursor.
      401 Missing or unknown admin token.
      403 A peer token, not the admin token.
      """
    ) { node, context in try node.features.peers.adminList(context, node: node) },
    Route(
      .delete, "/api/v1/admin/peers/{peerId}", "deletePeerAsAdmin", access: .admin,
      """
      Deletes a peer this node hosts, as DELETE /api/v1/peers/me would (its token, its event log, its jobs; its sockets close with 4401). Needs the admin token.
      204 Deleted.
      401 Missing or unknown admin token.
      403 A peer token, not the admin token.
      404 No such peer on this node.
      """
    ) { node, context in try await node.features.peers.adminDelete(context, node: node) },
  ]
}

extension Schemas {
  static let adminPeer: JSONValue = [
    "type": "object", "required": ["id", "displayName", "createdAt", "lastUsedAt", "connected"],
    "properties": [
      "id": ["type": "string"], "displayName": ["type": "string"],
      "createdAt": ["type": "string", "format": "date-time"],
      "lastUsedAt": ["type": ["string", "null"], "format": "date-time"], "connected": ["type": "boolean"],
    ],
  ]
  static let adminPeerList = page("peers", of: adminPeer)

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
