/// Advertising, browsing, service listings and mesh nodes: the discovery feature's REST commands and its DNS-SD
/// announcements.
///
/// Layer 6 (surface) over the ``Directory`` state machine. Advertising and browsing are persisted, so a peer that
/// was "receiving jobs" still is after a node restart; the directory then re-announces it as links come up.
import Discovery
import LWS
import MeshCore

/// The discovery feature: local peers' advertising and browsing (the routes' commands; the state is the mesh
/// core's directory), announced on the mesh and, with DNS-SD, on the LAN: every change to what local peers advertise
/// (``NodeFeature/localServicesChanged(node:)``) recomputes how many local peers advertise each service type and
/// hands that to ``DNSSDDiscovery`` (module `Discovery`), which registers, updates or withdraws only what changed.
/// Owned by the node actor and only touched on its executor.
final class DiscoveryFeature: NodeFeature {
  /// DNS-SD registrations of the service types local peers advertise (nil without DNS-SD).
  private var dnssd: DNSSDDiscovery?

  // MARK: - DNS-SD

  func localServicesChanged(node: isolated Node) {
    if dnssd != nil { publishLocalServiceTypes(node: node) }
  }

  /// Starts (or, with nil, stops) publishing local service types through `discovery`.
  func attachDNSSD(_ discovery: DNSSDDiscovery?, node: isolated Node) {
    dnssd = discovery
    publishLocalServiceTypes(node: node)
  }

  /// Hands the service types local peers advertise, with how many peers advertise each, to DNS-SD.
  func publishLocalServiceTypes(node: isolated Node) {
    guard let dnssd else { return }
    var peersByServiceType: [String: Int] = [:]
    for peerID in node.peers.keys {
      for type in node.mesh.node.directory.advertising(of: peerID).keys { peersByServiceType[type, default: 0] += 1 }
    }
    dnssd.setAdvertisedServiceTypes(peersByServiceType)
  }

  // MARK: - REST

  static func serviceType(_ context: RequestContext) throws(APIError) -> String {
    do {
      return try Validate.serviceType(context.parameters["serviceType"] ?? "")
    } catch {
      throw error.apiError
    }
  }

  func listAdvertising(_ context: RequestContext, node: isolated Node) -> HTTPResponse {
    let advertising = node.mesh.node.directory.advertising(of: context.authenticatedPeer.id)
    let entries: [JSONValue] = advertising.keys.sorted().map { type in
      ["serviceType": .string(type), "discoveryInfo": JSONValue.stringMap(advertising[type]!)]
    }
    return .json(["advertising": .array(entries)])
  }

  func startAdvertising(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let type = try Self.serviceType(context)
    let body = try RequestBody(context.request, allowEmpty: true)
    try body.allowOnly(["discoveryInfo"])
    let info: [String: String]
    do {
      info = try Validate.discoveryInfo(try body.optionalStringMap("discoveryInfo") ?? [:])
    } catch let error as ValidationError {
      throw error.apiError
    }
    let peer = context.authenticatedPeer
    try await node.store.setService(
      NodeStore.StoredService(peerID: peer.id, kind: "advertise", serviceType: type, discoveryInfo: info))
    guard node.peers[peer.id] != nil else { throw APIError.invalidToken }
    node.feed(.advertisingStarted(peerID: peer.id, serviceType: type, discoveryInfo: info))
    return .json(["serviceType": .string(type), "discoveryInfo": JSONValue.stringMap(info)])
  }

  func stopAdvertising(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let type = try Self.serviceType(context)
    let peer = context.authenticatedPeer
    guard node.mesh.node.directory.advertising(of: peer.id)[type] != nil else {
      throw APIError.notFound("this peer is not advertising \(type); see GET /api/v1/advertising")
    }
    try await node.store.removeService(peerID: peer.id, kind: "advertise", serviceType: type)
    node.feed(.advertisingStopped(peerID: peer.id, serviceType: type))
    return .noContent
  }

  func listBrowsing(_ context: RequestContext, node: isolated Node) -> HTTPResponse {
    let browsing = node.mesh.node.directory.browsing(of: context.authenticatedPeer.id).sorted().map {
      JSONValue.string($0)
    }
    return .json(["browsing": .array(browsing)])
  }

  func startBrowsing(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let type = try Self.serviceType(context)
    let peer = context.authenticatedPeer
    if !node.mesh.node.directory.browsing(of: peer.id).contains(type) {
      try await node.store.setService(
        NodeStore.StoredService(peerID: peer.id, kind: "browse", serviceType: type, discoveryInfo: [:]))
      guard node.peers[peer.id] != nil else { throw APIError.invalidToken }
      node.feed(.browsingStarted(peerID: peer.id, serviceType: type))
    }
    return .json(["serviceType": .string(type), "peers": advertisersJSON(type, excluding: peer.id, node: node)])
  }

  func stopBrowsing(_ context: RequestContext, node: isolated Node) async throws -> HTTPResponse {
    let type = try Self.serviceType(context)
    let peer = context.authenticatedPeer
    guard node.mesh.node.directory.browsing(of: peer.id).contains(type) else {
      throw APIError.notFound("this peer is not browsing \(type); see GET /api/v1/browsing")
    }
    try await node.store.removeService(peerID: peer.id, kind: "browse", serviceType: type)
    node.feed(.browsingStopped(peerID: peer.id, serviceType: type))
    return .noContent
  }

