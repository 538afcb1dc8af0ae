// The binary frame format of the mesh protocol `meshgate-node.v1` (docs/mesh-protocol.md is the byte-by-byte
// contract; keep the two in step).
//
// Every WebSocket binary message on a mesh link carries exactly one frame: a fixed 8-byte header (magic "MG",
// protocol version, frame type, big-endian u32 payload length) followed by the payload. Integers are big-endian,
// strings are a u16 byte count plus UTF-8, string maps are a u16 pair count plus (key, value) pairs with keys in
// strictly ascending byte order, byte blobs are a u32 byte count plus the bytes, enums are one u8 code. The
// encoding is canonical: every message has exactly one encoding, and the decoder accepts only that one, so
// `encode(decode(bytes)) == bytes` whenever `decode` succeeds.
//
// The decoder treats its input as hostile. It never traps on input and never allocates more than the input
// justifies: every count is checked against its limit and against the bytes actually left in the payload
// before anything is reserved. Each failure is a `MeshFrameError` naming the problem and the byte offset, in a
// sentence fit for a log line. The encoder, on the other hand, treats an oversize message (a string over 4096
// bytes, a map over 64 pairs, a data payload over 1 MiB + 64 KiB, a repeated member …) as a programmer error and
// stops with a precondition failure: values that reach the mesh have been validated at the REST surface, whose
// limits are well inside the frame limits.

/// Encodes and decodes mesh protocol frames (`meshgate-node.v1`); pure functions, safe from any thread.
public enum MeshFrameCodec {
  /// The two magic bytes every frame starts with: `"MG"`.
  public static let magic: [UInt8] = [0x4D, 0x47]
  /// The size of the fixed frame header in bytes.
  public static let headerSize = 8
  /// The largest payload a frame may carry, in bytes (16 MiB).
  public static let maxPayloadBytes = 16 * 1024 * 1024
  /// The longest string field, in UTF-8 bytes.
  public static let maxStringBytes = 4096
  /// The most (key, value) pairs in one string map (a service's discovery info).
  public static let maxMapPairs = 64
  /// The most services one peer announcement may advertise.
  public static let maxServicesPerPeer = 64
  /// The most peers in one `peerSnapshot`.
  public static let maxPeersPerSnapshot = 65536
  /// Most nodes in one `nodeDirectory` frame.
  public static let maxDirectoryNodes = 4096
  /// The largest invitation context (`InvitationOffer.context`), in bytes: the API's own limit (4 KiB).
  public static let maxContextBytes = Validate.contextMaxBytes
  /// The largest `sessionData` payload, in bytes (1 MiB + 64 KiB).
  public static let maxDataPayloadBytes = 1024 * 1024 + 64 * 1024
  /// The largest `sessionEvent` object, in bytes (1 MiB).
  public static let maxEventObjectBytes = 1024 * 1024
  /// The largest `chat` payload, in bytes (4 MiB: a batch of history).
  public static let maxChatPayloadBytes = 4 * 1024 * 1024
  /// The most members in one session description.
  public static let maxSessionMembers = 4096
  /// The largest challenge or proof in the link handshake (`authChallenge`, `authProof`), in bytes.
  public static let maxAuthBytes = 64
  /// The most target peers (`toPeerIDs`) in one `sessionData` or `sessionEvent`.
  public static let maxTargetPeers = 4096
  /// The largest `transferChunk` payload, in bytes (256 KiB).
  public static let maxChunkBytes = 256 * 1024
  /// The size of a SHA-256 digest in `transferEnd` / `transferFinished`.
  public static let digestBytes = 32

  /// The frame for `message`: header plus payload, ready to send as one WebSocket binary message.
  ///
  /// - Precondition: `message` is within the frame limits (strings ≤ ``maxStringBytes`` UTF-8 bytes, maps ≤
  ///   ``maxMapPairs`` pairs, ≤ ``maxServicesPerPeer`` services per peer, ≤ ``maxPeersPerSnapshot`` peers, context
  ///   ≤ ``maxContextBytes``, data payload ≤ ``maxDataPayloadBytes``, event object ≤ ``maxEventObjectBytes``,
  ///   ≤ ``maxSessionMembers`` members with distinct peer ids, ≤ ``maxTargetPeers`` distinct target peers, frame
  ///   payload ≤ ``maxPayloadBytes``). Breaking them is a programmer error, not an input error.
  /// The first bytes of the `transferChunk` frame for `count` content bytes at `offset`: everything
  /// ``encode(_:)`` writes before the content itself, so the content can be read straight into the frame after it
  /// (`prefix + content == encode(.transferChunk(...))`).
  ///
  /// - Precondition: `count` ≤ ``maxChunkBytes`` and `transferID` ≤ ``maxStringBytes`` UTF-8 bytes.
  public static func transferChunkPrefix(transferID: String, offset: UInt64, count: Int) -> [UInt8] {
    precondition(
      count >= 0 && count <= self.maxChunkBytes,
      "MeshFrameCodec.transferChunkPrefix: \(count) bytes, limit \(self.maxChunkBytes)")
    var writer = MeshFrameWriter(type: .transferChunk)
    writer.string(transferID, field: "transferID")
    writer.u64(offset)
    writer.u32(UInt32(count))
    return writer.finish(followedBy: count)
  }

