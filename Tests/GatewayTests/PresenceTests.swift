import LWS
import MeshCore
import Testing

@testable import Gateway

/// Presence is not an advert: every signed-in peer is listed and reported to a peer watching presence, whatever it
/// advertises.
private func ids(_ value: JSONValue?) -> [String] {
  guard case .array(let items) = value else { return [] }
  return items.compactMap { $0.objectValue?["id"]?.stringValue }
}

@Suite(.timeLimit(.minutes(1)))
struct PresenceTests {
  @Test func aPeerThatAdvertisesNothingIsPresentAndItsArrivalAndDeletionAreReported() async throws {
    try await InProcessNode.with { node in
      let ann = try await node.createPeerWithToken("Ann")
      let bob = try await node.createPeerWithToken("Bob")
      let socket = try await node.openEventSocket(token: ann.token)

      let watch = try await node.request(.put, "/api/v1/presence", token: ann.token)
      try #require(watch.status == 200, "no presence route: the waits below would not end")
      #expect(watch.object?["watching"] == true)
      #expect(ids(watch.object?["peers"]) == [bob.id])
      let bobFound = try await node.event("presence.found", on: socket) {
        $0["peer"]?.objectValue?["id"]?.stringValue == bob.id
      }
      #expect(bobFound["peer"]?.objectValue?["displayName"] == "Bob")

      let cy = try await node.createPeerWithToken("Cy")
      _ = try await node.event("presence.found", on: socket) { $0["peer"]?.objectValue?["id"]?.stringValue == cy.id }
      let list = try await node.request(.get, "/api/v1/presence", token: ann.token)
      #expect(list.status == 200)
      #expect(ids(list.object?["peers"]) == [bob.id, cy.id].sorted())

      #expect(try await node.request(.delete, "/api/v1/peers/me", token: cy.token).status == 204)
      let cyLost = try await node.event("presence.lost", on: socket) {
        $0["peer"]?.objectValue?["id"]?.stringValue == cy.id
      }
      #expect(cyLost["peer"]?.objectValue?["displayName"] == "Cy")

      #expect(try await node.request(.delete, "/api/v1/presence", token: ann.token).status == 204)
      let again = try await node.request(.delete, "/api/v1/presence", token: ann.token)
      #expect(again.status == 404)
      #expect(try await node.request(.get, "/api/v1/presence").status == 401)
    }
  }
}
