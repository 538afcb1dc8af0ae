/// The shape of every id that arrives from another node (docs/security.md, "Ids from the wire").
///
/// Ids from the wire become dictionary keys, database keys and parts of file paths (a transfer's partial file is
/// `<data dir>/transfers/<id>.in`), so a node checks each one before it uses it:
/// - node, peer, session, invitation, transfer and stream ids are **UUIDs** in canonical lowercase form
///   (`8-4-4-4-12` hex digits, 36 characters), which is what meshgate makes;
/// - chat room ids and chat message ids are **tokens**: 1–64 characters of `A-Z a-z 0-9 - _` (a room id is 16 hex
///   digits, a message id a UUID or a client's own 8–64 character id).
/// Neither shape can hold `/`, `.`, NUL or any other character that means something in a path. The frame codec
/// does not check them (it carries any string, and the simulator and unit tests use short ids); the node runtime
/// checks every frame with ``WireIDs/check(_:)`` before anything else sees it, and refuses the frame otherwise.
public enum WireIDs {
  /// The longest token id.
  public static let tokenMaxLength = 64

  /// Whether `value` is a UUID in canonical lowercase form, e.g. `0f8fad5b-d9cb-469f-a165-70867728950e`.
  public static func isUUID(_ value: String) -> Bool {
    let bytes = value.utf8
    guard bytes.count == 36 else { return false }
    for (index, byte) in bytes.enumerated() {
      switch index {
      case 8, 13, 18, 23:
        guard byte == UInt8(ascii: "-") else { return false }
      default:
        guard (0x30...0x39).contains(byte) || (0x61...0x66).contains(byte) else { return false }
      }
    }
    return true
  }

  /// Whether `value` is a token id: 1–64 characters of `A-Z a-z 0-9 - _`.
  public static func isToken(_ value: String) -> Bool {
    let bytes = value.utf8
    guard (1...tokenMaxLength).contains(bytes.count) else { return false }
    return bytes.allSatisfy {
      $0 == 0x2D || $0 == 0x5F || (0x30...0x39).contains($0) || (0x41...0x5A).contains($0)
        || (0x61...0x7A).contains($0)
    }
  }

  /// `value` if it is a UUID, else an error naming `field`.
  @discardableResult
  public static func uuid(_ value: String, field: String) throws(ValidationError) -> String {
    guard isUUID(value) else {
      throw ValidationError(field: field, rule: "must be a lowercase UUID (got \(quoted(value)))")
    }
    return value
  }

  /// `value` if it is a token id, else an error naming `field`.
  @discardableResult
  public static func token(_ value: String, field: String) throws(ValidationError) -> String {
    guard isToken(value) else {
      throw ValidationError(
        field: field,
        rule: "must be 1–\(tokenMaxLength) characters of A-Z, a-z, 0-9, '-' and '_' (got \(quoted(value)))")
    }
    return value
  }

  /// Checks every id a frame carries (chat payloads are checked when decoded, by ``check(_:)-chat``). Returns the
  /// first bad one as an error naming its field, or nil when all are well-formed.
  public static func check(_ message: MeshMessage) -> ValidationError? {
    do {
      try checkIDs(message)
      return nil
    } catch {
      return error
    }
  }

