/// The admin token and the node settings it guards.
///
/// Layer 4/6. A node creates one admin token (`mga_` + 32 random bytes, base64url) on its first start, prints it
/// once on standard output (`meshgate admin-token=…`) and keeps only its SHA-256 in SQLite (migration 8). Peer
/// tokens never work where the admin token is needed (`403 admin_token_required`), and the admin token is no peer
/// token (it gets `401` on peer routes). It guards `POST /api/v1/mesh/nodes` and `GET|PATCH /api/v1/node/settings`.
import Crypto
import Foundation
import LWS
import Logging
import MeshCore
import Store

extension NodeStore {
  /// Migration 8: the admin token's hash (one row).
  static let adminSchema = """
    CREATE TABLE admin_token(
      id INTEGER PRIMARY KEY CHECK (id = 1),
      token_hash TEXT NOT NULL,
      created_at TEXT NOT NULL
    );
    """

  /// The stored admin token hash; on first start (no token stored yet) a new token and its hash, the only time the
  /// token exists in clear. The new token is not stored here: ``saveAdminToken(hash:)`` stores it once the start
  /// can no longer fail, just before it is printed, so a start that fails leaves no token that nobody has seen.
  func adminToken() async throws -> (hash: String, newToken: String?) {
    let stored = try await database.read { connection in
      try connection.queryOne("SELECT token_hash FROM admin_token WHERE id = 1").map { try $0.string(0) }
    }
    if let stored { return (stored, nil) }
    let token = "mga_" + Crypto.base64URL(try Crypto.randomBytes(32))
    return (Crypto.sha256Hex(token), token)
  }

  /// Stores the hash of a new admin token from ``adminToken()``; fails if the node already has one.
  func saveAdminToken(hash: String) async throws {
    let created = Timestamp.now()
    try await database.write { connection in
      try connection.execute(
        "INSERT INTO admin_token(id, token_hash, created_at) VALUES (1, ?, ?)", [.text(hash), .text(created)])
    }
  }
}

extension NodeSafety {
  static let adminHint =
    "send the node's admin token as 'Authorization: Bearer mga_…'; it is printed once, on the node's first start "
    + "(the 'meshgate admin-token=' line)"

  /// Checks the request carries the admin token; a peer token (one of `peers`') gets `403`.
  func authenticateAdmin(_ head: HTTPRequestHead, peers: PeerTable) throws(APIError) {
    guard let header = head.headers["authorization"] else {
      guards.adminDenied += 1
      throw APIError(
        status: 401, code: "admin_token_required", message: "this route needs the admin token: " + Self.adminHint)
    }
    let parts = header.split(separator: " ", maxSplits: 1)
    let token =
      parts.count == 2 && parts[0].lowercased() == "bearer" ? String(parts[1]).trimmingCharacters(in: .whitespaces) : ""
    if !token.isEmpty, Crypto.sha256Hex(token) == guards.adminTokenHash { return }
    guards.adminDenied += 1
    if !token.isEmpty, peers.peer(forTokenHash: Crypto.sha256Hex(token)) != nil {
      throw APIError(
        status: 403, code: "admin_token_required",
        message: "a peer token cannot be used here: node settings, adding mesh nodes and removing pins need the admin "
          + "token; " + Self.adminHint)
    }
    throw APIError(
      status: 401, code: "invalid_admin_token", message: "the admin token is not valid on this node: " + Self.adminHint)
  }

  /// Applies the per-token request rate; throws 429 with Retry-After when the peer is over it.
  func checkRequestRate(peerID: String) throws(APIError) {
    let limit = guards.limits.requestsPerSecond
    guard let wait = guards.requestLimiter.check(peerID, perSecond: limit, now: Node.monotonicMillis()) else {
      return
    }
    guards.rateLimitedRequests += 1
    throw APIError(
      status: 429, code: "rate_limited",
      message: "more than \(limit) requests per second with this token; wait \(wait) s (Retry-After) and slow down",
      headers: [("retry-after", String(wait))])
  }

  /// Applies the browser WebSocket caps to one received message; returns the error reply when it is refused (and
  /// whether the socket must close).
  func checkSocketMessage(_ id: WebSocketID, size: Int) -> (reply: JSONValue, close: Bool)? {
    let limits = guards.limits
    if size > limits.webSocketMaxMessageBytes {
      guards.oversizedSocketMessages += 1
      return (
        EventHub.socketError(
          "message_too_large",
          "messages on this socket are limited to \(limits.webSocketMaxMessageBytes) bytes (got \(size)); "
            + "send files with POST /api/v1/sessions/{id}/resources"), true
      )
    }
    if let wait = guards.socketLimiter.check(
      id, perSecond: limits.webSocketMessagesPerSecond, now: Node.monotonicMillis())
    {
      guards.rateLimitedSocketMessages += 1
      var reply = EventHub.socketError(
        "rate_limited",
        "more than \(limits.webSocketMessagesPerSecond) messages per second on this socket; this one was dropped, "
          + "retry after \(wait) s")
      if case .object(var object) = reply, case .object(var data)? = object["data"] {
        data["retryAfterSeconds"] = .int(Int64(wait))
        object["data"] = .object(data)
        reply = .object(object)
      }
      return (reply, false)
    }
    return nil
  }
}
