import MeshCore
import Testing

// Golden bytes for every frame type of `meshgate-node.v1`, so a change to the codec's code cannot change the wire
// format unnoticed. The hex strings were recorded from the encoder before its per-frame code was folded (December
// 2026); MeshFrameCodecGoldenTests builds some of the same frames by hand from docs/mesh-protocol.md.

private let member = SessionMember(peerID: "p1", displayName: "Ada", nodeID: "n1", state: .connected)
private let session = SessionDescription(
  sessionID: "s1", hostNodeID: "n1", creatorPeerID: "p1", strategy: .star, encryption: .required, maxPeers: 8,
  revision: 3, members: [member, SessionMember(peerID: "p2", displayName: "", nodeID: "n2", state: .notConnected)])
private let digest = Array(UInt8(0)..<32)

/// One sample per frame type, with its recorded encoding.
private let goldenFrames: [(MeshMessage, [String])] = [
  (
    .hello(NodeHello(nodeID: "n1", name: "Ada", softwareVersion: "0.1.0", port: 8080)),
    ["4d4701010000001200026e3100034164610005302e312e301f90"]
  ),
  (.authChallenge(nonce: [1, 2, 3, 4]), ["4d470104000000080000000401020304"]),
  (.authProof(mac: [0xFE, 0xED]), ["4d4701050000000600000002feed"]),
  (.heartbeat(sequence: 7, sentAtMillis: 1_000), ["4d47010200000010000000000000000700000000000003e8"]),
  (.heartbeatAck(sequence: 7, sentAtMillis: 1_000), ["4d47010300000010000000000000000700000000000003e8"]),
  (
    .peerSnapshot([
      PeerAnnouncement(peerID: "p1", displayName: "Ada", advertising: ["_chat._tcp": ["b": "2", "a": ""]]),
      PeerAnnouncement(peerID: "p2", displayName: "Bo"),
    ]),
    [
      "4d47011000000032000000020002703100034164610001000a5f636861742e5f74637000020001610000000162000132",
      "000270320002426f0000",
    ]
  ),
  (
    .peerUpdated(PeerAnnouncement(peerID: "p1", displayName: "Ada", advertising: ["_x._udp": [:]])),
    ["4d47011100000016000270310003416461000100075f782e5f7564700000"]
  ),
  (.peerRemoved(peerID: "p1"), ["4d4701120000000400027031"]),
  (
    .nodeDirectory([NodeAddress(nodeID: "n2", host: "10.0.0.2", port: 9000)]),
    ["4d47011300000012000100026e32000831302e302e302e322328"]
  ),
  (.goodbye(reason: "bye"), ["4d47017f000000050003627965"]),
  (
    .invite(
      InvitationOffer(
        invitationID: "i1", session: session, fromPeerID: "p1", fromDisplayName: "Ada", toPeerID: "p2",
        context: [0xC0, 0xFF], timeoutMillis: 30_000, verificationCode: "1234")),
    [
      "4d47012000000054000269310002733100026e3100027031010200080000000000000003000200027031000341646100",
      "026e310100027032000000026e32020002703100034164610002703200000002c0ff00007530000431323334",
    ]
  ),
  (.inviteAnswer(invitationID: "i1", outcome: .declined), ["4d470121000000050002693101"]),
  (.inviteClosed(invitationID: "i1", outcome: .expired), ["4d470122000000050002693102"]),
  (.sessionJoin(sessionID: "s1", member: member), ["4d470128000000120002733100027031000341646100026e3101"]),
  (.sessionLeave(sessionID: "s1", peerID: "p2"), ["4d470129000000080002733100027032"]),
  (
    .sessionState(session),
    [
      "4d47012a000000330002733100026e3100027031010200080000000000000003000200027031000341646100026e3101",
      "00027032000000026e3202",
    ]
  ),
  (
    .sessionData(sessionID: "s1", fromPeerID: "p1", toPeerIDs: ["p2", "p3"], sequence: 5, payload: [1, 2]),
    ["4d470130000000200002733100027031000200027032000270330000000000000005000000020102"]
  ),
  (
    .sessionEvent(
      sessionID: "s1", fromPeerID: "p1", toPeerIDs: ["p2"], sequence: 0, name: "ping", object: Array("{}".utf8)),
    ["4d4701310000002200027331000270310001000270320000000000000000000470696e67000000027b7d"]
  ),
  (.dataAck(sequence: 5), ["4d470132000000080000000000000005"]),
  (
    .transferOffer(
      TransferOffer(
        transferID: "t1", sessionID: "s1", fromPeerID: "p1", fromDisplayName: "Ada", toPeerID: "p2", name: "a.txt",
        contentType: "text/plain", size: 1 << 33, resume: true)),
    [
      "4d470140000000310002743100027331000270310003416461000270320005612e747874000a746578742f706c61696e",
      "000000020000000001",
    ]
  ),
  (.transferAccept(transferID: "t1", offset: 42), ["4d4701410000000c00027431000000000000002a"]),
  (
    .transferReject(transferID: "t1", code: .insufficientStorage, message: "full"),
    ["4d4701420000000b0002743101000466756c6c"]
  ),
  (
    .transferChunk(transferID: "t1", offset: 42, bytes: [9, 8, 7]),
    ["4d4701430000001300027431000000000000002a00000003090807"]
  ),
  (.transferCredit(transferID: "t1", offset: 45), ["4d4701440000000c00027431000000000000002d"]),
  (
    .transferEnd(transferID: "t1", size: 45, sha256: digest),
    ["4d4701450000002c00027431000000000000002d000102030405060708090a0b0c0d0e0f101112131415161718191a1b", "1c1d1e1f"]
  ),
  (
    .transferFinished(transferID: "t1", sha256: digest),
    ["4d4701460000002400027431000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"]
  ),
  (.transferFailed(transferID: "t1", reason: "gone"), ["4d4701470000000a000274310004676f6e65"]),
  (.transferCancel(transferID: "t1", reason: "stop"), ["4d4701480000000a00027431000473746f70"]),
  (.transferAwaitingConsent(transferID: "t1", timeoutMillis: 60_000), ["4d47014d0000000c00027431000000000000ea60"]),
  (
    .transferGroupOffer(
      TransferGroupOffer(
        copyID: "c1", groupID: "g1", sessionID: "s1", fromPeerID: "p1", fromDisplayName: "Ada", name: "b.bin",
        contentType: "application/octet-stream", size: 3, resume: false,
        recipients: [
          TransferGroupRecipient(transferID: "t2", peerID: "p2"),
          TransferGroupRecipient(transferID: "t3", peerID: "p3"),
        ])),
    [
      "4d47014e000000510002633100026731000273310002703100034164610005622e62696e00186170706c69636174696f",
      "6e2f6f637465742d73747265616d000000000000000300000200027432000270320002743300027033",
    ]
  ),
  (
    .streamOpen(
      StreamOffer(
        streamID: "st1", sessionID: "s1", fromPeerID: "p1", fromDisplayName: "Ada", toPeerID: "p2", name: "cam")),
    ["4d4701490000001b00037374310002733100027031000341646100027032000363616d"]
  ),
  (.streamData(streamID: "st1", offset: 0, bytes: [1]), ["4d47014a00000012000373743100000000000000000000000101"]),
  (.streamCredit(streamID: "st1", offset: 1), ["4d47014b0000000d00037374310000000000000001"]),
  (.streamClose(streamID: "st1", reason: ""), ["4d47014c0000000700037374310000"]),
  (.chat(payload: Array("{\"k\":1}".utf8)), ["4d4701500000000b000000077b226b223a317d"]),
]

private func hex(_ bytes: [UInt8]) -> String {
  bytes.map { ($0 < 0x10 ? "0" : "") + String($0, radix: 16) }.joined()
}

@Suite struct MeshFrameGoldenBytesTests {
  @Test func everyFrameTypeHasAGoldenSample() {
    let types = Set(goldenFrames.map { MeshFrameCodec.encode($0.0)[3] })
    #expect(types.count == 35)
  }

  @Test(arguments: goldenFrames.indices)
  func encodesAndDecodesTheRecordedBytes(_ index: Int) throws {
    let (message, recorded) = goldenFrames[index]
    let expected = recorded.joined()
    let bytes = MeshFrameCodec.encode(message)
    #expect(hex(bytes) == expected, "frame type 0x\(String(bytes[3], radix: 16))")
    #expect(try MeshFrameCodec.decode(bytes) == message)
  }
}
