/// Peers: creating one (its token, the per-address and per-network creation rates, `--max-peers`), renaming and
/// deleting it, how long it lives without being used, and the admin's view of the peers (list, delete).
///
/// Layer 4 and 6. `POST /api/v1/peers` needs no token, so peers nobody uses would otherwise fill `--max-peers` for
/// good (they are stored): a peer whose token was never used after it was created is deleted after
/// `--peer-unused-expiry` (default 3600 s), and one whose token has not been used for `--peer-idle-expiry` (default
/// 90 days) likewise; a peer with an open WebSocket or event stream counts as in use. Use is kept in memory and
/// written to the store at most once an hour per peer, so expiry holds across restarts.
///
/// Who a token belongs to is the node's identity table (``PeerTable``, Node/PeerTable.swift), which the shell checks
/// every request against; this feature changes it (create, rename, delete) and hears of each use through the
/// ``NodeFeature/peerUsed(_:node:)`` hook. A deleted peer reaches every feature through
/// ``NodeFeature/peerRemoved(_:node:)``.
import Crypto
import Foundation
import LWS
import Logging
import MeshCore
import Store

/// The peers feature: the lifecycle of the peers this node hosts, with the state it needs (when each was created and
/// last used, the creation rate limiters and counters). Owned by the node actor and only touched on its executor.
final class PeersFeature: NodeFeature {
  /// Peer creations per second one network prefix may make, as a multiple of `--peer-create-rate`.
  static let creationPrefixFactor = 4

  /// When each peer's token was last used (Unix seconds; absent: never since it was created), as far as the store
  /// has been told (at most once an hour per peer); ``usageLoaded`` once read from the store at start.
  var lastUsed: [String: Int64] = [:]
  var usageLoaded = false
  /// When each peer was created (Unix seconds), parsed once from its `createdAt`.
  var createdAt: [String: Int64] = [:]
  /// When peers are next checked for expiry (monotonic ms).
  var nextExpiryCheck: UInt64 = 0
  /// Peers deleted because they expired (`meshgate_peers_expired_total`).
  var expired = 0
  /// Peer creations by client address (`--peer-create-rate`).
  var creationLimiter = RateLimiter<String>()
  /// Peer creations by the client's network (/24, /64), at ``creationPrefixFactor`` times the rate.
  var creationPrefixLimiter = RateLimiter<String>()
  /// Creations refused with 429.
  var rateLimitedCreations = 0
  /// Peers being stored: they count against `--max-peers` too, so parallel requests cannot overshoot it.
  var beingCreated = 0
  /// Creations refused with 409 (`peer_limit_reached`).
  var limitRefusals = 0

  // MARK: - Hooks

  /// Expired peers are deleted (checked once a second).
  func tick(node: isolated Node) {
    expire(node: node)
  }

  /// Notes that `peerID`'s token was used now (every authenticated request and socket).
  func peerUsed(_ peerID: String, node: isolated Node) {
    let now = Int64(Date().timeIntervalSince1970)
    if let last = lastUsed[peerID], now - last < 3600 { return }
    lastUsed[peerID] = now
    let store = node.store
    Task { try? await store.markPeerUsed(id: peerID, at: now) }
  }

  func metricsLines(into lines: inout [String], node: isolated Node) {
    let samples: [MetricSample] = [
      (
        "meshgate_peers_expired_total", "counter",
        "Peers deleted because their token was never used (--peer-unused-expiry) or long unused (--peer-idle-expiry).",
        expired
      ),
      (
        "meshgate_peer_creations_rate_limited_total", "counter",
        "POST /api/v1/peers refused with 429: over the client address's peer creation rate.", rateLimitedCreations
      ),
      (
        "meshgate_peer_limit_refusals_total", "counter", "POST /api/v1/peers refused with 409: the node is full.",
        limitRefusals
      ),
    ]
    for sample in samples { lines.appendSample(sample) }
  }

  // MARK: - Creating, renaming, deleting

  /// `POST /api/v1/peers`.
  func create(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    try checkCreation(context.request.head, node: node)
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
    beingCreated += 1
    defer { beingCreated -= 1 }
    try await node.store.insertPeer(peer)
    node.peers.insert(peer)
    createdAt[peer.id] = Int64(Date().timeIntervalSince1970)
    node.feed(.localPeerAdded(peerID: peer.id, displayName: peer.displayName))
    node.logger.info("Peer created.", ["peer.id": peer.id])
    return .json(
      ["peer": node.peerJSON(peer), "token": .string(token)], status: 201,
      headers: [("location", "/api/v1/peers/me")])
  }

