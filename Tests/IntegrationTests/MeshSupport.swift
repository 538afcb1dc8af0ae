import Foundation
import MeshgateTestSupport
import Testing

// Helpers for the multi-node mesh tests (the nodes come from `withNodes` in MeshgateTestSupport): peers, advertising
// and browsing, sessions, invitations, data, and reading whole event logs. Every wait polls with `eventuallyAsync`
// (which sleeps with `Task.sleep`), so a slow machine only makes tests slower, never flaky, and the cooperative pool
// stays free.

// MARK: - Events

/// One entry of a peer's event log.
struct MeshEvent: CustomStringConvertible {
  let id: Int
  let type: String
  let data: [String: Any]
  /// When the node appended the event (its wall clock), parsed from `at`.
  let at: Date?

  init(_ object: [String: Any]) throws {
    guard let idText = object["id"] as? String, let id = Int(idText), let type = object["type"] as? String else {
      throw TestSupportError.invalidJSON("event without a numeric id or a type: \(object)")
    }
    self.id = id
    self.type = type
    data = object["data"] as? [String: Any] ?? [:]
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    at = (object["at"] as? String).flatMap { formatter.date(from: $0) }
  }

  /// `data.peer.id` (peer.found / peer.lost / session.peer.state).
  var peerID: String? { (data["peer"] as? [String: Any])?["id"] as? String }
  /// `data.state` (session.peer.state).
  var state: String? { data["state"] as? String }
  /// `data.sessionId` (session.*).
  var sessionID: String? { data["sessionId"] as? String }
  /// `data.invitation` (invitation.*).
  var invitation: [String: Any]? { data["invitation"] as? [String: Any] }
  /// `data.invitation.id` (invitation.*).
  var invitationID: String? { invitation?["id"] as? String }
  /// `data.from.id` (session.data / session.event).
  var fromID: String? { (data["from"] as? [String: Any])?["id"] as? String }
  /// `data.text` (session.data).
  var text: String? { data["text"] as? String }

  var description: String {
    let json = (try? JSONSerialization.data(withJSONObject: data, options: [.sortedKeys]))
      .map { String(decoding: $0, as: UTF8.self) }
    return "#\(id) \(type) \(json ?? "?")"
  }
}

/// A peer together with the node that hosts it.
struct MeshPeer: CustomStringConvertible {
  let node: NodeProcess
  let peer: TestPeer

  var id: String { peer.id }
  var token: String { peer.token }
  var description: String { "\(peer.displayName)(\(peer.id)) on \(node.name ?? "?")" }
}

extension NodeProcess {
  /// Creates a peer on this node and pairs it with the node.
  func meshPeer(_ displayName: String) throws -> MeshPeer {
    MeshPeer(node: self, peer: try createPeer(displayName))
  }
}

extension MeshPeer {
  // MARK: Requests

  func get(_ path: String) throws -> HTTPResponse {
    try HTTPClient.get(port: node.port, path: path, token: token)
  }

  func post(_ path: String, json: String) throws -> HTTPResponse {
    try HTTPClient.post(port: node.port, path: path, json: json, token: token)
  }

  func put(_ path: String, json: String? = nil) throws -> HTTPResponse {
    try HTTPClient.put(port: node.port, path: path, json: json, token: token)
  }

  func delete(_ path: String) throws -> HTTPResponse {
    try HTTPClient.delete(port: node.port, path: path, token: token)
  }

  // MARK: Event log

  /// The whole event log after `since`, read page by page (`limit` events a page) until a page comes back empty.
  func allEvents(since: Int = 0, pageSize: Int = 100) throws -> [MeshEvent] {
    var cursor = since
    var events: [MeshEvent] = []
    while true {
      let response = try get("/api/v1/events?since=\(cursor)&limit=\(pageSize)")
      guard response.status == 200 else {
        throw TestSupportError.unexpectedMessage("GET /api/v1/events for \(self) answered \(response)")
      }
      let page = try response.jsonObject()
      let entries = try (page["events"] as? [[String: Any]] ?? []).map(MeshEvent.init)
      if entries.isEmpty { return events }
      events += entries
      guard let next = (page["nextCursor"] as? String).flatMap(Int.init), next > cursor else {
        throw TestSupportError.unexpectedMessage("event page for \(self) did not advance the cursor: \(page)")
      }
      cursor = next
    }
  }

