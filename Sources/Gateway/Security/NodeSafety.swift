/// The node's defences and their state: the names it answers to, the admin token, limits with their buckets and
/// counters, and the watch on the data directory; and the checks that use them (the HTTP pipeline's steps and the
/// handlers call these). Owned by the node actor.
import Crypto
import Foundation
import LWS
import Logging
import MeshCore

final class NodeSafety {
  static let logger = Logger(component: "node")

  /// Admin token hash, limits and their counters (Admin.swift, Limits.swift).
  var guards: SecurityState
  /// The names and addresses the node answers to (HostPolicy.swift).
  let hostPolicy: HostPolicy
  /// The data directory and database file the node opened, and why they are lost once they are (DataDirectoryHealth).
  let dataWatch: DataDirectoryWatch
  var dataDirectoryLost: String?
  var dataWatchTask: Task<Void, Never>?

  init(guards: SecurityState, hostPolicy: HostPolicy, dataWatch: DataDirectoryWatch) {
    self.guards = guards
    self.hostPolicy = hostPolicy
    self.dataWatch = dataWatch
  }

  /// Whether a request carries this node's admin token (without counting a denial: for routes that show more to the
  /// admin, such as the addresses in `GET /api/v1/mesh/nodes`).
  func carriesAdminToken(_ head: HTTPRequestHead) -> Bool {
    guard let header = head.headers["authorization"] else { return false }
    let parts = header.split(separator: " ", maxSplits: 1)
    guard parts.count == 2, parts[0].lowercased() == "bearer" else { return false }
    let token = String(parts[1]).trimmingCharacters(in: .whitespaces)
    return !token.isEmpty && Crypto.sha256Hex(token) == guards.adminTokenHash
  }

  // MARK: - Host and Origin

  /// The `421` for a request whose `Host` does not name this node.
  func hostRefusal(_ head: HTTPRequestHead) -> APIError? {
    guard !hostPolicy.allowsHost(head.headers["host"]) else { return nil }
    guards.hostRefusals += 1
    let host = head.headers["host"] ?? ""
    return APIError(
      status: 421, code: "host_not_allowed",
      message:
        "this node does not answer for the host \(host.debugDescription) (DNS rebinding protection): reach it by "
        + "IP address, localhost or its host name, or start it with --allowed-hosts NAME (MESHGATE_ALLOWED_HOSTS)")
  }

  /// The `403` for a browser request from another site: a WebSocket upgrade or a request that changes state whose
  /// `Origin` does not name this node. Requests without `Origin` come from no browser page and pass.
  func originRefusal(_ head: HTTPRequestHead, upgrade: Bool) -> APIError? {
    guard upgrade || ![.get, .head, .options].contains(head.method), let origin = head.headers["origin"],
      !hostPolicy.allowsOrigin(origin, requestHost: head.headers["host"])
    else { return nil }
    guards.originRefusals += 1
    return APIError(
      status: 403, code: "origin_not_allowed",
      message:
        "requests from the web page at \(origin.debugDescription) are refused (cross-site protection): open the "
        + "dashboard from this node, or start the node with --allowed-hosts naming that page's host "
        + "(MESHGATE_ALLOWED_HOSTS)")
  }

  /// The error for a plaintext request to a node that serves HTTPS.
  static func httpsRequired(_ head: HTTPRequestHead) -> APIError {
    let host = head.headers["host"] ?? "this-node:port"
    return APIError(
      status: 403, code: "https_required",
      message: "this node serves its dashboard and API over HTTPS (--tls-cert); use https://\(host)\(head.path)")
  }

  // MARK: - The data directory

  /// The error every write (and `/healthz`) gets once the data directory is lost.
  static func dataDirectoryLostError(_ reason: String) -> APIError {
    APIError(
      status: 503, code: "data_directory_lost",
      message: "\(reason) while the node was running, so nothing can be stored any more; restore the directory "
        + "and restart the node (a restart with an empty data directory starts over: every peer token and all "
        + "data are gone)")
  }

  /// Compares the data directory with the one the node opened (off the service thread); the first difference makes
  /// the node unhealthy and is logged once.
  func checkDataDirectory(node: isolated Node) async {
    guard dataDirectoryLost == nil else { return }
    let watch = dataWatch
    let problem = await Task.detached { watch.problem() }.value
    guard let problem, dataDirectoryLost == nil else { return }
    dataDirectoryLost = problem
    Self.logger.error(
      "The data directory was lost; refusing writes and reporting unhealthy. Restore it and restart the node.",
      ["data.dir": watch.directory, "reason": problem])
  }

  /// Checks the data directory every second until ``stopWatching()`` (a loop, not a timer: each check reads the disk
  /// on a task of its own, and the loop keeps two from overlapping, so a stalled file system cannot pile them up).
  func startWatching(node: isolated Node) {
    dataWatchTask = Task { [weak node] in
      while (try? await Task.sleep(for: .seconds(1))) != nil {
        guard let current = node else { return }
        await NodeSafety.checkDataDirectory(of: current)
      }
    }
  }

  private static func checkDataDirectory(of node: isolated Node) async {
    await node.safety.checkDataDirectory(node: node)
  }

  func stopWatching() {
    dataWatchTask?.cancel()
  }
}

@available(*, unavailable) extension NodeSafety: Sendable {}
