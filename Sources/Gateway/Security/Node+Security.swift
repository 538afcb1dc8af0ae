/// The node runtime's security wiring: what each mesh connection is carried over, pinning, refusals, and refusing
/// plaintext API requests on a node that serves HTTPS (docs/security.md).
///
/// Layer 4 (node runtime). Runs on the lws service thread inside the ``Node`` actor.
import Crypto
import LWS
import Logging
import MeshCore

extension NodeSafety {
  /// The most `node.link.refused` events a node publishes in its lifetime (distinct node ids and reasons).
  static let maxRefusalEvents = 64
}

extension Node {
  /// The transport of mesh WebSocket `id` for the link manager: TLS or not, both fingerprints, a fresh challenge.
  /// Nil (and the socket is closed) when the CSPRNG fails.
  func meshTransport(_ id: WebSocketID) -> LinkManager.Transport? {
    let seen = server.transportSecurity(of: id) ?? TransportSecurity(encrypted: false, peerCertificate: nil)
    guard let challenge = try? Crypto.randomBytes(32) else {
      meshLogger.error("The random number generator failed; closing a mesh link.", ["ws.connection.id": id])
      server.close(id, code: 1011, reason: "random number generator failed")
      return nil
    }
    return LinkManager.Transport(
      encrypted: seen.encrypted, localFingerprint: seen.encrypted ? security.fingerprint : nil,
      remoteFingerprint: seen.peerCertificate.map(Certificate.fingerprint(der:)), challenge: challenge)
  }

  /// How the link to `nodeID` is carried, for the session book.
  func linkSecurity(_ nodeID: String) -> SessionBook.LinkSecurity {
    mesh.node.linkSecurity(of: nodeID)
  }

  /// First TLS link to `nodeID`: remember its certificate.
  func pinCertificate(nodeID: String, fingerprint: String) {
    meshLogger.notice(
      "Pinned a node certificate on first link (trust on first use).",
      ["node.id": nodeID, "tls.fingerprint": fingerprint])
    let store = self.store
    let logger = meshLogger
    Task {
      do {
        try await store.insertPin(nodeID: nodeID, fingerprint: fingerprint, at: Timestamp.now())
      } catch {
        logger.error("Could not store a certificate pin.", ["node.id": nodeID, "error": String(describing: error)])
      }
    }
  }

  /// A link was refused: one warning per attempt; one `node.link.refused` event per node id and reason (a refused
  /// node redials every few seconds), and at most ``NodeSafety/maxRefusalEvents`` in all, so that a stranger claiming ever new
  /// node ids cannot flood the peers' event logs (the log lines and the metric still count every refusal).
  func reportRefusal(_ refusal: LinkManager.Refusal) {
    mesh.linksRefused += 1
    meshLogger.warning(
      "Refused a mesh link.",
      [
        "reason": refusal.code, "node.id": refusal.nodeID ?? "?", "node.name": refusal.name ?? "?",
        "tls.pinned": refusal.pinnedFingerprint ?? "", "tls.presented": refusal.presentedFingerprint ?? "",
        "detail": refusal.message,
      ])
    let key = "\(refusal.code)|\(refusal.nodeID ?? "")|"
    guard mesh.refusalsReported.count < NodeSafety.maxRefusalEvents, mesh.refusalsReported.insert(key).inserted else {
      return
    }
    var node = JSONObject()
    node["id"] = refusal.nodeID.map { .string($0) } ?? .null
    node["name"] = refusal.name.map { .string($0) } ?? .null
    publishToAllPeers(
      type: "node.link.refused",
      data: [
        "node": .object(node), "code": .string(refusal.code), "message": .string(refusal.message),
        "pinnedFingerprint": refusal.pinnedFingerprint.map { .string($0) } ?? .null,
        "presentedFingerprint": refusal.presentedFingerprint.map { .string($0) } ?? .null,
      ])
  }
}
