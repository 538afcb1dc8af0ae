/// Chat rooms: create, list, join, leave, post and read messages.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import LWS
import MeshCore

enum ChatRoutes {
  static let routes: [Route] = [
    Route(
      .post, "/api/v1/chats", "createChat", body: Schemas.createChat, returns: Schemas.chatEnvelope,
      links: .id(
        at: "/chat/id", as: "chatId", to: ["getChat", "joinChat", "leaveChat", "postChatMessage", "listChatMessages"]),
      """
      Hosts a chat room (encryption required) advertised on jobmanager-chat with its name; the host's node orders and keeps every message.
      201 The room.
      400 Bad name.
      409 The peer hosts too many rooms to advertise them all.
      """
    ) { node, context in try await node.features.chat.create(context, node: node) },
    Route(
      .get, "/api/v1/chats", "listChats", returns: Schemas.chatList,
      """
      The rooms this peer is in or hosts.
      200 The rooms.
      """
    ) { node, context in node.features.chat.list(context, node: node) },
    Route(
      .get, "/api/v1/chats/nearby", "nearbyChats", returns: Schemas.chatList,
      """
      Rooms other peers host, mesh-wide, from their jobmanager-chat advertisements.
      200 The rooms.
      """
    ) { node, context in node.features.chat.nearby(context, node: node) },
    Route(
      .get, "/api/v1/chats/{chatId}", "getChat", returns: Schemas.chatDetail,
      """
      One room with its members.
      200 The room.
      404 Unknown room.
      """
    ) { node, context in try node.features.chat.get(context, node: node) },
    Route(
      .post, "/api/v1/chats/{chatId}/join", "joinChat", returns: Schemas.chatEnvelope,
      """
      Joins a room (accepted by the host's node without a prompt); the host sends the whole history. Waits up to 10 s for the host.
      200 Joined.
      202 The host's node has not answered yet; chat.member.joined follows.
      404 Unknown room.
      409 The room ended, or the link to its host is not encrypted.
      503 The host's node is not linked.
      """
    ) { node, context in try await node.features.chat.join(context, node: node) },
    Route(
      .post, "/api/v1/chats/{chatId}/leave", "leaveChat", returns: Schemas.chatEnvelope,
      """
      Leaves a room; it ends when its host has left and no member remains.
      200 Left.
      403 Not a member.
      404 Unknown room.
      """
    ) { node, context in try await node.features.chat.leave(context, node: node) },
    Route(
      .post, "/api/v1/chats/{chatId}/messages", "postChatMessage", body: Schemas.postChatMessage,
      returns: Schemas.chatMessageEnvelope,
      """
      Sends a message to every member. 201 once it is stored on this node; it is delivered in order, once, also across link losses and restarts. A repeated id returns the stored message (safe retries).
      201 Stored; seq is set once the host has ordered it.
      200 A retry of a message already stored.
      400 Bad body or id.
      403 Not a member.
      404 Unknown room.
      409 The room ended, or the id is taken.
      """
    ) { node, context in try await node.features.chat.postMessage(context, node: node) },
    Route(
      .get, "/api/v1/chats/{chatId}/messages", "listChatMessages", returns: Schemas.chatMessagePage,
      query: [
        QueryParameter("after", "Return messages with seq greater than this; default 0.", .integer(minimum: 0)),
        QueryParameter("cursor", "Alias of after (the nextCursor of the previous page).", .numericCursor),
        .limit(max: 1000),
      ],
      """
      Messages in the host's order after a seq; the last page ends with this node's own messages not ordered yet (seq null).
      200 A page of messages.
      400 Bad after or limit.
      403 Not a member.
      404 Unknown room.
      """
    ) { node, context in try await node.features.chat.listMessages(context, node: node) },
  ]
}

extension Schemas {
  static let createChat: JSONValue = [
    "type": "object", "required": ["name"], "additionalProperties": false,
    "properties": [
      "name": [
        "type": "string", "minLength": 1, "maxLength": 63, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$",
        "description": "1–63 characters (Unicode code points), no control characters, not only spaces.",
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
  static let chatEnvelope = envelope("chat", chat)
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
  static let chatMessageEnvelope = envelope("message", chatMessage)
  static let chatMessagePage: JSONValue = [
    "type": "object", "required": ["messages", "nextCursor"],
    "properties": [
      "messages": ["type": "array", "items": chatMessage], "nextCursor": ["type": ["string", "null"]],
    ],
  ]
}
