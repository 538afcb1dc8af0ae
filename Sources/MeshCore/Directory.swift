/// The mesh-wide peer directory: who exists, who advertises which service, who browses for it.
///
/// This is MultipeerConnectivity's `MCNearbyServiceAdvertiser` / `MCNearbyServiceBrowser` (and Nearby's
/// advertiser / discoverer) as a sans-I/O state machine. A node is the authority for its own peers; it learns
/// about other nodes' peers only from their `peerSnapshot` / `peerUpdated` / `peerRemoved` frames, and forgets
/// them the moment the link to their node goes down. Every command returns ``Directive``s: frames to send and
/// events for local peers (`peer.found` / `peer.lost`). Nothing here does I/O or reads a clock, so the same
/// code runs in the node and in the in-process simulator.
///
/// Browsing semantics (what a user of MCNearbyServiceBrowser expects):
/// - A peer browsing service `S` is told `found` for every peer advertising `S` anywhere in the mesh, itself
///   excluded: all current advertisers when it starts browsing, and each new one as it appears.
/// - `lost` follows when the advertiser stops advertising `S`, leaves, or its node's link goes down.
/// - Changing the discovery info of a running advertisement reports `found` again with the new info.
/// - Order is deterministic (sorted by peer id and service type), so the simulator is reproducible.
///
/// Presence is not an advert: every peer the directory knows, local or remote, is present, whatever it advertises.
/// A local peer watching presence is told `present` for every present peer when it starts (itself excluded), then
/// `present` as peers appear or change their display name, and `absent` as they leave or their node's link goes down.
public struct Directory: Sendable {
  /// A peer as browsers see it.
  public struct PeerRef: Sendable, Hashable {
    /// The peer id.
    public var peerID: String
    /// The display name.
    public var displayName: String
    /// The node hosting it.
    public var nodeID: String

    public init(peerID: String, displayName: String, nodeID: String) {
      self.peerID = peerID
      self.displayName = displayName
      self.nodeID = nodeID
    }
  }

  /// What a local peer is told.
  public enum Event: Sendable, Hashable {
    case peerFound(PeerRef, serviceType: String, discoveryInfo: [String: String])
    case peerLost(PeerRef, serviceType: String)
    /// A peer appeared in the mesh, or changed its display name (to a peer watching presence).
    case peerPresent(PeerRef)
    /// A peer left the mesh, or its node's link went down (to a peer watching presence).
    case peerAbsent(PeerRef)
  }

  /// An output of the directory.
  public enum Directive: Sendable, Hashable {
    /// Send a frame to every linked node.
    case broadcast(MeshMessage)
    /// Send a frame to one node.
    case send(MeshMessage, to: String)
    /// Tell a local peer.
    case notify(peerID: String, Event)
  }

  struct LocalPeer: Sendable {
    var displayName: String
    var advertising: [String: [String: String]] = [:]
    var browsing: Set<String> = []
  }

  /// This node's id.
  public let nodeID: String
  var localPeers: [String: LocalPeer] = [:]
  /// The local peers watching presence (few: the dashboards open now), so a change does not walk every local peer.
  var presenceWatchers: Set<String> = []
  /// Linked nodes and the peers they announced.
  var remoteNodes: [String: [String: PeerAnnouncement]] = [:]
  /// Which linked node announced each remote peer (the first claim of a peer id wins).
  var owners: [String: String] = [:]
  /// Which node owned each remote peer whose node unlinked without removing it: while remembered, only that node may
  /// announce the peer id again (another node taking over a departed node's peer id would borrow the trust its
  /// recipients gave that peer). A peer its node removed (`peerRemoved`) is forgotten. At most
  /// ``MeshLimits/rememberedOwners`` entries, the oldest forgotten first.
  var formerOwners: [String: String] = [:]
  /// ``formerOwners``' peer ids, oldest first (an id may appear again after it was reclaimed; stale ones are skipped).
  var formerOwnerOrder: [String] = []
  /// Directory frames refused, by reason: `too_many_peers` (beyond ``MeshLimits/peersPerNode`` or
  /// ``MeshLimits/advertisementsPerNode``), `invalid_peer` (a display name, service type or discovery info that breaks
  /// the rules a local peer is held to), `not_own_peer` (a peer id another node already announced).
  public private(set) var refusals: [String: Int] = [:]