  func listPresence(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    let page = try Page(
      node.mesh.node.directory.presentPeers(excluding: context.authenticatedPeer.id), id: \.peerID,
      query: context.request.head.query)
    return .json(["peers": .array(page.items.map(\.json)), "nextCursor": page.nextCursorJSON])
  }

  /// Presence watching lives in the directory only (not the store): the dashboard PUTs it again on every hello.
  func startWatchingPresence(_ context: RequestContext, node: isolated Node) -> HTTPResponse {
    let peer = context.authenticatedPeer
    node.feed(.presenceWatchStarted(peerID: peer.id))
    return .json([
      "watching": true, "peers": .array(node.mesh.node.directory.presentPeers(excluding: peer.id).map(\.json)),
    ])
  }

  func stopWatchingPresence(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    let peer = context.authenticatedPeer
    guard node.mesh.node.directory.watchesPresence(peer.id) else {
      throw APIError.notFound("this peer is not watching presence; start with PUT /api/v1/presence")
    }
    node.feed(.presenceWatchStopped(peerID: peer.id))
    return .noContent
  }

  func servicePeers(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    let type = try Self.serviceType(context)
    let page = try Page(
      node.mesh.node.directory.advertisers(of: type, excluding: context.authenticatedPeer.id), id: \.peer.peerID,
      query: context.request.head.query)
    return .json([
      "serviceType": .string(type), "peers": .array(page.items.map(Self.advertiserJSON)),
      "nextCursor": page.nextCursorJSON,
    ])
  }

  func advertisersJSON(_ serviceType: String, excluding: String, node: isolated Node) -> JSONValue {
    .array(node.mesh.node.directory.advertisers(of: serviceType, excluding: excluding).map(Self.advertiserJSON))
  }

  static func advertiserJSON(_ advertiser: (peer: Directory.PeerRef, discoveryInfo: [String: String])) -> JSONValue {
    ["peer": advertiser.peer.json, "discoveryInfo": JSONValue.stringMap(advertiser.discoveryInfo)]
  }

  func addMeshNode(_ context: RequestContext, node: isolated Node) throws -> HTTPResponse {
    let body = try RequestBody(context.request)
    try body.allowOnly(["address"])
    let text = try body.requiredString("address")
    guard let address = MeshAddress(text) else {
      throw APIError.badRequest(
        "address must be HOST:PORT, e.g. 192.168.1.20:8080 or [fe80::1]:8080 (got \(text.debugDescription))")
    }
    guard !(address.port == UInt16(node.server.port) && ["127.0.0.1", "localhost", "::1"].contains(address.host)) else {
      throw APIError.badRequest("\(address) is this node itself; give the address of another node")
    }
    node.addSeed(address)
    return .json(meshNodesJSON(admin: true, node: node), status: 202)
  }

  /// `GET /api/v1/mesh/nodes` body. Addresses that are not linked (being dialled, backing off after failures, or
  /// waiting) are shown only to the admin: they may come from another node's gossip, and listing whether they
  /// answered would make this node a port scanner for anyone who can link to it.
  func meshNodesJSON(admin: Bool, node: isolated Node) -> JSONValue {
    let now = Node.monotonicMillis()
    let statuses = node.mesh.node.links.status(now: now).filter { admin || $0.state == .linked }
    let nodes: [JSONValue] = statuses.map { status in
      var object = JSONObject()
      object["id"] = status.nodeID.map { .string($0) } ?? .null
      object["name"] = status.name.map { .string($0) } ?? .null
      object["address"] = status.address.map { .string($0) } ?? .null
      object["state"] = .string(status.state.rawValue)
      object["rttMillis"] = status.rttMillis.map { .int(Int64($0)) } ?? .null
      object["source"] = status.source.map { .string($0.rawValue) } ?? .null
      object["direction"] = .string(status.inbound ? "inbound" : "outbound")
      object["linkedForSeconds"] =
        status.linkedSinceMillis.map { .double(Double(now - min(now, $0)) / 1000) } ?? .null
      object["encrypted"] = status.encrypted.map { .bool($0) } ?? .null
      object["fingerprint"] = status.fingerprint.map { .string($0) } ?? .null
      object["pinned"] = .bool(status.nodeID.map { node.mesh.node.links.pins[$0] != nil } ?? false)
      return .object(object)
    }
    let result: JSONValue = [
      "self": [
        "id": .string(node.nodeID), "name": .string(node.configuration.name), "port": .int(Int64(node.server.port)),
        "fingerprint": .string(node.security.fingerprint), "meshTls": .bool(node.security.meshTLS),
        "meshSecret": .bool(node.security.secret != nil), "https": .bool(node.security.servesHTTPS),
      ],
      "nodes": .array(nodes),
    ]
    guard admin, case .object(var object) = result else { return result }
    object["forgotten"] = .array(
      node.mesh.node.links.forgotten.map { entry in
        [
          "address": .string(entry.address), "id": entry.nodeID.map { .string($0) } ?? .null,
          "gossipedBy": entry.gossipedBy.map { .string($0) } ?? .null, "reason": .string(entry.reason),
          "attempts": .int(Int64(entry.attempts)),
        ]
      })
    return .object(object)
  }
}

@available(*, unavailable) extension DiscoveryFeature: Sendable {}
