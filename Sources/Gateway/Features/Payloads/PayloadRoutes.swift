/// File transfers (resources) and byte streams: their routes and schemas (part of ``Router/standard`` and the OpenAPI
/// document).
import LWS
import MeshCore

enum PayloadRoutes {
  static let routes: [Route] = transferRoutes + streamRoutes

  static let transferRoutes: [Route] = [
    Route(
      .post, "/api/v1/sessions/{sessionId}/resources", "sendResource", kind: .upload, returns: Schemas.transferSent,
      query: [
        QueryParameter(
          "to",
          "The receiving peer's id (a connected member of the session); or several ids separated by commas, or all (every other connected member), for a group send.",
          required: true),
        QueryParameter(
          "name", "The file name; path components, control characters and leading dots are removed.", required: true),
      ],
      links: .id(at: "/transfer/id", as: "transferId", to: ["getTransfer", "cancelTransfer", "getTransferContent"])
        + .id(at: "/group/id", as: "groupId", to: ["getTransferGroup", "cancelTransferGroup"]),
      """
      Sends the raw body (Content-Length required) as a file to one session member (sendResource). The body is streamed to disk and on to the receiver's node with flow control; the answer comes once the whole body is stored (spooled, so the transfer resumes after a link loss or restart). Both sides get transfer.started, transfer.progress (≤ 10/s) and transfer.finished | failed | canceled. With several recipients (to=a,b or to=all) it is a group send: one upload, one copy over the mesh per receiving node, a transfer per recipient (each with groupId); the answer is {group, transfers}, and a receiving node that refuses (413, 507) fails only its recipients.
      202 Uploaded; delivery continues in the background.
      400 Missing to or name, or a name with nothing usable in it.
      404 Not a member of the session.
      409 The receiver is not a connected member, or the transfer was canceled during the upload.
      411 No Content-Length.
      413 Over the sender's or the receiver's size limit.
      502 The transfer failed during the upload.
      503 The receiver's node is not linked or did not answer.
      507 The receiving node's disk (or this node's, for the upload's spool) would drop below its free-space reserve, counting the transfers it has already accepted; nothing was read.
      """
    ) { node, context in
      await node.features.payloads.untilTransfersListed(node: node)
      return try await node.features.payloads.uploadResource(context, node: node)
    },
    Route(
      .get, "/api/v1/transfers", "listTransfers", returns: Schemas.transferList,
      query: [.limit(max: 500), .cursor, QueryParameter("group", "Only the transfers of this group send.")],
      """
      Transfers this peer sent or received, oldest first, paged; with group, only that group send's.
      200 Transfers.
      400 Bad limit or cursor.
      """
    ) { node, context in
      await node.features.payloads.untilTransfersListed(node: node)
      return try node.features.payloads.listTransfers(context)
    },
    Route(
      .get, "/api/v1/transfers/{transferId}", "getTransfer", returns: Schemas.transferEnvelope,
      """
      One transfer: state, bytes, size, SHA-256 once known.
      200 The transfer.
      404 Not sent or received by this peer.
      """
    ) { node, context in
      await node.features.payloads.untilTransfersListed(node: node)
      return try node.features.payloads.getTransfer(context)
    },
    Route(
      .delete, "/api/v1/transfers/{transferId}", "cancelTransfer", returns: Schemas.transferEnvelope,
      """
      Cancels a transfer in progress: both sides stop, partial data is removed, both get transfer.canceled.
      200 Canceled.
      404 Not sent or received by this peer.
      409 Already finished, failed or canceled.
      """
    ) { node, context in
      await node.features.payloads.untilTransfersListed(node: node)
      return try node.features.payloads.deleteTransfer(context, node: node)
    },
    Route(
      .get, "/api/v1/transfer-groups/{groupId}", "getTransferGroup", returns: Schemas.transferGroupView,
      """
      A group send's summary for its sender: recipients, node copies, how many are pending, finished, failed or canceled (and, with file consent, declined or not answered yet), and the bytes delivered over all recipients (of totalBytes); with each recipient's transfer (its state says who accepted, declined or has not answered yet).
      200 The group and its recipients' transfers.
      404 Not a group send by this peer.
      """
    ) { node, context in
      await node.features.payloads.untilTransfersListed(node: node)
      return try node.features.payloads.getTransferGroup(context)
    },
    Route(
      .delete, "/api/v1/transfer-groups/{groupId}", "cancelTransferGroup", returns: Schemas.transferGroupEnvelope,
      """
      Cancels every recipient's transfer of a group send that has not ended (one recipient alone: DELETE /api/v1/transfers/{transferId}); each gets transfer.canceled.
      200 Canceled; the group now.
      404 Not a group send by this peer.
      409 Every transfer of the group has already ended.
      """
    ) { node, context in
      await node.features.payloads.untilTransfersListed(node: node)
      return try node.features.payloads.cancelTransferGroup(context, node: node)
    },
    Route(
      .get, "/api/v1/transfers/{transferId}/content", "getTransferContent",
      """
      The file of a finished transfer, for its sender or receiver, with the sent Content-Type, an attachment Content-Disposition and single byte ranges (Range: bytes=a-b, a-, -n).
      200 The whole file.
      206 The requested range.
      404 Not sent or received by this peer.
      409 Not finished.
      416 Range outside the file.
      """
    ) { node, context in
      await node.features.payloads.untilTransfersListed(node: node)
      return try node.features.payloads.transferContent(context)
    },
    Route(
      .post, "/api/v1/transfers/{transferId}/accept", "acceptTransfer", body: Schemas.acceptTransfer,
      returns: Schemas.transferEnvelope,
      """
      The recipient accepts a file that waits for its consent (state awaitingConsent, file consent on): its node creates the file and the sender's node starts sending. With always: true, later files from the same sender are accepted without asking (see GET /api/v1/file-consent).
      200 Accepted; the transfer is inProgress.
      400 Invalid field.
      404 Not sent or received by this peer.
      409 Not a file waiting for this peer's answer (transfer_not_awaiting_consent), ended meanwhile, or the always-accept list is full (always_accept_list_full).
      500 The receiving node cannot create the file.
      """
    ) { node, context in
      await node.features.payloads.untilTransfersListed(node: node)
      return try await node.features.payloads.acceptTransfer(context, node: node)
    },
    Route(
      .post, "/api/v1/transfers/{transferId}/decline", "declineTransfer", returns: Schemas.transferEnvelope,
      """
      The recipient declines a file that waits for its consent: nothing is stored, the sender's node removes its spool, and both sides get transfer.declined (state declined).
      200 Declined.
      404 Not sent or received by this peer.
      409 Not a file waiting for this peer's answer.
      """
    ) { node, context in
      await node.features.payloads.untilTransfersListed(node: node)
      return try node.features.payloads.declineTransfer(context, node: node)
    },
    Route(
      .get, "/api/v1/file-consent", "getFileConsent", returns: Schemas.fileConsentEnvelope,
      """
      Whether this node asks before incoming files are stored (mode auto or ask, set with --file-consent or PATCH /api/v1/node/settings), how long a file waits, and this peer's always-accept list.
      200 File consent for this peer.
      """
    ) { node, context in
      await node.features.payloads.untilTransfersListed(node: node)
      return node.features.payloads.fileConsentResponse(of: context.authenticatedPeer.id, node: node)
    },
    Route(
      .delete, "/api/v1/file-consent/always-accept/{peerId}", "removeAlwaysAccept",
      returns: Schemas.fileConsentEnvelope,
      """
      Removes a sender from this peer's always-accept list: its next file waits for an answer again.
      200 Removed; the list now.
      404 The sender is not on this peer's list.
      """
    ) { node, context in
      await node.features.payloads.untilTransfersListed(node: node)
      return try await node.features.payloads.removeAlwaysAccept(context, node: node)
    },
  ]

