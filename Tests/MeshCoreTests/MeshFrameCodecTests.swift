import MeshCore
import Testing

// MARK: - Helpers (independent of the codec, so golden frames are built by hand)

/// The error `decode` throws for `bytes`, or nil (with an issue recorded) when it decodes.
private func decodeError(
  _ bytes: some Collection<UInt8>,
  sourceLocation: SourceLocation = #_sourceLocation
) -> MeshFrameError? {
  do throws(MeshFrameError) {
    let message = try MeshFrameCodec.decode(bytes)
    Issue.record("expected a MeshFrameError, decoded \(message)", sourceLocation: sourceLocation)
    return nil
  } catch {
    return error
  }
}

private func be16(_ value: Int) -> [UInt8] { [UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)] }
private func be32(_ value: Int) -> [UInt8] { be16(value >> 16 & 0xFFFF) + be16(value & 0xFFFF) }
private func be64(_ value: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) } }

/// A u16 length plus the raw bytes: a wire string from arbitrary (possibly invalid) bytes.
private func wire(_ bytes: [UInt8]) -> [UInt8] { be16(bytes.count) + bytes }
/// A wire string from a Swift string.
private func wire(_ text: String) -> [UInt8] { wire(Array(text.utf8)) }

/// Header (magic, version 1, `type`, length of `payload`) plus `payload`.
private func frame(_ type: UInt8, _ payload: [UInt8]) -> [UInt8] {
  [0x4D, 0x47, 0x01, type] + be32(payload.count) + payload
}

/// A wire peer announcement from pre-encoded services.
private func wirePeer(_ peerID: String, _ displayName: String = "n", services: [[UInt8]] = []) -> [UInt8] {
  wire(peerID) + wire(displayName) + be16(services.count) + services.flatMap { $0 }
}

/// A wire service entry with its discovery info pairs in the given order.
private func wireService(_ type: String, _ pairs: [(String, String)] = []) -> [UInt8] {
  wire(type) + be16(pairs.count) + pairs.flatMap { wire($0.0) + wire($0.1) }
}

/// A u32 length plus the raw bytes: a wire byte blob.
private func blob(_ bytes: [UInt8]) -> [UInt8] { be32(bytes.count) + bytes }

/// A wire session member; `state` is the raw code (1 = connected).
private func wireMember(_ peerID: String, _ displayName: String = "m", node: String = "n", state: UInt8 = 1) -> [UInt8]
{
  wire(peerID) + wire(displayName) + wire(node) + [state]
}

/// A wire session description from raw codes and pre-encoded members.
private func wireSession(
  _ sessionID: String = "s",
  strategy: UInt8 = 0,
  encryption: UInt8 = 0,
  maxPeers: Int = 8,
  revision: UInt64 = 1,
  members: [[UInt8]] = []
) -> [UInt8] {
  wire(sessionID) + wire("h") + wire("c") + [strategy, encryption] + be16(maxPeers) + be64(revision)
    + be16(members.count) + members.flatMap { $0 }
}

/// Wire target peers: u16 count plus the strings.
private func wireTargets(_ peerIDs: [String]) -> [UInt8] { be16(peerIDs.count) + peerIDs.flatMap { wire($0) } }

/// A wire `invite` payload around a pre-encoded session.
private func wireInvite(session: [UInt8] = wireSession(), context: [UInt8] = blob([])) -> [UInt8] {
  wire("i") + session + wire("from") + wire("From") + wire("to") + context + be32(30_000) + wire("1234")
}

private let session = SessionDescription(
  sessionID: "3F2504E0-4F89-11D3-9A0C-0305E82C3301",
  hostNodeID: "node-a",
  creatorPeerID: "p-1",
  strategy: .cluster,
  encryption: .required,
  maxPeers: 8,
  revision: 3,
  members: [
    SessionMember(peerID: "p-1", displayName: "Ada", nodeID: "node-a", state: .connected),
    SessionMember(peerID: "p-2", displayName: "Zoë 👩‍💻", nodeID: "node-b", state: .connecting),
    SessionMember(peerID: "p-3", displayName: "", nodeID: "", state: .notConnected),
    SessionMember(peerID: "caf\u{E9}", displayName: "日本語", nodeID: "node-c", state: .connected),
  ]
)

private let emptySession = SessionDescription(
  sessionID: "",
  hostNodeID: "",
  creatorPeerID: "",
  strategy: .star,
  encryption: .none,
  maxPeers: 0,
  revision: 0,
  members: []
)