  /// Applies `--peer-create-rate` to the client's address (`429` with `Retry-After`) and `--max-peers` (`409`).
  func checkCreation(_ head: HTTPRequestHead, node: isolated Node) throws(APIError) {
    let limits = node.safety.guards.limits
    let now = Node.monotonicMillis()
    creationLimiter.prune(keep: 4_096, now: now)
    creationPrefixLimiter.prune(keep: 4_096, now: now)
    // A network (/24, /64) gets the budget of a few addresses: one host with many addresses (IPv6 hands out 2^64)
    // cannot multiply its budget by switching source address.
    let prefix = Self.networkPrefix(of: head.remoteAddress)
    if let prefix,
      let wait = creationPrefixLimiter.check(
        prefix, perSecond: limits.peerCreationsPerSecond * Self.creationPrefixFactor, now: now)
    {
      rateLimitedCreations += 1
      throw APIError(
        status: 429, code: "rate_limited",
        message:
          "more than \(limits.peerCreationsPerSecond * Self.creationPrefixFactor) new peers per second from "
          + "network \(prefix) (\(Self.creationPrefixFactor) times --peer-create-rate per /24 or /64); wait \(wait) s "
          + "(Retry-After) and reuse peers you created (their tokens stay valid)",
        headers: [("retry-after", String(wait))])
    }
    if let wait = creationLimiter.check(head.remoteAddress, perSecond: limits.peerCreationsPerSecond, now: now) {
      rateLimitedCreations += 1
      throw APIError(
        status: 429, code: "rate_limited",
        message:
          "more than \(limits.peerCreationsPerSecond) new peers per second from \(head.remoteAddress); wait \(wait) s "
          + "(Retry-After) and reuse peers you created (their tokens stay valid)",
        headers: [("retry-after", String(wait))])
    }
    try checkCapacity(node: node)
  }