  public init(nodeID: String) {
    self.nodeID = nodeID
  }

  // MARK: - Queries

  /// The ids of the nodes currently linked.
  public var linkedNodes: [String] { remoteNodes.keys.sorted() }

  /// Every peer advertising `serviceType`, mesh-wide, except `excluding`, sorted by peer id.
  public func advertisers(of serviceType: String, excluding: String? = nil) -> [(
    peer: PeerRef, discoveryInfo: [String: String]
  )] {
    var result: [(peer: PeerRef, discoveryInfo: [String: String])] = []
    for (peerID, peer) in localPeers where peerID != excluding {
      if let info = peer.advertising[serviceType] {
        result.append((PeerRef(peerID: peerID, displayName: peer.displayName, nodeID: nodeID), info))
      }
    }
    for (remoteNode, peers) in remoteNodes {
      for (peerID, announcement) in peers where peerID != excluding {
        if let info = announcement.advertising[serviceType] {
          result.append((PeerRef(peerID: peerID, displayName: announcement.displayName, nodeID: remoteNode), info))
        }
      }
    }
    return result.sorted { $0.peer.peerID < $1.peer.peerID }
  }

  /// The services `peerID` (a local peer) advertises, with their discovery info.
  public func advertising(of peerID: String) -> [String: [String: String]] {
    localPeers[peerID]?.advertising ?? [:]
  }

  /// The services `peerID` (a local peer) browses for.
  public func browsing(of peerID: String) -> Set<String> {
    localPeers[peerID]?.browsing ?? []
  }

  /// Every peer known mesh-wide (local and remote), except `excluding`, sorted by peer id.
  public func presentPeers(excluding: String? = nil) -> [PeerRef] {
    var result: [PeerRef] = []
    for (peerID, peer) in localPeers where peerID != excluding {
      result.append(PeerRef(peerID: peerID, displayName: peer.displayName, nodeID: nodeID))
    }
    for (remoteNode, peers) in remoteNodes {
      for (peerID, announcement) in peers where peerID != excluding && owners[peerID] == remoteNode {
        result.append(PeerRef(peerID: peerID, displayName: announcement.displayName, nodeID: remoteNode))
      }
    }
    return result.sorted { $0.peerID < $1.peerID }
  }

  /// Whether `peerID` (a local peer) watches presence.
  public func watchesPresence(_ peerID: String) -> Bool {
    presenceWatchers.contains(peerID)
  }

  /// Any peer known mesh-wide.
  public func peer(_ peerID: String) -> PeerRef? {
    if let local = localPeers[peerID] {
      return PeerRef(peerID: peerID, displayName: local.displayName, nodeID: nodeID)
    }
    if let remoteNode = owners[peerID], let announcement = remoteNodes[remoteNode]?[peerID] {
      return PeerRef(peerID: peerID, displayName: announcement.displayName, nodeID: remoteNode)
    }
    return nil
  }

  /// Whether `peerID` is hosted on this node.
  public func isLocal(_ peerID: String) -> Bool { localPeers[peerID] != nil }

  /// The number of peers known mesh-wide (local and remote).
  public var knownPeerCount: Int { localPeers.count + remoteNodes.values.reduce(0) { $0 + $1.count } }

  /// What this node announces about its peers (the snapshot sent to a newly linked node).
  public var snapshot: [PeerAnnouncement] {
    localPeers.keys.sorted().map { announcement(of: $0)! }
  }

  func announcement(of peerID: String) -> PeerAnnouncement? {
    guard let peer = localPeers[peerID] else { return nil }
    return PeerAnnouncement(peerID: peerID, displayName: peer.displayName, advertising: peer.advertising)
  }

  // MARK: - Local commands

