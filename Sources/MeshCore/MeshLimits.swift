/// What one linked node may announce to this node (docs/security.md, "What a linked node may do").
///
/// The frame format's own caps (docs/mesh-protocol.md, section 2.5) bound one frame; these bound the state a node
/// keeps for another node across frames. A frame that would break one is refused whole and counted
/// (`meshgate_mesh_frames_refused_total{reason=…}`); the link stays up.
public enum MeshLimits {
  /// Peers one node may announce (its `peerSnapshot`, and its `peerUpdated`s on top). Reason `too_many_peers`.
  public static let peersPerNode = 4096
  /// Service advertisements (peer × service type) one node may announce in all. Reason `too_many_peers`.
  public static let advertisementsPerNode = 8192
  /// Addresses learnt from one node's `nodeDirectory` that this node keeps (and dials at most once each) before
  /// their node answered as itself. Further entries are refused with reason `too_many_nodes`.
  public static let gossipAddressesPerNode = 32
  /// Invitations from one node that may be pending here at once. Reason `too_many_invitations`.
  public static let pendingInvitationsPerNode = 256
  /// Gossiped addresses dialled at the same time, over all nodes.
  public static let gossipDialsInFlight = 4
  /// Dials of a gossiped address before it first answered as its node; then it is forgotten.
  public static let gossipDialAttempts = 3
  /// Peer ids whose node left (without removing them) that this node remembers as that node's: until forgotten
  /// (oldest first beyond this many, or when the node removes the peer), another node announcing one is refused with
  /// reason `not_own_peer`.
  public static let rememberedOwners = 65_536
}
