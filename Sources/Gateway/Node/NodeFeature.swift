/// Features and the hooks through which the node tells every one of them what happened.
///
/// Layer 4 (node runtime). A feature owns its state in a class stored in the node actor (``Node/features``) and only
/// touched on the node's executor (the lws service thread); its routes live beside it (`Features/<X>/…Routes.swift`).
/// The node calls each hook on every feature, in ``Features/all``'s order (Features/FeatureRegistry.swift, the one
/// list that names the feature types), so a peer deletion, a link coming up or going down, or a tick reaches all of
/// them by construction; a feature that has nothing to do keeps the default.
import LWS
import MeshCore

protocol NodeFeature: AnyObject {
  /// A mesh link to `nodeID` came up.
  func nodeLinked(_ nodeID: String, node: isolated Node)
  /// The mesh link to `nodeID` went down.
  func nodeUnlinked(_ nodeID: String, node: isolated Node)
  /// The link to `nodeID` moved to a new connection: frames in flight on the old one may be lost.
  func linkReplaced(_ nodeID: String, node: isolated Node)
  /// Local peer `peerID` was deleted (its token is already revoked).
  func peerRemoved(_ peerID: String, node: isolated Node)
  /// The node's periodic tick (every ``Node/tickInterval``).
  func tick(node: isolated Node)
  /// The mesh core asked for work outside it (``MeshEffect/chat(_:)``): the feature it concerns carries it out.
  func meshEffect(_ effect: MeshEffect, node: isolated Node)
  /// Local peer `peerID` was told a session or invitation event (it is in its event log's batch already).
  func sessionEvent(_ event: SessionBook.Event, for peerID: String, node: isolated Node)
  /// An invitation a local peer sent or received was answered, expired or canceled.
  func invitationEnded(_ invitation: SessionBook.Invitation, node: isolated Node)
  /// A local peer received an invitation.
  func invitationReceived(_ invitation: SessionBook.Invitation, node: isolated Node)
  /// The directory told local peers something (a peer found or lost, advertising changed).
  func directoryChanged(node: isolated Node)
  /// What local peers advertise or browse, or the local peers themselves, changed.
  func localServicesChanged(node: isolated Node)

  // MARK: - payloads

  /// The node started (its mesh runs): restore what the feature keeps across restarts.
  func nodeStarted(node: isolated Node)
  /// Bulk room was freed on some mesh link (a frame was written, or a link closed and what was queued on it is gone):
  /// sends and producers held back by a full link try again.
  func linkRoomFreed(node: isolated Node)
  /// A piece of the streamed body of request `id` (a route whose body is not collected) arrived.
  func requestBodyReceived(_ id: RequestID, _ bytes: [UInt8], node: isolated Node)
  /// The streamed body of request `id` is complete.
  func requestBodyEnded(_ id: RequestID, node: isolated Node)
  /// Everything queued on streaming response `id` was written.
  func responseDrained(_ id: RequestID, node: isolated Node)
  /// Request `id` is over (answered, or its client went away).
  func requestClosed(_ id: RequestID, node: isolated Node)
  /// A message, the close, or a drained send queue on a WebSocket this feature's route took (``Route/upgrade``).
  func webSocketReceived(_ id: WebSocketID, _ message: WebSocketMessage, node: isolated Node)
  func webSocketClosed(_ id: WebSocketID, node: isolated Node)
  func webSocketDrained(_ id: WebSocketID, node: isolated Node)
  /// The feature's lines of `/metrics` (HELP, TYPE and samples; ``MetricSample`` for an unlabelled one), appended
  /// after the node's own.
  func metricsLines(into lines: inout [String], node: isolated Node)
  /// The `PATCH /api/v1/node/settings` members this feature owns, after the node's own.
  var settingNames: [String] { get }
  /// The feature's settings in the settings view.
  func settings(into object: inout JSONObject, node: isolated Node)
  /// Refuses a settings change whose members for this feature are invalid (nothing is applied then).
  func checkSettings(_ body: RequestBody, node: isolated Node) throws(APIError)
  /// Applies a settings change every feature checked.
  func applySettings(_ body: RequestBody, node: isolated Node)

  // MARK: - sessions and peers

  /// Room was freed in the node's event queue (a batch was written to the event log): local senders held at its
  /// bounds try again.
  func eventQueueRoomFreed(node: isolated Node)
  /// The `type` and `data` of the event local peer `peerID` is told for a session or invitation event (nil: not this
  /// feature's to word; exactly one feature words them).
  func sessionEventJSON(
    _ event: SessionBook.Event, for peerID: String, node: isolated Node
  ) -> (type: String, data: JSONValue)?
  /// An op other than `ping` on a peer's event socket (`/api/v1/ws`); nil when this feature does not serve `op`.
  func eventSocketOp(
    _ op: String, _ object: JSONObject, subscriber: Subscriber, socket: WebSocketID, node: isolated Node
  ) -> EventSocketAnswer?
  /// Local peer `peerID`'s token was used (an authenticated request or socket).
  func peerUsed(_ peerID: String, node: isolated Node)
}