  /// A peer was created on this node (or loaded at start-up).
  public mutating func addLocalPeer(_ peerID: String, displayName: String) -> [Directive] {
    guard localPeers[peerID] == nil else { return renameLocalPeer(peerID, displayName: displayName) }
    var directives: [Directive] = []
    // A remote claim on this id made before the peer existed here is dropped: the local peer wins.
    for remoteNode in remoteNodes.keys.sorted() {
      if let claim = remoteNodes[remoteNode]?.removeValue(forKey: peerID) {
        owners[peerID] = nil
        let ref = PeerRef(peerID: peerID, displayName: claim.displayName, nodeID: remoteNode)
        appendChanges(for: ref, from: claim.advertising, to: [:], into: &directives)
      }
    }
    localPeers[peerID] = LocalPeer(displayName: displayName)
    appendPresence(.peerPresent(PeerRef(peerID: peerID, displayName: displayName, nodeID: nodeID)), into: &directives)
    directives.append(.broadcast(.peerUpdated(announcement(of: peerID)!)))
    return directives
  }

  /// A local peer changed its display name. Browsers are not re-notified (an MCPeerID never changes);
  /// new `found` events carry the new name.
  public mutating func renameLocalPeer(_ peerID: String, displayName: String) -> [Directive] {
    guard let old = localPeers[peerID]?.displayName else { return [] }
    localPeers[peerID]?.displayName = displayName
    var directives: [Directive] = []
    if old != displayName {
      appendPresence(.peerPresent(PeerRef(peerID: peerID, displayName: displayName, nodeID: nodeID)), into: &directives)
    }
    directives.append(.broadcast(.peerUpdated(announcement(of: peerID)!)))
    return directives
  }

  /// A local peer left: its advertisements end (browsers get `lost`) and the mesh forgets it.
  public mutating func removeLocalPeer(_ peerID: String) -> [Directive] {
    guard let peer = localPeers.removeValue(forKey: peerID) else { return [] }
    presenceWatchers.remove(peerID)
    var directives: [Directive] = []
    let ref = PeerRef(peerID: peerID, displayName: peer.displayName, nodeID: nodeID)
    appendChanges(for: ref, from: peer.advertising, to: [:], into: &directives)
    appendPresence(.peerAbsent(ref), into: &directives)
    directives.append(.broadcast(.peerRemoved(peerID: peerID)))
    return directives
  }

  /// A local peer starts (or updates) advertising `serviceType`.
  public mutating func startAdvertising(_ peerID: String, serviceType: String, discoveryInfo: [String: String])
    -> [Directive]
  {
    guard let peer = localPeers[peerID] else { return [] }
    let old = peer.advertising
    localPeers[peerID]?.advertising[serviceType] = discoveryInfo
    var directives: [Directive] = []
    let ref = PeerRef(peerID: peerID, displayName: peer.displayName, nodeID: nodeID)
    appendChanges(for: ref, from: old, to: localPeers[peerID]!.advertising, into: &directives)
    if old != localPeers[peerID]!.advertising {
      directives.append(.broadcast(.peerUpdated(announcement(of: peerID)!)))
    }
    return directives
  }

  /// A local peer stops advertising `serviceType`.
  public mutating func stopAdvertising(_ peerID: String, serviceType: String) -> [Directive] {
    guard let peer = localPeers[peerID], peer.advertising[serviceType] != nil else { return [] }
    localPeers[peerID]?.advertising[serviceType] = nil
    var directives: [Directive] = []
    let ref = PeerRef(peerID: peerID, displayName: peer.displayName, nodeID: nodeID)
    appendChanges(for: ref, from: peer.advertising, to: localPeers[peerID]!.advertising, into: &directives)
    directives.append(.broadcast(.peerUpdated(announcement(of: peerID)!)))
    return directives
  }

  /// A local peer starts browsing `serviceType`: it is told about every current advertiser.
  public mutating func startBrowsing(_ peerID: String, serviceType: String) -> [Directive] {
    guard localPeers[peerID] != nil, !localPeers[peerID]!.browsing.contains(serviceType) else { return [] }
    localPeers[peerID]?.browsing.insert(serviceType)
    var directives: [Directive] = []
    for advertiser in advertisers(of: serviceType, excluding: peerID) {
      directives.append(
        .notify(
          peerID: peerID,
          .peerFound(advertiser.peer, serviceType: serviceType, discoveryInfo: advertiser.discoveryInfo)))
    }
    return directives
  }

  /// A local peer starts watching presence: it is told about every present peer.
  public mutating func startWatchingPresence(_ peerID: String) -> [Directive] {
    guard localPeers[peerID] != nil, presenceWatchers.insert(peerID).inserted else { return [] }
    var directives: [Directive] = []
    for peer in presentPeers(excluding: peerID) { directives.append(.notify(peerID: peerID, .peerPresent(peer))) }
    return directives
  }

