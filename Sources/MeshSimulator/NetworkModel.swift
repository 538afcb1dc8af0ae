public import MeshCore

/// How the simulated LAN behaves. Times are virtual milliseconds.
///
/// Connections behave like TCP under a WebSocket: frames on a live connection arrive in order and are never
/// silently lost. Loss is modelled the way TCP surfaces it: a frame that is "lost" takes its connection down
/// (both ends are told it closed, after a delay), and the link managers must reconnect. A partition stalls the
/// frames crossing it (they are delivered in order when it heals, unless the connection was closed first), makes
/// dials across it time out and stops beacons, so links across it die of silence.
public struct NetworkModel: Sendable {
  /// How nodes learn each other's addresses.
  public enum Discovery: Sendable, Hashable {
    /// Every node hears every other node's multicast beacon (within its partition) every ``beaconInterval``.
    case beacon
    /// Static seeds: node `i` seeds `i - 1` and `i + 1` (so neighbours dial each other at once).
    case seedRing
    /// Static seeds: every node except the hub seeds the hub, which seeds nobody.
    case seedStar(hub: Int)
    /// Static seeds: every node seeds every other (both sides of every pair dial).
    case seedFull
  }

  /// How the peers of a crashed node find out.
  public enum CrashDetection: Sendable, Hashable {
    /// The machine vanished: its connections go silent and die by heartbeat timeout; dials to it time out.
    case silence
    /// Only the process died: the kernel resets its connections (peers see a close after one frame delay) and
    /// refuses dials to it.
    case reset
  }

  /// Shortest one-way frame delay.
  public var minDelay: UInt64 = 1
  /// Longest one-way frame delay.
  public var maxDelay: UInt64 = 5
  /// Shortest time from a dial to an open connection (TCP + WebSocket upgrade).
  public var minConnectDelay: UInt64 = 2
  /// Longest time from a dial to an open connection.
  public var maxConnectDelay: UInt64 = 10
  /// After how long a dial into a partition (or to a vanished machine) fails.
  public var unreachableDialTimeout: UInt64 = 3000
  /// Whether a dial into a partition waits, as TCP retransmits its SYN, and connects as soon as the partition heals
  /// (within ``unreachableDialTimeout``; it fails after that). Nodes that both dial each other during a partition then
  /// connect twice at the heal, as on a real network, and resolve a duplicate link.
  public var dialsWaitAtPartitions = false
  /// Per-frame probability that the frame is lost and its connection reset (0 ... 1).
  public var loss: Double = 0
  /// Whether a node that closes a connection resets it instead of shutting it down cleanly, as Linux does when the
  /// closing side still has unread data: what was on its way to the other end, the closing node's `goodbye` included,
  /// is lost, and the other end sees only the close. So a link one node closes as a duplicate (and sees move to the
  /// new connection) may go down and come back on the other node.
  public var closeResets = false
  /// How peers notice a crash.
  public var crashDetection: CrashDetection = .silence
  /// How addresses are discovered.
  public var discovery: Discovery = .beacon
  /// How often each node announces itself on the beacon.
  public var beaconInterval: UInt64 = 1000
  /// How often each node's link manager ticks (the runtime's timer).
  public var tickInterval: UInt64 = 100
  /// Encode every frame with ``MeshFrameCodec`` to count bytes (slower).
  public var countBytes = false
  /// The link managers' timing.
  public var links = LinkManager.Configuration()
  /// Whether links run over TLS (each node presents certificate `cert-<node id>`; nothing is pinned or refused).
  /// Chat rooms are `encryption: required`: chat only runs over such links.
  public var tls = false

  public init() {}
}