  static let streamRoutes: [Route] = [
    Route(
      .post, "/api/v1/sessions/{sessionId}/streams", "openStream", body: Schemas.openStream,
      returns: Schemas.streamEnvelope, links: .id(at: "/stream/id", as: "streamId", to: ["writeStream", "readStream"]),
      """
      Opens a byte stream to one connected session member (startStream); the receiver gets stream.opened with its id.
      201 The open stream.
      400 Invalid field.
      404 Not a member of the session.
      409 The receiver is not a connected member.
      503 The receiver's node is not linked.
      """
    ) { node, context in try node.features.payloads.openStream(context, node: node) },
    Route(
      .put, "/api/v1/streams/{streamId}", "writeStream", kind: .unboundedBody, returns: Schemas.streamEnvelope,
      """
      The writer's bytes (Content-Length required: libwebsockets 4.1 cannot read chunked request bodies), forwarded as they arrive; reading pauses while the reader is behind. Answered when the reader has taken every byte.
      200 Every byte was delivered.
      404 Not a stream this peer opened.
      409 The stream already has a writer or is closed.
      411 No Content-Length.
      502 The stream failed on the way.
      """
    ) { node, context in try await node.features.payloads.writeStream(context, node: node) },
    Route(
      .get, "/api/v1/streams/{streamId}", "readStream",
      """
      The stream's bytes for its receiver, as they arrive; the body ends (and the connection closes) when the writer finishes.
      200 application/octet-stream, without a length.
      404 Not a stream to this peer.
      409 The stream already has a reader or is closed.
      """
    ) { node, context in try node.features.payloads.readStream(context, node: node) },
    Route(
      .get, "/api/v1/streams/{streamId}/ws", "streamWebSocket", kind: .webSocket,
      query: [QueryParameter("token", "The peer token, for browsers.")],
      upgrade: WebSocketUpgrade(
        connection: .feature, accept: { node, head, _ in node.features.payloads.acceptStreamSocket(head, node: node) },
        opened: { node, id, head, _ in node.features.payloads.streamSocketOpened(id, head: head, node: node) }),
      """
      WebSocket upgrade for a stream: its writer sends binary frames (closing the socket ends the stream), its reader receives binary frames (closed with 1000 at the end). The token may be passed as ?token=.
      101 Switching protocols.
      401 Missing or unknown token.
      404 Not a stream this peer writes or reads.
      409 The stream already has a writer or reader, or is closed.
      426 Not a WebSocket upgrade request.
      """
    ) { _, context in throw WebSocketUpgrade.required(context) },
  ]
}