  public static func encode(_ message: MeshMessage) -> [UInt8] {
    var writer = MeshFrameWriter(type: MeshFrameType(message))
    switch message {
    case .hello(let hello):
      writer.string(hello.nodeID, field: "nodeID")
      writer.string(hello.name, field: "name")
      writer.string(hello.softwareVersion, field: "softwareVersion")
      writer.u16(hello.port)
    case .authChallenge(let nonce):
      writer.blob(nonce, field: "nonce", limit: self.maxAuthBytes)
    case .authProof(let mac):
      writer.blob(mac, field: "mac", limit: self.maxAuthBytes)
    case .heartbeat(let sequence, let sentAtMillis), .heartbeatAck(let sequence, let sentAtMillis):
      writer.u64(sequence)
      writer.u64(sentAtMillis)
    case .peerSnapshot(let peers):
      precondition(
        peers.count <= self.maxPeersPerSnapshot,
        "MeshFrameCodec.encode: \(peers.count) peers in a snapshot, limit \(self.maxPeersPerSnapshot)"
      )
      writer.u32(UInt32(peers.count))
      for peer in peers { writer.peer(peer) }
    case .peerUpdated(let peer):
      writer.peer(peer)
    case .peerRemoved(let peerID):
      writer.string(peerID, field: "peerID")
    case .nodeDirectory(let nodes):
      precondition(
        nodes.count <= self.maxDirectoryNodes,
        "MeshFrameCodec.encode: \(nodes.count) nodes, limit \(self.maxDirectoryNodes)")
      writer.u16(UInt16(nodes.count))
      for node in nodes {
        writer.string(node.nodeID, field: "nodeID")
        writer.string(node.host, field: "host")
        writer.u16(node.port)
      }
    case .goodbye(let reason):
      writer.string(reason, field: "reason")
    case .invite(let offer):
      writer.string(offer.invitationID, field: "invitationID")
      writer.session(offer.session)
      writer.string(offer.fromPeerID, field: "fromPeerID")
      writer.string(offer.fromDisplayName, field: "fromDisplayName")
      writer.string(offer.toPeerID, field: "toPeerID")
      writer.blob(offer.context, field: "context", limit: self.maxContextBytes)
      writer.u32(offer.timeoutMillis)
      writer.string(offer.verificationCode, field: "verificationCode")
    case .inviteAnswer(let invitationID, let outcome), .inviteClosed(let invitationID, let outcome):
      writer.string(invitationID, field: "invitationID")
      writer.code(outcome)
    case .sessionJoin(let sessionID, let member):
      writer.string(sessionID, field: "sessionID")
      writer.member(member)
    case .sessionLeave(let sessionID, let peerID):
      writer.string(sessionID, field: "sessionID")
      writer.string(peerID, field: "peerID")
    case .sessionState(let session):
      writer.session(session)
    case .sessionData(let sessionID, let fromPeerID, let toPeerIDs, let sequence, let payload):
      writer.string(sessionID, field: "sessionID")
      writer.string(fromPeerID, field: "fromPeerID")
      writer.targets(toPeerIDs)
      writer.u64(sequence)
      writer.blob(payload, field: "payload", limit: self.maxDataPayloadBytes)
    case .sessionEvent(let sessionID, let fromPeerID, let toPeerIDs, let sequence, let name, let object):
      writer.string(sessionID, field: "sessionID")
      writer.string(fromPeerID, field: "fromPeerID")
      writer.targets(toPeerIDs)
      writer.u64(sequence)
      writer.string(name, field: "name")
      writer.blob(object, field: "object", limit: self.maxEventObjectBytes)
    case .dataAck(let sequence):
      writer.u64(sequence)
    case .chat(let payload):
      writer.blob(payload, field: "payload", limit: self.maxChatPayloadBytes)
    case .transferOffer(let offer):
      writer.string(offer.transferID, field: "transferID")
      writer.string(offer.sessionID, field: "sessionID")
      writer.string(offer.fromPeerID, field: "fromPeerID")
      writer.string(offer.fromDisplayName, field: "fromDisplayName")
      writer.string(offer.toPeerID, field: "toPeerID")
      writer.string(offer.name, field: "name")
      writer.string(offer.contentType, field: "contentType")
      writer.u64(offer.size)
      writer.u8(offer.resume ? 1 : 0)
    case .transferGroupOffer(let offer):
      writer.string(offer.copyID, field: "copyID")
      writer.string(offer.groupID, field: "groupID")
      writer.string(offer.sessionID, field: "sessionID")
      writer.string(offer.fromPeerID, field: "fromPeerID")
      writer.string(offer.fromDisplayName, field: "fromDisplayName")
      writer.string(offer.name, field: "name")
      writer.string(offer.contentType, field: "contentType")
      writer.u64(offer.size)
      writer.u8(offer.resume ? 1 : 0)
      writer.recipients(offer.recipients)
    case .transferAccept(let transferID, let offset), .transferCredit(let transferID, let offset),
      .transferAwaitingConsent(let transferID, let offset):
      writer.string(transferID, field: "transferID")
      writer.u64(offset)
    case .transferReject(let transferID, let code, let message):
      writer.string(transferID, field: "transferID")
      writer.code(code)
      writer.string(message, field: "message")
    case .transferChunk(let transferID, let offset, let bytes):
      writer.string(transferID, field: "transferID")
      writer.u64(offset)
      writer.blob(bytes, field: "bytes", limit: self.maxChunkBytes)
    case .transferEnd(let transferID, let size, let sha256):
      writer.string(transferID, field: "transferID")
      writer.u64(size)
      writer.digest(sha256)
    case .transferFinished(let transferID, let sha256):
      writer.string(transferID, field: "transferID")
      writer.digest(sha256)
    case .transferFailed(let transferID, let reason), .transferCancel(let transferID, let reason):
      writer.string(transferID, field: "transferID")
      writer.string(reason, field: "reason")
    case .streamOpen(let offer):
      writer.string(offer.streamID, field: "streamID")
      writer.string(offer.sessionID, field: "sessionID")
      writer.string(offer.fromPeerID, field: "fromPeerID")
      writer.string(offer.fromDisplayName, field: "fromDisplayName")
      writer.string(offer.toPeerID, field: "toPeerID")
      writer.string(offer.name, field: "name")
    case .streamData(let streamID, let offset, let bytes):
      writer.string(streamID, field: "streamID")
      writer.u64(offset)
      writer.blob(bytes, field: "bytes", limit: self.maxChunkBytes)
    case .streamCredit(let streamID, let offset):
      writer.string(streamID, field: "streamID")
      writer.u64(offset)
    case .streamClose(let streamID, let reason):
      writer.string(streamID, field: "streamID")
      writer.string(reason, field: "reason")
    }
    return writer.finish()
  }

  /// Decodes one complete frame: exactly one header and its payload, nothing before or after.
  ///
  /// Throws a ``MeshFrameError`` for anything that is not the canonical encoding of a message within the limits:
  /// wrong magic, version or type, a short or over-long frame, invalid UTF-8, counts or blobs over their limits,
  /// unknown enum codes, map keys that repeat or are out of order, duplicate peers in a snapshot, duplicate members
  /// or target peers, unused payload bytes.
  public static func decode(_ bytes: some Collection<UInt8>) throws(MeshFrameError) -> MeshMessage {
    try self.decodeFrame(bytes as? [UInt8] ?? Array(bytes))
  }