  /// A local peer stops watching presence.
  public mutating func stopWatchingPresence(_ peerID: String) -> [Directive] {
    presenceWatchers.remove(peerID)
    return []
  }

  /// A local peer stops browsing `serviceType`.
  public mutating func stopBrowsing(_ peerID: String, serviceType: String) -> [Directive] {
    localPeers[peerID]?.browsing.remove(serviceType)
    return []
  }

  // MARK: - Links

  /// A link to `remoteNode` completed its handshake: send it our snapshot.
  public mutating func nodeLinked(_ remoteNode: String) -> [Directive] {
    guard remoteNode != nodeID else { return [] }
    if remoteNodes[remoteNode] == nil { remoteNodes[remoteNode] = [:] }
    var directives: [Directive] = []
    directives.append(.send(.peerSnapshot(snapshot), to: remoteNode))
    return directives
  }

  /// The link to `remoteNode` is gone: its peers are lost to every local browser.
  public mutating func nodeUnlinked(_ remoteNode: String) -> [Directive] {
    guard let peers = remoteNodes.removeValue(forKey: remoteNode) else { return [] }
    var directives: [Directive] = []
    for peerID in peers.keys.sorted() where owners[peerID] == remoteNode {
      owners[peerID] = nil
      rememberOwner(peerID, remoteNode)
    }
    for peerID in peers.keys.sorted() where localPeers[peerID] == nil {
      let announcement = peers[peerID]!
      let ref = PeerRef(peerID: peerID, displayName: announcement.displayName, nodeID: remoteNode)
      appendChanges(for: ref, from: announcement.advertising, to: [:], into: &directives)
      appendPresence(.peerAbsent(ref), into: &directives)
    }
    return directives
  }

  /// A directory frame arrived from a linked node. Frames from unlinked nodes are ignored.
  public mutating func received(_ message: MeshMessage, from remoteNode: String) -> [Directive] {
    guard remoteNodes[remoteNode] != nil else { return [] }
    var directives: [Directive] = []
    switch message {
    case .peerSnapshot(let announcements):
      // A snapshot replaces all the node announced, so it is checked whole: beyond the limits or with an invalid
      // announcement it is refused and the node keeps what it had.
      guard announcements.count <= MeshLimits.peersPerNode,
        announcements.reduce(0, { $0 + $1.advertising.count }) <= MeshLimits.advertisementsPerNode
      else {
        refusals["too_many_peers", default: 0] += 1
        return directives
      }
      guard announcements.allSatisfy(Self.isValid) else {
        refusals["invalid_peer", default: 0] += 1
        return directives
      }
      var incoming: [String: PeerAnnouncement] = [:]
      for announcement in announcements where claimable(announcement.peerID, by: remoteNode) {
        incoming[announcement.peerID] = announcement
      }
      if incoming.count != announcements.count { refusals["not_own_peer", default: 0] += 1 }
      let known = remoteNodes[remoteNode]!
      for peerID in Set(known.keys).union(incoming.keys).sorted() {
        applyRemote(peerID, old: known[peerID], new: incoming[peerID], node: remoteNode, into: &directives)
      }
    case .peerUpdated(let announcement):
      guard Self.isValid(announcement) else {
        refusals["invalid_peer", default: 0] += 1
        return directives
      }
      guard claimable(announcement.peerID, by: remoteNode) else {
        refusals["not_own_peer", default: 0] += 1
        return directives
      }
      let known = remoteNodes[remoteNode]!
      let advertisements =
        known.values.reduce(0) { $0 + $1.advertising.count } - (known[announcement.peerID]?.advertising.count ?? 0)
        + announcement.advertising.count
      guard known[announcement.peerID] != nil || known.count < MeshLimits.peersPerNode,
        advertisements <= MeshLimits.advertisementsPerNode
      else {
        refusals["too_many_peers", default: 0] += 1
        return directives
      }
      applyRemote(
        announcement.peerID, old: remoteNodes[remoteNode]![announcement.peerID], new: announcement, node: remoteNode,
        into: &directives)
    case .peerRemoved(let peerID):
      applyRemote(peerID, old: remoteNodes[remoteNode]![peerID], new: nil, node: remoteNode, into: &directives)
    default:
      break
    }
    return directives
  }