  /// The /24 (IPv4, also IPv4-mapped IPv6) or /64 (IPv6) network of a client address, e.g. `192.168.1.0/24`; nil
  /// when the address is not an IP address.
  static func networkPrefix(of address: String) -> String? {
    var v4 = in_addr()
    var v6 = in6_addr()
    let bare = address.hasPrefix("::ffff:") && address.contains(".") ? String(address.dropFirst(7)) : address
    if inet_pton(AF_INET, bare, &v4) == 1 {
      let value = UInt32(bigEndian: v4.s_addr)
      return "\(value >> 24).\((value >> 16) & 0xFF).\((value >> 8) & 0xFF).0/24"
    }
    guard inet_pton(AF_INET6, address, &v6) == 1 else { return nil }
    var bytes = [UInt8](repeating: 0, count: 16)
    withUnsafeBytes(of: &v6) { raw in for index in 0..<8 { bytes[index] = raw[index] } }
    let groups = stride(from: 0, to: 8, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
    return groups.joined(separator: ":") + "::/64"
  }

  /// `409 peer_limit_reached` when the node hosts `--max-peers` peers.
  func checkCapacity(node: isolated Node) throws(APIError) {
    let maximum = node.safety.guards.limits.maxPeers
    guard node.peers.count + beingCreated >= maximum else { return }
    limitRefusals += 1
    throw APIError(
      status: 409, code: "peer_limit_reached",
      message:
        "this node already hosts its maximum of \(maximum) peers (--max-peers): delete unused peers "
        + "(DELETE /api/v1/peers/me with their token, or DELETE /api/v1/admin/peers/{peerId} with the admin token), "
        + "wait for unused ones to expire (--peer-unused-expiry), raise the limit, or use another node")
  }

  /// `PATCH /api/v1/peers/me`.
  func updateMe(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
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
    try await node.store.updatePeer(id: peer.id, displayName: peer.displayName, discoveryInfo: peer.discoveryInfo)
    guard node.peers[peer.id] != nil else { throw APIError.invalidToken }
    node.peers.insert(peer)
    node.feed(.localPeerRenamed(peerID: peer.id, displayName: peer.displayName))
    try await node.events.publish(
      [(peerID: peer.id, type: "peer.updated", data: ["peer": node.peerJSON(peer)])], node: node)
    return .json(["peer": node.peerJSON(peer)])
  }

  /// `DELETE /api/v1/peers/me`.
  func deleteMe(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    try await remove(context.authenticatedPeer, closeReason: "peer deleted", node: node)
    return .noContent
  }

  /// Deletes a local peer: its token stops working at once, every feature hears of it, its sockets close with 4401,
  /// then the store forgets it and everything it owns.
  func remove(_ peer: StoredPeer, closeReason: String, node: isolated Node) async throws {
    guard node.peers[peer.id] != nil else { return }
    // Revoke in memory first, so the token stops working before the store is even touched.
    node.peers.remove(peer.id)
    lastUsed[peer.id] = nil
    createdAt[peer.id] = nil
    node.safety.guards.requestLimiter.forget(peer.id)
    node.feed(.localPeerRemoved(peerID: peer.id, now: Node.monotonicMillis()))
    for feature in node.features.all { feature.peerRemoved(peer.id, node: node) }
    node.events.disconnectAll(of: peer.id, code: 4401, reason: closeReason, node: node)
    try await node.store.deletePeer(id: peer.id)
    node.logger.info("Peer deleted.", ["peer.id": peer.id])
  }

  // MARK: - Expiry

  /// Reads when each peer was last used and created (at start, before the first expiry check).
  func loadUsage(node: isolated Node) async {
    guard !usageLoaded else { return }
    let used = (try? await node.store.peersLastUsed()) ?? [:]
    for (peerID, at) in used where lastUsed[peerID].map({ $0 < at }) ?? true {
      lastUsed[peerID] = at
    }
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    for (peerID, peer) in node.peers.byID where createdAt[peerID] == nil {
      createdAt[peerID] = formatter.date(from: peer.createdAt).map { Int64($0.timeIntervalSince1970) } ?? 0
    }
    usageLoaded = true
  }

  /// Deletes the peers whose lifetime is over (once a second; nothing before their use was read at start).
  func expire(node: isolated Node) {
    let unused = Int64(node.configuration.peerUnusedExpirySeconds)
    let idle = Int64(node.configuration.peerIdleExpirySeconds)
    guard unused > 0 || idle > 0 else { return }
    let tick = Node.monotonicMillis()
    guard tick >= nextExpiryCheck else { return }
    nextExpiryCheck = tick + 1000
    guard usageLoaded else {
      Task { await node.features.peers.loadUsage(node: node) }
      return
    }
    let now = Int64(Date().timeIntervalSince1970)
    var expiring: [(StoredPeer, String)] = []
    for (peerID, peer) in node.peers.byID where !node.events.isConnected(peerID) {
      if let last = lastUsed[peerID] {
        if idle > 0 && now - last >= idle { expiring.append((peer, "its token was not used for \(idle) s")) }
      } else if unused > 0, now - (createdAt[peerID] ?? now) >= unused {
        expiring.append((peer, "its token was never used in the \(unused) s after it was created"))
      }
    }
    for (peer, reason) in expiring {
      expired += 1
      node.logger.info("Peer expired; deleted.", ["peer.id": peer.id, "reason": reason])
      Task { try? await node.features.peers.remove(peer, closeReason: "peer expired", node: node) }
    }
  }

  // MARK: - Admin

  /// `GET /api/v1/admin/peers`: every peer this node hosts, oldest first, paged.
  func adminList(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    let all = node.peers.byID.values.sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
    let page = try Page(all, id: \.id, query: context.request.head.query)
    let items: [JSONValue] = page.items.map { peer in
      let used = lastUsed[peer.id].map {
        JSONValue.string(Timestamp.format(Date(timeIntervalSince1970: Double($0))))
      }
      return [
        "id": .string(peer.id), "displayName": .string(peer.displayName), "createdAt": .string(peer.createdAt),
        "lastUsedAt": used ?? .null, "connected": .bool(node.events.isConnected(peer.id)),
      ]
    }
    return .json(["peers": .array(items), "nextCursor": page.nextCursorJSON])
  }

  /// `DELETE /api/v1/admin/peers/{peerId}`.
  func adminDelete(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let id = context.parameters["peerId"] ?? ""
    guard let peer = node.peers[id] else {
      throw APIError.notFound("this node hosts no peer \(id); see GET /api/v1/admin/peers")
    }
    try await remove(peer, closeReason: "peer deleted by the node's admin", node: node)
    return .noContent
  }
}

@available(*, unavailable) extension PeersFeature: Sendable {}

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
