// Simulator scale curve: cold-starts meshes of N nodes (one advertising + browsing peer each) in the deterministic
// MeshCore simulator and prints, per N, virtual time to convergence, frames and bytes sent, and wall time.
// Ratios are against the smallest N measured in the same run, so machine speed cancels out.
//
//   swift run -c release mesh-scale [N ...]      (default: 10 100 500)
import Foundation
import MeshSimulator

let counts = CommandLine.arguments.dropFirst().compactMap { Int($0) }
let nodeCounts = counts.isEmpty ? [10, 100, 500] : counts
var network = NetworkModel()
network.countBytes = true
print("nodes  converged(ms)  frames      bytes         frames/N²  wall(s)  wall ratio")
let results = scaleReport(nodeCounts: nodeCounts, network: network)
let base = results.first
for result in results {
  let converged = result.convergedAfterMillis.map { String($0) } ?? "no"
  let perSquare = Double(result.framesSent) / Double(result.nodes * result.nodes)
  let ratio = base.map { result.wallSeconds / max($0.wallSeconds, 1e-9) } ?? 1
  print(
    String(
      format: "%5ld  %13@  %10ld  %12ld  %9.2f  %7.2f  %9.1fx", result.nodes, converged, result.framesSent,
      result.bytesSent, perSquare, result.wallSeconds, ratio))
}
