/// The node's own routes: health, metrics, the OpenAPI document, node information, with their handlers.
///
/// Each route carries its handler; ``Router/standard`` is the union of every feature's routes, and the OpenAPI
/// document is generated from it.
import Foundation
import LWS
import MeshCore

enum SystemRoutes {
  static let routes: [Route] = [
    Route(
      .get, "/healthz", "getHealth", access: .open, returns: Schemas.health,
      """
      Liveness: 200 while the node serves requests, its store answers and its data directory is the one it opened.
      200 The node is healthy.
      503 The store does not answer (unavailable), or the data directory or its database file was deleted, moved or replaced while the node ran (data_directory_lost; writes answer the same).
      """
    ) { node, _ in try await SystemRoutes.health(node: node) },
    Route(
      .get, "/metrics", "getMetrics", access: .open,
      """
      Prometheus text exposition: requests by route and status, open WebSockets, peers, events.
      200 Prometheus text format 0.0.4.
      """
    ) { node, _ in SystemRoutes.metrics(node: node) },
    Route(
      .get, "/api/v1/openapi.json", "getOpenAPI", access: .open, returns: ["type": "object"],
      """
      This OpenAPI 3.1 document.
      200 The OpenAPI document.
      """
    ) { _, _ in .json(Router.standard.openAPIDocument(version: NodeConfiguration.version)) },
    Route(
      .get, "/api/v1/node", "getNode", access: .open, returns: Schemas.node,
      """
      This node's id, name, version, uptime and peer count, and the LAN addresses a phone can open its dashboard by.
      200 Node information.
      """
    ) { node, _ in .json(SystemRoutes.nodeInfo(node: node)) },
  ]

  /// `GET /healthz`: `503` once the data directory is lost or while the store does not answer.
  static func health(node: isolated Node) async throws -> HTTPResponse {
    if let lost = node.safety.dataDirectoryLost { throw NodeSafety.dataDirectoryLostError(lost) }
    do {
      try await node.store.probe()
    } catch {
      throw APIError.unavailable("the node's SQLite store does not answer: \(error)")
    }
    return .json(["status": "ok"])
  }

  /// `GET /api/v1/node`: ``Node/nodeJSON()`` and the LAN addresses (read from the interfaces on each request, so a
  /// laptop that changed networks answers with its new address).
  static func nodeInfo(node: isolated Node) -> JSONValue {
    guard case .object(var object) = node.nodeJSON() else { return node.nodeJSON() }
    let addresses = HostPolicy.lanAddresses(
      bind: node.configuration.bindAddress, interfaces: HostPolicy.interfaceAddresses())
    object["lanAddresses"] = .array(addresses.map { .string($0) })
    return .object(object)
  }

