/// Transceive: join the one session of every peer that transceives a service type.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import LWS
import MeshCore

enum TransceiveRoutes {
  static let routes: [Route] = [
    Route(
      .post, "/api/v1/transceive", "transceive", body: Schemas.transceive, returns: Schemas.transceiveResult,
      """
      PeerKit / ARKit MultipeerSession: advertise + browse + auto-invite + auto-accept everyone transceiving the service type into one session (led by the smallest peer id).
      200 Transceiving.
      400 Invalid service type.
      """
    ) { node, context in try await node.features.transceive.start(context, node: node) }
  ]
}

extension Schemas {
  static let transceive: JSONValue = [
    "type": "object", "required": ["serviceType"], "additionalProperties": false,
    "properties": ["serviceType": serviceType],
  ]
  static let transceiveResult: JSONValue = [
    "type": "object", "required": ["serviceType", "transceiving", "leader"],
    "properties": [
      "serviceType": serviceType, "transceiving": ["type": "boolean"],
      "leader": [
        "type": "string",
        "description":
          "The smallest peer id among the transceivers this node sees now (the caller included); partial right after a node starts or re-links, settled within about a second of the links coming up.",
      ],
      "session": [
        "type": ["object", "null"], "description": "The transceive session the caller is in; null until it joined one.",
      ],
    ],
  ]
}