// MARK: - sessions and peers

/// What a feature answers to an op on a peer's event socket.
enum EventSocketAnswer {
  /// Send this reply now.
  case reply(JSONValue)
  /// The feature replies later itself (the socket's reading is paused meanwhile).
  case later
}

/// One unlabelled `/metrics` sample: name, type, help and value.
typealias MetricSample = (name: String, type: String, help: String, value: any CustomStringConvertible)

extension [String] {
  /// Appends an unlabelled `/metrics` sample with its HELP and TYPE lines.
  mutating func appendSample(_ sample: MetricSample) {
    append("# HELP \(sample.name) \(sample.help)")
    append("# TYPE \(sample.name) \(sample.type)")
    append("\(sample.name) \(sample.value)")
  }
}

extension NodeFeature {
  func nodeLinked(_ nodeID: String, node: isolated Node) {}
  func nodeUnlinked(_ nodeID: String, node: isolated Node) {}
  func linkReplaced(_ nodeID: String, node: isolated Node) {
    nodeUnlinked(nodeID, node: node)
    nodeLinked(nodeID, node: node)
  }
  func peerRemoved(_ peerID: String, node: isolated Node) {}
  func tick(node: isolated Node) {}
  func meshEffect(_ effect: MeshEffect, node: isolated Node) {}
  func sessionEvent(_ event: SessionBook.Event, for peerID: String, node: isolated Node) {}
  func invitationEnded(_ invitation: SessionBook.Invitation, node: isolated Node) {}
  func invitationReceived(_ invitation: SessionBook.Invitation, node: isolated Node) {}
  func directoryChanged(node: isolated Node) {}
  func localServicesChanged(node: isolated Node) {}

  // MARK: - payloads

  func nodeStarted(node: isolated Node) {}
  func linkRoomFreed(node: isolated Node) {}
  func requestBodyReceived(_ id: RequestID, _ bytes: [UInt8], node: isolated Node) {}
  func requestBodyEnded(_ id: RequestID, node: isolated Node) {}
  func responseDrained(_ id: RequestID, node: isolated Node) {}
  func requestClosed(_ id: RequestID, node: isolated Node) {}
  func webSocketReceived(_ id: WebSocketID, _ message: WebSocketMessage, node: isolated Node) {}
  func webSocketClosed(_ id: WebSocketID, node: isolated Node) {}
  func webSocketDrained(_ id: WebSocketID, node: isolated Node) {}
  func metricsLines(into lines: inout [String], node: isolated Node) {}
  var settingNames: [String] { [] }
  func settings(into object: inout JSONObject, node: isolated Node) {}
  func checkSettings(_ body: RequestBody, node: isolated Node) throws(APIError) {}
  func applySettings(_ body: RequestBody, node: isolated Node) {}

  // MARK: - sessions and peers

  func eventQueueRoomFreed(node: isolated Node) {}
  func sessionEventJSON(
    _ event: SessionBook.Event, for peerID: String, node: isolated Node
  ) -> (type: String, data: JSONValue)? { nil }
  func eventSocketOp(
    _ op: String, _ object: JSONObject, subscriber: Subscriber, socket: WebSocketID, node: isolated Node
  ) -> EventSocketAnswer? { nil }
  func peerUsed(_ peerID: String, node: isolated Node) {}
}

extension Features {
  /// The event local peer `peerID` is told for a session or invitation event, as the feature that words it says.
  func sessionEventJSON(
    _ event: SessionBook.Event, for peerID: String, node: isolated Node
  ) -> (type: String, data: JSONValue) {
    for feature in all {
      if let built = feature.sessionEventJSON(event, for: peerID, node: node) { return built }
    }
    preconditionFailure("no feature words session events: the sessions feature is missing from Features.all")
  }

  /// The answer of the feature that serves event-socket op `op` (nil: no feature does).
  func eventSocketOp(
    _ op: String, _ object: JSONObject, subscriber: Subscriber, socket: WebSocketID, node: isolated Node
  ) -> EventSocketAnswer? {
    for feature in all {
      if let answer = feature.eventSocketOp(op, object, subscriber: subscriber, socket: socket, node: node) {
        return answer
      }
    }
    return nil
  }
}