  private static func decodeFrame(_ bytes: [UInt8]) throws(MeshFrameError) -> MeshMessage {
    // Header fields are checked as far as the bytes go, so a stranger's data is reported as bad magic rather
    // than as a short header.
    let count = bytes.count
    if count >= 1 && bytes[0] != self.magic[0] || count >= 2 && bytes[1] != self.magic[1] {
      throw MeshFrameError(.badMagic(Array(bytes.prefix(2))), offset: 0)
    }
    if count >= 3 && bytes[2] != meshProtocolVersion {
      throw MeshFrameError(.unsupportedVersion(bytes[2]), offset: 2)
    }
    if count >= 4 && MeshFrameType(rawValue: bytes[3]) == nil {
      throw MeshFrameError(.unknownType(bytes[3]), offset: 3)
    }
    guard count >= self.headerSize, let type = MeshFrameType(rawValue: bytes[3]) else {
      throw MeshFrameError(.truncatedHeader(got: count), offset: count)
    }
    var reader = MeshFrameReader(bytes: bytes, offset: 4, end: self.headerSize)
    let declared = Int(try reader.u32(field: "payload length"))
    guard declared <= self.maxPayloadBytes else {
      throw MeshFrameError(.payloadTooLarge(declared: declared), offset: 4)
    }
    let got = count - self.headerSize
    guard got >= declared else {
      throw MeshFrameError(.truncatedPayload(declared: declared, got: got), offset: count)
    }
    guard got == declared else {
      throw MeshFrameError(.trailingBytes(declared: declared, got: got), offset: self.headerSize + declared)
    }

    reader = MeshFrameReader(bytes: bytes, offset: self.headerSize, end: count)
    let message: MeshMessage
    switch type {
    case .hello:
      let nodeID = try reader.string(field: "nodeID")
      let name = try reader.string(field: "name")
      let softwareVersion = try reader.string(field: "softwareVersion")
      let port = try reader.u16(field: "port")
      message = .hello(NodeHello(nodeID: nodeID, name: name, softwareVersion: softwareVersion, port: port))
    case .authChallenge:
      message = .authChallenge(nonce: try reader.blob(field: "nonce", limit: self.maxAuthBytes))
    case .authProof:
      message = .authProof(mac: try reader.blob(field: "mac", limit: self.maxAuthBytes))
    case .heartbeat:
      let sequence = try reader.u64(field: "sequence")
      message = .heartbeat(sequence: sequence, sentAtMillis: try reader.u64(field: "sentAtMillis"))
    case .heartbeatAck:
      let sequence = try reader.u64(field: "sequence")
      message = .heartbeatAck(sequence: sequence, sentAtMillis: try reader.u64(field: "sentAtMillis"))
    case .peerSnapshot:
      message = .peerSnapshot(try reader.peers())
    case .peerUpdated:
      message = .peerUpdated(try reader.peer())
    case .peerRemoved:
      message = .peerRemoved(peerID: try reader.string(field: "peerID"))
    case .nodeDirectory:
      message = .nodeDirectory(try reader.nodeAddresses())
    case .goodbye:
      message = .goodbye(reason: try reader.string(field: "reason"))
    case .invite:
      message = .invite(try reader.invitation())
    case .inviteAnswer:
      let invitationID = try reader.string(field: "invitationID")
      message = .inviteAnswer(invitationID: invitationID, outcome: try reader.code(field: "outcome"))
    case .inviteClosed:
      let invitationID = try reader.string(field: "invitationID")
      message = .inviteClosed(invitationID: invitationID, outcome: try reader.code(field: "outcome"))
    case .sessionJoin:
      let sessionID = try reader.string(field: "sessionID")
      message = .sessionJoin(sessionID: sessionID, member: try reader.member())
    case .sessionLeave:
      let sessionID = try reader.string(field: "sessionID")
      message = .sessionLeave(sessionID: sessionID, peerID: try reader.string(field: "peerID"))
    case .sessionState:
      message = .sessionState(try reader.session())
    case .sessionData:
      let sessionID = try reader.string(field: "sessionID")
      let fromPeerID = try reader.string(field: "fromPeerID")
      let toPeerIDs = try reader.targets()
      let sequence = try reader.u64(field: "sequence")
      let payload = try reader.blob(field: "payload", limit: self.maxDataPayloadBytes)
      message = .sessionData(
        sessionID: sessionID, fromPeerID: fromPeerID, toPeerIDs: toPeerIDs, sequence: sequence, payload: payload)
    case .sessionEvent:
      let sessionID = try reader.string(field: "sessionID")
      let fromPeerID = try reader.string(field: "fromPeerID")
      let toPeerIDs = try reader.targets()
      let sequence = try reader.u64(field: "sequence")
      let name = try reader.string(field: "name")
      let object = try reader.blob(field: "object", limit: self.maxEventObjectBytes)
      message = .sessionEvent(
        sessionID: sessionID, fromPeerID: fromPeerID, toPeerIDs: toPeerIDs, sequence: sequence, name: name,
        object: object)
    case .dataAck:
      message = .dataAck(sequence: try reader.u64(field: "sequence"))
    case .chat:
      message = .chat(payload: try reader.blob(field: "payload", limit: self.maxChatPayloadBytes))
    case .transferOffer:
      let transferID = try reader.string(field: "transferID")
      let sessionID = try reader.string(field: "sessionID")
      let fromPeerID = try reader.string(field: "fromPeerID")
      let fromDisplayName = try reader.string(field: "fromDisplayName")
      let toPeerID = try reader.string(field: "toPeerID")
      let name = try reader.string(field: "name")
      let contentType = try reader.string(field: "contentType")
      let size = try reader.u64(field: "size")
      let resume = try reader.flag(field: "resume")
      message = .transferOffer(
        TransferOffer(
          transferID: transferID, sessionID: sessionID, fromPeerID: fromPeerID, fromDisplayName: fromDisplayName,
          toPeerID: toPeerID, name: name, contentType: contentType, size: size, resume: resume))
    case .transferGroupOffer:
      let copyID = try reader.string(field: "copyID")
      let groupID = try reader.string(field: "groupID")
      let sessionID = try reader.string(field: "sessionID")
      let fromPeerID = try reader.string(field: "fromPeerID")
      let fromDisplayName = try reader.string(field: "fromDisplayName")
      let name = try reader.string(field: "name")
      let contentType = try reader.string(field: "contentType")
      let size = try reader.u64(field: "size")
      let resume = try reader.flag(field: "resume")
      let recipients = try reader.recipients()
      message = .transferGroupOffer(
        TransferGroupOffer(
          copyID: copyID, groupID: groupID, sessionID: sessionID, fromPeerID: fromPeerID,
          fromDisplayName: fromDisplayName, name: name, contentType: contentType, size: size, resume: resume,
          recipients: recipients))
    case .transferAccept:
      let transferID = try reader.string(field: "transferID")
      message = .transferAccept(transferID: transferID, offset: try reader.u64(field: "offset"))
    case .transferReject:
      let transferID = try reader.string(field: "transferID")
      let code: TransferRejection = try reader.code(field: "code")
      message = .transferReject(transferID: transferID, code: code, message: try reader.string(field: "message"))
    case .transferChunk:
      let transferID = try reader.string(field: "transferID")
      let offset = try reader.u64(field: "offset")
      let bytes = try reader.blob(field: "bytes", limit: self.maxChunkBytes)
      message = .transferChunk(transferID: transferID, offset: offset, bytes: bytes)
    case .transferCredit:
      let transferID = try reader.string(field: "transferID")
      message = .transferCredit(transferID: transferID, offset: try reader.u64(field: "offset"))
    case .transferEnd:
      let transferID = try reader.string(field: "transferID")
      let size = try reader.u64(field: "size")
      message = .transferEnd(transferID: transferID, size: size, sha256: try reader.digest())
    case .transferFinished:
      let transferID = try reader.string(field: "transferID")
      message = .transferFinished(transferID: transferID, sha256: try reader.digest())
    case .transferFailed:
      let transferID = try reader.string(field: "transferID")
      message = .transferFailed(transferID: transferID, reason: try reader.string(field: "reason"))
    case .transferCancel:
      let transferID = try reader.string(field: "transferID")
      message = .transferCancel(transferID: transferID, reason: try reader.string(field: "reason"))
    case .transferAwaitingConsent:
      let transferID = try reader.string(field: "transferID")
      message = .transferAwaitingConsent(transferID: transferID, timeoutMillis: try reader.u64(field: "timeoutMillis"))
    case .streamOpen:
      let streamID = try reader.string(field: "streamID")
      let sessionID = try reader.string(field: "sessionID")
      let fromPeerID = try reader.string(field: "fromPeerID")
      let fromDisplayName = try reader.string(field: "fromDisplayName")
      let toPeerID = try reader.string(field: "toPeerID")
      let name = try reader.string(field: "name")
      message = .streamOpen(
        StreamOffer(
          streamID: streamID, sessionID: sessionID, fromPeerID: fromPeerID, fromDisplayName: fromDisplayName,
          toPeerID: toPeerID, name: name))
    case .streamData:
      let streamID = try reader.string(field: "streamID")
      let offset = try reader.u64(field: "offset")
      let bytes = try reader.blob(field: "bytes", limit: self.maxChunkBytes)
      message = .streamData(streamID: streamID, offset: offset, bytes: bytes)
    case .streamCredit:
      let streamID = try reader.string(field: "streamID")
      message = .streamCredit(streamID: streamID, offset: try reader.u64(field: "offset"))
    case .streamClose:
      let streamID = try reader.string(field: "streamID")
      message = .streamClose(streamID: streamID, reason: try reader.string(field: "reason"))
    }
    guard reader.remaining == 0 else {
      throw MeshFrameError(.unusedPayloadBytes(count: reader.remaining), offset: reader.offset)
    }
    return message
  }
}