  /// The events of `type` in the log (optionally only those matching `predicate`).
  func events(_ type: String, since: Int = 0, where predicate: (MeshEvent) -> Bool = { _ in true }) throws
    -> [MeshEvent]
  {
    try allEvents(since: since).filter { $0.type == type && predicate($0) }
  }

  /// Waits until the log has an event of `type` matching `predicate`, and returns the first one.
  @discardableResult
  func awaitEvent(
    _ type: String, since: Int = 0, timeout: Duration = .seconds(30), fileID: String = #fileID, line: Int = #line,
    isolation: isolated (any Actor)? = #isolation, where predicate: (MeshEvent) -> Bool = { _ in true }
  ) async throws -> MeshEvent {
    var found: MeshEvent?
    var seen: [MeshEvent] = []
    do {
      try await eventuallyAsync(timeout: timeout, interval: .milliseconds(50), fileID: fileID, line: line) {
        seen = try allEvents(since: since)
        found = seen.first { $0.type == type && predicate($0) }
        return found != nil
      }
    } catch {
      throw TestSupportError.conditionNotMet(
        "no \(type) event for \(self) within \(timeout) (\(fileID):\(line)); its log:\n  "
          + seen.map(\.description).joined(separator: "\n  "))
    }
    return found!
  }

  /// The id of the newest event in the log (0 when empty), to wait only for what happens next.
  func lastEventID() throws -> Int {
    try allEvents().last?.id ?? 0
  }

  // MARK: Advertising and browsing

