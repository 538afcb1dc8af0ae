/// Chat rooms: create, list, join, leave, post and read messages.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import LWS
import MeshCore

enum ChatRoutes {
  static let routes: [Route] = [
    Route(
      method: .post, pattern: "/api/v1/chats", operationID: "createChat",
      summary:
        "Hosts a chat room (encryption required) advertised on jobmanager-chat with its name; the host's node orders and keeps every message.",
      authenticated: true, requestSchema: Schemas.createChat,
      responses: [
        (201, "The room.", Schemas.chatEnvelope), (400, "Bad name.", Schemas.error),
        (409, "The peer hosts too many rooms to advertise them all.", Schemas.error),
      ], queryParameters: [],
      handler: { node, context in try await node.createChat(context) }),
    Route(
      method: .get, pattern: "/api/v1/chats", operationID: "listChats",
      summary: "The rooms this peer is in or hosts.", authenticated: true, requestSchema: nil,
      responses: [(200, "The rooms.", Schemas.chatList)], queryParameters: [],
      handler: { node, context in node.listChats(context) }),
    Route(
      method: .get, pattern: "/api/v1/chats/nearby", operationID: "nearbyChats",
      summary: "Rooms other peers host, mesh-wide, from their jobmanager-chat advertisements.", authenticated: true,
      requestSchema: nil, responses: [(200, "The rooms.", Schemas.chatList)], queryParameters: [],
      handler: { node, context in node.nearbyChats(context) }),
    Route(
      method: .get, pattern: "/api/v1/chats/{chatId}", operationID: "getChat",
      summary: "One room with its members.", authenticated: true, requestSchema: nil,
      responses: [(200, "The room.", Schemas.chatDetail), (404, "Unknown room.", Schemas.error)], queryParameters: [],
      handler: { node, context in try node.getChat(context) }),
    Route(
      method: .post, pattern: "/api/v1/chats/{chatId}/join", operationID: "joinChat",
      summary:
        "Joins a room (accepted by the host's node without a prompt); the host sends the whole history. Waits up to 10 s for the host.",
      authenticated: true, requestSchema: nil,
      responses: [
        (200, "Joined.", Schemas.chatEnvelope),
        (202, "The host's node has not answered yet; chat.member.joined follows.", Schemas.chatEnvelope),
        (404, "Unknown room.", Schemas.error),
        (409, "The room ended, or the link to its host is not encrypted.", Schemas.error),
        (503, "The host's node is not linked.", Schemas.error),
      ], queryParameters: [],
      handler: { node, context in try await node.joinChat(context) }),
    Route(
      method: .post, pattern: "/api/v1/chats/{chatId}/leave", operationID: "leaveChat",
      summary: "Leaves a room; it ends when its host has left and no member remains.", authenticated: true,
      requestSchema: nil,
      responses: [
        (200, "Left.", Schemas.chatEnvelope), (403, "Not a member.", Schemas.error),
        (404, "Unknown room.", Schemas.error),
      ], queryParameters: [],
      handler: { node, context in try await node.leaveChat(context) }),
    Route(
      method: .post, pattern: "/api/v1/chats/{chatId}/messages", operationID: "postChatMessage",
      summary:
        "Sends a message to every member. 201 once it is stored on this node; it is delivered in order, once, also across link losses and restarts. A repeated id returns the stored message (safe retries).",
      authenticated: true, requestSchema: Schemas.postChatMessage,
      responses: [
        (201, "Stored; seq is set once the host has ordered it.", Schemas.chatMessageEnvelope),
        (200, "A retry of a message already stored.", Schemas.chatMessageEnvelope),
        (400, "Bad body or id.", Schemas.error), (403, "Not a member.", Schemas.error),
        (404, "Unknown room.", Schemas.error), (409, "The room ended, or the id is taken.", Schemas.error),
      ], queryParameters: [],
      handler: { node, context in try await node.postChatMessage(context) }),
    Route(
      method: .get, pattern: "/api/v1/chats/{chatId}/messages", operationID: "listChatMessages",
      summary:
        "Messages in the host's order after a seq; the last page ends with this node's own messages not ordered yet (seq null).",
      authenticated: true, requestSchema: nil,
      responses: [
        (200, "A page of messages.", Schemas.chatMessagePage), (400, "Bad after or limit.", Schemas.error),
        (403, "Not a member.", Schemas.error), (404, "Unknown room.", Schemas.error),
      ],
      queryParameters: [
        ("after", "Return messages with seq greater than this; default 0.", ["type": "integer", "minimum": 0]),
        ("cursor", "Alias of after (the nextCursor of the previous page).", ["type": "string"]),
        ("limit", "Page size, 1–1000, default 100.", ["type": "integer", "minimum": 1, "maximum": 1000]),
      ],
      handler: { node, context in try await node.listChatMessages(context) }),
  ]
}

extension Schemas {
  static let createChat: JSONValue = [
    "type": "object", "required": ["name"], "additionalProperties": false,
    "properties": [
      "name": [
        "type": "string", "minLength": 1, "maxLength": 63, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$",
        "description": "1–63 UTF-8 bytes, no control characters.",
      ]
    ],
  ]
  static let chat: JSONValue = [
    "type": "object", "required": ["id", "name", "host", "joined", "ended", "memberCount"],
    "properties": [
      "id": ["type": "string"], "name": ["type": "string"], "host": peerRef, "joined": ["type": "boolean"],
      "ended": ["type": "boolean"], "memberCount": ["type": ["integer", "null"]], "createdAt": ["type": "string"],
      "message": ["type": "string"],
    ],
  ]
  static let chatEnvelope: JSONValue = ["type": "object", "required": ["chat"], "properties": ["chat": chat]]
  static let chatList: JSONValue = [
    "type": "object", "required": ["chats"], "properties": ["chats": ["type": "array", "items": chat]],
  ]
  static let chatDetail: JSONValue = [
    "type": "object", "required": ["chat", "members"],
    "properties": [
      "chat": chat,
      "members": [
        "type": "array",
        "items": [
          "type": "object", "required": ["peer", "role"],
          "properties": ["peer": peerRef, "role": ["type": "string", "enum": ["host", "member"]]],
        ],
      ],
    ],
  ]
  static let postChatMessage: JSONValue = [
    "type": "object", "required": ["body"], "additionalProperties": false,
    "properties": [
      "body": ["type": "string", "minLength": 1],
      "id": ["type": "string", "pattern": "^[A-Za-z0-9_-]{8,64}$"],
    ],
  ]
  static let chatMessage: JSONValue = [
    "type": "object", "required": ["id", "chatId", "from", "body", "at", "seq"],
    "properties": [
      "id": ["type": "string"], "chatId": ["type": "string"], "from": peerRef, "body": ["type": "string"],
      "at": ["type": "string"], "seq": ["type": ["integer", "null"]],
    ],
  ]
  static let chatMessageEnvelope: JSONValue = [
    "type": "object", "required": ["message"], "properties": ["message": chatMessage],
  ]
  static let chatMessagePage: JSONValue = [
    "type": "object", "required": ["messages", "nextCursor"],
    "properties": [
      "messages": ["type": "array", "items": chatMessage], "nextCursor": ["type": ["string", "null"]],
    ],
  ]
}