/// Why a frame was rejected, and where: ``offset`` counts bytes from the first byte of the frame.
public struct MeshFrameError: Error, Equatable, Sendable, CustomStringConvertible {
  /// What is wrong with a frame. Switch over it with a `default:` case: reasons may be added.
  public enum Reason: Equatable, Sendable {
    /// Fewer than 8 bytes, all of them consistent with a header.
    case truncatedHeader(got: Int)
    /// The first bytes are not `"MG"` (carries the one or two bytes found).
    case badMagic([UInt8])
    /// The header's version byte is not ``meshProtocolVersion``.
    case unsupportedVersion(UInt8)
    /// The header's type byte is not a frame type of this protocol version.
    case unknownType(UInt8)
    /// The header declares a payload over ``MeshFrameCodec/maxPayloadBytes``.
    case payloadTooLarge(declared: Int)
    /// Fewer payload bytes follow the header than it declares.
    case truncatedPayload(declared: Int, got: Int)
    /// More payload bytes follow the header than it declares.
    case trailingBytes(declared: Int, got: Int)
    /// The payload ends inside a field.
    case truncatedField(field: String, needed: Int, available: Int)
    /// A string field's length is over ``MeshFrameCodec/maxStringBytes``.
    case stringTooLong(field: String, bytes: Int)
    /// A string field is not valid UTF-8 (``MeshFrameError/offset`` is the first bad byte).
    case invalidUTF8(field: String)
    /// A byte blob's length is over its limit (`limit`, e.g. ``MeshFrameCodec/maxDataPayloadBytes``).
    case blobTooLarge(field: String, bytes: Int, limit: Int)
    /// An enum field (strategy, encryption, state, outcome) holds a code this protocol version does not define.
    case unknownEnumCode(field: String, code: UInt8)
    /// A count is over its limit; `what` reads like "peers in snapshot".
    case tooMany(what: String, count: Int, limit: Int)
    /// A count is within its limit but the rest of the payload cannot hold that many elements.
    case countExceedsPayload(what: String, count: Int, minimumBytes: Int, available: Int)
    /// A map key repeats (byte for byte, or as canonically equivalent Unicode).
    case duplicateKey(field: String, key: String)
    /// A map key is not greater, byte-wise, than the key before it.
    case keyOutOfOrder(field: String, key: String)
    /// A peer id occurs twice in one snapshot.
    case duplicatePeer(peerID: String)
    /// A peer id occurs twice in one list (`members` of a session, `toPeerIDs` of data or an event).
    case duplicateListEntry(field: String, peerID: String)
    /// The message ends before the payload does.
    case unusedPayloadBytes(count: Int)
  }

  /// What is wrong.
  public let reason: Reason
  /// The byte offset in the frame (header included) where the problem was found.
  public let offset: Int

  /// An error for `reason` found at byte `offset` of the frame.
  public init(_ reason: Reason, offset: Int) {
    self.reason = reason
    self.offset = offset
  }

  /// A log-safe sentence, e.g. `unknown frame type 0x2a at byte 3`. Keys and peer ids are quoted, escaped and
  /// shortened; payload contents are never included otherwise.
  public var description: String { "\(self.reasonDescription) at byte \(self.offset)" }

  private var reasonDescription: String {
    switch self.reason {
    case .truncatedHeader(let got):
      return "truncated frame: the header needs \(MeshFrameCodec.headerSize) bytes, got \(got)"
    case .badMagic(let found):
      let bytes = found.map(Self.hex).joined(separator: " ")
      return "bad magic \(bytes) (expected 0x4d 0x47, \"MG\"): not a meshgate-node frame"
    case .unsupportedVersion(let version):
      return "unsupported protocol version \(version) (this node speaks \(meshProtocolVersion))"
    case .unknownType(let type):
      return "unknown frame type \(Self.hex(type))"
    case .payloadTooLarge(let declared):
      return "frame too large: header says \(declared) payload bytes, limit is \(MeshFrameCodec.maxPayloadBytes)"
    case .truncatedPayload(let declared, let got):
      return "truncated frame: header says \(declared) payload bytes, got \(got)"
    case .trailingBytes(let declared, let got):
      return "trailing bytes: header says \(declared) payload bytes, got \(got) (\(got - declared) extra)"
    case .truncatedField(let field, let needed, let available):
      return "payload ends inside field \(field): needs \(needed) bytes, \(available) left"
    case .stringTooLong(let field, let bytes):
      return "string field \(field) is \(bytes) bytes (limit \(MeshFrameCodec.maxStringBytes))"
    case .invalidUTF8(let field):
      return "string field \(field) is not valid UTF-8"
    case .blobTooLarge(let field, let bytes, let limit):
      return "byte field \(field) is \(bytes) bytes (limit \(limit))"
    case .unknownEnumCode(let field, let code):
      return "unknown code \(Self.hex(code)) for field \(field)"
    case .tooMany(let what, let count, let limit):
      return "too many \(what) (\(count) > \(limit))"
    case .countExceedsPayload(let what, let count, let minimumBytes, let available):
      return "payload too short for \(count) \(what): needs at least \(minimumBytes) bytes, \(available) left"
    case .duplicateKey(let field, let key):
      return "duplicate key \(Self.quoted(key)) in map \(field)"
    case .keyOutOfOrder(let field, let key):
      return "key \(Self.quoted(key)) in map \(field) is out of order (keys must be in ascending byte order)"
    case .duplicatePeer(let peerID):
      return "duplicate peerID \(Self.quoted(peerID)) in snapshot"
    case .duplicateListEntry(let field, let peerID):
      return "duplicate peerID \(Self.quoted(peerID)) in list \(field)"
    case .unusedPayloadBytes(let count):
      return "\(count) unused payload bytes after the last field"
    }
  }