/// Session, invitation and data frames: every case, every enum value, empty lists and blobs, unicode, extremes.
private let sessionSamples: [MeshMessage] = [
  .invite(
    InvitationOffer(
      invitationID: "inv-1", session: session, fromPeerID: "p-1", fromDisplayName: "Ada", toPeerID: "p-9",
      context: Array("{\"job\":\"build\"}".utf8), timeoutMillis: 30_000, verificationCode: "4821")),
  .invite(
    InvitationOffer(
      invitationID: "", session: emptySession, fromPeerID: "", fromDisplayName: "", toPeerID: "", context: [],
      timeoutMillis: 0, verificationCode: "")),
  .invite(
    InvitationOffer(
      invitationID: "✉️",
      session: SessionDescription(
        sessionID: "s", hostNodeID: "h", creatorPeerID: "c", strategy: .pointToPoint, encryption: .optional,
        maxPeers: .max, revision: .max, members: []),
      fromPeerID: "🦊", fromDisplayName: "Zoë", toPeerID: "ünï", context: [0x00, 0xFF, 0xC0, 0x80],
      timeoutMillis: .max, verificationCode: "٤٨٢١")),
  .inviteAnswer(invitationID: "inv-1", outcome: .accepted),
  .inviteAnswer(invitationID: "inv-1", outcome: .declined),
  .inviteAnswer(invitationID: "", outcome: .expired),
  .inviteAnswer(invitationID: "🎟", outcome: .canceled),
  .inviteClosed(invitationID: "inv-1", outcome: .accepted),
  .inviteClosed(invitationID: "inv-1", outcome: .declined),
  .inviteClosed(invitationID: "inv-1", outcome: .expired),
  .inviteClosed(invitationID: "", outcome: .canceled),
  .sessionJoin(
    sessionID: "s-1", member: SessionMember(peerID: "p-2", displayName: "Bob", nodeID: "node-b", state: .connecting)),
  .sessionJoin(sessionID: "", member: SessionMember(peerID: "", displayName: "", nodeID: "", state: .connected)),
  .sessionJoin(
    sessionID: "sé", member: SessionMember(peerID: "👩‍👩‍👧‍👦", displayName: "\u{0}", nodeID: "n", state: .notConnected)),
  .sessionLeave(sessionID: "s-1", peerID: "p-2"),
  .sessionLeave(sessionID: "", peerID: ""),
  .sessionLeave(sessionID: "セッション", peerID: "🦊"),
  .sessionState(session),
  .sessionState(emptySession),
  .sessionState(
    SessionDescription(
      sessionID: "s", hostNodeID: "h", creatorPeerID: "c", strategy: .pointToPoint, encryption: .optional,
      maxPeers: 2, revision: .max,
      members: [
        SessionMember(peerID: "e\u{301}x", displayName: "d", nodeID: "h", state: .connected),
        SessionMember(peerID: "ex", displayName: "d", nodeID: "h", state: .connecting),
      ])),
  .sessionData(sessionID: "s-1", fromPeerID: "p-1", toPeerIDs: ["p-2", "p-3"], sequence: 1, payload: [1, 2, 3]),
  .sessionData(sessionID: "s-1", fromPeerID: "p-1", toPeerIDs: ["p-2"], sequence: 0, payload: []),
  .sessionData(sessionID: "", fromPeerID: "", toPeerIDs: [], sequence: .max, payload: [0x00]),
  .sessionData(
    sessionID: "ß", fromPeerID: "🦊", toPeerIDs: ["ünï", "", "caf\u{E9}"], sequence: 42,
    payload: Array(0...255)),
  .sessionEvent(
    sessionID: "s-1", fromPeerID: "p-1", toPeerIDs: ["p-2"], sequence: 7, name: "job.progress",
    object: Array("{\"percent\":42,\"note\":\"½ done\"}".utf8)),
  .sessionEvent(sessionID: "", fromPeerID: "", toPeerIDs: [], sequence: 0, name: "", object: []),
  .sessionEvent(
    sessionID: "s", fromPeerID: "p", toPeerIDs: ["a", "b", "c"], sequence: .max, name: "ereignis ⚡️", object: [0xFF]),
  .dataAck(sequence: 0),
  .dataAck(sequence: 1),
  .dataAck(sequence: .max),
  .chat(payload: []),
  .chat(payload: Array(#"{"op":"unknownRoom","room":"r1"}"#.utf8)),
]

/// Link and peer directory frames: every case, empty and unicode fields, extreme integers and canonical-order corner
/// cases.
private let linkSamples: [MeshMessage] = [
  .hello(
    NodeHello(nodeID: "5C1D0F86-2E8B-4C43-9B1E-0E4E2B1A7D31", name: "kitchen", softwareVersion: "0.1.0", port: 8080)),
  .hello(NodeHello(nodeID: "", name: "", softwareVersion: "", port: 0)),
  .hello(NodeHello(nodeID: "ünïcødé ✓", name: "日本語のノード 👩‍👩‍👧‍👦", softwareVersion: "1.0.0-β", port: .max)),
  .hello(NodeHello(nodeID: "nul\u{0}inside", name: "tab\tnew\nline", softwareVersion: "\u{FEFF}bom", port: 1)),
  .heartbeat(sequence: 0, sentAtMillis: 0),
  .heartbeat(sequence: .max, sentAtMillis: .max),
  .heartbeat(sequence: 7, sentAtMillis: 1_700_000_000_000),
  .heartbeatAck(sequence: 0, sentAtMillis: 0),
  .heartbeatAck(sequence: .max, sentAtMillis: 1),
  .peerSnapshot([]),
  .peerSnapshot([PeerAnnouncement(peerID: "a", displayName: "A")]),
  .peerSnapshot([
    PeerAnnouncement(peerID: "p-2", displayName: "Zoë's laptop", advertising: ["jobmanager-jobs": [:]]),
    PeerAnnouncement(peerID: "p-1", displayName: "Bob", advertising: ["jobmanager-chat": ["room": "Lobby 🛋"]]),
    PeerAnnouncement(peerID: "", displayName: ""),
    // Canonically equivalent ids in different peers are kept apart only by bytes: "é" vs "e" + U+0301.
    PeerAnnouncement(peerID: "x", displayName: "caf\u{E9}", advertising: ["b": ["caf\u{E9}": "1"]]),
  ]),
  .peerUpdated(PeerAnnouncement(peerID: "p", displayName: "")),
  .peerUpdated(
    PeerAnnouncement(
      peerID: "peer-⚡️",
      displayName: "Ada",
      advertising: [
        "jobmanager-chat": ["room": "general", "topic": "", "": "empty key", "Z": "upper", "é": "2 bytes"],
        "jobmanager-jobs": [:],
        "a": ["k": "v"],
      ]
    )
  ),
  .peerRemoved(peerID: "p-1"),
  .peerRemoved(peerID: ""),
  .peerRemoved(peerID: "🦊"),
  .goodbye(reason: "shutdown"),
  .goodbye(reason: "duplicate link"),
  .goodbye(reason: ""),
  .nodeDirectory([]),
  .nodeDirectory([
    NodeAddress(nodeID: "node-b", host: "192.168.1.20", port: 8080),
    NodeAddress(nodeID: "node-c", host: "fe80::1", port: 65535),
  ]),
]

private let digest = Array(0..<32).map { UInt8($0) }

/// Resource transfer frames (0x40–0x48): every case, every rejection code, empty and maximum chunks, extremes.
private let transferSamples: [MeshMessage] =
  [
    .transferOffer(
      TransferOffer(
        transferID: "t-1", sessionID: "s-1", fromPeerID: "p-1", fromDisplayName: "Ada", toPeerID: "p-2",
        name: "report.pdf", contentType: "application/pdf", size: 1 << 40, resume: false)),
    .transferOffer(
      TransferOffer(
        transferID: "", sessionID: "", fromPeerID: "", fromDisplayName: "", toPeerID: "", name: "", contentType: "",
        size: .max, resume: true)),
    .transferAccept(transferID: "t-1", offset: 0),
    .transferAccept(transferID: "t-1", offset: .max),
    .transferChunk(transferID: "t-1", offset: 65536, bytes: Array(0...255)),
    .transferChunk(transferID: "", offset: 0, bytes: []),
    .transferChunk(transferID: "t", offset: .max, bytes: [UInt8](repeating: 0xAB, count: 1000)),
    .transferCredit(transferID: "t-1", offset: 1 << 33),
    .transferEnd(transferID: "t-1", size: 0, sha256: digest),
    .transferFinished(transferID: "t-1", sha256: digest.reversed()),
    .transferFailed(transferID: "t-1", reason: "sha256 mismatch"),
    .transferCancel(transferID: "t-1", reason: ""),
    .transferAwaitingConsent(transferID: "t-1", timeoutMillis: 300_000),
    .transferGroupOffer(
      TransferGroupOffer(
        copyID: "c-1", groupID: "g-1", sessionID: "s-1", fromPeerID: "p-1", fromDisplayName: "Ada", name: "deck.pdf",
        contentType: "application/pdf", size: 1 << 30, resume: false,
        recipients: [
          TransferGroupRecipient(transferID: "t-1", peerID: "p-2"),
          TransferGroupRecipient(transferID: "t-2", peerID: "p-3"),
        ])),
    .transferGroupOffer(
      TransferGroupOffer(
        copyID: "", groupID: "", sessionID: "", fromPeerID: "", fromDisplayName: "", name: "", contentType: "",
        size: .max, resume: true, recipients: [])),
    .transferReject(transferID: "t-1", code: .declined, message: "declined"),
    .streamOpen(
      StreamOffer(
        streamID: "st-1", sessionID: "s-1", fromPeerID: "p-1", fromDisplayName: "Ada", toPeerID: "p-2",
        name: "camera 📷")),
    .streamOpen(StreamOffer(streamID: "", sessionID: "", fromPeerID: "", fromDisplayName: "", toPeerID: "", name: "")),
    .streamData(streamID: "st-1", offset: 0, bytes: Array(0...255)),
    .streamData(streamID: "", offset: .max, bytes: []),
    .streamCredit(streamID: "st-1", offset: 1 << 40),
    .streamClose(streamID: "st-1", reason: ""),
    .streamClose(streamID: "st-1", reason: "the reader went away"),
  ] + TransferRejection.allCases.map { .transferReject(transferID: "t-1", code: $0, message: "no space ⛔️") }

/// Messages covering every case.
private let samples: [MeshMessage] = linkSamples + sessionSamples + transferSamples

/// Every frame type byte of protocol version 1.
private let knownTypes: [UInt8] = [
  0x01, 0x02, 0x03, 0x04, 0x05, 0x10, 0x11, 0x12, 0x13, 0x20, 0x21, 0x22, 0x28, 0x29, 0x2A, 0x30, 0x31, 0x32, 0x40,
  0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4A, 0x4B, 0x4C, 0x4D, 0x4E, 0x50, 0x7F,
]

/// A seeded xorshift64 generator (Marsaglia 2003), so every run fuzzes the same inputs.
private struct XorShift64 {
  private var state: UInt64

  init(seed: UInt64) { self.state = seed == 0 ? 0x9E37_79B9_7F4A_7C15 : seed }

  mutating func next() -> UInt64 {
    self.state ^= self.state << 13
    self.state ^= self.state >> 7
    self.state ^= self.state << 17
    return self.state
  }

  /// A value in `0..<bound` (bound > 0).
  mutating func below(_ bound: Int) -> Int { Int(self.next() % UInt64(bound)) }

  mutating func byte() -> UInt8 { UInt8(truncatingIfNeeded: self.next()) }
}

// MARK: - Round trips

@Suite struct MeshFrameCodecRoundTripTests {
  @Test(arguments: samples)
  func roundTripsEveryCase(_ message: MeshMessage) throws {
    let bytes = MeshFrameCodec.encode(message)
    #expect(try MeshFrameCodec.decode(bytes) == message)
    #expect(Array(bytes.prefix(4)) == [0x4D, 0x47, meshProtocolVersion, bytes[3]])
    #expect(Int(bytes[4]) << 24 | Int(bytes[5]) << 16 | Int(bytes[6]) << 8 | Int(bytes[7]) == bytes.count - 8)
  }

  @Test func decodesSlicesAndOtherCollections() throws {
    let message = samples[2]
    let bytes = MeshFrameCodec.encode(message)
    let padded: [UInt8] = [0xAA, 0xBB] + bytes + [0xCC]
    #expect(try MeshFrameCodec.decode(padded[2..<(padded.count - 1)]) == message)
    #expect(try MeshFrameCodec.decode(bytes.reversed().reversed() as [UInt8]) == message)
    #expect(try MeshFrameCodec.decode(ContiguousArray(bytes)) == message)
    // Error offsets count from the start of the slice, not of the underlying array.
    #expect(decodeError(padded[2..<6])?.offset == 4)
  }

  @Test func encodingIsCanonicalWhateverTheDictionaryOrder() throws {
    var forward: [String: String] = [:]
    var backward: [String: String] = [:]
    let keys = (0..<64).map { "key-\($0)" }
    for key in keys { forward[key] = key }
    for key in keys.reversed() { backward[key] = key }
    let first = MeshFrameCodec.encode(
      .peerUpdated(PeerAnnouncement(peerID: "p", displayName: "", advertising: ["s": forward])))
    let second = MeshFrameCodec.encode(
      .peerUpdated(PeerAnnouncement(peerID: "p", displayName: "", advertising: ["s": backward]))
    )
    #expect(first == second)
  }

  @Test func mapKeysAreOrderedByUTF8Bytes() {
    // Byte order: "B" (0x42) < "a" (0x61) < "b" < "é" (0xC3 0xA9) < "😀" (0xF0 …).
    let peer = PeerAnnouncement(
      peerID: "p",
      displayName: "d",
      advertising: ["s": ["😀": "4", "b": "2", "é": "3", "a": "1", "B": "0"]]
    )
    let expected = frame(
      0x11,
      wirePeer("p", "d", services: [wireService("s", [("B", "0"), ("a", "1"), ("b", "2"), ("é", "3"), ("😀", "4")])])
    )
    #expect(MeshFrameCodec.encode(.peerUpdated(peer)) == expected)
  }

  @Test func roundTripsMaximumStrings() throws {
    let max = String(repeating: "x", count: MeshFrameCodec.maxStringBytes)
    let maxMultibyte = String(repeating: "€", count: MeshFrameCodec.maxStringBytes / 3) + "x"  // 4096 bytes
    #expect(maxMultibyte.utf8.count == 4096)
    let messages: [MeshMessage] = [
      .hello(NodeHello(nodeID: max, name: maxMultibyte, softwareVersion: max, port: 1)),
      .goodbye(reason: max),
      .peerRemoved(peerID: maxMultibyte),
      .peerUpdated(PeerAnnouncement(peerID: max, displayName: max, advertising: [max: [max: maxMultibyte]])),
    ]
    for message in messages {
      #expect(try MeshFrameCodec.decode(MeshFrameCodec.encode(message)) == message)
    }
  }

  @Test func roundTripsMaximumMapsAndServices() throws {
    var services: [String: [String: String]] = [:]
    for service in 0..<MeshFrameCodec.maxServicesPerPeer {
      var info: [String: String] = [:]
      for pair in 0..<MeshFrameCodec.maxMapPairs { info["k\(pair)"] = "v\(service).\(pair)" }
      services["svc-\(service)"] = info
    }
    let message = MeshMessage.peerUpdated(PeerAnnouncement(peerID: "p", displayName: "full", advertising: services))
    #expect(try MeshFrameCodec.decode(MeshFrameCodec.encode(message)) == message)
  }

  @Test func roundTripsMaximumSnapshot() throws {
    let peers = (0..<MeshFrameCodec.maxPeersPerSnapshot).map { PeerAnnouncement(peerID: "\($0)", displayName: "") }
    let bytes = MeshFrameCodec.encode(.peerSnapshot(peers))
    #expect(Array(bytes[8..<12]) == [0x00, 0x01, 0x00, 0x00])
    guard case .peerSnapshot(let decoded) = try MeshFrameCodec.decode(bytes) else {
      Issue.record("not a snapshot")
      return
    }
    #expect(decoded == peers)
  }

  @Test func roundTripsMaximumSessionFrames() throws {
    let max = String(repeating: "x", count: MeshFrameCodec.maxStringBytes)
    let members = (0..<MeshFrameCodec.maxSessionMembers).map {
      SessionMember(peerID: "peer-\($0)", displayName: "name \($0)", nodeID: "node-\($0 % 7)", state: .connected)
    }
    let big = SessionDescription(
      sessionID: max, hostNodeID: max, creatorPeerID: max, strategy: .star, encryption: .required, maxPeers: .max,
      revision: .max, members: members)
    let targets = (0..<MeshFrameCodec.maxTargetPeers).map { "target-\($0)" }
    let messages: [MeshMessage] = [
      .invite(
        InvitationOffer(
          invitationID: max, session: big, fromPeerID: max, fromDisplayName: max, toPeerID: max,
          context: [UInt8](repeating: 0xAB, count: MeshFrameCodec.maxContextBytes), timeoutMillis: .max,
          verificationCode: max)),
      .sessionState(big),
      .sessionJoin(
        sessionID: max, member: SessionMember(peerID: max, displayName: max, nodeID: max, state: .connected)),
      .sessionLeave(sessionID: max, peerID: max),
      .inviteAnswer(invitationID: max, outcome: .declined),
      .inviteClosed(invitationID: max, outcome: .canceled),
      .sessionData(
        sessionID: max, fromPeerID: max, toPeerIDs: targets, sequence: .max,
        payload: (0..<MeshFrameCodec.maxDataPayloadBytes).map { UInt8(truncatingIfNeeded: $0) }),
      .sessionEvent(
        sessionID: max, fromPeerID: max, toPeerIDs: targets, sequence: 1, name: max,
        object: [UInt8](repeating: 0x7B, count: MeshFrameCodec.maxEventObjectBytes)),
      .sessionData(sessionID: "s", fromPeerID: "p", toPeerIDs: [max], sequence: 1, payload: []),
    ]
    for message in messages {
      #expect(try MeshFrameCodec.decode(MeshFrameCodec.encode(message)) == message)
    }
  }

  @Test func everyEnumValueHasItsWireCode() throws {
    // The code is the last byte of an inviteAnswer / inviteClosed and of a sessionJoin (the member state).
    let outcomes: [(InvitationOutcome, UInt8)] = [(.accepted, 0), (.declined, 1), (.expired, 2), (.canceled, 3)]
    for (outcome, code) in outcomes {
      #expect(MeshFrameCodec.encode(.inviteAnswer(invitationID: "i", outcome: outcome)).last == code)
      #expect(MeshFrameCodec.encode(.inviteClosed(invitationID: "i", outcome: outcome)).last == code)
    }
    let states: [(MemberState, UInt8)] = [(.connecting, 0), (.connected, 1), (.notConnected, 2)]
    for (state, code) in states {
      let member = SessionMember(peerID: "p", displayName: "", nodeID: "", state: state)
      #expect(MeshFrameCodec.encode(.sessionJoin(sessionID: "s", member: member)).last == code)
    }
    // Strategy and encryption are the two bytes after the three strings of a session description.
    let strategies: [(SessionStrategy, UInt8)] = [(.cluster, 0), (.star, 1), (.pointToPoint, 2)]
    let encryptions: [(SessionEncryption, UInt8)] = [(.none, 0), (.optional, 1), (.required, 2)]
    for (strategy, strategyCode) in strategies {
      for (encryption, encryptionCode) in encryptions {
        var described = emptySession
        described.strategy = strategy
        described.encryption = encryption
        let bytes = MeshFrameCodec.encode(.sessionState(described))
        #expect(Array(bytes[14..<16]) == [strategyCode, encryptionCode])
        #expect(try MeshFrameCodec.decode(bytes) == .sessionState(described))
      }
    }
    #expect(SessionStrategy.allCases.count == 3)
    #expect(SessionEncryption.allCases.count == 3)
  }

  @Test func targetAndMemberOrderIsKept() throws {
    let targets = ["z", "a", "m", "B"]
    let message = MeshMessage.sessionData(sessionID: "s", fromPeerID: "p", toPeerIDs: targets, sequence: 1, payload: [])
    #expect(try MeshFrameCodec.decode(MeshFrameCodec.encode(message)) == message)
    var reversed = session
    reversed.members.reverse()
    #expect(try MeshFrameCodec.decode(MeshFrameCodec.encode(.sessionState(reversed))) == .sessionState(reversed))
  }

  @Test func roundTripsAPayloadOfExactly16MiB() throws {
    // Peers of 6 + 8 (id) + name bytes each; the last one's name is cut to land on 16 MiB exactly.
    var peers: [PeerAnnouncement] = []
    var left = MeshFrameCodec.maxPayloadBytes - 4
    while left > 0 {
      let name = min(MeshFrameCodec.maxStringBytes, left - 14)
      let id = String(peers.count + 10_000_000)
      peers.append(PeerAnnouncement(peerID: id, displayName: String(repeating: "n", count: name)))
      left -= 14 + name
      if left > 0 && left < 14 {  // Too little for another peer: give it back to the previous one.
        let last = peers.removeLast()
        left += 14 + last.displayName.utf8.count
      }
    }
    let bytes = MeshFrameCodec.encode(.peerSnapshot(peers))
    #expect(bytes.count == 8 + 16 * 1024 * 1024)
    #expect(Array(bytes[4..<8]) == [0x01, 0x00, 0x00, 0x00])
    #expect(try MeshFrameCodec.decode(bytes) == .peerSnapshot(peers))
  }
}

// MARK: - Golden bytes

@Suite struct MeshFrameCodecGoldenTests {
  @Test func hello() throws {
    let message = MeshMessage.hello(NodeHello(nodeID: "n1", name: "Ada", softwareVersion: "0.1.0", port: 8080))
    let expected: [UInt8] = [
      0x4D, 0x47, 0x01, 0x01, 0x00, 0x00, 0x00, 0x12,  // "MG", version 1, hello, 18 payload bytes
      0x00, 0x02, 0x6E, 0x31,  // nodeID "n1"
      0x00, 0x03, 0x41, 0x64, 0x61,  // name "Ada"
      0x00, 0x05, 0x30, 0x2E, 0x31, 0x2E, 0x30,  // softwareVersion "0.1.0"
      0x1F, 0x90,  // port 8080
    ]
    #expect(MeshFrameCodec.encode(message) == expected)
    #expect(try MeshFrameCodec.decode(expected) == message)
  }

  @Test func heartbeat() throws {
    let message = MeshMessage.heartbeat(sequence: 1, sentAtMillis: 0x0102_0304_0506_0708)
    let expected: [UInt8] = [
      0x4D, 0x47, 0x01, 0x02, 0x00, 0x00, 0x00, 0x10,  // heartbeat, 16 payload bytes
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,  // sequence 1
      0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,  // sentAtMillis
    ]
    #expect(MeshFrameCodec.encode(message) == expected)
    #expect(try MeshFrameCodec.decode(expected) == message)
  }

  @Test func heartbeatAck() throws {
    let message = MeshMessage.heartbeatAck(sequence: .max, sentAtMillis: 1_700_000_000_000)
    let expected: [UInt8] = [
      0x4D, 0x47, 0x01, 0x03, 0x00, 0x00, 0x00, 0x10,  // heartbeatAck, 16 payload bytes
      0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,  // sequence UInt64.max
      0x00, 0x00, 0x01, 0x8B, 0xCF, 0xE5, 0x68, 0x00,  // 1_700_000_000_000 = 0x18B_CFE5_6800
    ]
    #expect(MeshFrameCodec.encode(message) == expected)
    #expect(try MeshFrameCodec.decode(expected) == message)
  }

  @Test func peerSnapshot() throws {
    #expect(MeshFrameCodec.encode(.peerSnapshot([])) == [0x4D, 0x47, 0x01, 0x10, 0, 0, 0, 4, 0, 0, 0, 0])
    let message = MeshMessage.peerSnapshot([PeerAnnouncement(peerID: "p", displayName: "Al")])
    let expected: [UInt8] = [
      0x4D, 0x47, 0x01, 0x10, 0x00, 0x00, 0x00, 0x0D,  // peerSnapshot, 13 payload bytes
      0x00, 0x00, 0x00, 0x01,  // 1 peer
      0x00, 0x01, 0x70,  // peerID "p"
      0x00, 0x02, 0x41, 0x6C,  // displayName "Al"
      0x00, 0x00,  // 0 services
    ]
    #expect(MeshFrameCodec.encode(message) == expected)
    #expect(try MeshFrameCodec.decode(expected) == message)
  }

  @Test func peerUpdated() throws {
    let message = MeshMessage.peerUpdated(
      PeerAnnouncement(peerID: "p", displayName: "Zoë", advertising: ["jobmanager-chat": ["room": "x"], "a": [:]])
    )
    let expected: [UInt8] =
      [0x4D, 0x47, 0x01, 0x11, 0x00, 0x00, 0x00, 0x2C]  // peerUpdated, 44 payload bytes
      + [0x00, 0x01, 0x70]  // peerID "p"
      + [0x00, 0x04, 0x5A, 0x6F, 0xC3, 0xAB]  // displayName "Zoë" (ë is 2 bytes)
      + [0x00, 0x02]  // 2 services, in byte order of their types
      + [0x00, 0x01, 0x61, 0x00, 0x00]  // "a", 0 pairs
      + [0x00, 0x0F] + Array("jobmanager-chat".utf8) + [0x00, 0x01]  // "jobmanager-chat", 1 pair
      + [0x00, 0x04, 0x72, 0x6F, 0x6F, 0x6D, 0x00, 0x01, 0x78]  // "room" = "x"
    #expect(MeshFrameCodec.encode(message) == expected)
    #expect(try MeshFrameCodec.decode(expected) == message)
  }

  @Test func peerRemovedAndGoodbye() throws {
    let removed: [UInt8] = [0x4D, 0x47, 0x01, 0x12, 0x00, 0x00, 0x00, 0x04, 0x00, 0x02, 0x70, 0x31]
    #expect(MeshFrameCodec.encode(.peerRemoved(peerID: "p1")) == removed)
    #expect(try MeshFrameCodec.decode(removed) == .peerRemoved(peerID: "p1"))
    let goodbye: [UInt8] = [0x4D, 0x47, 0x01, 0x7F, 0x00, 0x00, 0x00, 0x0A, 0x00, 0x08] + Array("shutdown".utf8)
    let directory: [UInt8] = [
      0x4D, 0x47, 0x01, 0x13, 0x00, 0x00, 0x00, 0x0B,  // header: nodeDirectory, 11 payload bytes
      0x00, 0x01,  // one node
      0x00, 0x01, 0x62,  // nodeID "b"
      0x00, 0x02, 0x68, 0x31,  // host "h1"
      0x1F, 0x90,  // port 8080
    ]
    #expect(MeshFrameCodec.encode(.nodeDirectory([NodeAddress(nodeID: "b", host: "h1", port: 8080)])) == directory)
    #expect(try MeshFrameCodec.decode(directory) == .nodeDirectory([NodeAddress(nodeID: "b", host: "h1", port: 8080)]))
    #expect(MeshFrameCodec.encode(.goodbye(reason: "shutdown")) == goodbye)
    #expect(try MeshFrameCodec.decode(goodbye) == .goodbye(reason: "shutdown"))
  }

  @Test func inviteAnswerAndInviteClosed() throws {
    let message = MeshMessage.inviteAnswer(invitationID: "i1", outcome: .declined)
    let expected: [UInt8] = [
      0x4D, 0x47, 0x01, 0x21, 0x00, 0x00, 0x00, 0x05,  // inviteAnswer, 5 payload bytes
      0x00, 0x02, 0x69, 0x31,  // invitationID "i1"
      0x01,  // outcome declined
    ]
    #expect(MeshFrameCodec.encode(message) == expected)
    #expect(try MeshFrameCodec.decode(expected) == message)
    let closed: [UInt8] = [0x4D, 0x47, 0x01, 0x22, 0x00, 0x00, 0x00, 0x05, 0x00, 0x02, 0x69, 0x31, 0x02]
    #expect(MeshFrameCodec.encode(.inviteClosed(invitationID: "i1", outcome: .expired)) == closed)
    #expect(try MeshFrameCodec.decode(closed) == .inviteClosed(invitationID: "i1", outcome: .expired))
  }

  @Test func dataAck() throws {
    let message = MeshMessage.dataAck(sequence: 0x0102_0304_0506_0708)
    let expected: [UInt8] = [
      0x4D, 0x47, 0x01, 0x32, 0x00, 0x00, 0x00, 0x08,  // dataAck, 8 payload bytes
      0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,  // sequence
    ]
    #expect(MeshFrameCodec.encode(message) == expected)
    #expect(try MeshFrameCodec.decode(expected) == message)
  }

  @Test func sessionData() throws {
    let message = MeshMessage.sessionData(
      sessionID: "s", fromPeerID: "a", toPeerIDs: ["b", "c"], sequence: 7, payload: [0xDE, 0xAD])
    let expected: [UInt8] = [
      0x4D, 0x47, 0x01, 0x30, 0x00, 0x00, 0x00, 0x1C,  // sessionData, 28 payload bytes
      0x00, 0x01, 0x73,  // sessionID "s"
      0x00, 0x01, 0x61,  // fromPeerID "a"
      0x00, 0x02, 0x00, 0x01, 0x62, 0x00, 0x01, 0x63,  // toPeerIDs ["b", "c"]
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07,  // sequence 7 (reliable)
      0x00, 0x00, 0x00, 0x02, 0xDE, 0xAD,  // payload, 2 bytes
    ]
    #expect(MeshFrameCodec.encode(message) == expected)
    #expect(try MeshFrameCodec.decode(expected) == message)
  }

  @Test func sessionState() throws {
    let message = MeshMessage.sessionState(
      SessionDescription(
        sessionID: "s", hostNodeID: "h", creatorPeerID: "c", strategy: .star, encryption: .optional, maxPeers: 8,
        revision: 2, members: [SessionMember(peerID: "c", displayName: "C", nodeID: "h", state: .connected)]))
    let expected: [UInt8] = [
      0x4D, 0x47, 0x01, 0x2A, 0x00, 0x00, 0x00, 0x21,  // sessionState, 33 payload bytes
      0x00, 0x01, 0x73,  // sessionID "s"
      0x00, 0x01, 0x68,  // hostNodeID "h"
      0x00, 0x01, 0x63,  // creatorPeerID "c"
      0x01, 0x01,  // strategy star, encryption optional
      0x00, 0x08,  // maxPeers 8
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02,  // revision 2
      0x00, 0x01,  // 1 member
      0x00, 0x01, 0x63, 0x00, 0x01, 0x43, 0x00, 0x01, 0x68, 0x01,  // "c", "C", node "h", connected
    ]
    #expect(MeshFrameCodec.encode(message) == expected)
    #expect(try MeshFrameCodec.decode(expected) == message)
  }

  @Test func publicConstants() {
    #expect(meshProtocolVersion == 1)
    #expect(MeshFrameCodec.magic == [0x4D, 0x47])
    #expect(MeshFrameCodec.headerSize == 8)
    #expect(MeshFrameCodec.maxPayloadBytes == 16_777_216)
    #expect(MeshFrameCodec.maxStringBytes == 4096)
    #expect(MeshFrameCodec.maxMapPairs == 64)
    #expect(MeshFrameCodec.maxServicesPerPeer == 64)
    #expect(MeshFrameCodec.maxPeersPerSnapshot == 65536)
    #expect(MeshFrameCodec.maxContextBytes == 4096)
    #expect(MeshFrameCodec.maxDataPayloadBytes == 1_114_112)
    #expect(MeshFrameCodec.maxEventObjectBytes == 1_048_576)
    #expect(MeshFrameCodec.maxSessionMembers == 4096)
    #expect(MeshFrameCodec.maxTargetPeers == 4096)
  }
}

// MARK: - Header errors

@Suite struct MeshFrameCodecHeaderErrorTests {
  @Test func rejectsBadMagic() {
    let valid = MeshFrameCodec.encode(.goodbye(reason: "x"))
    var bad = valid
    bad[0] = 0x47
    #expect(decodeError(bad) == MeshFrameError(.badMagic([0x47, 0x47]), offset: 0))
    bad = valid
    bad[1] = 0x00
    #expect(decodeError(bad) == MeshFrameError(.badMagic([0x4D, 0x00]), offset: 0))
    #expect(decodeError([0x7B]) == MeshFrameError(.badMagic([0x7B]), offset: 0))
    // Text sent by mistake (here an HTTP request line) is bad magic, not a short header.
    let http = decodeError(Array("GET / HTTP/1.1\r\n".utf8))
    #expect(http == MeshFrameError(.badMagic([0x47, 0x45]), offset: 0))
    #expect(
      http?.description == "bad magic 0x47 0x45 (expected 0x4d 0x47, \"MG\"): not a meshgate-node frame at byte 0")
  }

  @Test(arguments: [0, 2, 7, 0xFF] as [UInt8])
  func rejectsOtherVersions(_ version: UInt8) {
    var bytes = MeshFrameCodec.encode(.heartbeat(sequence: 1, sentAtMillis: 2))
    bytes[2] = version
    let error = decodeError(bytes)
    #expect(error == MeshFrameError(.unsupportedVersion(version), offset: 2))
    #expect(error?.description == "unsupported protocol version \(version) (this node speaks 1) at byte 2")
    #expect(decodeError(bytes.prefix(3)) == error)  // Known as soon as the byte is there.
  }

  @Test func rejectsEveryUnknownType() {
    let known = Set(knownTypes)
    for type in UInt8.min...UInt8.max where !known.contains(type) {
      let error = decodeError(frame(type, []))
      #expect(error == MeshFrameError(.unknownType(type), offset: 3))
      #expect(decodeError([0x4D, 0x47, 0x01, type]) == error)
    }
    #expect(decodeError(frame(0x2B, [1, 2, 3]))?.description == "unknown frame type 0x2b at byte 3")
    #expect(decodeError(frame(0x00, []))?.description == "unknown frame type 0x00 at byte 3")
  }

  @Test func rejectsTheUnassignedRestOf0x20Through0x6F() {
    let assigned: Set<UInt8> = [
      0x20, 0x21, 0x22, 0x28, 0x29, 0x2A, 0x30, 0x31, 0x32, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48,
      0x49, 0x4A, 0x4B, 0x4C, 0x4D, 0x4E, 0x50,
    ]
    #expect(Set(knownTypes).intersection(0x20...0x6F) == assigned)
    for type in UInt8(0x20)...UInt8(0x6F) where !assigned.contains(type) {
      #expect(decodeError(frame(type, wire("x")))?.reason == .unknownType(type))
    }
  }

  @Test func eachMessageHasItsTypeByte() {
    let types: [(MeshMessage, UInt8)] = [
      (
        .invite(
          InvitationOffer(
            invitationID: "", session: emptySession, fromPeerID: "", fromDisplayName: "", toPeerID: "", context: [],
            timeoutMillis: 0, verificationCode: "")), 0x20
      ),
      (.inviteAnswer(invitationID: "", outcome: .accepted), 0x21),
      (.inviteClosed(invitationID: "", outcome: .accepted), 0x22),
      (
        .sessionJoin(sessionID: "", member: SessionMember(peerID: "", displayName: "", nodeID: "", state: .connected)),
        0x28
      ),
      (.sessionLeave(sessionID: "", peerID: ""), 0x29),
      (.sessionState(emptySession), 0x2A),
      (.sessionData(sessionID: "", fromPeerID: "", toPeerIDs: [], sequence: 0, payload: []), 0x30),
      (.sessionEvent(sessionID: "", fromPeerID: "", toPeerIDs: [], sequence: 0, name: "", object: []), 0x31),
      (.dataAck(sequence: 0), 0x32),
      (.transferAccept(transferID: "", offset: 0), 0x41),
      (.transferReject(transferID: "", code: .refused, message: ""), 0x42),
      (.transferChunk(transferID: "", offset: 0, bytes: []), 0x43),
      (.transferCredit(transferID: "", offset: 0), 0x44),
      (.transferEnd(transferID: "", size: 0, sha256: digest), 0x45),
      (.transferFinished(transferID: "", sha256: digest), 0x46),
      (.transferFailed(transferID: "", reason: ""), 0x47),
      (.transferCancel(transferID: "", reason: ""), 0x48),
      (.transferAwaitingConsent(transferID: "", timeoutMillis: 0), 0x4D),
      (
        .transferGroupOffer(
          TransferGroupOffer(
            copyID: "", groupID: "", sessionID: "", fromPeerID: "", fromDisplayName: "", name: "", contentType: "",
            size: 0, resume: false, recipients: [])), 0x4E
      ),
      (.streamData(streamID: "", offset: 0, bytes: []), 0x4A),
      (.streamCredit(streamID: "", offset: 0), 0x4B),
      (.streamClose(streamID: "", reason: ""), 0x4C),
      (.chat(payload: []), 0x50),
    ]
    for (message, type) in types {
      #expect(MeshFrameCodec.encode(message)[3] == type, "\(message)")
    }
  }

  @Test func rejectsTruncatedHeaders() {
    #expect(decodeError([]) == MeshFrameError(.truncatedHeader(got: 0), offset: 0))
    let error = decodeError([0x4D, 0x47, 0x01, 0x02, 0x00])
    #expect(error == MeshFrameError(.truncatedHeader(got: 5), offset: 5))
    #expect(error?.description == "truncated frame: the header needs 8 bytes, got 5 at byte 5")
  }

  @Test func rejectsPayloadsOver16MiBFromTheHeaderAlone() {
    let over = MeshFrameCodec.maxPayloadBytes + 1
    let error = decodeError([0x4D, 0x47, 0x01, 0x10] + be32(over))
    #expect(error == MeshFrameError(.payloadTooLarge(declared: over), offset: 4))
    #expect(error?.description == "frame too large: header says 16777217 payload bytes, limit is 16777216 at byte 4")
    #expect(
      decodeError([0x4D, 0x47, 0x01, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF])?.reason == .payloadTooLarge(declared: 0xFFFF_FFFF))
    // Exactly 16 MiB declared but absent is only truncated.
    let exact = decodeError([0x4D, 0x47, 0x01, 0x10] + be32(MeshFrameCodec.maxPayloadBytes))
    #expect(exact?.reason == .truncatedPayload(declared: MeshFrameCodec.maxPayloadBytes, got: 0))
  }

  @Test(arguments: samples)
  func rejectsEveryPrefixOfAValidFrame(_ message: MeshMessage) {
    let bytes = MeshFrameCodec.encode(message)
    let declared = bytes.count - 8
    for length in 0..<bytes.count {
      let expected =
        length < 8
        ? MeshFrameError(.truncatedHeader(got: length), offset: length)
        : MeshFrameError(.truncatedPayload(declared: declared, got: length - 8), offset: length)
      #expect(decodeError(bytes.prefix(length)) == expected, "prefix of \(length) bytes")
    }
  }

  @Test(arguments: samples)
  func rejectsEveryPrefixOfAValidPayload(_ message: MeshMessage) {
    // The header's length is fixed up to match, so the payload parser itself meets the end of the bytes.
    let bytes = MeshFrameCodec.encode(message)
    let payload = Array(bytes[8...])
    for length in 0..<payload.count {
      let reason = decodeError(frame(bytes[3], Array(payload.prefix(length))))?.reason
      switch reason {
      case .truncatedField?, .countExceedsPayload?: break
      default: Issue.record("prefix of \(length) payload bytes: \(String(describing: reason))")
      }
    }
  }

  @Test func describesTruncatedPayloads() {
    let bytes = [0x4D, 0x47, 0x01, 0x7F] + be32(40) + [UInt8](repeating: 0, count: 12)
    #expect(decodeError(bytes)?.description == "truncated frame: header says 40 payload bytes, got 12 at byte 20")
  }

  @Test(arguments: samples)
  func rejectsTrailingBytes(_ message: MeshMessage) {
    let bytes = MeshFrameCodec.encode(message)
    let declared = bytes.count - 8
    for extra in [[0x00], [0x4D, 0x47], [UInt8](repeating: 0xFF, count: 100)] as [[UInt8]] {
      #expect(
        decodeError(bytes + extra)
          == MeshFrameError(.trailingBytes(declared: declared, got: declared + extra.count), offset: bytes.count)
      )
    }
  }

  @Test func rejectsALengthFieldThatDisagreesWithTheBytes() {
    let bytes = MeshFrameCodec.encode(.goodbye(reason: "shutdown"))  // 10 payload bytes
    var shorter = bytes
    shorter[7] = 9
    let trailing = decodeError(shorter)
    #expect(trailing == MeshFrameError(.trailingBytes(declared: 9, got: 10), offset: 17))
    #expect(trailing?.description == "trailing bytes: header says 9 payload bytes, got 10 (1 extra) at byte 17")
    var longer = bytes
    longer[7] = 11
    #expect(decodeError(longer) == MeshFrameError(.truncatedPayload(declared: 11, got: 10), offset: 18))
    var huge = bytes
    huge[4] = 0x00
    huge[5] = 0x10
    #expect(decodeError(huge)?.reason == .truncatedPayload(declared: 0x10_000A, got: 10))
  }
}

