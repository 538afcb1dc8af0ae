import Foundation

// The one harness that runs several real nodes for a test (`withNodes`, and `withNode` for one), with the mesh
// helpers it needs: seeding (`MeshSeeds`), the mesh-nodes view (`meshNodes()`) and waiting for links (`awaitLinks`).

// MARK: - Scoped nodes

/// Starts one node, runs `body`, and always stops and cleans it up afterwards; see `withNodes`.
public func withNode<T>(
  arguments: [String] = [], environment: [String: String] = [:], name: String? = nil,
  startTimeout: Duration = .seconds(15), isolation: isolated (any Actor)? = #isolation,
  _ body: (NodeProcess) async throws -> T
) async throws -> T {
  try await withNodes(
    count: 1, arguments: arguments, environment: environment, names: name.map { [$0] },
    startTimeout: startTimeout
  ) { nodes in
    try await body(nodes[0])
  }
}

/// Starts `count` real `meshgate` nodes (each with a server-chosen port and, unless given one, its own temporary data
/// directory), runs `body` with them, then always stops (SIGTERM, SIGKILL after 10 s) and cleans up every node, even
/// when starting or `body` throws.
///
/// - Parameters:
///   - arguments: extra arguments for every node.
///   - perNodeArguments: further arguments for node `i` (0-based), appended after `arguments`.
///   - environment: extra environment variables for every node.
///   - names: `--name` for node `i`; defaults to `node0`, `node1`, ...
///   - dataDirectories: the data directory of node `i` (nil: a fresh temporary one, removed afterwards); a given
///     directory is kept.
///   - seeds: nil starts the nodes concurrently and seeds none of them (they find each other only if their
///     arguments say how, e.g. by beacon or DNS-SD). Given, the nodes start one after another and node `i` gets
///     `--peer <address>` for each node in `seeds.nodes(i)`, which must all be lower-numbered (already running):
///     ports are chosen by the servers, so no test ever guesses a free port that another process could take.
///   - linked: whether to wait, before `body`, until every node reports every other one as linked (`awaitLinks`,
///     bounded at 20 s).
///   - startTimeout: how long each node may take to print its ready line.
///
/// If starting (or linking) fails or `body` throws, each node's stderr tail is printed to standard output before the
/// error is rethrown. Set `MESHGATE_KEEP_TEST_DATA=1` to keep data directories and logs (their paths are printed).
public func withNodes<T>(
  count: Int, arguments: [String] = [], perNodeArguments: (Int) -> [String] = { _ in [] },
  environment: [String: String] = [:], names: [String]? = nil, dataDirectories: [String?]? = nil,
  seeds: MeshSeeds? = nil, linked: Bool = false, startTimeout: Duration = .seconds(15),
  isolation: isolated (any Actor)? = #isolation, _ body: ([NodeProcess]) async throws -> T
) async throws -> T {
  var nodes: [NodeProcess] = []
  func makeNode(_ index: Int, seedArguments: [String]) throws -> NodeProcess {
    try NodeProcess(
      arguments: arguments + perNodeArguments(index) + seedArguments, environment: environment,
      dataDirectory: dataDirectories?[index] ?? nil, name: names.map { $0[index] } ?? "node\(index)")
  }
  var stage = "starting \(count) node(s)"
  do {
    if let seeds {
      for index in 0..<count {
        let seedIndices = seeds.nodes(index)
        guard seedIndices.allSatisfy({ (0..<index).contains($0) }) else {
          throw TestSupportError.process(
            "node \(index) is seeded with nodes \(seedIndices); only lower-numbered nodes, which start first, can be")
        }
        let node = try makeNode(index, seedArguments: seedIndices.flatMap { ["--peer", nodes[$0].meshAddress] })
        nodes.append(node)
        try await onDedicatedThread { try node.start(timeout: startTimeout) }
      }
    } else {
      for index in 0..<count { nodes.append(try makeNode(index, seedArguments: [])) }
      try await withThrowingTaskGroup(of: Void.self) { group in
        for node in nodes {
          group.addTask { try await onDedicatedThread { try node.start(timeout: startTimeout) } }
        }
        try await group.waitForAll()
      }
    }
    if linked {
      stage = "linking \(count) node(s)"
      try await awaitLinks(nodes)
    }
  } catch {
    dumpLogs(of: nodes, because: "\(stage) failed: \(error)")
    await teardown(nodes)
    throw error
  }
  let result: T
  do {
    result = try await body(nodes)
  } catch {
    dumpLogs(of: nodes, because: "the test body threw: \(error)")
    await teardown(nodes)
    throw error
  }
  await teardown(nodes)
  return result
}

/// Which running nodes `withNodes` gives each node as `--peer` seeds: node `i` dials the nodes `nodes(i)`, which must
/// all be lower-numbered than `i` (with seeds, nodes start in order).
public struct MeshSeeds {
  /// The indices of the nodes that node `i` is seeded with.
  public let nodes: (Int) -> [Int]

  public init(_ nodes: @escaping (Int) -> [Int]) {
    self.nodes = nodes
  }

