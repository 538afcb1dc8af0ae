/// REST handlers for the foundation routes: health and metrics (and the answer of a WebSocket endpoint to plain HTTP).
///
/// Layer 6 (surface). Each handler validates input (400s name the field and the rule), does its work through
/// the store and the node state, and returns a response; thrown ``APIError``s become the JSON error shape.
import Crypto
import Foundation
import LWS
import Logging
import MeshCore

extension Node {
  /// The answer to a plain request on a WebSocket endpoint: `426` with how to connect.
  func upgradeRequired(_ context: RequestContext, url: String) -> APIError {
    APIError(
      status: 426, code: "upgrade_required", message: "this endpoint is a WebSocket: connect with \(url)",
      headers: [("upgrade", "websocket")])
  }

  func healthz() async throws -> HTTPResponse {
    if let lost = dataDirectoryLost { throw dataDirectoryLostError(lost) }
    do {
      try await store.probe()
    } catch {
      throw APIError.unavailable("the node's SQLite store does not answer: \(error)")
    }
    return .json(["status": "ok"])
  }

  func metricsResponse() -> HTTPResponse {
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
    for (key, count) in metrics.requests.sorted(by: { $0.key < $1.key }) {
      let parts = key.split(separator: "|", omittingEmptySubsequences: false)
      let route = Self.escapeLabel(String(parts[0]))
      lines.append(
        "meshgate_http_requests_total{route=\"\(route)\",method=\"\(parts[1])\",status=\"\(parts[2])\"} \(count)")
    }
    let statistics = server.statistics()
    let streams = events.streamCount
    let samples: [(String, String, String, any CustomStringConvertible)] = [
      ("meshgate_websocket_connections", "gauge", "Open WebSocket connections.", statistics.openWebSockets),
      ("meshgate_event_streams", "gauge", "Open Server-Sent Events streams.", streams),
      (
        "meshgate_connections", "gauge", "Accepted connections open (HTTP, WebSocket, inbound mesh links).",
        statistics.openConnections
      ),
      (
        "meshgate_connections_max", "gauge", "Connections served at once (--max-connections).",
        server.maxConnections
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
      ("meshgate_peers", "gauge", "Peers hosted on this node.", peers.count),
      ("meshgate_events_appended_total", "counter", "Events appended to peers' event logs.", events.counters.appended),
      (
        "meshgate_event_queue_bytes", "gauge", "Bytes of events waiting to be appended to peers' event logs.",
        events.queuedBytes
      ),
      (
        "meshgate_mesh_read_pauses_total", "counter",
        "Times mesh links stopped being read because the event queue was over its high-water mark.",
        events.counters.meshReadPauses
      ),
      (
        "meshgate_event_ring_full_total", "counter",
        "Small event batches that waited for their SQLite commit because the event ring was full.",
        store.eventLog.ringFullCount
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
        "Event consumers disconnected because their send queue was full.", events.counters.slowConsumerDisconnects
      ),
      (
        "meshgate_websocket_upgrades_rejected_total", "counter", "WebSocket upgrades refused (bad path or token).",
        metrics.webSocketUpgradesRejected
      ),
      (
        "meshgate_rate_limited_requests_total", "counter", "Requests refused with 429: over their token's rate.",
        guards.rateLimitedRequests
      ),
      (
        "meshgate_websocket_messages_rate_limited_total", "counter",
        "Browser WebSocket messages dropped: over the socket's message rate.", guards.rateLimitedSocketMessages
      ),
      (
        "meshgate_websocket_messages_too_large_total", "counter",
        "Browser WebSocket messages over the size cap (the socket was closed with 1009).",
        guards.oversizedSocketMessages
      ),
      (
        "meshgate_events_trimmed_total", "counter", "Events dropped from peers' logs by the retention limit.",
        store.eventLog.trimmed
      ),
      (
        "meshgate_storage_failures_total", "counter",
        "Requests refused because the data directory was full or failing (507/503).", metrics.storageFailures
      ),
      ("meshgate_admin_denied_total", "counter", "Requests refused for lack of the admin token.", guards.adminDenied),
      (
        "meshgate_host_refusals_total", "counter",
        "Requests refused with 421: their Host names no name or address of this node.", guards.hostRefusals
      ),
      (
        "meshgate_origin_refusals_total", "counter",
        "Requests and WebSocket upgrades refused with 403: their Origin is another site.", guards.originRefusals
      ),
      (
        "meshgate_events_off_schema_total", "counter",
        "Events whose data did not match docs/events.md (checked by debug builds only; 0 in release builds).",
        events.counters.offSchema
      ),
      (
        "meshgate_mesh_spoofed_frames_total", "counter",
        "Session frames dropped because their sender is not a peer of the node that sent them.", guards.spoofedFrames
      ),
      ("meshgate_mesh_links", "gauge", "Nodes linked to this one.", mesh.links.linkedNodeIDs.count),
      ("meshgate_mesh_dials_total", "counter", "Mesh links this node started dialling.", mesh.links.dials),
      (
        "meshgate_mesh_known_peers", "gauge", "Peers known mesh-wide (local and on linked nodes).",
        mesh.directory.knownPeerCount
      ),
      ("meshgate_mesh_frames_sent_total", "counter", "Mesh frames queued to linked nodes.", mesh.framesOut),
      ("meshgate_mesh_frames_received_total", "counter", "Mesh frames received from linked nodes.", mesh.framesIn),
      ("meshgate_mesh_bad_frames_total", "counter", "Malformed mesh frames (the link was closed).", mesh.badFrames),
      (
        "meshgate_mesh_links_refused_total", "counter",
        "Mesh links refused for security (changed certificate, missing or wrong mesh secret).", mesh.linksRefused
      ),
      (
        "meshgate_mesh_encrypted_links", "gauge", "Linked nodes whose link runs over TLS.",
        mesh.links.linkedNodeIDs.filter { mesh.links.transport(of: $0)?.encrypted == true }.count
      ),
      (
        "meshgate_uptime_seconds", "gauge", "Seconds since the node started.",
        String(format: "%.3f", Date().timeIntervalSince(startedAt))
      ),
    ]
    for (name, type, help, value) in samples { sample(name, type, help, value) }
    family(
      "meshgate_mesh_frames_refused_total", "counter",
      "Mesh frames (or the parts naming this node's peers) refused from linked nodes, by reason; see docs/security.md.")
    var refusals = frameRefusals
    for reason in Self.frameRefusalReasons where refusals[reason] == nil { refusals[reason] = 0 }
    for (reason, count) in refusals.sorted(by: { $0.key < $1.key }) {
      lines.append("meshgate_mesh_frames_refused_total{reason=\"\(Self.escapeLabel(reason))\"} \(count)")
    }
    lines += featuresMetricsLines()
    family("meshgate_build_info", "gauge", "Always 1; the version label tells the build.")
    lines.append("meshgate_build_info{version=\"\(NodeConfiguration.version)\"} 1")
    return HTTPResponse(
      status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8", headers: [("cache-control", "no-store")],
      body: Array((lines.joined(separator: "\n") + "\n").utf8))
  }

  static func escapeLabel(_ value: String) -> String {
    value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
      .replacingOccurrences(of: "\n", with: "\\n")
  }
}