// MARK: - Payload errors

@Suite struct MeshFrameCodecPayloadErrorTests {
  @Test func rejectsPayloadsThatEndInsideAField() {
    // A goodbye whose string says 5 bytes but the payload holds 3.
    let error = decodeError(frame(0x7F, be16(5) + Array("abc".utf8)))
    #expect(error == MeshFrameError(.truncatedField(field: "reason", needed: 5, available: 3), offset: 10))
    #expect(error?.description == "payload ends inside field reason: needs 5 bytes, 3 left at byte 10")
    #expect(
      decodeError(frame(0x02, [UInt8](repeating: 0, count: 12)))?.reason
        == .truncatedField(field: "sentAtMillis", needed: 8, available: 4))
    #expect(
      decodeError(frame(0x01, wire("n") + wire("a") + wire("v") + [0x1F]))?.reason
        == .truncatedField(field: "port", needed: 2, available: 1))
    #expect(decodeError(frame(0x12, [0x00]))?.reason == .truncatedField(field: "peerID", needed: 2, available: 1))
  }

  @Test func rejectsUnusedPayloadBytes() {
    let heartbeat = decodeError(frame(0x02, [UInt8](repeating: 0, count: 17)))
    #expect(heartbeat == MeshFrameError(.unusedPayloadBytes(count: 1), offset: 24))
    #expect(heartbeat?.description == "1 unused payload bytes after the last field at byte 24")
    let hello = frame(0x01, wire("n") + wire("a") + wire("v") + be16(80) + [0, 0, 0])
    #expect(decodeError(hello) == MeshFrameError(.unusedPayloadBytes(count: 3), offset: hello.count - 3))
    #expect(decodeError(frame(0x10, be32(0) + [0]))?.reason == .unusedPayloadBytes(count: 1))
  }

  @Test(
    arguments: [
      [0xFF],  // never valid in UTF-8
      [0x80],  // lone continuation byte
      [0xC0, 0xAF],  // overlong "/"
      [0xE0, 0x80, 0xAF],  // overlong "/" in three bytes
      [0xED, 0xA0, 0x80],  // UTF-16 surrogate U+D800
      [0xF4, 0x90, 0x80, 0x80],  // above U+10FFFF
      [0xE2, 0x82],  // truncated "€"
      [0xF0, 0x9F, 0x98],  // truncated "😀"
    ] as [[UInt8]])
  func rejectsInvalidUTF8AtTheFirstBadByte(_ bad: [UInt8]) {
    // "ok" + the bad sequence + "!": the error points at the first byte of the bad sequence.
    let text = Array("ok".utf8) + bad + Array("!".utf8)
    let cases: [(field: String, frame: [UInt8], offset: Int)] = [
      ("nodeID", frame(0x01, wire(text) + wire("n") + wire("v") + be16(1)), 12),
      ("name", frame(0x01, wire("id") + wire(text) + wire("v") + be16(1)), 16),
      ("softwareVersion", frame(0x01, wire("id") + wire("n") + wire(text) + be16(1)), 19),
      ("peerID", frame(0x12, wire(text)), 12),
      ("reason", frame(0x7F, wire(text)), 12),
      ("displayName", frame(0x11, wire("p") + wire(text) + be16(0)), 15),
      ("serviceType", frame(0x11, wire("p") + wire("d") + be16(1) + wire(text) + be16(0)), 20),
      (
        "discoveryInfo key", frame(0x11, wirePeer("p", "d", services: [wire("s") + be16(1) + wire(text) + wire("v")])),
        25
      ),
      (
        "discoveryInfo value",
        frame(0x11, wirePeer("p", "d", services: [wire("s") + be16(1) + wire("k") + wire(text)])), 28
      ),
    ]
    for (field, bytes, offset) in cases {
      let error = decodeError(bytes)
      #expect(error == MeshFrameError(.invalidUTF8(field: field), offset: offset), "\(field)")
      #expect(error?.description == "string field \(field) is not valid UTF-8 at byte \(offset)")
    }
    // Inside a snapshot: 4 bytes of count, then the peer.
    let snapshot = frame(0x10, be32(1) + wire(text) + wire("d") + be16(0))
    #expect(decodeError(snapshot) == MeshFrameError(.invalidUTF8(field: "peerID"), offset: 16))
  }

  @Test func rejectsStringsOver4096Bytes() {
    let long = [UInt8](repeating: 0x61, count: 4097)
    let error = decodeError(frame(0x7F, wire(long)))
    #expect(error == MeshFrameError(.stringTooLong(field: "reason", bytes: 4097), offset: 8))
    #expect(error?.description == "string field reason is 4097 bytes (limit 4096) at byte 8")
    // Caught from the length alone, before the bytes are needed.
    #expect(decodeError(frame(0x12, be16(0xFFFF)))?.reason == .stringTooLong(field: "peerID", bytes: 65535))
    let atLimit = frame(0x7F, wire([UInt8](repeating: 0x61, count: 4096)))
    #expect(throws: Never.self) { try MeshFrameCodec.decode(atLimit) }
  }

  @Test func rejectsOversizeCounts() {
    let peers = decodeError(frame(0x10, be32(70000)))
    #expect(peers == MeshFrameError(.tooMany(what: "peers in snapshot", count: 70000, limit: 65536), offset: 8))
    #expect(peers?.description == "too many peers in snapshot (70000 > 65536) at byte 8")
    #expect(
      decodeError(frame(0x10, be32(65537)))?.reason
        == .tooMany(what: "peers in snapshot", count: 65537, limit: 65536))
    #expect(
      decodeError(frame(0x10, [0xFF, 0xFF, 0xFF, 0xFF]))?.reason
        == .tooMany(what: "peers in snapshot", count: 0xFFFF_FFFF, limit: 65536))

    let services = decodeError(frame(0x11, wire("p") + wire("d") + be16(65)))
    #expect(services == MeshFrameError(.tooMany(what: "services for one peer", count: 65, limit: 64), offset: 14))
    #expect(services?.description == "too many services for one peer (65 > 64) at byte 14")

    let pairs = decodeError(frame(0x11, wirePeer("p", "d", services: [wire("s") + be16(65)])))
    #expect(pairs == MeshFrameError(.tooMany(what: "pairs in map discoveryInfo", count: 65, limit: 64), offset: 19))
    #expect(pairs?.description == "too many pairs in map discoveryInfo (65 > 64) at byte 19")
  }

  @Test func rejectsCountsThePayloadCannotHoldBeforeReserving() {
    // 65536 peers need at least 6 bytes each; 10 are there.
    let peers = decodeError(frame(0x10, be32(65536) + [UInt8](repeating: 0, count: 10)))
    #expect(
      peers
        == MeshFrameError(
          .countExceedsPayload(what: "peers in snapshot", count: 65536, minimumBytes: 393_216, available: 10),
          offset: 12
        )
    )
    #expect(
      peers?.description
        == "payload too short for 65536 peers in snapshot: needs at least 393216 bytes, 10 left at byte 12")
    #expect(
      decodeError(frame(0x11, wire("p") + wire("d") + be16(64) + [0, 0, 0]))?.reason
        == .countExceedsPayload(what: "services for one peer", count: 64, minimumBytes: 256, available: 3))
    #expect(
      decodeError(frame(0x11, wirePeer("p", "d", services: [wire("s") + be16(2) + wire("k")])))?.reason
        == .countExceedsPayload(what: "pairs in map discoveryInfo", count: 2, minimumBytes: 8, available: 3))
  }

  @Test func rejectsDuplicateMapKeys() {
    let pairs = decodeError(frame(0x11, wirePeer("p", "d", services: [wireService("s", [("k", "1"), ("k", "2")])])))
    #expect(pairs == MeshFrameError(.duplicateKey(field: "discoveryInfo", key: "k"), offset: 27))
    #expect(pairs?.description == "duplicate key \"k\" in map discoveryInfo at byte 27")
    let services = decodeError(frame(0x11, wirePeer("p", "d", services: [wireService("s"), wireService("s")])))
    #expect(services == MeshFrameError(.duplicateKey(field: "advertising", key: "s"), offset: 21))
  }

  @Test func rejectsCanonicallyEquivalentKeysAsDuplicates() {
    // "e" + U+0301 (0x65 0xCC 0x81) sorts before "é" (0xC3 0xA9) byte-wise, but they are the same Swift String.
    let decomposed = "e\u{301}"
    let precomposed = "\u{E9}"
    let pairs = frame(0x11, wirePeer("p", "d", services: [wireService("s", [(decomposed, "1"), (precomposed, "2")])]))
    #expect(decodeError(pairs) == MeshFrameError(.duplicateKey(field: "discoveryInfo", key: precomposed), offset: 29))
    let services = frame(0x11, wirePeer("p", "d", services: [wireService(decomposed), wireService(precomposed)]))
    #expect(decodeError(services) == MeshFrameError(.duplicateKey(field: "advertising", key: precomposed), offset: 23))
  }

  @Test func rejectsKeysOutOfByteOrder() {
    let pairs = decodeError(frame(0x11, wirePeer("p", "d", services: [wireService("s", [("b", "1"), ("a", "2")])])))
    // 8 header + "p" 3 + "d" 3 + count 2 + "s" 3 + count 2 + ("b", "1") 6 = 27.
    #expect(pairs == MeshFrameError(.keyOutOfOrder(field: "discoveryInfo", key: "a"), offset: 27))
    #expect(
      pairs?.description
        == "key \"a\" in map discoveryInfo is out of order (keys must be in ascending byte order) at byte 27")
    // "a" (0x61) before "B" (0x42) is out of order even though it is alphabetical.
    let services = decodeError(frame(0x11, wirePeer("p", "d", services: [wireService("a"), wireService("B")])))
    #expect(services == MeshFrameError(.keyOutOfOrder(field: "advertising", key: "B"), offset: 21))
    // A prefix sorts first: "ab" after "a" is fine, "a" after "ab" is not.
    #expect(
      decodeError(frame(0x11, wirePeer("p", "d", services: [wireService("ab"), wireService("a")])))?.reason
        == .keyOutOfOrder(field: "advertising", key: "a"))
    let ordered = frame(0x11, wirePeer("p", "d", services: [wireService("a"), wireService("ab")]))
    #expect(throws: Never.self) { try MeshFrameCodec.decode(ordered) }
  }

  @Test func rejectsDuplicatePeersInASnapshot() {
    let bytes = frame(0x10, be32(3) + wirePeer("a") + wirePeer("b") + wirePeer("a"))
    let error = decodeError(bytes)
    // Each peer is 8 bytes ("a", "n", no services): the third starts at 8 + 4 + 16 = 28.
    #expect(error == MeshFrameError(.duplicatePeer(peerID: "a"), offset: 28))
    #expect(error?.description == "duplicate peerID \"a\" in snapshot at byte 28")
  }

  @Test func quotesAndShortensKeysInDescriptions() {
    let hostile = String(repeating: "\n", count: 100)
    let error = MeshFrameError(.duplicateKey(field: "discoveryInfo", key: hostile), offset: 9)
    #expect(
      error.description == "duplicate key \"\(String(repeating: "\\n", count: 64))\"… in map discoveryInfo at byte 9")
    #expect(!error.description.contains("\n"))
  }
}

