/// Advertising, browsing, who advertises a service type, and the mesh nodes this node knows.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import LWS
import MeshCore

enum DiscoveryRoutes {
  static let routes: [Route] = [
    Route(
      .get, "/api/v1/advertising", "listAdvertising", returns: Schemas.advertisingList,
      """
      The service types this peer advertises, with their discovery info.
      200 Advertised services.
      401 Missing or unknown token.
      """
    ) { node, context in node.features.discovery.listAdvertising(context, node: node) },
    Route(
      .put, "/api/v1/advertising/{serviceType}", "startAdvertising", body: Schemas.advertiseRequest,
      returns: Schemas.advertisingEntry,
      """
      Starts (or updates) advertising a service type, like MCNearbyServiceAdvertiser; browsers mesh-wide get peer.found.
      200 Advertising.
      400 Invalid service type or discovery info.
      401 Missing or unknown token.
      """
    ) { node, context in try await node.features.discovery.startAdvertising(context, node: node) },
    Route(
      .delete, "/api/v1/advertising/{serviceType}", "stopAdvertising",
      """
      Stops advertising; browsers mesh-wide get peer.lost.
      204 Stopped.
      400 Invalid service type.
      404 Not advertising this service type.
      """
    ) { node, context in try await node.features.discovery.stopAdvertising(context, node: node) },
    Route(
      .get, "/api/v1/browsing", "listBrowsing", returns: Schemas.browsingList,
      """
      The service types this peer browses for.
      200 Browsed services.
      401 Missing or unknown token.
      """
    ) { node, context in node.features.discovery.listBrowsing(context, node: node) },
    Route(
      .put, "/api/v1/browsing/{serviceType}", "startBrowsing", returns: Schemas.browsingEntry,
      """
      Starts browsing, like MCNearbyServiceBrowser: peer.found for every current advertiser mesh-wide (self excluded), then found/lost as they change.
      200 Browsing, with the advertisers known now.
      400 Invalid service type.
      """
    ) { node, context in try await node.features.discovery.startBrowsing(context, node: node) },
    Route(
      .delete, "/api/v1/browsing/{serviceType}", "stopBrowsing",
      """
      Stops browsing.
      204 Stopped.
      400 Invalid service type.
      404 Not browsing this service type.
      """
    ) { node, context in try await node.features.discovery.stopBrowsing(context, node: node) },
    Route(
      .get, "/api/v1/services/{serviceType}/peers", "listServicePeers", returns: Schemas.servicePeers,
      query: [.limit(max: 500), .cursor],
      """
      Peers advertising the service type, mesh-wide, the caller excluded.
      200 Advertisers.
      400 Invalid service type.
      """
    ) { node, context in try node.features.discovery.servicePeers(context, node: node) },
    Route(
      .get, "/api/v1/presence", "listPresence", returns: Schemas.presenceList, query: [.limit(max: 500), .cursor],
      """
      Every signed-in peer mesh-wide, the caller excluded, whatever it advertises (presence is not an advert). Sorted by peer id.
      200 Present peers.
      401 Missing or unknown token.
      """
    ) { node, context in try node.features.discovery.listPresence(context, node: node) },
    Route(
      .put, "/api/v1/presence", "startWatchingPresence", returns: Schemas.presenceWatch,
      """
      Starts watching presence: presence.found for every present peer (self excluded), then presence.found / presence.lost as peers sign in, rename, are deleted or their node is lost. Idempotent. Watching is not kept over a node restart: PUT again when the event socket says hello.
      200 Watching, with the peers present now.
      401 Missing or unknown token.
      """
    ) { node, context in node.features.discovery.startWatchingPresence(context, node: node) },
    Route(
      .delete, "/api/v1/presence", "stopWatchingPresence",
      """
      Stops watching presence.
      204 Stopped.
      401 Missing or unknown token.
      404 Not watching presence.
      """
    ) { node, context in try node.features.discovery.stopWatchingPresence(context, node: node) },
    Route(
      .get, "/api/v1/mesh/nodes", "listMeshNodes", access: .open, returns: Schemas.meshNodes,
      """
      This node and the nodes linked to it: direction, RTT, how each was found, TLS. With the admin token (optional) also the addresses it is dialling, backing off from or waiting for.
      200 Known nodes.
      """
    ) { node, context in
      .json(
        node.features.discovery.meshNodesJSON(admin: node.safety.carriesAdminToken(context.request.head), node: node))
    },
    Route(
      .post, "/api/v1/mesh/nodes", "addMeshNode", access: .admin, body: Schemas.addMeshNode, returns: Schemas.meshNodes,
      """
      Adds a static seed HOST:PORT; the node dials it now and re-dials it after every loss. Needs the admin token.
      202 Dialling.
      400 Malformed address.
      401 Missing or unknown admin token.
      403 A peer token, not the admin token.
      """
    ) { node, context in try node.features.discovery.addMeshNode(context, node: node) },
  ]
}

