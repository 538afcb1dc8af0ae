public import MeshCore

// Transceive (`POST /api/v1/transceive`, `TransceiveFeature`) on simulated nodes: each node's ``TransceiveBook``
// is wired the way the node runtime wires it — reconciled when the directory tells a local peer something and every
// ``Simulation/transceiveEveryTicks`` ticks, and told about every invitation a local peer receives.

extension Simulation {
  /// Node ticks between two periodic reconciliations (the runtime reconciles once a second, every 10th tick).
  static let transceiveEveryTicks = 10

  /// `POST /transceive {serviceType}` by `peerID`: advertise with `transceive=1` (persisted, like every
  /// advertisement), browse, transceive.
  public func transceive(_ peerID: String, serviceType: String) {
    let node = liveHome(peerID)
    var info = nodes[node].mesh.directory.advertising(of: peerID)[serviceType] ?? [:]
    info[TransceiveBook.discoveryKey] = "1"
    advertise(peerID, serviceType: serviceType, discoveryInfo: info)
    browse(peerID, serviceType: serviceType)
    transceiveBooks[node].start(Transceiver(peerID: peerID, serviceType: serviceType))
    reconcileTransceivers(on: node)
  }

  /// The leader `peerID` sees for `serviceType` (what `POST /transceive` reports).
  public func transceiveLeader(of serviceType: String, seenBy peerID: String) -> String {
    TransceiveBook.leader(of: serviceType, including: peerID, in: nodes[liveHome(peerID)].mesh.directory)
  }

  /// The session `peerID` transceives `serviceType` in, as its node's transceive book records it.
  public func transceiveSession(of peerID: String, serviceType: String) -> String? {
    let node = home(peerID)
    guard nodes[node].alive else { return nil }
    return transceiveBooks[node].session(of: Transceiver(peerID: peerID, serviceType: serviceType))
  }

  /// The transceive book of node `index` (empty for a crashed node).
  public func transceivers(on index: Int) -> Set<Transceiver> {
    nodes[index].alive ? transceiveBooks[index].transceivers : []
  }

  func reconcileTransceivers(on node: Int) {
    guard nodes[node].alive, !transceiveBooks[node].transceivers.isEmpty else { return }
    let effects = nodes[node].mesh.reconcile(&transceiveBooks[node], now: now, newID: { self.nextTransceiveID() })
    for sessionID in transceiveBooks[node].sessionOf.values.sorted() where sessionHosts[sessionID] == nil {
      if nodes[node].mesh.sessions.sessions[sessionID]?.hostNodeID == nodes[node].nodeID {
        sessionHosts[sessionID] = node
        transceiveSessions.insert(sessionID)
      }
    }
    interpret(effects, on: node)
  }

  func transceiverReceived(_ invitation: SessionBook.Invitation, on node: Int) {
    guard nodes[node].alive, !transceiveBooks[node].transceivers.isEmpty else { return }
    interpret(nodes[node].mesh.transceiverInvited(invitation, book: &transceiveBooks[node], now: now), on: node)
  }

  /// The ids transceive books ask for, sessions and invitations alike: `t1`, `t2` …
  func nextTransceiveID() -> String {
    let id = "t\(nextSessionNumber)"
    nextSessionNumber += 1
    return id
  }
}
