import Foundation
import MeshgateTestSupport
import Testing

/// A group send whose recipients on a node all wait for file consent (`--file-consent ask`, not on the always-accept
/// list) is refused for that reason: `409 transfer_refused` with the consent message. It was answered
/// `409 not_a_member` although every recipient was a connected member.
@Suite(.timeLimit(.minutes(2))) struct GroupConsentTests {
  @Test func aGroupSendRefusedForConsentSaysSoNotThatTheRecipientIsNoMember() async throws {
    try await withNodes(count: 2, seeds: .allEarlier) { nodes in
      let (alice, bob, sessionID) = try await transferPair(nodes)
      let admin = try nodes[1].adminToken()
      let patched = try HTTPClient.patch(
        port: nodes[1].port, path: "/api/v1/node/settings", json: #"{"fileConsent":"ask"}"#, token: admin)
      #expect(patched.status == 200, "\(patched)")
      // "to=<id>," is a group of one: the group path, not a single transfer.
      let answer = try HTTPClient.post(
        port: nodes[0].port, path: "/api/v1/sessions/\(sessionID)/resources?to=\(bob.id),&name=group.bin",
        body: Array(repeating: 7, count: 10_000), contentType: nil, token: alice.token, timeout: .seconds(60))
      #expect(answer.status == 409, "\(answer)")
      #expect(errorCode(answer) == "transfer_refused", "\(answer)")
      #expect(errorMessage(answer)?.contains("asks before a file is stored") == true, "\(answer)")
    }
  }
}
