/// REST handlers for advertising, browsing, service listings and mesh nodes.
///
/// Layer 6 (surface) over the ``Directory`` state machine. Advertising and browsing are persisted, so a peer that
/// was "receiving jobs" still is after a node restart; the directory then re-announces it as links come up.
import LWS
import MeshCore

extension Node {
  func serviceType(_ context: RequestContext) throws(APIError) -> String {
    do {
      return try Validate.serviceType(context.parameters["serviceType"] ?? "")
    } catch {
      throw error.apiError
    }
  }

  func listAdvertising(_ context: RequestContext) -> HTTPResponse {
    let advertising = mesh.directory.advertising(of: context.authenticatedPeer.id)
    let entries: [JSONValue] = advertising.keys.sorted().map { type in
      ["serviceType": .string(type), "discoveryInfo": Self.mapJSON(advertising[type]!)]
    }
    return .json(["advertising": .array(entries)])
  }

  func startAdvertising(_ context: RequestContext) async throws -> HTTPResponse {
    let type = try serviceType(context)
    let body = try RequestBody(context.request, allowEmpty: true)
    try body.allowOnly(["discoveryInfo"])
    let info: [String: String]
    do {
      info = try Validate.discoveryInfo(try body.optionalStringMap("discoveryInfo") ?? [:])
    } catch let error as ValidationError {
      throw error.apiError
    }
    let peer = context.authenticatedPeer
    try await store.setService(
      NodeStore.StoredService(peerID: peer.id, kind: "advertise", serviceType: type, discoveryInfo: info))
    guard peers[peer.id] != nil else { throw APIError.invalidToken }
    feed(.advertisingStarted(peerID: peer.id, serviceType: type, discoveryInfo: info))
    return .json(["serviceType": .string(type), "discoveryInfo": Self.mapJSON(info)])
  }

  func stopAdvertising(_ context: RequestContext) async throws -> HTTPResponse {
    let type = try serviceType(context)
    let peer = context.authenticatedPeer
    guard mesh.directory.advertising(of: peer.id)[type] != nil else {
      throw APIError.notFound("this peer is not advertising \(type); see GET /api/v1/advertising")
    }
    try await store.removeService(peerID: peer.id, kind: "advertise", serviceType: type)
    feed(.advertisingStopped(peerID: peer.id, serviceType: type))
    return .noContent
  }

  func listBrowsing(_ context: RequestContext) -> HTTPResponse {
    let browsing = mesh.directory.browsing(of: context.authenticatedPeer.id).sorted().map { JSONValue.string($0) }
    return .json(["browsing": .array(browsing)])
  }

  func startBrowsing(_ context: RequestContext) async throws -> HTTPResponse {
    let type = try serviceType(context)
    let peer = context.authenticatedPeer
    if !mesh.directory.browsing(of: peer.id).contains(type) {
      try await store.setService(
        NodeStore.StoredService(peerID: peer.id, kind: "browse", serviceType: type, discoveryInfo: [:]))
      guard peers[peer.id] != nil else { throw APIError.invalidToken }
      feed(.browsingStarted(peerID: peer.id, serviceType: type))
    }
    return .json(["serviceType": .string(type), "peers": advertisersJSON(type, excluding: peer.id)])
  }

  func stopBrowsing(_ context: RequestContext) async throws -> HTTPResponse {
    let type = try serviceType(context)
    let peer = context.authenticatedPeer
    guard mesh.directory.browsing(of: peer.id).contains(type) else {
      throw APIError.notFound("this peer is not browsing \(type); see GET /api/v1/browsing")
    }
    try await store.removeService(peerID: peer.id, kind: "browse", serviceType: type)
    feed(.browsingStopped(peerID: peer.id, serviceType: type))
    return .noContent
  }

  func listPresence(_ context: RequestContext) throws -> HTTPResponse {
    let page = try Page(
      mesh.directory.presentPeers(excluding: context.authenticatedPeer.id), id: \.peerID,
      query: context.request.head.query)
    return .json(["peers": .array(page.items.map(\.json)), "nextCursor": page.nextCursorJSON])
  }

  /// Presence watching lives in the directory only (not the store): the dashboard PUTs it again on every hello.
  func startWatchingPresence(_ context: RequestContext) -> HTTPResponse {
    let peer = context.authenticatedPeer
    feed(.presenceWatchStarted(peerID: peer.id))
    return .json([
      "watching": true, "peers": .array(mesh.directory.presentPeers(excluding: peer.id).map(\.json)),
    ])
  }

  func stopWatchingPresence(_ context: RequestContext) throws -> HTTPResponse {
    let peer = context.authenticatedPeer
    guard mesh.directory.watchesPresence(peer.id) else {
      throw APIError.notFound("this peer is not watching presence; start with PUT /api/v1/presence")
    }
    feed(.presenceWatchStopped(peerID: peer.id))
    return .noContent
  }

  func servicePeers(_ context: RequestContext) throws -> HTTPResponse {
    let type = try serviceType(context)
    let page = try Page(
      mesh.directory.advertisers(of: type, excluding: context.authenticatedPeer.id), id: \.peer.peerID,
      query: context.request.head.query)
    return .json([
      "serviceType": .string(type), "peers": .array(page.items.map(Self.advertiserJSON)),
      "nextCursor": page.nextCursorJSON,
    ])
  }

  func advertisersJSON(_ serviceType: String, excluding: String) -> JSONValue {
    .array(mesh.directory.advertisers(of: serviceType, excluding: excluding).map(Self.advertiserJSON))
  }

  static func advertiserJSON(_ advertiser: (peer: Directory.PeerRef, discoveryInfo: [String: String])) -> JSONValue {
    ["peer": advertiser.peer.json, "discoveryInfo": mapJSON(advertiser.discoveryInfo)]
  }

  func addMeshNode(_ context: RequestContext) throws -> HTTPResponse {
    let body = try RequestBody(context.request)
    try body.allowOnly(["address"])
    let text = try body.requiredString("address")
    guard let address = MeshAddress(text) else {
      throw APIError.badRequest(
        "address must be HOST:PORT, e.g. 192.168.1.20:8080 or [fe80::1]:8080 (got \(text.debugDescription))")
    }
    guard !(address.port == UInt16(server.port) && ["127.0.0.1", "localhost", "::1"].contains(address.host)) else {
      throw APIError.badRequest("\(address) is this node itself; give the address of another node")
    }
    addSeed(address)
    return .json(meshNodesJSON(admin: true), status: 202)
  }
}
