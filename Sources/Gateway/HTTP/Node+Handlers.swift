/// REST handlers for the peer routes.
///
/// Layer 6 (surface). Each handler validates input (400s name the field and the rule), does its work through
/// the store and the node state, and returns a response; thrown ``APIError``s become the JSON error shape.
import Crypto
import Foundation
import LWS
import Logging
import MeshCore

extension Node {
  func createPeer(_ context: RequestContext) async throws -> HTTPResponse {
    try safety.checkPeerCreation(context.request.head, peerCount: peers.count)
    let body = try RequestBody(context.request)
    try body.allowOnly(["displayName", "discoveryInfo"])
    let displayName: String
    let discoveryInfo: [String: String]
    do {
      displayName = try Validate.displayName(try body.requiredString("displayName"))
      discoveryInfo = try Validate.discoveryInfo(try body.optionalStringMap("discoveryInfo") ?? [:])
    } catch let error as ValidationError {
      throw error.apiError
    }
    let token = "mgt_" + Crypto.base64URL(try Crypto.randomBytes(32))
    let peer = StoredPeer(
      id: RecordID.make(), displayName: displayName, discoveryInfo: discoveryInfo,
      tokenHash: Crypto.sha256Hex(token), createdAt: Timestamp.now())
    // Peers being stored count against --max-peers too, so parallel requests cannot overshoot it.
    safety.guards.peersBeingCreated += 1
    defer { safety.guards.peersBeingCreated -= 1 }
    try await store.insertPeer(peer)
    peers[peer.id] = peer
    peerIDsByTokenHash[peer.tokenHash] = peer.id
    peerTable.createdAt[peer.id] = Int64(Date().timeIntervalSince1970)
    feed(.localPeerAdded(peerID: peer.id, displayName: peer.displayName))
    logger.info("Peer created.", ["peer.id": peer.id])
    return .json(
      ["peer": peerJSON(peer), "token": .string(token)], status: 201,
      headers: [("location", "/api/v1/peers/me")])
  }

  func updateMe(_ context: RequestContext) async throws -> HTTPResponse {
    let body = try RequestBody(context.request)
    try body.allowOnly(["displayName", "discoveryInfo"])
    guard !body.object.keys.isEmpty else {
      throw APIError.badRequest("send at least one of displayName, discoveryInfo")
    }
    var peer = context.authenticatedPeer
    do {
      if body.object["displayName"] != nil {
        peer.displayName = try Validate.displayName(try body.requiredString("displayName"))
      }
      if let info = try body.optionalStringMap("discoveryInfo") {
        peer.discoveryInfo = try Validate.discoveryInfo(info)
      }
    } catch let error as ValidationError {
      throw error.apiError
    }
    try await store.updatePeer(id: peer.id, displayName: peer.displayName, discoveryInfo: peer.discoveryInfo)
    guard peers[peer.id] != nil else { throw APIError.invalidToken }
    peers[peer.id] = peer
    feed(.localPeerRenamed(peerID: peer.id, displayName: peer.displayName))
    try await events.publish([(peerID: peer.id, type: "peer.updated", data: ["peer": peerJSON(peer)])], node: self)
    return .json(["peer": peerJSON(peer)])
  }

  func deleteMe(_ context: RequestContext) async throws -> HTTPResponse {
    try await removePeer(context.authenticatedPeer, closeReason: "peer deleted")
    return .noContent
  }
}
