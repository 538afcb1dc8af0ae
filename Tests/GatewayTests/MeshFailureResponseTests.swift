import MeshCore
import Testing

@testable import Gateway

/// The REST answer to every ``MeshFailure`` (docs/api.md): the mesh core says what went wrong, the HTTP layer says it
/// with a status, a stable code and a message that tells how to fix it. The texts are part of the API.
@Suite struct MeshFailureResponseTests {
  @Test(arguments: [
    (
      MeshFailure.notSessionMember(sessionID: "s1"), 404, "not_found", "no session s1 with this peer as a member"
    ),
    (
      .inviterNotSessionMember(sessionID: "s1"), 404, "not_found",
      "no session s1 with this peer as a member; create one with POST /api/v1/sessions"
    ),
    (
      .inviterNotConnected(.notConnected), 409, "not_connected",
      "only connected members can invite; this peer is notConnected"
    ),
    (.selfInvitation, 400, "invalid_request", "a peer cannot invite itself"),
    (.contextTooLarge(maxBytes: 4096), 400, "validation_failed", "context must be at most 4096 bytes"),
    (.alreadyMember(displayName: "Bo"), 409, "already_member", "Bo is already a member of this session"),
    (.alreadyInvited(displayName: "Bo"), 409, "already_invited", "Bo already has a pending invitation to this session"),
    (.onlyHubInvites, 409, "strategy_violation", "in a star session only the hub (its creator) invites"),
    (
      .encryptionUnavailable(displayName: "Bo"), 409, "encryption_unavailable",
      "this session requires encryption, but the link to Bo's node is not encrypted (TLS); link the nodes over TLS "
        + "(the default; not --mesh-tls off), use encryption optional or none, or invite a peer on this node"
    ),
    (.pointToPointFull, 409, "strategy_violation", "a pointToPoint session holds exactly two peers and is full"),
    (
      .sessionFull(maxPeers: 8), 409, "session_full",
      "the session is full (maxPeers 8, members and pending invitations)"
    ),
    (.invitationNotFound(invitationID: "i1", sentByPeer: false), 404, "not_found", "no invitation i1 for this peer"),
    (.invitationNotFound(invitationID: "i1", sentByPeer: true), 404, "not_found", "no invitation i1 sent by this peer"),
    (.invitationExpired, 409, "invitation_closed", "the invitation has expired; ask for a new one"),
    (
      .invitationClosed(.declined, answering: true), 409, "invitation_closed",
      "the invitation is already declined; ask for a new one"
    ),
    (.invitationClosed(.accepted, answering: false), 409, "invitation_closed", "the invitation is already accepted"),
    (.senderNotConnected(.connecting), 409, "not_connected", "this peer is connecting in the session"),
    (.targetNotConnected(peerID: "p9"), 409, "not_connected", "p9 is not a connected member of this session"),
    (.spokeSendsOnlyToHub, 409, "strategy_violation", "in a star session spokes send only to the hub"),
    (.unknownPeer(peerID: "p9"), 404, "not_found", "no peer p9 in the mesh"),
    (.chatNotFound(roomID: "r1"), 404, "not_found", "no chat room r1; see GET /api/v1/chats/nearby"),
    (.chatEnded(roomID: "r1"), 409, "chat_ended", "chat room r1 has ended: everyone left"),
    (
      .notChatMember(roomID: "r1"), 403, "not_a_member",
      "this peer is not in chat room r1; join it first with POST /api/v1/chats/r1/join"
    ),
    (
      .chatHostUnreachable(roomID: "r1", hostName: "Hana"), 503, "host_unreachable",
      "the node hosting chat room r1 (Hana's) is not linked right now; try again when it is back "
        + "(GET /api/v1/mesh/nodes)"
    ),
  ])
  func answersWithItsStatusCodeAndMessage(failure: MeshFailure, status: Int, code: String, message: String) {
    #expect(APIError(failure) == APIError(status: status, code: code, message: message))
  }
}