// MARK: - Session, invitation and data frame errors

@Suite struct MeshFrameCodecSessionErrorTests {
  @Test func rejectsUnknownEnumCodes() {
    // Frame offsets: 8 header bytes, then the fields before the code.
    let cases: [(field: String, frame: (UInt8) -> [UInt8], offset: Int, firstUnknown: UInt8)] = [
      ("outcome", { frame(0x21, wire("i") + [$0]) }, 11, 4),
      ("outcome", { frame(0x22, wire("i") + [$0]) }, 11, 4),
      ("strategy", { frame(0x2A, wireSession(strategy: $0)) }, 17, 3),
      ("encryption", { frame(0x2A, wireSession(encryption: $0)) }, 18, 3),
      ("state", { frame(0x2A, wireSession(members: [wireMember("p", state: $0)])) }, 40, 3),
      ("state", { frame(0x28, wire("s") + wireMember("p", state: $0)) }, 20, 3),
      ("strategy", { frame(0x20, wireInvite(session: wireSession(strategy: $0))) }, 20, 3),
      ("encryption", { frame(0x20, wireInvite(session: wireSession(encryption: $0))) }, 21, 3),
    ]
    for (field, makeFrame, offset, firstUnknown) in cases {
      #expect(throws: Never.self, "\(field)") { try MeshFrameCodec.decode(makeFrame(firstUnknown - 1)) }
      for code in [firstUnknown, 0x7F, 0xFF] {
        let error = decodeError(makeFrame(code))
        #expect(error == MeshFrameError(.unknownEnumCode(field: field, code: code), offset: offset), "\(field)")
      }
    }
    #expect(
      decodeError(frame(0x21, wire("i") + [0x04]))?.description == "unknown code 0x04 for field outcome at byte 11")
    #expect(
      decodeError(frame(0x2A, wireSession(strategy: 0xFF)))?.description
        == "unknown code 0xff for field strategy at byte 17")
  }

  @Test func rejectsOversizeBlobsFromTheLengthAlone() {
    let invite = decodeError(frame(0x20, wireInvite(context: be32(4097) + [UInt8](repeating: 0, count: 4097))))
    // "i" (3) + session (23) + "from" (6) + "From" (6) + "to" (4) = 42 payload bytes before the context.
    #expect(invite == MeshFrameError(.blobTooLarge(field: "context", bytes: 4097, limit: 4096), offset: 50))
    #expect(invite?.description == "byte field context is 4097 bytes (limit 4096) at byte 50")

    let dataPrefix = wire("s") + wire("p") + wireTargets(["q"]) + be64(1)
    let payloadLimit = MeshFrameCodec.maxDataPayloadBytes
    let data = decodeError(frame(0x30, dataPrefix + be32(payloadLimit + 1)))
    #expect(
      data == MeshFrameError(.blobTooLarge(field: "payload", bytes: payloadLimit + 1, limit: payloadLimit), offset: 27))
    #expect(data?.description == "byte field payload is 1114113 bytes (limit 1114112) at byte 27")
    #expect(
      decodeError(frame(0x30, dataPrefix + [0xFF, 0xFF, 0xFF, 0xFF]))?.reason
        == .blobTooLarge(field: "payload", bytes: 0xFFFF_FFFF, limit: payloadLimit))

    let eventPrefix = wire("s") + wire("p") + wireTargets([]) + [UInt8](repeating: 0, count: 8) + wire("n")
    let objectLimit = MeshFrameCodec.maxEventObjectBytes
    let event = decodeError(frame(0x31, eventPrefix + be32(objectLimit + 1)))
    #expect(
      event == MeshFrameError(.blobTooLarge(field: "object", bytes: objectLimit + 1, limit: objectLimit), offset: 27))

    // Within the limit but longer than what is left: truncated, not too large.
    #expect(
      decodeError(frame(0x30, dataPrefix + be32(payloadLimit) + [1, 2]))?.reason
        == .truncatedField(field: "payload", needed: payloadLimit, available: 2))
    // The context's 1 byte plus timeoutMillis (4) and verificationCode (6) are all that is left.
    #expect(
      decodeError(frame(0x20, wireInvite(context: be32(4096) + [1])))?.reason
        == .truncatedField(field: "context", needed: 4096, available: 11))
  }

  @Test func acceptsBlobsAtTheirLimits() throws {
    let context = [UInt8](repeating: 1, count: MeshFrameCodec.maxContextBytes)
    #expect(throws: Never.self) { try MeshFrameCodec.decode(frame(0x20, wireInvite(context: blob(context)))) }
    let payload = [UInt8](repeating: 2, count: MeshFrameCodec.maxDataPayloadBytes)
    let data = frame(0x30, wire("s") + wire("p") + wireTargets([]) + be64(0) + blob(payload))
    #expect(
      try MeshFrameCodec.decode(data)
        == .sessionData(sessionID: "s", fromPeerID: "p", toPeerIDs: [], sequence: 0, payload: payload))
  }

  @Test func rejectsTooManyMembersOrTargets() {
    // wireSession() ends with a zero member count (payload bytes 21–22); replace it.
    let session = Array(wireSession().dropLast(2)) + be16(4097)
    let tooMany = decodeError(frame(0x2A, session))
    #expect(tooMany == MeshFrameError(.tooMany(what: "members in session", count: 4097, limit: 4096), offset: 29))
    #expect(tooMany?.description == "too many members in session (4097 > 4096) at byte 29")
    #expect(
      decodeError(frame(0x2A, Array(wireSession().dropLast(2)) + [0xFF, 0xFF]))?.reason
        == .tooMany(what: "members in session", count: 65535, limit: 4096))

    let targets = decodeError(frame(0x30, wire("s") + wire("p") + be16(4097)))
    #expect(targets == MeshFrameError(.tooMany(what: "peers in toPeerIDs", count: 4097, limit: 4096), offset: 14))
    #expect(targets?.description == "too many peers in toPeerIDs (4097 > 4096) at byte 14")
    #expect(
      decodeError(frame(0x31, wire("s") + wire("p") + [0xFF, 0xFF]))?.reason
        == .tooMany(what: "peers in toPeerIDs", count: 65535, limit: 4096))
  }

  @Test func rejectsCountsThePayloadCannotHoldBeforeReserving() {
    // 4096 members need at least 7 bytes each; 5 are there.
    let session = Array(wireSession().dropLast(2)) + be16(4096) + [0, 0, 0, 0, 0]
    let members = decodeError(frame(0x2A, session))
    #expect(
      members
        == MeshFrameError(
          .countExceedsPayload(what: "members in session", count: 4096, minimumBytes: 28672, available: 5),
          offset: 31))
    #expect(
      members?.description
        == "payload too short for 4096 members in session: needs at least 28672 bytes, 5 left at byte 31")
    // 3 members need 21 bytes: 2 complete ones (20 bytes) are not enough.
    let two = Array(wireSession().dropLast(2)) + be16(3) + wireMember("a", "", node: "") + wireMember("b", "", node: "")
    #expect(
      decodeError(frame(0x2A, two))?.reason
        == .countExceedsPayload(what: "members in session", count: 3, minimumBytes: 21, available: 16))
    // 4096 targets need at least 2 bytes each.
    #expect(
      decodeError(frame(0x30, wire("s") + wire("p") + be16(4096) + [0, 0]))?.reason
        == .countExceedsPayload(what: "peers in toPeerIDs", count: 4096, minimumBytes: 8192, available: 2))
  }

  @Test func rejectsGroupOffersThatNameARecipientOrATransferTwice() {
    let head = wire("c") + wire("g") + wire("s") + wire("p") + wire("n") + wire("f") + wire("t") + be64(1) + [0]
    // The recipients start at 8 + 7 × 3 + 9 = 38; each entry is 3 + 3 bytes, after a 2-byte count.
    let peers = decodeError(frame(0x4E, head + be16(2) + wire("1") + wire("x") + wire("2") + wire("x")))
    #expect(peers == MeshFrameError(.duplicateListEntry(field: "recipients", peerID: "x"), offset: 46))
    let ids = decodeError(frame(0x4E, head + be16(2) + wire("1") + wire("x") + wire("1") + wire("y")))
    #expect(ids?.reason == .duplicateListEntry(field: "recipients.transferID", peerID: "1"))
    #expect(
      decodeError(frame(0x4E, head + be16(4097)))?.reason == .tooMany(what: "recipients", count: 4097, limit: 4096))
  }

  @Test func rejectsDuplicateMembersAndTargets() {
    let members = decodeError(frame(0x2A, wireSession(members: [wireMember("a"), wireMember("b"), wireMember("a")])))
    // Members start at 8 + 23 = 31; each is 3 + 3 + 3 + 1 = 10 bytes.
    #expect(members == MeshFrameError(.duplicateListEntry(field: "members", peerID: "a"), offset: 51))
    #expect(members?.description == "duplicate peerID \"a\" in list members at byte 51")
    let targets = decodeError(frame(0x30, wire("s") + wire("p") + wireTargets(["x", "y", "x"]) + be64(1) + blob([])))
    #expect(targets == MeshFrameError(.duplicateListEntry(field: "toPeerIDs", peerID: "x"), offset: 22))
    #expect(targets?.description == "duplicate peerID \"x\" in list toPeerIDs at byte 22")
    let events = decodeError(frame(0x31, wire("s") + wire("p") + wireTargets(["x", "x"]) + wire("n") + blob([])))
    #expect(events?.reason == .duplicateListEntry(field: "toPeerIDs", peerID: "x"))
    // Canonically equivalent ids are the same Swift string, so they are duplicates too.
    let equivalent = frame(0x30, wire("s") + wire("p") + wireTargets(["e\u{301}", "\u{E9}"]) + be64(1) + blob([]))
    #expect(decodeError(equivalent)?.reason == .duplicateListEntry(field: "toPeerIDs", peerID: "\u{E9}"))
    let inInvite = wireInvite(session: wireSession(members: [wireMember("\u{E9}"), wireMember("e\u{301}")]))
    #expect(decodeError(frame(0x20, inInvite))?.reason == .duplicateListEntry(field: "members", peerID: "e\u{301}"))
  }

  @Test(arguments: [[0xFF], [0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xE2, 0x82]] as [[UInt8]])
  func rejectsInvalidUTF8InEveryNewStringField(_ bad: [UInt8]) {
    let text = Array("ok".utf8) + bad + Array("!".utf8)
    let member = wireMember("p")
    // (field, type, bytes before the string, bytes after it)
    let cases: [(field: String, type: UInt8, before: [UInt8], after: [UInt8])] = [
      ("invitationID", 0x20, [], Array(wireInvite().dropFirst(3))),
      ("sessionID", 0x2A, [], Array(wireSession().dropFirst(3))),
      ("hostNodeID", 0x2A, wire("s"), Array(wireSession().dropFirst(6))),
      ("creatorPeerID", 0x2A, wire("s") + wire("h"), Array(wireSession().dropFirst(9))),
      ("peerID", 0x2A, Array(wireSession().dropLast(2)) + be16(1), Array(member.dropFirst(3))),
      ("displayName", 0x28, wire("s") + wire("p"), wire("n") + [1]),
      ("nodeID", 0x28, wire("s") + wire("p") + wire("d"), [1]),
      ("fromPeerID", 0x20, wire("i") + wireSession(), wire("From") + wire("to") + blob([]) + be32(1) + wire("v")),
      ("fromDisplayName", 0x20, wire("i") + wireSession() + wire("f"), wire("to") + blob([]) + be32(1) + wire("v")),
      ("toPeerID", 0x20, wire("i") + wireSession() + wire("f") + wire("F"), blob([]) + be32(1) + wire("v")),
      (
        "verificationCode", 0x20, wire("i") + wireSession() + wire("f") + wire("F") + wire("t") + blob([]) + be32(1), []
      ),
      ("invitationID", 0x21, [], [0]),
      ("invitationID", 0x22, [], [0]),
      ("sessionID", 0x28, [], member),
      ("sessionID", 0x29, [], wire("p")),
      ("peerID", 0x29, wire("s"), []),
      ("sessionID", 0x30, [], wire("p") + wireTargets([]) + be64(0) + blob([])),
      ("fromPeerID", 0x30, wire("s"), wireTargets([]) + be64(0) + blob([])),
      ("toPeerID", 0x30, wire("s") + wire("p") + be16(2) + wire("q"), be64(0) + blob([])),
      ("fromPeerID", 0x31, wire("s"), wireTargets([]) + [UInt8](repeating: 0, count: 8) + wire("n") + blob([])),
      ("toPeerID", 0x31, wire("s") + wire("p") + be16(1), [UInt8](repeating: 0, count: 8) + wire("n") + blob([])),
      ("name", 0x31, wire("s") + wire("p") + wireTargets(["q"]) + [UInt8](repeating: 0, count: 8), blob([])),
    ]
    for (field, type, before, after) in cases {
      // The valid version of the same frame decodes, so the bad bytes are the only problem.
      #expect(throws: Never.self, "\(field) in \(type)") {
        try MeshFrameCodec.decode(frame(type, before + wire("ok!") + after))
      }
      let offset = 8 + before.count + 2 + 2
      let error = decodeError(frame(type, before + wire(text) + after))
      #expect(error == MeshFrameError(.invalidUTF8(field: field), offset: offset), "\(field) in \(type)")
    }
  }

  @Test func rejectsOverlongStringsInNewFields() {
    let long = be16(4097) + [UInt8](repeating: 0x61, count: 4097)
    #expect(decodeError(frame(0x21, long + [0]))?.reason == .stringTooLong(field: "invitationID", bytes: 4097))
    #expect(decodeError(frame(0x29, wire("s") + long))?.reason == .stringTooLong(field: "peerID", bytes: 4097))
    #expect(
      decodeError(frame(0x31, wire("s") + wire("p") + wireTargets([]) + be64(0) + long + blob([])))?.reason
        == .stringTooLong(field: "name", bytes: 4097))
    #expect(
      decodeError(frame(0x30, wire("s") + wire("p") + be16(1) + [0xFF, 0xFF]))?.reason
        == .stringTooLong(field: "toPeerID", bytes: 65535))
  }

  @Test func rejectsUnusedPayloadBytesAfterNewFrames() {
    let cases: [[UInt8]] = [
      frame(0x20, wireInvite() + [0]),
      frame(0x21, wire("i") + [0, 0]),
      frame(0x22, wire("i") + [3, 3]),
      frame(0x28, wire("s") + wireMember("p") + [0]),
      frame(0x29, wire("s") + wire("p") + [0]),
      frame(0x2A, wireSession() + [0]),
      frame(0x30, wire("s") + wire("p") + wireTargets([]) + be64(0) + blob([]) + [0]),
      frame(0x31, wire("s") + wire("p") + wireTargets([]) + be64(0) + wire("n") + blob([]) + [0]),
      frame(0x32, be64(1) + [0]),
    ]
    for bytes in cases {
      #expect(decodeError(bytes) == MeshFrameError(.unusedPayloadBytes(count: 1), offset: bytes.count - 1))
    }
  }

  @Test func rejectsShortFixedFields() {
    #expect(decodeError(frame(0x32, [0, 0, 0]))?.reason == .truncatedField(field: "sequence", needed: 8, available: 3))
    #expect(decodeError(frame(0x21, wire("i")))?.reason == .truncatedField(field: "outcome", needed: 1, available: 0))
    #expect(
      decodeError(frame(0x20, Array(wireInvite().dropLast(6 + 2))))?.reason
        == .truncatedField(field: "timeoutMillis", needed: 4, available: 2))
    #expect(
      decodeError(frame(0x2A, Array(wireSession().dropLast(2 + 8)) + [0, 0]))?.reason
        == .truncatedField(field: "revision", needed: 8, available: 2))
  }
}