extension Schemas {
  static let serviceType: JSONValue = [
    "type": "string", "minLength": 1, "maxLength": 15, "pattern": "^(?=[a-z0-9-]*[a-z])[a-z0-9]+(-[a-z0-9]+)*$",
    "description": "1–15 of a-z 0-9 -, at least one letter, no leading, trailing or double hyphen (RFC 6335).",
  ]
  static let advertiseRequest: JSONValue = [
    "type": "object", "additionalProperties": false, "properties": ["discoveryInfo": optionalDiscoveryInfo],
  ]
  static let advertisingEntry: JSONValue = [
    "type": "object", "required": ["serviceType", "discoveryInfo"],
    "properties": ["serviceType": serviceType, "discoveryInfo": discoveryInfo],
  ]
  static let advertisingList: JSONValue = [
    "type": "object", "required": ["advertising"],
    "properties": ["advertising": ["type": "array", "items": advertisingEntry]],
  ]
  static let advertiser: JSONValue = [
    "type": "object", "required": ["peer", "discoveryInfo"],
    "properties": ["peer": peerRef, "discoveryInfo": discoveryInfo],
  ]
  static let servicePeers: JSONValue = [
    "type": "object", "required": ["serviceType", "peers"],
    "properties": [
      "serviceType": serviceType, "peers": ["type": "array", "items": advertiser],
      "nextCursor": ["type": ["string", "null"]],
    ],
  ]
  static let browsingEntry: JSONValue = [
    "type": "object", "required": ["serviceType", "peers"],
    "properties": ["serviceType": serviceType, "peers": ["type": "array", "items": advertiser]],
  ]
  static let presenceList: JSONValue = [
    "type": "object", "required": ["peers", "nextCursor"],
    "properties": ["peers": ["type": "array", "items": peerRef], "nextCursor": ["type": ["string", "null"]]],
  ]
  static let presenceWatch: JSONValue = [
    "type": "object", "required": ["watching", "peers"],
    "properties": ["watching": ["type": "boolean", "const": true], "peers": ["type": "array", "items": peerRef]],
  ]
  static let browsingList: JSONValue = [
    "type": "object", "required": ["browsing"],
    "properties": ["browsing": ["type": "array", "items": serviceType]],
  ]
  static let meshNode: JSONValue = [
    "type": "object", "required": ["state"],
    "properties": [
      "id": ["type": ["string", "null"]], "name": ["type": ["string", "null"]],
      "address": ["type": ["string", "null"]],
      "state": ["type": "string", "enum": ["linked", "connecting", "backoff", "waiting"]],
      "rttMillis": ["type": ["integer", "null"]],
      "source": ["type": ["string", "null"], "enum": ["seed", "beacon", "gossip", nil]],
      "direction": ["type": "string", "enum": ["inbound", "outbound"]],
      "linkedForSeconds": ["type": ["number", "null"]],
      "encrypted": ["type": ["boolean", "null"], "description": "The link runs over TLS (null when not linked)."],
      "fingerprint": [
        "type": ["string", "null"],
        "description": "SHA-256 of the node's certificate (DER), hex: the one its link presented, else the pinned one.",
      ],
      "pinned": ["type": "boolean", "description": "A certificate is pinned for this node id."],
    ],
  ]
  static let meshNodes: JSONValue = [
    "type": "object", "required": ["self", "nodes"],
    "properties": [
      "self": ["type": "object"], "nodes": ["type": "array", "items": meshNode],
      "forgotten": [
        "type": "array",
        "description": .string(
          "Admin token only: the last 64 gossiped addresses this node stopped dialling (unreachable, or answered as "
            + "another node)."),
        "items": [
          "type": "object", "required": ["address", "id", "gossipedBy", "reason", "attempts"],
          "properties": [
            "address": ["type": "string"], "id": ["type": ["string", "null"]],
            "gossipedBy": ["type": ["string", "null"]],
            "reason": ["type": "string", "enum": ["unreachable", "answered_as_another_node"]],
            "attempts": ["type": "integer"],
          ],
        ],
      ],
    ],
  ]
  static let addMeshNode: JSONValue = [
    "type": "object", "required": ["address"], "additionalProperties": false,
    "properties": ["address": ["type": "string", "description": "HOST:PORT, e.g. 192.168.1.20:8080"]],
  ]
}
