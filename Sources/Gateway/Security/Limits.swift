/// Rate limits and caps: per-token request rate, browser WebSocket message rate and size.
///
/// Layer 6 (surface). Token buckets refilled from a monotonic clock in milliseconds, kept by the ``Node`` actor
/// (so no locking). A request over its token's rate gets `429` with `Retry-After`; a WebSocket message over the
/// socket's rate gets an `{"type":"error","data":{"code":"rate_limited",…}}` reply and is dropped; one over the
/// size cap gets a `message_too_large` reply and the socket closes with 1009. Each refusal is counted on
/// `/metrics`. The values start from the command line and an admin can change them at run time with
/// `PATCH /api/v1/node/settings`.
import LWS
import MeshCore

/// The limits a node enforces.
public struct Limits: Sendable, Equatable {
  /// Requests per second one peer token may make (a burst of twice that is allowed); 0 turns the limit off.
  public var requestsPerSecond = 20_000
  /// WebSocket messages per second one browser socket may send (a burst of twice that); 0 turns the limit off.
  public var webSocketMessagesPerSecond = 5_000
  /// The largest message a browser socket may send, in bytes.
  public var webSocketMaxMessageBytes = 2 << 20
  /// Peers one client address may create per second (a burst of twice that); 0 turns the limit off.
  public var peerCreationsPerSecond = 10
  /// The most peers this node hosts: by default as many as a linked node accepts from one node (a node with more
  /// is refused whole by its neighbours, so more suits only a node that links with no other).
  public var maxPeers = MeshLimits.peersPerNode

  public init() {}

  /// The most a WebSocket message may be anywhere (the server's reassembly buffer).
  static let webSocketHardLimit = 16 << 20
  /// The most peers a node may be set to host: its peer snapshot frame holds at most 65 536.
  static let maxPeersHardLimit = 50_000

  /// `{requestsPerSecond, webSocketMessagesPerSecond, webSocketMaxMessageBytes, peerCreationsPerSecond, maxPeers}`.
  var json: JSONValue {
    [
      "requestsPerSecond": .int(Int64(requestsPerSecond)),
      "webSocketMessagesPerSecond": .int(Int64(webSocketMessagesPerSecond)),
      "webSocketMaxMessageBytes": .int(Int64(webSocketMaxMessageBytes)),
      "peerCreationsPerSecond": .int(Int64(peerCreationsPerSecond)), "maxPeers": .int(Int64(maxPeers)),
    ]
  }
}

/// A token bucket: `rate` tokens a second up to `capacity`, one taken per request.
struct TokenBucket: Sendable {
  var tokens: Double
  var updatedAt: UInt64

  init(capacity: Double, now: UInt64) {
    tokens = capacity
    updatedAt = now
  }

  /// Takes a token if there is one; otherwise returns the seconds until there will be.
  mutating func take(rate: Double, capacity: Double, now: UInt64) -> Double? {
    if now > updatedAt {
      tokens = min(capacity, tokens + Double(now - updatedAt) / 1000 * rate)
      updatedAt = now
    }
    tokens = min(tokens, capacity)
    if tokens >= 1 {
      tokens -= 1
      return nil
    }
    return (1 - tokens) / rate
  }
}

/// Buckets per key (a peer id or a socket), with the counters `/metrics` shows.
struct RateLimiter<Key: Hashable & Sendable>: Sendable {
  var buckets: [Key: TokenBucket] = [:]

  /// nil when allowed, else the whole seconds to wait (at least 1) for `Retry-After`.
  mutating func check(_ key: Key, perSecond: Int, now: UInt64) -> Int? {
    guard perSecond > 0 else { return nil }
    let rate = Double(perSecond)
    let capacity = rate * 2
    var bucket = buckets[key] ?? TokenBucket(capacity: capacity, now: now)
    let wait = bucket.take(rate: rate, capacity: capacity, now: now)
    buckets[key] = bucket
    guard let wait else { return nil }
    return max(1, Int(wait.rounded(.up)))
  }

  mutating func forget(_ key: Key) {
    buckets[key] = nil
  }

  /// Drops buckets that have refilled completely (they are the same as no bucket) once there are more than
  /// `keep`, so keys from many addresses cannot grow the table without bound.
  /// (A bucket of capacity 2N refills at N per second, so one untouched for 2 s is full.)
  mutating func prune(keep: Int, now: UInt64) {
    guard buckets.count > keep else { return }
    buckets = buckets.filter { now < $0.value.updatedAt + 2_000 }
  }
}

/// Security state of a node: the admin token's hash, the limits in force, the buckets and the refusal counters.
struct SecurityState: Sendable {
  var adminTokenHash: String
  var limits: Limits
  var requestLimiter = RateLimiter<String>()
  /// Keyed by the socket itself: a message's check builds no string.
  var socketLimiter = RateLimiter<WebSocketID>()
  /// Requests refused for their `Host` (421) or `Origin` (403), and WebSocket upgrades refused for `Origin`.
  var hostRefusals = 0
  var originRefusals = 0
  var rateLimitedRequests = 0
  var rateLimitedSocketMessages = 0
  var oversizedSocketMessages = 0
  var adminDenied = 0
}