// MARK: - Fuzz

@Suite struct MeshFrameCodecFuzzTests {
  /// `decode` must throw or return a message that encodes back to exactly `bytes`; returns the error, if any.
  private static func check(_ bytes: [UInt8]) -> MeshFrameError? {
    do throws(MeshFrameError) {
      let message = try MeshFrameCodec.decode(bytes)
      #expect(MeshFrameCodec.encode(message) == bytes, "decoded \(message) from \(bytes)")
      return nil
    } catch {
      #expect((0...bytes.count).contains(error.offset), "\(error) for \(bytes.count) bytes")
      #expect(!error.description.isEmpty)
      return error
    }
  }

  @Test func randomBytesNeverCrash() {
    var random = XorShift64(seed: 0x6D65_7368_6761_7465)  // "meshgate"
    var decoded = 0
    for round in 0..<20_000 {
      let length = random.below(8) == 0 ? random.below(600) : random.below(48)
      var bytes = (0..<length).map { _ in random.byte() }
      // Half the arrays get a well-formed header, so the payload parsers see random bytes too.
      if round % 2 == 0 && length >= 8 {
        bytes.replaceSubrange(
          0..<8, with: [0x4D, 0x47, 0x01, knownTypes[random.below(knownTypes.count)]] + be32(length - 8))
      }
      if Self.check(bytes) == nil { decoded += 1 }
    }
    #expect(decoded > 0, "no random frame decoded: the payload parsers were not exercised")
  }