  /// `PUT /advertising/{serviceType}`; expects 200.
  func advertise(_ serviceType: String, discoveryInfo: [String: String]? = nil) throws {
    let json = try discoveryInfo.map { #"{"discoveryInfo":\#(try jsonText($0))}"# }
    let response = try put("/api/v1/advertising/\(serviceType)", json: json)
    guard response.status == 200 else {
      throw TestSupportError.unexpectedMessage("advertising \(serviceType) for \(self) answered \(response)")
    }
  }

  /// `DELETE /advertising/{serviceType}`; expects 204.
  func stopAdvertising(_ serviceType: String) throws {
    let response = try delete("/api/v1/advertising/\(serviceType)")
    guard response.status == 204 else {
      throw TestSupportError.unexpectedMessage("stopping \(serviceType) for \(self) answered \(response)")
    }
  }

  /// `PUT /browsing/{serviceType}`; expects 200 and returns the advertisers it lists.
  @discardableResult
  func browse(_ serviceType: String) throws -> [[String: Any]] {
    let response = try put("/api/v1/browsing/\(serviceType)")
    guard response.status == 200 else {
      throw TestSupportError.unexpectedMessage("browsing \(serviceType) for \(self) answered \(response)")
    }
    return try response.jsonObject()["peers"] as? [[String: Any]] ?? []
  }

  /// `GET /services/{serviceType}/peers`: the advertisers this peer sees.
  func servicePeers(_ serviceType: String) throws -> [[String: Any]] {
    let response = try get("/api/v1/services/\(serviceType)/peers")
    guard response.status == 200 else {
      throw TestSupportError.unexpectedMessage("listing \(serviceType) peers for \(self) answered \(response)")
    }
    return try response.jsonObject()["peers"] as? [[String: Any]] ?? []
  }

  /// The peer ids in `servicePeers(serviceType)`.
  func servicePeerIDs(_ serviceType: String) throws -> Set<String> {
    Set(try servicePeers(serviceType).compactMap { ($0["peer"] as? [String: Any])?["id"] as? String })
  }

  // MARK: Sessions

  /// `POST /sessions`; expects 201 and returns the session object.
  func createSession(strategy: String? = nil, encryption: String? = nil, maxPeers: Int? = nil) throws
    -> [String: Any]
  {
    var fields: [String: Any] = [:]
    if let strategy { fields["strategy"] = strategy }
    if let encryption { fields["encryption"] = encryption }
    if let maxPeers { fields["maxPeers"] = maxPeers }
    let response = try post("/api/v1/sessions", json: try jsonText(fields))
    guard response.status == 201, let session = try response.jsonObject()["session"] as? [String: Any] else {
      throw TestSupportError.unexpectedMessage("creating a session for \(self) answered \(response)")
    }
    return session
  }

  /// `GET /sessions/{id}` as this peer; nil when it answers 404.
  func session(_ sessionID: String) throws -> [String: Any]? {
    let response = try get("/api/v1/sessions/\(sessionID)")
    if response.status == 404 { return nil }
    guard response.status == 200 else {
      throw TestSupportError.unexpectedMessage("GET session \(sessionID) for \(self) answered \(response)")
    }
    return try response.jsonObject()["session"] as? [String: Any]
  }

  /// The member states (peer id → state) of `sessionID` as this peer's node sees it; empty when not a member.
  func memberStates(_ sessionID: String) throws -> [String: String] {
    let members = try session(sessionID)?["members"] as? [[String: Any]] ?? []
    var states: [String: String] = [:]
    for member in members {
      if let id = member["id"] as? String { states[id] = member["state"] as? String ?? "?" }
    }
    return states
  }

  /// `POST /sessions/{id}/data` with a raw body.
  func sendData(_ sessionID: String, _ body: String, to targets: [String]? = nil, mode: String = "reliable") throws
    -> HTTPResponse
  {
    var path = "/api/v1/sessions/\(sessionID)/data?mode=\(mode)"
    if let targets { path += "&to=" + targets.joined(separator: ",") }
    return try HTTPClient.post(
      port: node.port, path: path, body: Array(body.utf8), contentType: "application/octet-stream", token: token)
  }

  // MARK: Invitations

  /// `POST /invitations` to `invitee`. The invitee's node may take a moment to announce a new peer to this node,
  /// so a 404 for an unknown peer is retried (up to `timeout`); any other answer is returned as is.
  func invite(
    _ invitee: MeshPeer, to sessionID: String, context: String? = nil, timeoutSeconds: Int? = nil,
    timeout: Duration = .seconds(10), isolation: isolated (any Actor)? = #isolation
  ) async throws -> HTTPResponse {
    var fields: [String: Any] = ["to": invitee.id, "session": sessionID]
    if let context { fields["context"] = context }
    if let timeoutSeconds { fields["timeoutSeconds"] = timeoutSeconds }
    let json = try jsonText(fields)
    var response: HTTPResponse?
    try await eventuallyAsync(timeout: timeout, message: "\(self) inviting \(invitee): peer unknown to the node") {
      response = try post("/api/v1/invitations", json: json)
      return response!.status != 404 || errorCode(response!) != "not_found"
        || errorMessage(response!)?.contains("no peer") != true
    }
    return response!
  }

  /// `invite` that must succeed (201); returns the invitation object.
  func inviteOK(
    _ invitee: MeshPeer, to sessionID: String, context: String? = nil, timeoutSeconds: Int? = nil,
    isolation: isolated (any Actor)? = #isolation
  ) async throws -> [String: Any] {
    let response = try await invite(invitee, to: sessionID, context: context, timeoutSeconds: timeoutSeconds)
    guard response.status == 201, let invitation = try response.jsonObject()["invitation"] as? [String: Any] else {
      throw TestSupportError.unexpectedMessage("\(self) inviting \(invitee) answered \(response)")
    }
    return invitation
  }

  /// `POST /invitations/{id}/{action}` (accept, decline or cancel) as this peer, once and as is.
  func answer(_ invitationID: String, _ action: String) throws -> HTTPResponse {
    try post("/api/v1/invitations/\(invitationID)/\(action)", json: "{}")
  }

  /// Waits for the invitation to reach this (invitee's) node, then accepts or declines it; the answer must be 200.
  @discardableResult
  func answerWhenReceived(
    _ invitationID: String, _ action: String, timeout: Duration = .seconds(10),
    isolation: isolated (any Actor)? = #isolation
  ) async throws -> [String: Any] {
    var response: HTTPResponse?
    try await eventuallyAsync(timeout: timeout, message: "invitation \(invitationID) reaching \(self)") {
      response = try answer(invitationID, action)
      return response!.status != 404
    }
    guard response!.status == 200, let invitation = try response!.jsonObject()["invitation"] as? [String: Any] else {
      throw TestSupportError.unexpectedMessage("\(action) of \(invitationID) by \(self) answered \(response!)")
    }
    return invitation
  }
}

/// Invites `invitee` into `sessionID` as `inviter`, has the invitee accept, and waits until the inviter's node
/// shows the invitee as a connected member. Returns the invitation as the inviter got it.
@discardableResult
func inviteAndAccept(
  _ inviter: MeshPeer, _ invitee: MeshPeer, sessionID: String, timeout: Duration = .seconds(15),
  isolation: isolated (any Actor)? = #isolation
) async throws -> [String: Any] {
  let invitation = try await inviter.inviteOK(invitee, to: sessionID)
  let id = try #require(invitation["id"] as? String)
  try await invitee.answerWhenReceived(id, "accept")
  try await eventuallyAsync(timeout: timeout, message: "\(invitee) connected in \(sessionID) on the inviter's node") {
    try inviter.memberStates(sessionID)[invitee.id] == "connected"
  }
  return invitation
}

// MARK: - Misc

/// Compact JSON text for a dictionary or array built from strings, numbers and booleans.
func jsonText(_ value: Any) throws -> String {
  String(decoding: try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys]), as: UTF8.self)
}

