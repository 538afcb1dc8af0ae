/// One row of ``scaleReport(nodeCounts:seed:network:maxTime:)``.
public struct ScaleResult: Sendable, Equatable {
  /// The number of nodes.
  public var nodes: Int
  /// Virtual milliseconds from a cold start until every browser saw every advertiser (nil: did not converge).
  public var convergedAfterMillis: UInt64?
  /// Frames sent until convergence (handshakes, snapshots, heartbeats and their acks).
  public var framesSent: Int
  /// Encoded bytes sent until convergence (0 unless the network model counts bytes).
  public var bytesSent: Int
  /// Simulation events processed, including the quiet second used to confirm convergence.
  public var events: Int
  /// Wall-clock seconds the run took, including the quiet second.
  public var wallSeconds: Double
}

/// Cold-starts a mesh of each size (one peer per node, each advertising `svc` with its own discovery info and
/// browsing `svc`) and measures how long it takes until every browser has found every other peer.
public func scaleReport(
  nodeCounts: [Int], seed: UInt64 = 1, network: NetworkModel = NetworkModel(), maxTime: UInt64 = 60_000
) -> [ScaleResult] {
  var results: [ScaleResult] = []
  for count in nodeCounts {
    let clock = ContinuousClock()
    let started = clock.now
    let simulation = Simulation(seed: seed, nodeCount: count, network: network)
    for node in 0..<count {
      let peerID = "p\(node)"
      simulation.addPeer(node: node, peerID: peerID, name: "Peer \(node)")
      simulation.advertise(peerID, serviceType: "svc", discoveryInfo: ["n": "\(node)"])
      simulation.browse(peerID, serviceType: "svc")
    }
    let converged = simulation.runUntilQuiet(maxTime: maxTime)
    let elapsed = clock.now - started
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    let stats = converged == nil ? simulation.stats : simulation.statsAtLastChange
    results.append(
      ScaleResult(
        nodes: count, convergedAfterMillis: converged, framesSent: stats.framesSent, bytesSent: stats.bytesSent,
        events: simulation.stats.events, wallSeconds: seconds))
  }
  return results
}