  private static func hex(_ byte: UInt8) -> String {
    let digits = String(byte, radix: 16)
    return byte < 0x10 ? "0x0\(digits)" : "0x\(digits)"
  }

  /// `text` in quotes with control characters escaped, cut to 64 characters so a hostile key cannot flood a log.
  private static func quoted(_ text: String) -> String {
    let limit = 64
    guard text.count > limit else { return text.debugDescription }
    return String(text.prefix(limit)).debugDescription + "…"
  }
}

/// The frame type byte (header offset 3). 0x01–0x0F are the link itself (0x04–0x05 the mesh-secret handshake).
/// 0x20–0x6F are reserved for sessions, invitations, data and apps: 0x20–0x27 invitations, 0x28–0x2F session
/// membership, 0x30–0x3F data and events, 0x40–0x48, 0x4D and 0x4E resource transfers, 0x49–0x4C byte streams, 0x50 the chat app
/// (the rest of the range is unassigned).
enum MeshFrameType: UInt8 {
  case hello = 0x01
  case heartbeat = 0x02
  case heartbeatAck = 0x03
  case authChallenge = 0x04
  case authProof = 0x05
  case peerSnapshot = 0x10
  case peerUpdated = 0x11
  case peerRemoved = 0x12
  case nodeDirectory = 0x13
  case invite = 0x20
  case inviteAnswer = 0x21
  case inviteClosed = 0x22
  case sessionJoin = 0x28
  case sessionLeave = 0x29
  case sessionState = 0x2A
  case sessionData = 0x30
  case sessionEvent = 0x31
  case dataAck = 0x32
  case transferOffer = 0x40
  case transferAccept = 0x41
  case transferReject = 0x42
  case transferChunk = 0x43
  case transferCredit = 0x44
  case transferEnd = 0x45
  case transferFinished = 0x46
  case transferFailed = 0x47
  case transferCancel = 0x48
  case streamOpen = 0x49
  case streamData = 0x4A
  case streamCredit = 0x4B
  case streamClose = 0x4C
  case transferAwaitingConsent = 0x4D
  case transferGroupOffer = 0x4E
  case chat = 0x50
  case goodbye = 0x7F

  init(_ message: MeshMessage) {
    switch message {
    case .hello: self = .hello
    case .heartbeat: self = .heartbeat
    case .heartbeatAck: self = .heartbeatAck
    case .authChallenge: self = .authChallenge
    case .authProof: self = .authProof
    case .peerSnapshot: self = .peerSnapshot
    case .peerUpdated: self = .peerUpdated
    case .peerRemoved: self = .peerRemoved
    case .nodeDirectory: self = .nodeDirectory
    case .goodbye: self = .goodbye
    case .invite: self = .invite
    case .inviteAnswer: self = .inviteAnswer
    case .inviteClosed: self = .inviteClosed
    case .sessionJoin: self = .sessionJoin
    case .sessionLeave: self = .sessionLeave
    case .sessionState: self = .sessionState
    case .sessionData: self = .sessionData
    case .sessionEvent: self = .sessionEvent
    case .dataAck: self = .dataAck
    case .chat: self = .chat
    case .transferOffer: self = .transferOffer
    case .transferAccept: self = .transferAccept
    case .transferReject: self = .transferReject
    case .transferChunk: self = .transferChunk
    case .transferCredit: self = .transferCredit
    case .transferEnd: self = .transferEnd
    case .transferFinished: self = .transferFinished
    case .transferFailed: self = .transferFailed
    case .transferCancel: self = .transferCancel
    case .transferAwaitingConsent: self = .transferAwaitingConsent
    case .transferGroupOffer: self = .transferGroupOffer
    case .streamOpen: self = .streamOpen
    case .streamData: self = .streamData
    case .streamCredit: self = .streamCredit
    case .streamClose: self = .streamClose
    }
  }
}

// The one-byte wire codes of the protocol's enums. Codes are part of the wire contract: never renumber them.

/// An enum carried as a one-byte code: a value's code is its position in ``wireOrder``.
protocol MeshWireEnum: Equatable {
  /// Every value, in the order of its wire code (0, 1, 2 …). Append new values; never reorder or remove one.
  static var wireOrder: [Self] { get }
}

extension MeshWireEnum {
  var wireCode: UInt8 {
    guard let code = Self.wireOrder.firstIndex(of: self) else {
      preconditionFailure("\(Self.self).wireOrder lacks \(self)")
    }
    return UInt8(code)
  }

  init?(wireCode: UInt8) {
    guard Int(wireCode) < Self.wireOrder.count else { return nil }
    self = Self.wireOrder[Int(wireCode)]
  }
}

extension SessionStrategy: MeshWireEnum {
  static let wireOrder: [Self] = [.cluster, .star, .pointToPoint]
}

extension SessionEncryption: MeshWireEnum {
  static let wireOrder: [Self] = [.none, .optional, .required]
}

extension MemberState: MeshWireEnum {
  static let wireOrder: [Self] = [.connecting, .connected, .notConnected]
}

extension InvitationOutcome: MeshWireEnum {
  static let wireOrder: [Self] = [.accepted, .declined, .expired, .canceled]
}

extension TransferRejection: MeshWireEnum {
  static let wireOrder: [Self] = [.tooLarge, .insufficientStorage, .notMember, .unknownTransfer, .refused, .declined]
}

/// Builds one frame: writes the header with a placeholder length, appends the payload, then patches the length.
struct MeshFrameWriter {
  private var bytes: [UInt8]

  init(type: MeshFrameType) {
    self.bytes = MeshFrameCodec.magic + [meshProtocolVersion, type.rawValue, 0, 0, 0, 0]
  }

  mutating func u8(_ value: UInt8) {
    self.bytes.append(value)
  }

  /// An enum as its one-byte wire code.
  mutating func code(_ value: some MeshWireEnum) {
    self.u8(value.wireCode)
  }

  mutating func u16(_ value: UInt16) {
    self.bytes.append(UInt8(truncatingIfNeeded: value >> 8))
    self.bytes.append(UInt8(truncatingIfNeeded: value))
  }

  mutating func u32(_ value: UInt32) {
    for shift in stride(from: 24, through: 0, by: -8) { self.bytes.append(UInt8(truncatingIfNeeded: value >> shift)) }
  }

  mutating func u64(_ value: UInt64) {
    for shift in stride(from: 56, through: 0, by: -8) { self.bytes.append(UInt8(truncatingIfNeeded: value >> shift)) }
  }