extension Schemas {
  static let openStream: JSONValue = [
    "type": "object", "required": ["to"], "additionalProperties": false,
    "properties": ["to": ["type": "string"], "name": ["type": "string", "minLength": 1]],
  ]
  static let stream: JSONValue = [
    "type": "object",
    "required": ["id", "sessionId", "direction", "name", "state", "bytes", "from", "to", "reason", "createdAt"],
    "properties": [
      "id": ["type": "string"], "sessionId": ["type": "string"],
      "direction": ["type": "string", "enum": ["outgoing", "incoming"]], "name": ["type": "string"],
      "state": ["type": "string", "enum": ["open", "closed", "failed"]],
      "bytes": ["type": "integer", "description": "Bytes sent (writer) or handed to the reader (receiver)."],
      "from": peerRef, "to": peerRef, "reason": ["type": ["string", "null"]],
      "createdAt": ["type": "string", "format": "date-time"],
    ],
  ]
  static let streamEnvelope = envelope("stream", stream)

  static let transfer: JSONValue = [
    "type": "object",
    "required": [
      "id", "sessionId", "direction", "name", "contentType", "size", "bytes", "state", "from", "to", "sha256",
      "reason", "resumedFrom", "createdAt", "updatedAt",
    ],
    "properties": [
      "id": ["type": "string"], "sessionId": ["type": "string"],
      "direction": ["type": "string", "enum": ["outgoing", "incoming"]], "name": ["type": "string"],
      "contentType": ["type": "string"], "size": ["type": "integer"],
      "bytes": ["type": "integer", "description": "Bytes durable at the receiver, as far as this side knows."],
      "state": [
        "type": "string",
        "enum": [
          "pending", "awaitingConsent", "inProgress", "interrupted", "finished", "failed", "canceled", "declined",
        ],
      ],
      "from": peerRef, "to": peerRef, "sha256": ["type": ["string", "null"]],
      "reason": ["type": ["string", "null"]],
      "resumedFrom": [
        "type": ["integer", "null"], "description": "The offset the last resume continued from.",
      ],
      "createdAt": ["type": "string", "format": "date-time"], "updatedAt": ["type": "string", "format": "date-time"],
      "groupId": ["type": "string", "description": "The group send this transfer is part of (absent otherwise)."],
    ],
  ]
  static let transferGroup: JSONValue = [
    "type": "object",
    "required": [
      "id", "sessionId", "name", "size", "sha256", "recipients", "copies", "pending", "finished", "failed", "canceled",
      "declined", "awaitingConsent", "bytes", "totalBytes", "createdAt",
    ],
    "properties": [
      "id": ["type": "string"], "sessionId": ["type": "string"], "name": ["type": "string"],
      "size": ["type": "integer"], "sha256": ["type": ["string", "null"]],
      "recipients": ["type": "integer"],
      "copies": ["type": "integer", "description": "Copies sent over the mesh: one per receiving node."],
      "pending": ["type": "integer"], "finished": ["type": "integer"],
      "failed": ["type": "integer", "description": "Failed or declined."], "canceled": ["type": "integer"],
      "declined": [
        "type": "integer", "description": "Declined by their recipient (file consent); counted in failed too.",
      ],
      "awaitingConsent": [
        "type": "integer",
        "description": "Recipients asked first (file consent) who have not answered yet; counted in pending too.",
      ],
      "bytes": ["type": "integer", "description": "Bytes durable at the recipients, summed over them."],
      "totalBytes": ["type": "integer", "description": "size × recipients."],
      "createdAt": ["type": "string", "format": "date-time"],
    ],
  ]
  static let transferGroupEnvelope = envelope("group", transferGroup)
  static let transferGroupView: JSONValue = [
    "type": "object", "required": ["group", "transfers"],
    "properties": [
      "group": transferGroup,
      "transfers": [
        "type": "array", "items": transfer,
        "description": "One per recipient, in the order of the upload's answer.",
      ],
    ],
  ]
  static let transferSent: JSONValue = [
    "type": "object",
    "description": "{transfer} for one recipient; {group, transfers} for a group send.",
    "properties": ["transfer": transfer, "group": transferGroup, "transfers": ["type": "array", "items": transfer]],
  ]
  static let acceptTransfer: JSONValue = [
    "type": "object", "additionalProperties": false,
    "properties": [
      "always": [
        "type": "boolean",
        "description": "Also accept every later file from this sender without asking (default false).",
      ]
    ],
  ]
  static let fileConsent: JSONValue = [
    "type": "object", "required": ["mode", "timeoutSeconds", "alwaysAccept"],
    "properties": [
      "mode": ["type": "string", "enum": ["auto", "ask"]],
      "timeoutSeconds": ["type": "integer", "minimum": 1],
      "alwaysAccept": [
        "type": "array",
        "items": [
          "type": "object", "required": ["peerId", "displayName", "nodeId", "since"],
          "properties": [
            "peerId": ["type": "string"], "displayName": ["type": "string"], "nodeId": ["type": ["string", "null"]],
            "since": ["type": "string", "format": "date-time"],
          ],
        ],
      ],
    ],
  ]
  static let fileConsentEnvelope = envelope("fileConsent", fileConsent)
  static let transferEnvelope = envelope("transfer", transfer)
  static let transferList = page("transfers", of: transfer)
}