  static func checkIDs(_ message: MeshMessage) throws(ValidationError) {
    switch message {
    case .hello(let hello):
      try uuid(hello.nodeID, field: "hello.nodeID")
    case .peerSnapshot(let peers):
      for peer in peers { try uuid(peer.peerID, field: "peerSnapshot.peerID") }
    case .peerUpdated(let peer):
      try uuid(peer.peerID, field: "peerUpdated.peerID")
    case .peerRemoved(let peerID):
      try uuid(peerID, field: "peerRemoved.peerID")
    case .nodeDirectory(let nodes):
      for node in nodes { try uuid(node.nodeID, field: "nodeDirectory.nodeID") }
    case .invite(let offer):
      try uuid(offer.invitationID, field: "invite.invitationID")
      try session(offer.session, frame: "invite")
      try uuid(offer.fromPeerID, field: "invite.fromPeerID")
      try uuid(offer.toPeerID, field: "invite.toPeerID")
    case .inviteAnswer(let invitationID, _):
      try uuid(invitationID, field: "inviteAnswer.invitationID")
    case .inviteClosed(let invitationID, _):
      try uuid(invitationID, field: "inviteClosed.invitationID")
    case .sessionJoin(let sessionID, let member):
      try uuid(sessionID, field: "sessionJoin.sessionID")
      try self.member(member, frame: "sessionJoin")
    case .sessionLeave(let sessionID, let peerID):
      try uuid(sessionID, field: "sessionLeave.sessionID")
      try uuid(peerID, field: "sessionLeave.peerID")
    case .sessionState(let description):
      try session(description, frame: "sessionState")
    case .sessionData(let sessionID, let fromPeerID, let toPeerIDs, _, _),
      .sessionEvent(let sessionID, let fromPeerID, let toPeerIDs, _, _, _):
      try uuid(sessionID, field: "sessionData.sessionID")
      try uuid(fromPeerID, field: "sessionData.fromPeerID")
      for peerID in toPeerIDs { try uuid(peerID, field: "sessionData.toPeerIDs") }
    case .transferOffer(let offer):
      try uuid(offer.transferID, field: "transferOffer.transferID")
      try uuid(offer.sessionID, field: "transferOffer.sessionID")
      try uuid(offer.fromPeerID, field: "transferOffer.fromPeerID")
      try uuid(offer.toPeerID, field: "transferOffer.toPeerID")
    case .transferGroupOffer(let offer):
      try uuid(offer.copyID, field: "transferGroupOffer.copyID")
      try uuid(offer.groupID, field: "transferGroupOffer.groupID")
      try uuid(offer.sessionID, field: "transferGroupOffer.sessionID")
      try uuid(offer.fromPeerID, field: "transferGroupOffer.fromPeerID")
      // The copy and each recipient's transfer are different records: an id used twice would merge two of them.
      var transferIDs: Set<String> = [offer.copyID]
      for recipient in offer.recipients {
        try uuid(recipient.transferID, field: "transferGroupOffer.recipients.transferID")
        try uuid(recipient.peerID, field: "transferGroupOffer.recipients.peerID")
        guard transferIDs.insert(recipient.transferID).inserted else {
          throw ValidationError(
            field: "transferGroupOffer.recipients.transferID",
            rule:
              "must differ from the copy id and from every other recipient's (got \(quoted(recipient.transferID)) twice)"
          )
        }
      }
    case .transferAccept(let id, _), .transferReject(let id, _, _), .transferChunk(let id, _, _),
      .transferCredit(let id, _), .transferEnd(let id, _, _), .transferFinished(let id, _), .transferFailed(let id, _),
      .transferCancel(let id, _), .transferAwaitingConsent(let id, _):
      try uuid(id, field: "transferID")
    case .streamOpen(let offer):
      try uuid(offer.streamID, field: "streamOpen.streamID")
      try uuid(offer.sessionID, field: "streamOpen.sessionID")
      try uuid(offer.fromPeerID, field: "streamOpen.fromPeerID")
      try uuid(offer.toPeerID, field: "streamOpen.toPeerID")
    case .streamData(let id, _, _), .streamCredit(let id, _), .streamClose(let id, _):
      try uuid(id, field: "streamID")
    case .authChallenge, .authProof, .heartbeat, .heartbeatAck, .goodbye, .dataAck, .chat:
      break
    }
  }

  static func session(_ description: SessionDescription, frame: String) throws(ValidationError) {
    try uuid(description.sessionID, field: "\(frame).sessionID")
    try uuid(description.hostNodeID, field: "\(frame).hostNodeID")
    try uuid(description.creatorPeerID, field: "\(frame).creatorPeerID")
    for member in description.members { try self.member(member, frame: frame) }
  }

  static func member(_ member: SessionMember, frame: String) throws(ValidationError) {
    try uuid(member.peerID, field: "\(frame).member.peerID")
    try uuid(member.nodeID, field: "\(frame).member.nodeID")
  }

  /// Checks the ids of a decoded chat message: room ids and message ids are tokens, peers are UUIDs on UUID nodes.
  public static func check(_ wire: ChatWire) -> ValidationError? {
    do {
      switch wire {
      case .sync(let roomID, let members, _):
        try token(roomID, field: "chat.room")
        for member in members { try peer(member) }
      case .post(let roomID, let message):
        try token(roomID, field: "chat.room")
        try self.message(message)
      case .messages(let roomID, let messages):
        try token(roomID, field: "chat.room")
        for message in messages { try self.message(message) }
      case .roster(let roomID, _, let host, let members, _):
        try token(roomID, field: "chat.room")
        try peer(host)
        for member in members { try peer(member) }
      case .unknownRoom(let roomID):
        try token(roomID, field: "chat.room")
      }
      return nil
    } catch {
      return error
    }
  }

  static func peer(_ peer: Directory.PeerRef) throws(ValidationError) {
    try uuid(peer.peerID, field: "chat.peer.id")
    try uuid(peer.nodeID, field: "chat.peer.nodeId")
  }

  static func message(_ message: ChatMessage) throws(ValidationError) {
    try token(message.id, field: "chat.message.id")
    try peer(message.from)
  }

  /// A wire value quoted for an error message (``Validate/quoted(_:limit:)``), cut at 40 characters.
  static func quoted(_ text: String) -> String { Validate.quoted(text, limit: 40) }
}