  mutating func string(_ value: String, field: StaticString) {
    let utf8 = value.utf8
    precondition(
      utf8.count <= MeshFrameCodec.maxStringBytes,
      "MeshFrameCodec.encode: field \(field) is \(utf8.count) UTF-8 bytes, limit \(MeshFrameCodec.maxStringBytes)"
    )
    self.u16(UInt16(utf8.count))
    self.bytes.append(contentsOf: utf8)
  }

  /// Keys in ascending order of their UTF-8 bytes: the one canonical order.
  private static func sortedByBytes<Value>(_ map: [String: Value]) -> [(key: String, value: Value)] {
    map.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
  }

  mutating func stringMap(_ map: [String: String]) {
    precondition(
      map.count <= MeshFrameCodec.maxMapPairs,
      "MeshFrameCodec.encode: discoveryInfo has \(map.count) pairs, limit \(MeshFrameCodec.maxMapPairs)"
    )
    self.u16(UInt16(map.count))
    for (key, value) in Self.sortedByBytes(map) {
      self.string(key, field: "discoveryInfo key")
      self.string(value, field: "discoveryInfo value")
    }
  }

  mutating func peer(_ peer: PeerAnnouncement) {
    self.string(peer.peerID, field: "peerID")
    self.string(peer.displayName, field: "displayName")
    precondition(
      peer.advertising.count <= MeshFrameCodec.maxServicesPerPeer,
      "MeshFrameCodec.encode: peer advertises \(peer.advertising.count) services, "
        + "limit \(MeshFrameCodec.maxServicesPerPeer)"
    )
    self.u16(UInt16(peer.advertising.count))
    for (serviceType, discoveryInfo) in Self.sortedByBytes(peer.advertising) {
      self.string(serviceType, field: "serviceType")
      self.stringMap(discoveryInfo)
    }
  }

  /// A byte blob: u32 length, then the bytes.
  mutating func blob(_ value: [UInt8], field: StaticString, limit: Int) {
    precondition(
      value.count <= limit,
      "MeshFrameCodec.encode: field \(field) is \(value.count) bytes, limit \(limit)"
    )
    self.u32(UInt32(value.count))
    self.bytes.append(contentsOf: value)
  }

  /// Stops unless `peerIDs` has at most `limit` entries, all distinct (as Swift strings, like the decoder).
  private static func checkList(_ peerIDs: some Collection<String>, field: StaticString, limit: Int) {
    precondition(
      peerIDs.count <= limit,
      "MeshFrameCodec.encode: \(peerIDs.count) entries in \(field), limit \(limit)"
    )
    precondition(
      Set(peerIDs).count == peerIDs.count,
      "MeshFrameCodec.encode: duplicate peer id in \(field)"
    )
  }

  mutating func member(_ member: SessionMember) {
    self.string(member.peerID, field: "peerID")
    self.string(member.displayName, field: "displayName")
    self.string(member.nodeID, field: "nodeID")
    self.code(member.state)
  }

  mutating func session(_ session: SessionDescription) {
    self.string(session.sessionID, field: "sessionID")
    self.string(session.hostNodeID, field: "hostNodeID")
    self.string(session.creatorPeerID, field: "creatorPeerID")
    self.code(session.strategy)
    self.code(session.encryption)
    self.u16(session.maxPeers)
    self.u64(session.revision)
    Self.checkList(session.members.lazy.map(\.peerID), field: "members", limit: MeshFrameCodec.maxSessionMembers)
    self.u16(UInt16(session.members.count))
    for member in session.members { self.member(member) }
  }

  /// Target peers: u16 count, then that many distinct peer id strings.
  /// A group send's recipients: u16 count, then (transferID, peerID) string pairs; peers and ids distinct.
  mutating func recipients(_ recipients: [TransferGroupRecipient]) {
    Self.checkList(recipients.map(\.peerID), field: "recipients", limit: MeshFrameCodec.maxTargetPeers)
    Self.checkList(recipients.map(\.transferID), field: "recipients.transferID", limit: MeshFrameCodec.maxTargetPeers)
    self.u16(UInt16(recipients.count))
    for recipient in recipients {
      self.string(recipient.transferID, field: "transferID")
      self.string(recipient.peerID, field: "peerID")
    }
  }

  mutating func targets(_ peerIDs: [String]) {
    Self.checkList(peerIDs, field: "toPeerIDs", limit: MeshFrameCodec.maxTargetPeers)
    self.u16(UInt16(peerIDs.count))
    for peerID in peerIDs { self.string(peerID, field: "toPeerID") }
  }

  /// A SHA-256 digest: exactly 32 raw bytes, no length prefix.
  mutating func digest(_ value: [UInt8]) {
    precondition(
      value.count == MeshFrameCodec.digestBytes,
      "MeshFrameCodec.encode: a SHA-256 digest is \(MeshFrameCodec.digestBytes) bytes, not \(value.count)")
    self.bytes.append(contentsOf: value)
  }

  /// The finished frame, with the payload length in the header.
  mutating func finish() -> [UInt8] {
    self.finish(followedBy: 0)
  }

  /// The frame's bytes, its length counting `trailing` more payload bytes the caller appends itself.
  mutating func finish(followedBy trailing: Int) -> [UInt8] {
    let length = self.bytes.count + trailing - MeshFrameCodec.headerSize
    precondition(
      length <= MeshFrameCodec.maxPayloadBytes,
      "MeshFrameCodec.encode: payload is \(length) bytes, limit \(MeshFrameCodec.maxPayloadBytes)"
    )
    for index in 0..<4 { self.bytes[4 + index] = UInt8(truncatingIfNeeded: length >> (24 - 8 * index)) }
    return self.bytes
  }
}

/// Reads the fields of one frame from `offset` up to `end`, throwing on anything short, oversize or malformed.
struct MeshFrameReader {
  private let bytes: [UInt8]
  /// The next byte to read.
  private(set) var offset: Int
  private let end: Int

  init(bytes: [UInt8], offset: Int, end: Int) {
    self.bytes = bytes
    self.offset = offset
    self.end = end
  }

  /// Bytes left before `end`.
  var remaining: Int { self.end - self.offset }

  /// Claims the next `count` bytes for `field` and returns their range.
  private mutating func take(_ count: Int, field: StaticString) throws(MeshFrameError) -> Range<Int> {
    guard count <= self.remaining else {
      let reason = MeshFrameError.Reason.truncatedField(field: "\(field)", needed: count, available: self.remaining)
      throw MeshFrameError(reason, offset: self.offset)
    }
    defer { self.offset += count }
    return self.offset..<(self.offset + count)
  }

  private mutating func integer<T: FixedWidthInteger & UnsignedInteger>(field: StaticString) throws(MeshFrameError)
    -> T
  {
    var value: T = 0
    for index in try self.take(T.bitWidth / 8, field: field) { value = value << 8 | T(self.bytes[index]) }
    return value
  }