  @Test func mutatedFramesNeverCrash() {
    var random = XorShift64(seed: 0x0BAD_F00D_DEAD_BEEF)
    let corpus = samples.map(MeshFrameCodec.encode)
    var decoded = 0
    var reasons: Set<String> = []
    for _ in 0..<20_000 {
      var bytes = corpus[random.below(corpus.count)]
      for _ in 0...random.below(4) {
        let position = bytes.isEmpty ? 0 : random.below(bytes.count)
        switch random.below(7) {
        case 0 where !bytes.isEmpty: bytes[position] ^= UInt8(1) << UInt8(random.below(8))
        case 1 where !bytes.isEmpty: bytes[position] = random.byte()
        case 2: bytes.insert(random.byte(), at: position)
        case 3 where !bytes.isEmpty: bytes.remove(at: position)
        case 4: bytes.removeLast(random.below(min(bytes.count, 8) + 1))
        case 5 where bytes.count > 12:  // Rewrite a length or count field somewhere in the payload.
          let at = 8 + random.below(bytes.count - 10)
          bytes.replaceSubrange(at..<(at + 2), with: be16(random.below(80)))
        default: bytes.append(contentsOf: bytes.suffix(random.below(6)))
        }
      }
      // Usually repair the header's length, so mutations reach the payload parsers.
      if bytes.count >= 8 && random.below(4) != 0 { bytes.replaceSubrange(4..<8, with: be32(bytes.count - 8)) }
      if let error = Self.check(bytes) {
        reasons.insert(String(describing: error.reason).prefix { $0 != "(" }.description)
      } else {
        decoded += 1
      }
    }
    #expect(decoded > 100)
    #expect(reasons.count >= 12, "reasons seen: \(reasons.sorted())")
  }

