/// What the HTTP surface keeps beside the routes: the static dashboard, the names the node answers to, each open
/// request's route label, the counters `/metrics` shows, and when the node started. Owned by the node actor.
import Foundation
import LWS

final class HTTPSurface {
  let startedAt = Date()
  let staticFiles: StaticFiles
  /// The names and addresses the node answers to (HostPolicy.swift).
  let hostPolicy: HostPolicy
  var routeLabels: [RequestID: String] = [:]
  /// Counters exposed on `/metrics`.
  var metrics = NodeMetrics()
  /// What each open WebSocket is, decided once when it opens (``Node/webSocketOpened(_:head:)``).
  var connections: [WebSocketID: ConnectionKind] = [:]

  init(staticFiles: StaticFiles, hostPolicy: HostPolicy) {
    self.staticFiles = staticFiles
    self.hostPolicy = hostPolicy
  }
}

@available(*, unavailable) extension HTTPSurface: Sendable {}

/// What a WebSocket connection is.
enum ConnectionKind {
  /// A link to another node (`/mesh`, accepted or dialled).
  case mesh
  /// A socket a feature took when it opened (``NodeFeature/webSocketOpened(_:head:node:)``), such as a byte stream's
  /// writer or reader.
  case feature
  /// A peer's event socket (`/api/v1/ws`).
  case events
}

extension Node {
  /// Every route of the node (``Router/standard``).
  nonisolated var router: Router { .standard }
  var startedAt: Date { surface.startedAt }
  var staticFiles: StaticFiles { surface.staticFiles }
  var hostPolicy: HostPolicy { surface.hostPolicy }
  var routeLabels: [RequestID: String] {
    get { surface.routeLabels }
    _modify { yield &surface.routeLabels }
  }
  var metrics: NodeMetrics {
    get { surface.metrics }
    _modify { yield &surface.metrics }
  }
}