  mutating func u8(field: StaticString) throws(MeshFrameError) -> UInt8 { try self.integer(field: field) }
  mutating func u16(field: StaticString) throws(MeshFrameError) -> UInt16 { try self.integer(field: field) }
  mutating func u32(field: StaticString) throws(MeshFrameError) -> UInt32 { try self.integer(field: field) }
  mutating func u64(field: StaticString) throws(MeshFrameError) -> UInt64 { try self.integer(field: field) }

  /// The byte range of a length-prefixed string, its length checked against the limit (not yet validated).
  private mutating func stringBytes(field: StaticString) throws(MeshFrameError) -> Range<Int> {
    let start = self.offset
    let length = Int(try self.u16(field: field))
    guard length <= MeshFrameCodec.maxStringBytes else {
      throw MeshFrameError(.stringTooLong(field: "\(field)", bytes: length), offset: start)
    }
    return try self.take(length, field: field)
  }

  /// The string in `range`, which must be valid UTF-8.
  private func makeString(_ range: Range<Int>, field: StaticString) throws(MeshFrameError) -> String {
    if let string = String(validating: self.bytes[range], as: UTF8.self) { return string }
    throw MeshFrameError(.invalidUTF8(field: "\(field)"), offset: self.firstInvalidUTF8(in: range))
  }

  /// The offset of the first byte of the first ill-formed UTF-8 sequence in `range`.
  private func firstInvalidUTF8(in range: Range<Int>) -> Int {
    var parser = Unicode.UTF8.ForwardParser()
    var iterator = self.bytes[range].makeIterator()
    var position = range.lowerBound
    while true {
      switch parser.parseScalar(from: &iterator) {
      case .valid(let scalar): position += scalar.count
      case .error: return position
      case .emptyInput: return range.lowerBound
      }
    }
  }

  mutating func string(field: StaticString) throws(MeshFrameError) -> String {
    try self.makeString(try self.stringBytes(field: field), field: field)
  }

  /// A byte blob: u32 length (at most `limit`), then the bytes.
  mutating func blob(field: StaticString, limit: Int) throws(MeshFrameError) -> [UInt8] {
    let start = self.offset
    let length = Int(try self.u32(field: field))
    guard length <= limit else {
      throw MeshFrameError(.blobTooLarge(field: "\(field)", bytes: length, limit: limit), offset: start)
    }
    return Array(self.bytes[try self.take(length, field: field)])
  }

  /// A one-byte enum code, mapped by `make`; an unknown code is an error naming `field`.
  private mutating func code<T>(field: StaticString, _ make: (UInt8) -> T?) throws(MeshFrameError) -> T {
    let start = self.offset
    let code = try self.u8(field: field)
    guard let value = make(code) else {
      throw MeshFrameError(.unknownEnumCode(field: "\(field)", code: code), offset: start)
    }
    return value
  }

  /// An enum from its one-byte wire code.
  mutating func code<T: MeshWireEnum>(field: StaticString) throws(MeshFrameError) -> T {
    try self.code(field: field, T.init(wireCode:))
  }

  /// A boolean: one byte, 0 or 1 (anything else is an unknown code, keeping the encoding canonical).
  mutating func flag(field: StaticString) throws(MeshFrameError) -> Bool {
    try self.code(field: field) { $0 == 0 ? false : $0 == 1 ? true : nil }
  }

  /// A SHA-256 digest: exactly 32 raw bytes.
  mutating func digest() throws(MeshFrameError) -> [UInt8] {
    Array(self.bytes[try self.take(MeshFrameCodec.digestBytes, field: "sha256")])
  }

  /// A session member: peerID, displayName, nodeID, state u8.
  mutating func member() throws(MeshFrameError) -> SessionMember {
    let peerID = try self.string(field: "peerID")
    let displayName = try self.string(field: "displayName")
    let nodeID = try self.string(field: "nodeID")
    let state: MemberState = try self.code(field: "state")
    return SessionMember(peerID: peerID, displayName: displayName, nodeID: nodeID, state: state)
  }

  /// A session description: ids, strategy, encryption, maxPeers, revision, then u16 count and that many members.
  mutating func session() throws(MeshFrameError) -> SessionDescription {
    let sessionID = try self.string(field: "sessionID")
    let hostNodeID = try self.string(field: "hostNodeID")
    let creatorPeerID = try self.string(field: "creatorPeerID")
    let strategy: SessionStrategy = try self.code(field: "strategy")
    let encryption: SessionEncryption = try self.code(field: "encryption")
    let maxPeers = try self.u16(field: "maxPeers")
    let revision = try self.u64(field: "revision")
    let members = try self.distinctList(
      countField: "member count", what: "members in session", limit: MeshFrameCodec.maxSessionMembers,
      minimumBytes: 7, key: \.peerID, duplicate: { .duplicateListEntry(field: "members", peerID: $0) }
    ) { reader throws(MeshFrameError) in try reader.member() }
    return SessionDescription(
      sessionID: sessionID, hostNodeID: hostNodeID, creatorPeerID: creatorPeerID, strategy: strategy,
      encryption: encryption, maxPeers: maxPeers, revision: revision, members: members)
  }

  /// An invitation offer, as the `invite` frame carries it.
  mutating func invitation() throws(MeshFrameError) -> InvitationOffer {
    let invitationID = try self.string(field: "invitationID")
    let session = try self.session()
    let fromPeerID = try self.string(field: "fromPeerID")
    let fromDisplayName = try self.string(field: "fromDisplayName")
    let toPeerID = try self.string(field: "toPeerID")
    let context = try self.blob(field: "context", limit: MeshFrameCodec.maxContextBytes)
    let timeoutMillis = try self.u32(field: "timeoutMillis")
    let verificationCode = try self.string(field: "verificationCode")
    return InvitationOffer(
      invitationID: invitationID, session: session, fromPeerID: fromPeerID, fromDisplayName: fromDisplayName,
      toPeerID: toPeerID, context: context, timeoutMillis: timeoutMillis, verificationCode: verificationCode)
  }

  /// A group send's recipients (see the writer's `recipients(_:)`): no peer and no transfer id twice.
  mutating func recipients() throws(MeshFrameError) -> [TransferGroupRecipient] {
    var transferIDs: Set<String> = []
    return try self.distinctList(
      countField: "recipients count", what: "recipients", limit: MeshFrameCodec.maxTargetPeers, minimumBytes: 4,
      key: \.peerID, duplicate: { .duplicateListEntry(field: "recipients", peerID: $0) }
    ) { reader throws(MeshFrameError) in
      let entryStart = reader.offset
      let transferID = try reader.string(field: "transferID")
      let recipient = TransferGroupRecipient(transferID: transferID, peerID: try reader.string(field: "peerID"))
      guard transferIDs.insert(transferID).inserted else {
        throw MeshFrameError(
          .duplicateListEntry(field: "recipients.transferID", peerID: transferID), offset: entryStart)
      }
      return recipient
    }
  }