  @Test func mutatedSessionFramesReachTheNewChecks() {
    // Single-byte changes to session, invitation and data frames (header length kept right) must hit the new
    // error paths: enum codes, blob lengths, list counts and duplicates.
    var random = XorShift64(seed: 0x5E55_1011_DA7A_0ACC)
    let corpus = sessionSamples.map(MeshFrameCodec.encode)
    var reasons: Set<String> = []
    for _ in 0..<30_000 {
      var bytes = corpus[random.below(corpus.count)]
      let position = 8 + random.below(bytes.count - 8)
      bytes[position] = random.below(2) == 0 ? random.byte() : bytes[position] &+ 1
      if let error = Self.check(bytes) {
        reasons.insert(String(describing: error.reason).prefix { $0 != "(" }.description)
      }
    }
    let wanted = [
      "unknownEnumCode", "blobTooLarge", "duplicateListEntry", "tooMany", "truncatedField", "invalidUTF8",
    ]
    for reason in wanted {
      #expect(reasons.contains(reason), "reasons seen: \(reasons.sorted())")
    }
  }
}

// MARK: - Encoder preconditions

@Suite struct MeshFrameCodecEncoderLimitTests {
  @Test func stopsOnAStringOver4096Bytes() async {
    await #expect(processExitsWith: .failure) {
      _ = MeshFrameCodec.encode(.goodbye(reason: String(repeating: "x", count: 4097)))
    }
  }

  @Test func stopsOnTooManyPairsOrServices() async {
    await #expect(processExitsWith: .failure) {
      let info = Dictionary(uniqueKeysWithValues: (0..<65).map { ("k\($0)", "") })
      _ = MeshFrameCodec.encode(.peerUpdated(PeerAnnouncement(peerID: "p", displayName: "", advertising: ["s": info])))
    }
    await #expect(processExitsWith: .failure) {
      let services = Dictionary(uniqueKeysWithValues: (0..<65).map { ("s\($0)", [String: String]()) })
      _ = MeshFrameCodec.encode(.peerUpdated(PeerAnnouncement(peerID: "p", displayName: "", advertising: services)))
    }
  }

  @Test func stopsOnOversizeBlobs() async {
    await #expect(processExitsWith: .failure) {
      let offer = InvitationOffer(
        invitationID: "i", session: emptySession, fromPeerID: "", fromDisplayName: "", toPeerID: "",
        context: [UInt8](repeating: 0, count: 4097), timeoutMillis: 0, verificationCode: "")
      _ = MeshFrameCodec.encode(.invite(offer))
    }
    await #expect(processExitsWith: .failure) {
      let payload = [UInt8](repeating: 0, count: MeshFrameCodec.maxDataPayloadBytes + 1)
      _ = MeshFrameCodec.encode(
        .sessionData(sessionID: "", fromPeerID: "", toPeerIDs: [], sequence: 0, payload: payload))
    }
    await #expect(processExitsWith: .failure) {
      let object = [UInt8](repeating: 0, count: MeshFrameCodec.maxEventObjectBytes + 1)
      _ = MeshFrameCodec.encode(
        .sessionEvent(sessionID: "", fromPeerID: "", toPeerIDs: [], sequence: 0, name: "", object: object))
    }
  }

  @Test func stopsOnTooManyOrDuplicateMembersAndTargets() async {
    await #expect(processExitsWith: .failure) {
      var big = emptySession
      big.members = (0...4096).map { SessionMember(peerID: "\($0)", displayName: "", nodeID: "", state: .connected) }
      _ = MeshFrameCodec.encode(.sessionState(big))
    }
    await #expect(processExitsWith: .failure) {
      var twice = emptySession
      twice.members = [SessionMember(peerID: "a", displayName: "", nodeID: "", state: .connected)]
      twice.members.append(twice.members[0])
      _ = MeshFrameCodec.encode(.sessionState(twice))
    }
    await #expect(processExitsWith: .failure) {
      let targets = (0...4096).map { "\($0)" }
      _ = MeshFrameCodec.encode(
        .sessionData(sessionID: "", fromPeerID: "", toPeerIDs: targets, sequence: 0, payload: []))
    }
    await #expect(processExitsWith: .failure) {
      _ = MeshFrameCodec.encode(
        .sessionEvent(sessionID: "", fromPeerID: "", toPeerIDs: ["x", "x"], sequence: 0, name: "", object: []))
    }
  }

  @Test func stopsOnTooManyPeersOrAPayloadOver16MiB() async {
    await #expect(processExitsWith: .failure) {
      let peers = (0...65536).map { PeerAnnouncement(peerID: "\($0)", displayName: "") }
      _ = MeshFrameCodec.encode(.peerSnapshot(peers))
    }
    await #expect(processExitsWith: .failure) {
      let name = String(repeating: "n", count: 4096)
      let peers = (0..<4100).map { PeerAnnouncement(peerID: "\($0)", displayName: name) }
      _ = MeshFrameCodec.encode(.peerSnapshot(peers))
    }
  }
}

