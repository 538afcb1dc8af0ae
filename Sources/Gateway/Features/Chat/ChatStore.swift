/// The chat app's tables: rooms (with roster and this node's members) and messages.
///
/// Layer 4 (node runtime), part of ``NodeStore``. A room row is rewritten whole on every change (rosters are
/// small); messages are inserted once and get their `seq` when the host orders them. `seq` is unique per room,
/// so a message can never be listed twice.
import MeshCore
import Store

extension NodeStore {
  static let chatSchema = """
    CREATE TABLE chat_rooms(
      id TEXT PRIMARY KEY,
      name TEXT NOT NULL,
      host TEXT NOT NULL,
      members TEXT NOT NULL,
      local_members TEXT NOT NULL,
      last_seq INTEGER NOT NULL CHECK (last_seq >= 0),
      ended INTEGER NOT NULL,
      created_at TEXT NOT NULL
    );
    CREATE TABLE chat_messages(
      room_id TEXT NOT NULL REFERENCES chat_rooms(id) ON DELETE CASCADE,
      id TEXT NOT NULL,
      sender TEXT NOT NULL,
      sender_peer_id TEXT NOT NULL,
      sender_seq INTEGER NOT NULL,
      body TEXT NOT NULL,
      sent_at TEXT NOT NULL,
      seq INTEGER,
      PRIMARY KEY(room_id, id)
    );
    CREATE UNIQUE INDEX chat_messages_by_seq ON chat_messages(room_id, seq) WHERE seq IS NOT NULL;
    CREATE INDEX chat_messages_by_sender ON chat_messages(room_id, sender_peer_id, sender_seq);
    """

  /// Applies a chat batch's changes (``MeshEffect/chatStore(_:)``) in one transaction, in order.
  func applyChat(_ writes: [ChatWrite]) async throws {
    try await database.write { connection in
      for write in writes {
        switch write {
        case .room(let room):
          try connection.execute(
            """
            INSERT INTO chat_rooms(id, name, host, members, local_members, last_seq, ended, created_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(id) DO UPDATE SET name = excluded.name, host = excluded.host, members = excluded.members,
              local_members = excluded.local_members, last_seq = excluded.last_seq, ended = excluded.ended
            """,
            [
              .text(room.id), .text(room.name), .text(ChatWire.peerJSON(room.host).serializedString()),
              .text(Self.peersText(room.members)), .text(Self.peersText(room.localMembers)),
              .integer(Int64(room.lastSeq)), .integer(room.ended ? 1 : 0), .text(room.createdAt),
            ])
        case .messages(let roomID, let messages):
          for message in messages {
            try connection.execute(
              """
              INSERT INTO chat_messages(room_id, id, sender, sender_peer_id, sender_seq, body, sent_at, seq)
              VALUES (?, ?, ?, ?, ?, ?, ?, ?)
              ON CONFLICT(room_id, id) DO UPDATE SET seq = excluded.seq WHERE excluded.seq IS NOT NULL
              """,
              [
                .text(roomID), .text(message.id), .text(ChatWire.peerJSON(message.from).serializedString()),
                .text(message.from.peerID), .integer(Int64(message.senderSeq)), .text(message.body),
                .text(message.sentAt), message.seq.map { .integer(Int64($0)) } ?? .null,
              ])
          }
        }
      }
    }
  }

  /// Everything ``ChatBook/restore(rooms:pending:senderSeqs:)`` needs after a restart.
  struct ChatState: Sendable {
    var rooms: [ChatRoom]
    var pending: [String: [ChatMessage]]
    var senderSeqs: [String: [String: UInt64]]
  }

  func chatState() async throws -> ChatState {
    try await database.read { connection in
      let rooms = try connection.query(
        "SELECT id, name, host, members, local_members, last_seq, ended, created_at FROM chat_rooms ORDER BY rowid"
      ).map { row in
        ChatRoom(
          id: try row.string(0), name: try row.string(1), host: Self.peer(try row.string(2)),
          members: Self.peers(try row.string(3)), localMembers: Self.peers(try row.string(4)),
          lastSeq: UInt64(try row.int64(5)), ended: try row.int64(6) != 0, createdAt: try row.string(7))
      }
      var pending: [String: [ChatMessage]] = [:]
      for row in try connection.query(
        "SELECT room_id, \(Self.chatMessageColumns) FROM chat_messages WHERE seq IS NULL ORDER BY rowid")
      {
        pending[try row.string(0), default: []].append(try Self.chatMessage(row, offset: 1))
      }
      var senderSeqs: [String: [String: UInt64]] = [:]
      for row in try connection.query(
        "SELECT room_id, sender_peer_id, MAX(sender_seq) FROM chat_messages GROUP BY room_id, sender_peer_id")
      {
        senderSeqs[try row.string(0), default: [:]][try row.string(1)] = UInt64(try row.int64(2))
      }
      return ChatState(rooms: rooms, pending: pending, senderSeqs: senderSeqs)
    }
  }

  /// Ordered messages of a room with `seq` > `after`, ascending, at most `limit`.
  func chatMessages(roomID: String, after: UInt64, limit: Int) async throws -> [ChatMessage] {
    try await database.read { connection in
      try connection.query(
        """
        SELECT \(Self.chatMessageColumns) FROM chat_messages
        WHERE room_id = ? AND seq > ? ORDER BY seq LIMIT ?
        """, [.text(roomID), .integer(Int64(after)), .integer(Int64(limit))]
      ).map { try Self.chatMessage($0, offset: 0) }
    }
  }

  /// Messages of a room not ordered yet (this node's own, waiting for the host), oldest first.
  func pendingChatMessages(roomID: String) async throws -> [ChatMessage] {
    try await database.read { connection in
      try connection.query(
        "SELECT \(Self.chatMessageColumns) FROM chat_messages WHERE room_id = ? AND seq IS NULL ORDER BY rowid",
        [.text(roomID)]
      ).map { try Self.chatMessage($0, offset: 0) }
    }
  }

  /// One message by id.
  func chatMessage(roomID: String, id: String) async throws -> ChatMessage? {
    try await database.read { connection in
      try connection.queryOne(
        "SELECT \(Self.chatMessageColumns) FROM chat_messages WHERE room_id = ? AND id = ?", [.text(roomID), .text(id)]
      ).map { try Self.chatMessage($0, offset: 0) }
    }
  }

  static let chatMessageColumns = "id, sender, sender_seq, body, sent_at, seq"

  static func chatMessage(_ row: Row, offset: Int) throws -> ChatMessage {
    ChatMessage(
      id: try row.string(offset), from: peer(try row.string(offset + 1)),
      senderSeq: UInt64(try row.int64(offset + 2)), body: try row.string(offset + 3),
      sentAt: try row.string(offset + 4), seq: try row.optionalInt64(offset + 5).map { UInt64($0) })
  }

  static func peersText(_ peers: [Directory.PeerRef]) -> String {
    JSONValue.array(peers.map(ChatWire.peerJSON)).serializedString()
  }

  static func peer(_ text: String) -> Directory.PeerRef {
    decodeParty(text) ?? Directory.PeerRef(peerID: "", displayName: "", nodeID: "")
  }

  static func peers(_ text: String) -> [Directory.PeerRef] {
    guard case .array(let items)? = try? JSONValue.parse(text) else { return [] }
    return items.compactMap { decodeParty($0.serializedString()) }
  }
}