/// Beacon arguments with a random UDP port and multicast group, so parallel tests never hear each other.
func isolatedBeaconArguments() -> [String] {
  let port = Int.random(in: 20_000...60_000)
  let group = "239.255.\(Int.random(in: 1...254)).\(Int.random(in: 1...254))"
  return ["--discovery", "beacon", "--beacon-port", String(port), "--beacon-group", group]
}

/// Nil when `received` is exactly `expected`; otherwise a short description of what is missing, repeated or out of
/// order (for messages about long sequences).
func sequenceProblem(_ received: [String], expected: [String]) -> String? {
  guard received != expected else { return nil }
  var parts = ["got \(received.count) of \(expected.count)"]
  let missing = Set(expected).subtracting(received)
  if !missing.isEmpty { parts.append("missing \(expected.filter { missing.contains($0) }.prefix(10))") }
  var counts: [String: Int] = [:]
  for item in received { counts[item, default: 0] += 1 }
  let repeated = counts.filter { $0.value > 1 }.keys.sorted()
  if !repeated.isEmpty { parts.append("repeated \(repeated.prefix(10))") }
  let unexpected = Set(received).subtracting(expected)
  if !unexpected.isEmpty { parts.append("unexpected \(unexpected.sorted().prefix(10))") }
  let order = received.filter { Set(expected).contains($0) }
  let positions = Dictionary(expected.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
  if let index = order.indices.dropFirst().first(where: { positions[order[$0]]! < positions[order[$0 - 1]]! }) {
    let window = order[max(0, index - 3)..<min(order.count, index + 3)]
    parts.append("out of order at position \(index): …\(window.joined(separator: ", "))…")
  }
  return parts.joined(separator: "; ")
}

/// Seconds (with milliseconds) of a duration, for messages.
func seconds(_ duration: Duration) -> String {
  let (whole, fraction) = duration.components
  return String(format: "%.3f s", Double(whole) + Double(fraction) / 1e18)
}
