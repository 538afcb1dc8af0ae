/// How long a peer lives without being used, and the admin's view of the peers (list, delete).
///
/// Layer 4 and 6. `POST /api/v1/peers` needs no token, so peers nobody uses would otherwise fill `--max-peers` for
/// good (they are stored): a peer whose token was never used after it was created is deleted after
/// `--peer-unused-expiry` (default 3600 s), and one whose token has not been used for `--peer-idle-expiry` (default
/// 90 days) likewise; a peer with an open WebSocket or event stream counts as in use. Use is kept in memory and
/// written to the store at most once an hour per peer, so expiry holds across restarts. Runs on the node's executor.
import Foundation
import LWS
import Logging
import MeshCore
import Store

extension Node {
  /// Notes that `peerID`'s token was used now (called for every authenticated request and socket).
  func notePeerUsed(_ peerID: String) {
    let now = Int64(Date().timeIntervalSince1970)
    if let last = peerTable.lastUsed[peerID], now - last < 3600 { return }
    peerTable.lastUsed[peerID] = now
    let store = self.store
    Task { try? await store.markPeerUsed(id: peerID, at: now) }
  }

  /// Reads when each peer was last used and created (at start, before the first expiry check).
  func loadPeerUsage() async {
    guard !peerTable.usageLoaded else { return }
    let used = (try? await store.peersLastUsed()) ?? [:]
    for (peerID, at) in used where peerTable.lastUsed[peerID].map({ $0 < at }) ?? true {
      peerTable.lastUsed[peerID] = at
    }
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    for (peerID, peer) in peers where peerTable.createdAt[peerID] == nil {
      peerTable.createdAt[peerID] = formatter.date(from: peer.createdAt).map { Int64($0.timeIntervalSince1970) } ?? 0
    }
    peerTable.usageLoaded = true
  }

  /// Deletes the peers whose lifetime is over (once a second; nothing before their use was read at start).
  func expirePeers() {
    let unused = Int64(configuration.peerUnusedExpirySeconds)
    let idle = Int64(configuration.peerIdleExpirySeconds)
    guard unused > 0 || idle > 0 else { return }
    let tick = Self.monotonicMillis()
    guard tick >= peerTable.nextExpiryCheck else { return }
    peerTable.nextExpiryCheck = tick + 1000
    guard peerTable.usageLoaded else {
      Task { await self.loadPeerUsage() }
      return
    }
    let now = Int64(Date().timeIntervalSince1970)
    var expired: [(StoredPeer, String)] = []
    for (peerID, peer) in peers where !events.isConnected(peerID) {
      if let last = peerTable.lastUsed[peerID] {
        if idle > 0 && now - last >= idle { expired.append((peer, "its token was not used for \(idle) s")) }
      } else if unused > 0, now - (peerTable.createdAt[peerID] ?? now) >= unused {
        expired.append((peer, "its token was never used in the \(unused) s after it was created"))
      }
    }
    for (peer, reason) in expired {
      peerTable.expired += 1
      logger.info("Peer expired; deleted.", ["peer.id": peer.id, "reason": reason])
      Task { try? await self.removePeer(peer, closeReason: "peer expired") }
    }
  }

  /// Deletes a local peer: its token stops working at once, its sockets close with 4401, then the store forgets it
  /// and everything it owns.
  func removePeer(_ peer: StoredPeer, closeReason: String) async throws {
    guard peers[peer.id] != nil else { return }
    // Revoke in memory first, so the token stops working before the store is even touched.
    peers[peer.id] = nil
    peerIDsByTokenHash[peer.tokenHash] = nil
    peerTable.lastUsed[peer.id] = nil
    peerTable.createdAt[peer.id] = nil
    guards.requestLimiter.forget(peer.id)
    feed(.localPeerRemoved(peerID: peer.id, now: Self.monotonicMillis()))
    featuresPeerRemoved(peer.id)
    events.disconnectAll(of: peer.id, code: 4401, reason: closeReason, node: self)
    try await store.deletePeer(id: peer.id)
    logger.info("Peer deleted.", ["peer.id": peer.id])
  }

  // MARK: - Admin

  /// `GET /api/v1/admin/peers`: every peer this node hosts, oldest first, paged.
  func adminListPeers(_ context: RequestContext) throws -> HTTPResponse {
    let all = peers.values.sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
    let page = try Page(all, id: \.id, query: context.request.head.query)
    let items: [JSONValue] = page.items.map { peer in
      let used = peerTable.lastUsed[peer.id].map {
        JSONValue.string(Timestamp.format(Date(timeIntervalSince1970: Double($0))))
      }
      return [
        "id": .string(peer.id), "displayName": .string(peer.displayName), "createdAt": .string(peer.createdAt),
        "lastUsedAt": used ?? .null, "connected": .bool(events.isConnected(peer.id)),
      ]
    }
    return .json(["peers": .array(items), "nextCursor": page.nextCursorJSON])
  }

  /// `DELETE /api/v1/admin/peers/{peerId}`.
  func adminDeletePeer(_ context: RequestContext) async throws -> HTTPResponse {
    let id = context.parameters["peerId"] ?? ""
    guard let peer = peers[id] else {
      throw APIError.notFound("this node hosts no peer \(id); see GET /api/v1/admin/peers")
    }
    try await removePeer(peer, closeReason: "peer deleted by the node's admin")
    return .noContent
  }
}

extension NodeStore {
  /// Migration 14: when each peer's token was last used (Unix seconds; NULL: never since it was created).
  static let peerUsageSchema = "ALTER TABLE peers ADD COLUMN last_used_at INTEGER;"

  func peersLastUsed() async throws -> [String: Int64] {
    try await database.read { connection in
      var used: [String: Int64] = [:]
      for row in try connection.query("SELECT id, last_used_at FROM peers WHERE last_used_at IS NOT NULL") {
        used[try row.string(0)] = try row.int64(1)
      }
      return used
    }
  }

  func markPeerUsed(id: String, at seconds: Int64) async throws {
    try await database.write { connection in
      try connection.execute("UPDATE peers SET last_used_at = ? WHERE id = ?", [.integer(seconds), .text(id)])
    }
  }
}