@Suite struct MeshFrameCodecTransferTests {
  @Test func transferChunkBytesAreAsDocumented() throws {
    let bytes = MeshFrameCodec.encode(.transferChunk(transferID: "t", offset: 258, bytes: [9, 8]))
    #expect(bytes == frame(0x43, wire("t") + be64(258) + blob([9, 8])))
  }

  @Test func transferOfferBytesAreAsDocumented() throws {
    let offer = TransferOffer(
      transferID: "t", sessionID: "s", fromPeerID: "a", fromDisplayName: "A", toPeerID: "b", name: "f.txt",
      contentType: "text/plain", size: 5, resume: true)
    let strings = wire("t") + wire("s") + wire("a") + wire("A") + wire("b") + wire("f.txt") + wire("text/plain")
    let expected = frame(0x40, strings + be64(5) + [1])
    #expect(MeshFrameCodec.encode(.transferOffer(offer)) == expected)
  }

  @Test func aChunkPrefixFollowedByItsContentIsTheEncodedChunk() {
    for (id, offset, content) in [
      ("t", UInt64(258), [UInt8]([9, 8])), ("", 0, []),
      ("a7f3c2e0-1b2c-4d5e-8f90-123456789abc", .max, [UInt8](repeating: 0xCD, count: MeshFrameCodec.maxChunkBytes)),
    ] {
      let prefix = MeshFrameCodec.transferChunkPrefix(transferID: id, offset: offset, count: content.count)
      #expect(
        prefix + content == MeshFrameCodec.encode(.transferChunk(transferID: id, offset: offset, bytes: content)))
    }
  }

  @Test func roundTripsAMaximumChunk() throws {
    let message = MeshMessage.transferChunk(
      transferID: "t", offset: 1, bytes: [UInt8](repeating: 0xAB, count: MeshFrameCodec.maxChunkBytes))
    #expect(try MeshFrameCodec.decode(MeshFrameCodec.encode(message)) == message)
  }

  @Test func rejectsAResumeFlagOtherThanZeroOrOne() {
    let payload = wire("t") + wire("s") + wire("a") + wire("A") + wire("b") + wire("f") + wire("x") + be64(5) + [2]
    #expect(decodeError(frame(0x40, payload))?.reason == .unknownEnumCode(field: "resume", code: 2))
  }

  @Test func streamDataBytesAreAsDocumented() {
    #expect(
      MeshFrameCodec.encode(.streamData(streamID: "s", offset: 3, bytes: [1]))
        == frame(0x4A, wire("s") + be64(3) + blob([1])))
  }

  @Test func rejectsUnknownRejectionCodes() {
    #expect(decodeError(frame(0x42, wire("t") + [6] + wire("m")))?.reason == .unknownEnumCode(field: "code", code: 6))
  }

  @Test func rejectsShortDigestsAndOversizeChunks() {
    let short = decodeError(frame(0x46, wire("t") + [UInt8](repeating: 1, count: 31)))
    #expect(short?.reason == .truncatedField(field: "sha256", needed: 32, available: 31))
    let size = MeshFrameCodec.maxChunkBytes + 1
    let oversize = decodeError(frame(0x43, wire("t") + be64(0) + be32(size) + [UInt8](repeating: 0, count: size)))
    #expect(oversize?.reason == .blobTooLarge(field: "bytes", bytes: size, limit: MeshFrameCodec.maxChunkBytes))
  }
}
