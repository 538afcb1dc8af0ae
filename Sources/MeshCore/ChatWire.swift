/// The chat app's messages between nodes, carried in ``MeshMessage/chat(payload:)`` frames as UTF-8 JSON.
///
/// Layer 3 (sans-I/O). A room lives on its host's node, which orders every message (`seq`) and keeps the roster;
/// member nodes tell it who of theirs is in the room (`sync`), send it their peers' messages (`post`), and get
/// back the ordered messages (`messages`) and the roster (`roster`). See docs/mesh-protocol.md, "Chat".

/// A chat message. `seq` is the host's order, nil while the host has not ordered it yet.
public struct ChatMessage: Sendable, Hashable {
  /// Unique mesh-wide (a UUID made by the sender's node).
  public var id: String
  public var from: Directory.PeerRef
  /// The sender's own order in this room, from 1; the host drops any post at or below the last one it ordered.
  public var senderSeq: UInt64
  public var body: String
  /// When the sender's node accepted it (ISO 8601).
  public var sentAt: String
  public var seq: UInt64?

  public init(
    id: String, from: Directory.PeerRef, senderSeq: UInt64, body: String, sentAt: String, seq: UInt64? = nil
  ) {
    self.id = id
    self.from = from
    self.senderSeq = senderSeq
    self.body = body
    self.sentAt = sentAt
    self.seq = seq
  }
}

/// One chat frame's content.
public enum ChatWire: Sendable, Hashable {
  /// Member node → host node: the complete set of the sender node's peers in the room, and the last `seq` it
  /// holds. Joins, leaves and re-joins after a re-link or restart are all this one idempotent message; the host
  /// answers with the messages after `after` (only if `members` is not empty) and then the roster.
  case sync(roomID: String, members: [Directory.PeerRef], after: UInt64)
  /// Member node → host node: a message of one of its peers, to be ordered and fanned out.
  case post(roomID: String, ChatMessage)
  /// Host node → member node: ordered messages (every one has a `seq`), ascending and without gaps.
  case messages(roomID: String, [ChatMessage])
  /// Host node → member nodes: the room as it is now.
  case roster(roomID: String, name: String, host: Directory.PeerRef, members: [Directory.PeerRef], ended: Bool)
  /// Host node → member node: the room is unknown here (never existed or long gone).
  case unknownRoom(roomID: String)

  /// The largest message body in UTF-8 bytes (16 KiB).
  public static let maxBodyBytes = 16 * 1024

  public var roomID: String {
    switch self {
    case .sync(let roomID, _, _), .post(let roomID, _), .messages(let roomID, _), .roster(let roomID, _, _, _, _),
      .unknownRoom(let roomID):
      roomID
    }
  }

  public func encoded() -> [UInt8] {
    var object: JSONObject
    switch self {
    case .sync(let roomID, let members, let after):
      object = [
        "op": "sync", "room": .string(roomID), "members": .array(members.map(Self.peerJSON)),
        "after": .int(Int64(after)),
      ]
    case .post(let roomID, let message):
      object = ["op": "post", "room": .string(roomID), "message": Self.messageJSON(message)]
    case .messages(let roomID, let messages):
      object = ["op": "messages", "room": .string(roomID), "messages": .array(messages.map(Self.messageJSON))]
    case .roster(let roomID, let name, let host, let members, let ended):
      object = [
        "op": "roster", "room": .string(roomID), "name": .string(name), "host": Self.peerJSON(host),
        "members": .array(members.map(Self.peerJSON)), "ended": .bool(ended),
      ]
    case .unknownRoom(let roomID):
      object = ["op": "unknownRoom", "room": .string(roomID)]
    }
    return JSONValue.object(object).serialized()
  }

