import MeshCore

// Transfers and streams in the simulation: not simulated yet. The mesh core delivers their frames to the runtime
// (``MeshEffect/deliver(_:from:)``) after its frame guard, and the gateway's payloads feature acts on them outside
// the core. This is the seam where the simulation will run payloads once their decisions (offers, credit, routing,
// resume) are a sans-I/O book in MeshCore: interpret that book's effects here, as Simulation+Chat.swift does for chat,
// with the bytes kept in a per-node store that survives crashes.

extension Simulation {
  /// A transfer or stream frame reached node `node` from `nodeID`: counted, not acted on.
  func payloadFrame(_ message: MeshMessage, from nodeID: String, on node: Int) {
    stats.payloadFrames += 1
  }
}