  /// Every earlier node: node `i` dials nodes `0..<i`, a full mesh from the start.
  public static var allEarlier: MeshSeeds { MeshSeeds { Array(0..<$0) } }
  /// The previous node only: a chain 0 – 1 – 2 …, the other links come from gossip.
  public static var previous: MeshSeeds { MeshSeeds { $0 == 0 ? [] : [$0 - 1] } }
  /// Node 0 only: a star around node 0, the other links come from gossip.
  public static var first: MeshSeeds { MeshSeeds { $0 == 0 ? [] : [0] } }
}

private func dumpLogs(of nodes: [NodeProcess], because reason: String) {
  var text = "=== meshgate test support: \(reason)\n"
  for (index, node) in nodes.enumerated() {
    text += "=== node \(index) \(node.describe()) stderr tail (\(node.stderrPath)):\n\(node.logTail(lines: 40))\n"
    let out = node.stdoutTail(lines: 10)
    if !out.isEmpty { text += "=== node \(index) stdout tail:\n\(out)\n" }
  }
  print(text, terminator: "")
}

private func teardown(_ nodes: [NodeProcess]) async {
  let keep = ProcessInfo.processInfo.environment["MESHGATE_KEEP_TEST_DATA"].map { !$0.isEmpty && $0 != "0" } ?? false
  await withTaskGroup(of: Void.self) { group in
    for node in nodes {
      group.addTask {
        do {
          if node.isRunning { _ = try await onDedicatedThread { try node.stop() } }
        } catch {
          print("=== meshgate test support: stopping \(node.describe()) failed: \(error)")
        }
        if keep {
          print("=== meshgate test support: kept \(node.dataDirectory), \(node.stdoutPath), \(node.stderrPath)")
          node.kill9()
        } else {
          node.cleanup()
        }
      }
    }
  }
}

// MARK: - Mesh links

/// One entry of `GET /api/v1/mesh/nodes`.
public struct MeshNodeEntry: Sendable {
  public let id: String?
  public let name: String?
  public let address: String?
  public let state: String
  public let rttMillis: Int?
  public let source: String?
  public let direction: String?
}

extension NodeProcess {
  /// `127.0.0.1:<port>`, the address other nodes dial (what `MeshSeeds` passes as `--peer`).
  public var meshAddress: String { "127.0.0.1:\(port)" }

  /// `GET /api/v1/mesh/nodes` → its `self` object (as `local`) and the nodes.
  public func meshNodes() throws -> (local: [String: Any], nodes: [MeshNodeEntry]) {
    let response = try HTTPClient.get(port: port, path: "/api/v1/mesh/nodes")
    guard response.status == 200 else {
      throw TestSupportError.unexpectedMessage("GET /api/v1/mesh/nodes on \(describe()) answered \(response)")
    }
    let object = try response.jsonObject()
    let nodes = (object["nodes"] as? [[String: Any]] ?? []).map { entry in
      MeshNodeEntry(
        id: entry["id"] as? String, name: entry["name"] as? String, address: entry["address"] as? String,
        state: entry["state"] as? String ?? "?", rttMillis: entry["rttMillis"] as? Int,
        source: entry["source"] as? String, direction: entry["direction"] as? String)
    }
    return (object["self"] as? [String: Any] ?? [:], nodes)
  }

  /// The ids of the nodes this node reports as `linked`.
  public func linkedNodeIDs() throws -> Set<String> {
    Set(try meshNodes().nodes.filter { $0.state == "linked" }.compactMap(\.id))
  }
}

/// Waits until every node in `nodes` reports each pair in `pairs` (indices into `nodes`) as linked, both ways.
/// With no `pairs`, every node must be linked to every other one. On timeout the error lists the missing links and
/// what each node reports.
public func awaitLinks(
  _ nodes: [NodeProcess], pairs: [(Int, Int)]? = nil, timeout: Duration = .seconds(20),
  fileID: String = #fileID, line: Int = #line, isolation: isolated (any Actor)? = #isolation
) async throws {
  let wanted =
    pairs ?? nodes.indices.flatMap { a in nodes.indices.filter { $0 > a }.map { (a, $0) } }
  var missing: [String] = []
  do {
    try await eventuallyAsync(timeout: timeout, interval: .milliseconds(100), fileID: fileID, line: line) {
      missing = []
      let linked = try nodes.map { try $0.linkedNodeIDs() }
      for (a, b) in wanted {
        if !linked[a].contains(nodes[b].nodeID) { missing.append("node\(a) → node\(b)") }
        if !linked[b].contains(nodes[a].nodeID) { missing.append("node\(b) → node\(a)") }
      }
      return missing.isEmpty
    }
  } catch {
    var state = ""
    for (index, node) in nodes.enumerated() {
      let entries = (try? node.meshNodes().nodes) ?? []
      state +=
        "\n  node\(index) \(node.nodeID): "
        + entries.map { "\($0.id ?? "?")@\($0.address ?? "?") \($0.state) \($0.source ?? "-")" }.joined(separator: ", ")
    }
    throw TestSupportError.conditionNotMet("links missing after \(timeout): \(missing.joined(separator: ", "))\(state)")
  }
}