  mutating func applyRemote(
    _ peerID: String, old: PeerAnnouncement?, new: PeerAnnouncement?, node remoteNode: String,
    into directives: inout [Directive]
  ) {
    // A peer id claimed by this node's own peer, or first by another node, is never shadowed by a remote claim.
    guard localPeers[peerID] == nil, claimable(peerID, by: remoteNode) else { return }
    remoteNodes[remoteNode]![peerID] = new
    owners[peerID] = new == nil ? nil : remoteNode
    formerOwners[peerID] = nil
    let name = new?.displayName ?? old?.displayName ?? ""
    let ref = PeerRef(peerID: peerID, displayName: name, nodeID: remoteNode)
    appendChanges(for: ref, from: old?.advertising ?? [:], to: new?.advertising ?? [:], into: &directives)
    if new == nil {
      if old != nil { appendPresence(.peerAbsent(ref), into: &directives) }
    } else if old?.displayName != new?.displayName {
      appendPresence(.peerPresent(ref), into: &directives)
    }
  }

  /// Tells every local peer watching presence (the peer itself excluded) that `event` happened.
  func appendPresence(_ event: Event, into directives: inout [Directive]) {
    let subject: String
    switch event {
    case .peerPresent(let peer), .peerAbsent(let peer): subject = peer.peerID
    case .peerFound, .peerLost: return
    }
    guard !presenceWatchers.isEmpty else { return }
    for watcher in presenceWatchers.sorted() where watcher != subject {
      directives.append(.notify(peerID: watcher, event))
    }
  }

  /// Whether `remoteNode` may announce `peerID`: no local peer and no other linked node has it, and no other node
  /// owned it when that node left.
  func claimable(_ peerID: String, by remoteNode: String) -> Bool {
    localPeers[peerID] == nil && (owners[peerID] == nil || owners[peerID] == remoteNode)
      && (formerOwners[peerID] == nil || formerOwners[peerID] == remoteNode)
  }

  /// Remembers that `remoteNode` owned `peerID` when it left (``formerOwners``), forgetting the oldest beyond the
  /// bound.
  mutating func rememberOwner(_ peerID: String, _ remoteNode: String) {
    formerOwners[peerID] = remoteNode
    formerOwnerOrder.append(peerID)
    while formerOwners.count > MeshLimits.rememberedOwners, !formerOwnerOrder.isEmpty {
      formerOwners[formerOwnerOrder.removeFirst()] = nil
    }
    // Ids reclaimed since they were queued leave stale entries behind; compact when they dominate.
    if formerOwnerOrder.count > 2 * max(formerOwners.count, 1024) {
      formerOwnerOrder.removeAll { formerOwners[$0] == nil }
    }
  }

  /// Whether a remote announcement keeps the rules a local peer is held to (DESIGN.md, "Identity, names and
  /// limits"): a valid display name, service types and discovery info.
  static func isValid(_ announcement: PeerAnnouncement) -> Bool {
    guard (try? Validate.displayName(announcement.displayName)) != nil else { return false }
    for (serviceType, info) in announcement.advertising {
      guard (try? Validate.serviceType(serviceType)) != nil, (try? Validate.discoveryInfo(info)) != nil else {
        return false
      }
    }
    return true
  }

  /// Emits `found` / `lost` to local browsers for the difference between two advertisement sets of one peer.
  func appendChanges(
    for peer: PeerRef, from old: [String: [String: String]], to new: [String: [String: String]],
    into directives: inout [Directive]
  ) {
    for serviceType in Set(old.keys).union(new.keys).sorted() {
      let before = old[serviceType]
      let after = new[serviceType]
      guard before != after else { continue }
      for browser in browsers(of: serviceType, excluding: peer.peerID) {
        if let after {
          directives.append(
            .notify(peerID: browser, .peerFound(peer, serviceType: serviceType, discoveryInfo: after)))
        } else {
          directives.append(.notify(peerID: browser, .peerLost(peer, serviceType: serviceType)))
        }
      }
    }
  }

  func browsers(of serviceType: String, excluding: String) -> [String] {
    localPeers.filter { $0.key != excluding && $0.value.browsing.contains(serviceType) }.keys.sorted()
  }
}