  /// Target peers: u16 count (at most ``MeshFrameCodec/maxTargetPeers``), then that many distinct peer ids.
  mutating func targets() throws(MeshFrameError) -> [String] {
    try self.distinctList(
      countField: "toPeerIDs count", what: "peers in toPeerIDs", limit: MeshFrameCodec.maxTargetPeers,
      minimumBytes: 2, key: { $0 }, duplicate: { .duplicateListEntry(field: "toPeerIDs", peerID: $0) }
    ) { reader throws(MeshFrameError) in try reader.string(field: "toPeerID") }
  }

  /// A counted list: a u16 count (u32 with `wideCount`), at most `limit` and at most what the bytes left can hold at
  /// `minimumBytes` an element, then that many elements, each read by `element`.
  private mutating func list<Element>(
    countField: StaticString, what: String, limit: Int, minimumBytes: Int, wideCount: Bool = false,
    _ element: (inout Self) throws(MeshFrameError) -> Element
  ) throws(MeshFrameError) -> [Element] {
    let start = self.offset
    let declared = wideCount ? Int(try self.u32(field: countField)) : Int(try self.u16(field: countField))
    let count = try self.count(declared, at: start, what: what, limit: limit, minimumBytes: minimumBytes)
    var elements: [Element] = []
    elements.reserveCapacity(count)
    for _ in 0..<count { elements.append(try element(&self)) }
    return elements
  }

  /// A ``list(countField:what:limit:minimumBytes:wideCount:_:)`` in which no two elements have the same `key`; a
  /// repeat is the error `duplicate(key)`, at the repeating element's first byte.
  private mutating func distinctList<Element>(
    countField: StaticString, what: String, limit: Int, minimumBytes: Int, wideCount: Bool = false,
    key: (Element) -> String, duplicate: (String) -> MeshFrameError.Reason,
    _ element: (inout Self) throws(MeshFrameError) -> Element
  ) throws(MeshFrameError) -> [Element] {
    var seen: Set<String> = []
    return try self.list(
      countField: countField, what: what, limit: limit, minimumBytes: minimumBytes, wideCount: wideCount
    ) { reader throws(MeshFrameError) in
      let elementStart = reader.offset
      let value = try element(&reader)
      guard seen.insert(key(value)).inserted else { throw MeshFrameError(duplicate(key(value)), offset: elementStart) }
      return value
    }
  }

  /// Reads an element count and checks it against `limit` and against the bytes left, at `minimumBytes` each.
  private mutating func count(
    _ count: Int,
    at start: Int,
    what: String,
    limit: Int,
    minimumBytes: Int
  ) throws(MeshFrameError) -> Int {
    guard count <= limit else {
      throw MeshFrameError(.tooMany(what: what, count: count, limit: limit), offset: start)
    }
    guard count * minimumBytes <= self.remaining else {
      let reason = MeshFrameError.Reason.countExceedsPayload(
        what: what,
        count: count,
        minimumBytes: count * minimumBytes,
        available: self.remaining
      )
      throw MeshFrameError(reason, offset: self.offset)
    }
    return count
  }

  /// A map key: valid UTF-8 and, byte-wise, strictly greater than the key before it.
  private mutating func key(
    after previous: Range<Int>?,
    keyField: StaticString,
    mapField: StaticString
  ) throws(MeshFrameError) -> (String, Range<Int>) {
    let start = self.offset
    let range = try self.stringBytes(field: keyField)
    let key = try self.makeString(range, field: keyField)
    if let previous {
      let (before, current) = (self.bytes[previous], self.bytes[range])
      if before.elementsEqual(current) {
        throw MeshFrameError(.duplicateKey(field: "\(mapField)", key: key), offset: start)
      }
      guard before.lexicographicallyPrecedes(current) else {
        throw MeshFrameError(.keyOutOfOrder(field: "\(mapField)", key: key), offset: start)
      }
    }
    return (key, range)
  }

  /// A map with string keys: u16 pair count (at most `limit`), then (key, value) entries, keys strictly ascending.
  private mutating func map<Value>(
    countField: StaticString, what: String, limit: Int, keyField: StaticString, mapField: StaticString,
    _ value: (inout Self) throws(MeshFrameError) -> Value
  ) throws(MeshFrameError) -> [String: Value] {
    let start = self.offset
    let pairs = try self.count(
      Int(try self.u16(field: countField)), at: start, what: what, limit: limit, minimumBytes: 4)
    var map: [String: Value] = [:]
    map.reserveCapacity(pairs)
    var previous: Range<Int>?
    for _ in 0..<pairs {
      let keyStart = self.offset
      let (key, range) = try self.key(after: previous, keyField: keyField, mapField: mapField)
      previous = range
      if map.updateValue(try value(&self), forKey: key) != nil {
        // Byte-wise distinct but canonically equivalent keys (precomposed vs. decomposed) collide in a Swift
        // dictionary; they count as duplicates.
        throw MeshFrameError(.duplicateKey(field: "\(mapField)", key: key), offset: keyStart)
      }
    }
    return map
  }

  /// A service's discovery info: u16 pair count, then (key, value) string pairs, keys strictly ascending.
  mutating func stringMap() throws(MeshFrameError) -> [String: String] {
    try self.map(
      countField: "discoveryInfo count", what: "pairs in map discoveryInfo", limit: MeshFrameCodec.maxMapPairs,
      keyField: "discoveryInfo key", mapField: "discoveryInfo"
    ) { reader throws(MeshFrameError) in try reader.string(field: "discoveryInfo value") }
  }

  /// A peer announcement: peerID, displayName, u16 service count, then (serviceType, discovery info) entries.
  mutating func peer() throws(MeshFrameError) -> PeerAnnouncement {
    let peerID = try self.string(field: "peerID")
    let displayName = try self.string(field: "displayName")
    let advertising = try self.map(
      countField: "service count", what: "services for one peer", limit: MeshFrameCodec.maxServicesPerPeer,
      keyField: "serviceType", mapField: "advertising"
    ) { reader throws(MeshFrameError) in try reader.stringMap() }
    return PeerAnnouncement(peerID: peerID, displayName: displayName, advertising: advertising)
  }

  /// A node directory: u16 count, then (nodeID string, host string, port u16) entries.
  mutating func nodeAddresses() throws(MeshFrameError) -> [NodeAddress] {
    try self.list(
      countField: "node count", what: "nodes in directory", limit: MeshFrameCodec.maxDirectoryNodes, minimumBytes: 6
    ) { reader throws(MeshFrameError) in
      let nodeID = try reader.string(field: "nodeID")
      let host = try reader.string(field: "host")
      return NodeAddress(nodeID: nodeID, host: host, port: try reader.u16(field: "port"))
    }
  }

  /// A snapshot's peers: u32 count, then that many announcements with distinct peer ids.
  mutating func peers() throws(MeshFrameError) -> [PeerAnnouncement] {
    try self.distinctList(
      countField: "peer count", what: "peers in snapshot", limit: MeshFrameCodec.maxPeersPerSnapshot,
      minimumBytes: 6, wideCount: true, key: \.peerID, duplicate: { .duplicatePeer(peerID: $0) }
    ) { reader throws(MeshFrameError) in try reader.peer() }
  }
}