  /// `GET /metrics`: the Prometheus text exposition of the node's counters.
  static func metrics(node: isolated Node) -> HTTPResponse {
    var lines: [String] = []
    func family(_ name: String, _ type: String, _ help: String) {
      lines.append("# HELP \(name) \(help)")
      lines.append("# TYPE \(name) \(type)")
    }
    /// One unlabelled sample with its HELP and TYPE lines.
    func sample(_ name: String, _ type: String, _ help: String, _ value: some CustomStringConvertible) {
      family(name, type, help)
      lines.append("\(name) \(value)")
    }
    family("meshgate_http_requests_total", "counter", "HTTP requests answered, by route, method and status.")
    for (key, count) in node.surface.requestCounts.sorted(by: { $0.key < $1.key }) {
      let parts = key.split(separator: "|", omittingEmptySubsequences: false)
      let route = PrometheusText.escapeLabel(String(parts[0]))
      lines.append(
        "meshgate_http_requests_total{route=\"\(route)\",method=\"\(parts[1])\",status=\"\(parts[2])\"} \(count)")
    }
    let statistics = node.server.statistics()
    let streams = node.events.streamCount
    let samples: [(String, String, String, any CustomStringConvertible)] = [
      ("meshgate_websocket_connections", "gauge", "Open WebSocket connections.", statistics.openWebSockets),
      ("meshgate_event_streams", "gauge", "Open Server-Sent Events streams.", streams),
      (
        "meshgate_connections", "gauge", "Accepted connections open (HTTP, WebSocket, inbound mesh links).",
        statistics.openConnections
      ),
      (
        "meshgate_connections_max", "gauge", "Connections served at once (--max-connections).",
        node.server.maxConnections
      ),
      (
        "meshgate_connections_refused_total", "counter",
        "Connections over --max-connections: answered 503 or closed at once.", statistics.refusedConnections
      ),
      (
        "meshgate_accept_failures_total", "counter",
        "Connections that could not be accepted for want of file descriptors (they were closed).",
        statistics.acceptFailures
      ),
      (
        "meshgate_oversized_request_heads_total", "counter", "Requests answered 431: request head over 16 KiB.",
        statistics.oversizedHeads
      ),
      (
        "meshgate_body_timeouts_total", "counter",
        "Connections closed because a request body stopped (--body-timeout).",
        statistics.bodyTimeouts
      ),
      (
        "meshgate_slow_bodies_total", "counter",
        "Requests answered 408 because their body arrived slower than --min-body-rate.", statistics.slowBodies
      ),
      ("meshgate_peers", "gauge", "Peers hosted on this node.", node.peers.count),
      (
        "meshgate_events_appended_total", "counter", "Events appended to peers' event logs.",
        node.events.counters.appended
      ),
      (
        "meshgate_event_queue_bytes", "gauge", "Bytes of events waiting to be appended to peers' event logs.",
        node.events.queuedBytes
      ),
      (
        "meshgate_mesh_read_pauses_total", "counter",
        "Times mesh links stopped being read because the event queue was over its high-water mark.",
        node.events.counters.meshReadPauses
      ),
      (
        "meshgate_event_ring_full_total", "counter",
        "Small event batches that waited for their SQLite commit because the event ring was full.",
        node.store.eventLog.ringFullCount
      ),
      (
        "meshgate_websocket_messages_sent_total", "counter", "WebSocket messages written to clients.",
        statistics.webSocketMessagesOut
      ),
      (
        "meshgate_websocket_messages_received_total", "counter", "WebSocket messages received from clients.",
        statistics.webSocketMessagesIn
      ),
      (
        "meshgate_websocket_coalesced_writes_total", "counter",
        "Socket writes that carried several queued WebSocket messages at once.", statistics.coalescedWrites
      ),
      (
        "meshgate_slow_consumer_disconnects_total", "counter",
        "Event consumers disconnected because their send queue was full.", node.events.counters.slowConsumerDisconnects
      ),
      (
        "meshgate_websocket_upgrades_rejected_total", "counter", "WebSocket upgrades refused (bad path or token).",
        node.surface.webSocketUpgradesRejected
      ),
      (
        "meshgate_rate_limited_requests_total", "counter", "Requests refused with 429: over their token's rate.",
        node.safety.guards.rateLimitedRequests
      ),
      (
        "meshgate_websocket_messages_rate_limited_total", "counter",
        "Browser WebSocket messages dropped: over the socket's message rate.",
        node.safety.guards.rateLimitedSocketMessages
      ),
      (
        "meshgate_websocket_messages_too_large_total", "counter",
        "Browser WebSocket messages over the size cap (the socket was closed with 1009).",
        node.safety.guards.oversizedSocketMessages
      ),
      (
        "meshgate_events_trimmed_total", "counter", "Events dropped from peers' logs by the retention limit.",
        node.store.eventLog.trimmed
      ),
      (
        "meshgate_storage_failures_total", "counter",
        "Requests refused because the data directory was full or failing (507/503).", node.surface.storageFailures
      ),
      (
        "meshgate_admin_denied_total", "counter", "Requests refused for lack of the admin token.",
        node.safety.guards.adminDenied
      ),
      (
        "meshgate_host_refusals_total", "counter",
        "Requests refused with 421: their Host names no name or address of this node.", node.safety.guards.hostRefusals
      ),
      (
        "meshgate_origin_refusals_total", "counter",
        "Requests and WebSocket upgrades refused with 403: their Origin is another site.",
        node.safety.guards.originRefusals
      ),
      (
        "meshgate_events_off_schema_total", "counter",
        "Events whose data did not match docs/events.md (checked by debug builds only; 0 in release builds).",
        node.events.counters.offSchema
      ),
      (
        "meshgate_mesh_spoofed_frames_total", "counter",
        "Session frames dropped because their sender is not a peer of the node that sent them.",
        node.links.spoofedFrames
      ),
      ("meshgate_mesh_links", "gauge", "Nodes linked to this one.", node.mesh.node.links.linkedNodeIDs.count),
      ("meshgate_mesh_dials_total", "counter", "Mesh links this node started dialling.", node.mesh.node.links.dials),
      (
        "meshgate_mesh_known_peers", "gauge", "Peers known mesh-wide (local and on linked nodes).",
        node.mesh.node.directory.knownPeerCount
      ),
      ("meshgate_mesh_frames_sent_total", "counter", "Mesh frames queued to linked nodes.", node.links.framesOut),
      (
        "meshgate_mesh_frames_received_total", "counter", "Mesh frames received from linked nodes.", node.links.framesIn
      ),
      (
        "meshgate_mesh_bad_frames_total", "counter", "Malformed mesh frames (the link was closed).",
        node.links.badFrames
      ),
      (
        "meshgate_mesh_links_refused_total", "counter",
        "Mesh links refused for security (changed certificate, missing or wrong mesh secret).", node.links.linksRefused
      ),
      (
        "meshgate_mesh_encrypted_links", "gauge", "Linked nodes whose link runs over TLS.",
        node.mesh.node.links.linkedNodeIDs.filter { node.mesh.node.links.transport(of: $0)?.encrypted == true }.count
      ),
      (
        "meshgate_uptime_seconds", "gauge", "Seconds since the node started.",
        String(format: "%.3f", Date().timeIntervalSince(node.surface.startedAt))
      ),
    ]
    for (name, type, help, value) in samples { sample(name, type, help, value) }
    family(
      "meshgate_mesh_frames_refused_total", "counter",
      "Mesh frames (or the parts naming this node's peers) refused from linked nodes, by reason; see docs/security.md.")
    var refusals = node.links.frameRefusals(node: node)
    for reason in MeshLinks.frameRefusalReasons where refusals[reason] == nil { refusals[reason] = 0 }
    for (reason, count) in refusals.sorted(by: { $0.key < $1.key }) {
      lines.append("meshgate_mesh_frames_refused_total{reason=\"\(PrometheusText.escapeLabel(reason))\"} \(count)")
    }
    for feature in node.features.all { feature.metricsLines(into: &lines, node: node) }
    family("meshgate_build_info", "gauge", "Always 1; the version label tells the build.")
    lines.append("meshgate_build_info{version=\"\(NodeConfiguration.version)\"} 1")
    return HTTPResponse(
      status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8", headers: [("cache-control", "no-store")],
      body: Array((lines.joined(separator: "\n") + "\n").utf8))
  }
}

/// The Prometheus text exposition format (version 0.0.4) of `/metrics`.
enum PrometheusText {
  /// `value` as a label value: backslash, double quote and line feed escaped.
  static func escapeLabel(_ value: String) -> String {
    value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
      .replacingOccurrences(of: "\n", with: "\\n")
  }
}

extension Schemas {
  static let health: JSONValue = [
    "type": "object", "required": ["status"], "properties": ["status": ["type": "string", "enum": ["ok"]]],
  ]
  static let node: JSONValue = [
    "type": "object", "required": ["id", "name", "version", "startedAt", "uptimeSeconds", "peerCount"],
    "properties": [
      "id": ["type": "string"], "name": ["type": "string"], "version": ["type": "string"],
      "startedAt": ["type": "string", "format": "date-time"], "uptimeSeconds": ["type": "number"],
      "peerCount": ["type": "integer"], "openWebSockets": ["type": "integer"],
      "lanAddresses": [
        "type": "array", "items": ["type": "string"],
        "description": .string(
          "GET /api/v1/node only: the addresses other devices on the LAN reach this node by (IPv4 first, then global "
            + "IPv6; no loopback or link-local), [] when it listens on loopback only."),
      ],
    ],
  ]
}