  /// Why a chat frame was not understood.
  public struct DecodeError: Error, Equatable, Sendable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
  }

  public static func decode(_ bytes: [UInt8]) throws(DecodeError) -> ChatWire {
    let value: JSONValue
    do {
      value = try JSONValue.parse(bytes)
    } catch {
      throw DecodeError("chat frame is not JSON: \(error)")
    }
    guard case .object(let object) = value else { throw DecodeError("chat frame is not a JSON object") }
    let roomID = try string(object, "room")
    switch try string(object, "op") {
    case "sync":
      return .sync(roomID: roomID, members: try peers(object, "members"), after: try unsigned(object, "after"))
    case "post":
      guard case .object(let message)? = object["message"] else { throw DecodeError("post without a message") }
      return .post(roomID: roomID, try Self.message(message))
    case "messages":
      guard case .array(let items)? = object["messages"] else { throw DecodeError("messages without an array") }
      var messages: [ChatMessage] = []
      for item in items {
        guard case .object(let message) = item else { throw DecodeError("a message is not an object") }
        messages.append(try Self.message(message))
      }
      return .messages(roomID: roomID, messages)
    case "roster":
      guard case .object(let host)? = object["host"] else { throw DecodeError("roster without a host") }
      guard case .bool(let ended)? = object["ended"] else { throw DecodeError("roster without ended") }
      return .roster(
        roomID: roomID, name: try string(object, "name"), host: try peer(host), members: try peers(object, "members"),
        ended: ended)
    case "unknownRoom":
      return .unknownRoom(roomID: roomID)
    case let op:
      throw DecodeError("unknown chat op \(op.debugDescription)")
    }
  }

  public static func peerJSON(_ peer: Directory.PeerRef) -> JSONValue {
    ["id": .string(peer.peerID), "displayName": .string(peer.displayName), "nodeId": .string(peer.nodeID)]
  }

  public static func messageJSON(_ message: ChatMessage) -> JSONValue {
    [
      "id": .string(message.id), "from": peerJSON(message.from), "senderSeq": .int(Int64(message.senderSeq)),
      "body": .string(message.body), "at": .string(message.sentAt), "seq": message.seq.map { .int(Int64($0)) } ?? .null,
    ]
  }

  static func string(_ object: JSONObject, _ key: String) throws(DecodeError) -> String {
    guard case .string(let value)? = object[key] else { throw DecodeError("\(key) must be a string") }
    return value
  }

  static func unsigned(_ object: JSONObject, _ key: String) throws(DecodeError) -> UInt64 {
    guard let value = object[key]?.intValue, value >= 0 else {
      throw DecodeError("\(key) must be a non-negative integer")
    }
    return UInt64(value)
  }

  static func peer(_ object: JSONObject) throws(DecodeError) -> Directory.PeerRef {
    Directory.PeerRef(
      peerID: try string(object, "id"), displayName: try string(object, "displayName"),
      nodeID: try string(object, "nodeId"))
  }

  static func peers(_ object: JSONObject, _ key: String) throws(DecodeError) -> [Directory.PeerRef] {
    guard case .array(let items)? = object[key] else { throw DecodeError("\(key) must be an array") }
    var peers: [Directory.PeerRef] = []
    for item in items {
      guard case .object(let peerObject) = item else { throw DecodeError("a peer in \(key) is not an object") }
      peers.append(try peer(peerObject))
    }
    return peers
  }

  static func message(_ object: JSONObject) throws(DecodeError) -> ChatMessage {
    guard case .object(let from)? = object["from"] else { throw DecodeError("message without from") }
    let body = try string(object, "body")
    guard body.utf8.count <= maxBodyBytes else { throw DecodeError("message body over \(maxBodyBytes) bytes") }
    let seq: UInt64?
    switch object["seq"] {
    case nil, .null?: seq = nil
    default: seq = try unsigned(object, "seq")
    }
    return ChatMessage(
      id: try string(object, "id"), from: try peer(from), senderSeq: try unsigned(object, "senderSeq"), body: body,
      sentAt: try string(object, "at"), seq: seq)
  }
}
