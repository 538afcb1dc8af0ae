/// The route table: every REST route, its auth rule, body limit and OpenAPI description, in one place.
///
/// Layer 6 (surface). `/api/v1/openapi.json` is generated from this table, so the document describes exactly
/// the routes that exist; the router answers 404 for unknown paths and 405 (with `Allow`) for known paths
/// with the wrong method.
import LWS
import MeshCore

/// What a route does; ``Node`` switches over it.
enum Operation: Sendable {
  case healthz, metrics, openAPI, nodeInfo
  case createPeer, getMe, updateMe, deleteMe
  case listEvents, eventStream, webSocket
  case listAdvertising, startAdvertising, stopAdvertising
  case listBrowsing, startBrowsing, stopBrowsing
  case servicePeers, listMeshNodes, addMeshNode, deleteMeshPin
  case getSettings, updateSettings
  case createSession, listSessions, getSession, leaveSession, sendData, sendEvent
  case createInvitation, listInvitations, getInvitation, acceptInvitation, declineInvitation, cancelInvitation
  case transceive
  case createJob, listJobs, getJob, updateJob, deleteJob, sendJob
  case createChat, listChats, nearbyChats, getChat, joinChat, leaveChat, postChatMessage, listChatMessages
  case uploadResource, listTransfers, getTransfer, deleteTransfer, transferContent
  case acceptTransfer, declineTransfer, getFileConsent, removeAlwaysAccept
  case openStream, writeStream, readStream, streamSocket
}

/// One REST route.
struct Route: Sendable {
  let method: HTTPMethod
  let pattern: String
  let operation: Operation
  let operationID: String
  let summary: String
  /// Whether a peer token is required.
  let authenticated: Bool
  let requestSchema: JSONValue?
  let responses: [(status: Int, description: String, schema: JSONValue?)]
  let queryParameters: [(name: String, description: String, schema: JSONValue)]
  /// Whether the node's admin token is required (Admin.swift).
  var admin = false
  /// The request body is raw bytes (`application/octet-stream`), streamed rather than JSON.
  var rawRequestBody = false

  var segments: [Substring] { pattern.split(separator: "/", omittingEmptySubsequences: true) }

  /// The path parameters if `path` matches the pattern (`own` is `segments`, which the router computes once).
  func match(_ pathSegments: [Substring], own: [Substring]? = nil) -> [String: String]? {
    let own = own ?? segments
    guard own.count == pathSegments.count else { return nil }
    var parameters: [String: String] = [:]
    for (pattern, actual) in zip(own, pathSegments) {
      if pattern.hasPrefix("{") && pattern.hasSuffix("}") {
        guard !actual.isEmpty else { return nil }
        parameters[String(pattern.dropFirst().dropLast())] = String(actual)
      } else if pattern != actual {
        return nil
      }
    }
    return parameters
  }
}

/// The outcome of routing a request.
enum RouteMatch {
  case found(Route, parameters: [String: String])
  case methodNotAllowed(pattern: String, allowed: [HTTPMethod])
  case notFound
}

/// All routes of the node.
struct Router: Sendable {
  let routes: [Route]
  /// Each route's pattern split into segments, once.
  let patterns: [[Substring]]

  init(routes: [Route]) {
    self.routes = routes
    self.patterns = routes.map(\.segments)
  }

  func match(method: HTTPMethod, path: String) -> RouteMatch {
    let pathSegments = path.split(separator: "/", omittingEmptySubsequences: true)
    var allowed: [HTTPMethod] = []
    var pattern = ""
    for (index, route) in routes.enumerated() {
      guard let parameters = route.match(pathSegments, own: patterns[index]) else { continue }
      if route.method == method || (method == .head && route.method == .get) {
        return .found(route, parameters: parameters)
      }
      allowed.append(route.method)
      pattern = route.pattern
    }
    if allowed.isEmpty { return .notFound }
    if allowed.contains(.get) { allowed.append(.head) }
    return .methodNotAllowed(pattern: pattern, allowed: allowed)
  }

  static let standard = Router(routes: coreRoutes + transferRoutes + streamRoutes)

  static let coreRoutes: [Route] = [
    Route(
      method: .get, pattern: "/healthz", operation: .healthz, operationID: "getHealth",
      summary:
        "Liveness: 200 while the node serves requests, its store answers and its data directory is the one it opened.",
      authenticated: false, requestSchema: nil,
      responses: [
        (200, "The node is healthy.", Schemas.health),
        (
          503,
          "The store does not answer (unavailable), or the data directory or its database file was deleted, "
            + "moved or replaced while the node ran (data_directory_lost; writes answer the same).", Schemas.error
        ),
      ],
      queryParameters: []),
    Route(
      method: .get, pattern: "/metrics", operation: .metrics, operationID: "getMetrics",
      summary: "Prometheus text exposition: requests by route and status, open WebSockets, peers, events.",
      authenticated: false, requestSchema: nil, responses: [(200, "Prometheus text format 0.0.4.", nil)],
      queryParameters: []),
    Route(
      method: .get, pattern: "/api/v1/openapi.json", operation: .openAPI, operationID: "getOpenAPI",
      summary: "This OpenAPI 3.1 document.", authenticated: false, requestSchema: nil,
      responses: [(200, "The OpenAPI document.", ["type": "object"])], queryParameters: []),
    Route(
      method: .get, pattern: "/api/v1/node", operation: .nodeInfo, operationID: "getNode",
      summary: "This node's id, name, version, uptime and peer count.", authenticated: false, requestSchema: nil,
      responses: [(200, "Node information.", Schemas.node)], queryParameters: []),
    Route(
      method: .post, pattern: "/api/v1/peers", operation: .createPeer, operationID: "createPeer",
      summary: "Creates a peer hosted on this node and returns its bearer token (shown only once).",
      authenticated: false, requestSchema: Schemas.createPeer,
      responses: [
        (201, "The peer and its token.", Schemas.createdPeer),
        (400, "Invalid display name or discovery info.", Schemas.error),
        (409, "The node already hosts --max-peers peers (peer_limit_reached).", Schemas.error),
        (413, "Body too large.", Schemas.error), (415, "Not JSON, or no Content-Type.", Schemas.error),
        (429, "Over the client address's peer creation rate (--peer-create-rate); see Retry-After.", Schemas.error),
        (503, "The node's data directory is lost or failing.", Schemas.error),
      ], queryParameters: []),
    Route(
      method: .get, pattern: "/api/v1/peers/me", operation: .getMe, operationID: "getMe",
      summary: "The peer the bearer token belongs to.", authenticated: true, requestSchema: nil,
      responses: [(200, "The peer.", Schemas.peerEnvelope), (401, "Missing or unknown token.", Schemas.error)],
      queryParameters: []),
    Route(
      method: .patch, pattern: "/api/v1/peers/me", operation: .updateMe, operationID: "updateMe",
      summary: "Changes the peer's display name or discovery info; pushes peer.updated to its clients.",
      authenticated: true, requestSchema: Schemas.updatePeer,
      responses: [
        (200, "The updated peer.", Schemas.peerEnvelope), (400, "Invalid field.", Schemas.error),
        (401, "Missing or unknown token.", Schemas.error),
      ], queryParameters: []),
    Route(
      method: .delete, pattern: "/api/v1/peers/me", operation: .deleteMe, operationID: "deleteMe",
      summary: "Deletes the peer, its token and its event log; its open WebSockets close with 4401.",
      authenticated: true, requestSchema: nil,
      responses: [(204, "Deleted.", nil), (401, "Missing or unknown token.", Schemas.error)], queryParameters: []),
    Route(
      method: .get, pattern: "/api/v1/events", operation: .listEvents, operationID: "listEvents",
      summary: "The peer's durable event log after a cursor, oldest first.", authenticated: true, requestSchema: nil,
      responses: [
        (200, "A page of events.", Schemas.eventPage), (400, "Bad cursor or limit.", Schemas.error),
        (401, "Missing or unknown token.", Schemas.error),
      ],
      queryParameters: [
        (
          "since", "Return events after this cursor (an event id); default 0, the start of the log.",
          Schemas.cursorQuery
        ),
        ("cursor", "Alias of since, for the generic ?limit=&cursor= paging.", Schemas.cursorQuery),
        ("limit", "Page size, 1–1000, default 100.", ["type": "integer", "minimum": 1, "maximum": 1000]),
      ]),
    Route(
      method: .get, pattern: "/api/v1/events/stream", operation: .eventStream, operationID: "streamEvents",
      summary:
        "Server-Sent Events: replays events after since (or Last-Event-ID), then pushes new ones live. The token may be passed as ?token=.",
      authenticated: true, requestSchema: nil,
      responses: [(200, "text/event-stream", nil), (401, "Missing or unknown token.", Schemas.error)],
      queryParameters: [
        ("since", "Replay events after this cursor.", Schemas.cursorQuery),
        ("token", "The peer token, for clients that cannot set headers.", ["type": "string"]),
      ]),
    Route(
      method: .get, pattern: "/api/v1/ws", operation: .webSocket, operationID: "openWebSocket",
      summary:
        "WebSocket upgrade: a hello event, the replay after since, then live events. The token may be passed as ?token=.",
      authenticated: true, requestSchema: nil,
      responses: [
        (101, "Switching protocols.", nil), (401, "Missing or unknown token.", Schemas.error),
        (426, "Not a WebSocket upgrade request.", Schemas.error),
      ],
      queryParameters: [
        ("since", "Replay events after this cursor.", Schemas.cursorQuery),
        ("token", "The peer token, for browsers.", ["type": "string"]),
      ]),
    Route(
      method: .get, pattern: "/api/v1/advertising", operation: .listAdvertising, operationID: "listAdvertising",
      summary: "The service types this peer advertises, with their discovery info.", authenticated: true,
      requestSchema: nil,
      responses: [
        (200, "Advertised services.", Schemas.advertisingList), (401, "Missing or unknown token.", Schemas.error),
      ],
      queryParameters: []),
    Route(
      method: .put, pattern: "/api/v1/advertising/{serviceType}", operation: .startAdvertising,
      operationID: "startAdvertising",
      summary:
        "Starts (or updates) advertising a service type, like MCNearbyServiceAdvertiser; browsers mesh-wide get peer.found.",
      authenticated: true, requestSchema: Schemas.advertiseRequest,
      responses: [
        (200, "Advertising.", Schemas.advertisingEntry),
        (400, "Invalid service type or discovery info.", Schemas.error),
        (401, "Missing or unknown token.", Schemas.error),
      ], queryParameters: []),
    Route(
      method: .delete, pattern: "/api/v1/advertising/{serviceType}", operation: .stopAdvertising,
      operationID: "stopAdvertising", summary: "Stops advertising; browsers mesh-wide get peer.lost.",
      authenticated: true, requestSchema: nil,
      responses: [
        (204, "Stopped.", nil), (400, "Invalid service type.", Schemas.error),
        (404, "Not advertising this service type.", Schemas.error),
      ], queryParameters: []),
    Route(
      method: .get, pattern: "/api/v1/browsing", operation: .listBrowsing, operationID: "listBrowsing",
      summary: "The service types this peer browses for.", authenticated: true, requestSchema: nil,
      responses: [(200, "Browsed services.", Schemas.browsingList), (401, "Missing or unknown token.", Schemas.error)],
      queryParameters: []),
    Route(
      method: .put, pattern: "/api/v1/browsing/{serviceType}", operation: .startBrowsing, operationID: "startBrowsing",
      summary:
        "Starts browsing, like MCNearbyServiceBrowser: peer.found for every current advertiser mesh-wide (self excluded), then found/lost as they change.",
      authenticated: true, requestSchema: nil,
      responses: [
        (200, "Browsing, with the advertisers known now.", Schemas.browsingEntry),
        (400, "Invalid service type.", Schemas.error),
      ], queryParameters: []),
    Route(
      method: .delete, pattern: "/api/v1/browsing/{serviceType}", operation: .stopBrowsing,
      operationID: "stopBrowsing", summary: "Stops browsing.", authenticated: true, requestSchema: nil,
      responses: [
        (204, "Stopped.", nil), (400, "Invalid service type.", Schemas.error),
        (404, "Not browsing this service type.", Schemas.error),
      ], queryParameters: []),
    Route(
      method: .get, pattern: "/api/v1/services/{serviceType}/peers", operation: .servicePeers,
      operationID: "listServicePeers", summary: "Peers advertising the service type, mesh-wide, the caller excluded.",
      authenticated: true, requestSchema: nil,
      responses: [(200, "Advertisers.", Schemas.servicePeers), (400, "Invalid service type.", Schemas.error)],
      queryParameters: [
        ("limit", "Page size, 1–500, default 100.", ["type": "integer", "minimum": 1, "maximum": 500]),
        ("cursor", "The nextCursor of the previous page.", ["type": "string"]),
      ]),
    Route(
      method: .get, pattern: "/api/v1/mesh/nodes", operation: .listMeshNodes, operationID: "listMeshNodes",
      summary:
        "This node and the nodes linked to it: direction, RTT, how each was found, TLS. With the admin token "
        + "(optional) also the addresses it is dialling, backing off from or waiting for.",
      authenticated: false, requestSchema: nil, responses: [(200, "Known nodes.", Schemas.meshNodes)],
      queryParameters: []),
    Route(
      method: .post, pattern: "/api/v1/mesh/nodes", operation: .addMeshNode, operationID: "addMeshNode",
      summary:
        "Adds a static seed HOST:PORT; the node dials it now and re-dials it after every loss. Needs the admin token.",
      authenticated: false, requestSchema: Schemas.addMeshNode,
      responses: [
        (202, "Dialling.", Schemas.meshNodes), (400, "Malformed address.", Schemas.error),
        (401, "Missing or unknown admin token.", Schemas.error),
        (403, "A peer token, not the admin token.", Schemas.error),
      ], queryParameters: [], admin: true),
    Route(
      method: .get, pattern: "/api/v1/node/settings", operation: .getSettings, operationID: "getNodeSettings",
      summary: "The node's limits and event retention. Needs the admin token.", authenticated: false,
      requestSchema: nil,
      responses: [
        (200, "The settings.", Schemas.settingsEnvelope), (401, "Missing or unknown admin token.", Schemas.error),
        (403, "A peer token, not the admin token.", Schemas.error),
      ], queryParameters: [], admin: true),
    Route(
      method: .patch, pattern: "/api/v1/node/settings", operation: .updateSettings, operationID: "updateNodeSettings",
      summary: "Changes limits and event retention at run time (until the node restarts). Needs the admin token.",
      authenticated: false, requestSchema: Schemas.settingsPatch,
      responses: [
        (200, "The settings now in force.", Schemas.settingsEnvelope), (400, "Invalid field.", Schemas.error),
        (401, "Missing or unknown admin token.", Schemas.error),
        (403, "A peer token, not the admin token.", Schemas.error),
      ], queryParameters: [], admin: true),
    Route(
      method: .delete, pattern: "/api/v1/mesh/pins/{nodeId}", operation: .deleteMeshPin, operationID: "deleteMeshPin",
      summary:
        "Forgets the pinned certificate of a node (after it was replaced on purpose); its next TLS link pins anew. "
        + "Needs the admin token.",
      authenticated: false, requestSchema: nil,
      responses: [
        (204, "Pin removed.", nil), (401, "Missing or unknown admin token.", Schemas.error),
        (403, "A peer token, not the admin token.", Schemas.error), (404, "No pin for that node.", Schemas.error),
      ], queryParameters: [], admin: true),
    Route(
      method: .post, pattern: "/api/v1/sessions", operation: .createSession, operationID: "createSession",
      summary: "Creates a session (MCSession) with this peer as its first member; defaults: optional, cluster, 64.",
      authenticated: true, requestSchema: Schemas.createSession,
      responses: [(201, "The session.", Schemas.sessionEnvelope), (400, "Invalid field.", Schemas.error)],
      queryParameters: []),
    Route(
      method: .get, pattern: "/api/v1/sessions", operation: .listSessions, operationID: "listSessions",
      summary: "Sessions this peer is a member of, paged.", authenticated: true, requestSchema: nil,
      responses: [(200, "Sessions.", Schemas.sessionList), (400, "Bad limit or cursor.", Schemas.error)],
      queryParameters: [
        ("limit", "Page size, 1–500, default 100.", ["type": "integer", "minimum": 1, "maximum": 500]),
        ("cursor", "The nextCursor of the previous page.", ["type": "string"]),
      ]),
    Route(
      method: .get, pattern: "/api/v1/sessions/{sessionId}", operation: .getSession, operationID: "getSession",
      summary: "One session with its members and their states.", authenticated: true, requestSchema: nil,
      responses: [(200, "The session.", Schemas.sessionEnvelope), (404, "Not a member.", Schemas.error)],
      queryParameters: []),
    Route(
      method: .delete, pattern: "/api/v1/sessions/{sessionId}/members/me", operation: .leaveSession,
      operationID: "leaveSession", summary: "Leaves the session; the others see session.peer.state notConnected.",
      authenticated: true, requestSchema: nil,
      responses: [(204, "Left.", nil), (404, "Not a member.", Schemas.error)], queryParameters: []),
    Route(
      method: .post, pattern: "/api/v1/sessions/{sessionId}/data", operation: .sendData, operationID: "sendData",
      summary:
        "Sends the raw body (≤ 1 MiB) to ?to=id,id (default: every connected member). reliable: once and in order per sender, or session.send.failed; the answer waits while the sender's lane on a mesh link is full (503 link_busy after 10 s); unreliable: never waits, may drop.",
      authenticated: true, requestSchema: nil,
      responses: [
        (202, "Accepted for delivery.", Schemas.sendResult), (404, "Not a member.", Schemas.error),
        (409, "A target is not connected, or the strategy forbids it.", Schemas.error),
        (413, "Body over 1 MiB.", Schemas.error),
        (
          503,
          "link_busy (reliable only): the sender's lane on a mesh link had no room for 10 s (the answer is held "
            + "meanwhile); nothing was sent; retry after Retry-After.", Schemas.error
        ),
      ],
      queryParameters: [
        ("to", "Comma-separated peer ids; default every connected member.", ["type": "string"]),
        ("mode", "reliable (default) or unreliable.", ["type": "string", "enum": ["reliable", "unreliable"]]),
      ]),
    Route(
      method: .post, pattern: "/api/v1/sessions/{sessionId}/events", operation: .sendEvent, operationID: "sendEvent",
      summary: "Sends a PeerKit-style named event {event, object, to?} to session members (session.event).",
      authenticated: true, requestSchema: Schemas.namedEvent,
      responses: [
        (202, "Accepted for delivery.", Schemas.sendResult), (404, "Not a member.", Schemas.error),
        (409, "A target is not connected.", Schemas.error),
        (
          503,
          "link_busy: the sender's lane on a mesh link had no room for 10 s (the answer is held meanwhile); nothing "
            + "was sent; retry after Retry-After.", Schemas.error
        ),
      ], queryParameters: []),
    Route(
      method: .post, pattern: "/api/v1/invitations", operation: .createInvitation, operationID: "createInvitation",
      summary:
        "Invites a peer anywhere in the mesh into a session (invitePeer(_:to:withContext:timeout:)); both sides see the same verificationCode.",
      authenticated: true, requestSchema: Schemas.createInvitation,
      responses: [
        (201, "The pending invitation.", Schemas.invitationEnvelope), (400, "Invalid field.", Schemas.error),
        (404, "Unknown peer or session.", Schemas.error),
        (409, "Strategy, capacity or duplicate invitation.", Schemas.error),
      ], queryParameters: []),
    Route(
      method: .get, pattern: "/api/v1/invitations", operation: .listInvitations, operationID: "listInvitations",
      summary: "Invitations this peer sent or received, newest first.", authenticated: true, requestSchema: nil,
      responses: [(200, "Invitations.", Schemas.invitationList), (400, "Bad direction.", Schemas.error)],
      queryParameters: [
        ("direction", "incoming or outgoing; default both.", ["type": "string", "enum": ["incoming", "outgoing"]]),
        ("limit", "Page size, 1–500, default 100.", ["type": "integer", "minimum": 1, "maximum": 500]),
        ("cursor", "The nextCursor of the previous page.", ["type": "string"]),
      ]),
    Route(
      method: .get, pattern: "/api/v1/invitations/{invitationId}", operation: .getInvitation,
      operationID: "getInvitation", summary: "One invitation.", authenticated: true, requestSchema: nil,
      responses: [(200, "The invitation.", Schemas.invitationEnvelope), (404, "Unknown.", Schemas.error)],
      queryParameters: []),
    Route(
      method: .post, pattern: "/api/v1/invitations/{invitationId}/accept", operation: .acceptInvitation,
      operationID: "acceptInvitation", summary: "The invitee accepts: it joins the session. Late accepts are 409.",
      authenticated: true, requestSchema: nil,
      responses: [
        (200, "Accepted.", Schemas.invitationEnvelope), (403, "Not the invitee.", Schemas.error),
        (409, "Already accepted, declined, expired or canceled.", Schemas.error),
      ], queryParameters: []),
    Route(
      method: .post, pattern: "/api/v1/invitations/{invitationId}/decline", operation: .declineInvitation,
      operationID: "declineInvitation", summary: "The invitee declines.", authenticated: true, requestSchema: nil,
      responses: [
        (200, "Declined.", Schemas.invitationEnvelope), (403, "Not the invitee.", Schemas.error),
        (409, "No longer pending.", Schemas.error),
      ], queryParameters: []),
    Route(
      method: .post, pattern: "/api/v1/invitations/{invitationId}/cancel", operation: .cancelInvitation,
      operationID: "cancelInvitation", summary: "The inviter withdraws a pending invitation.", authenticated: true,
      requestSchema: nil,
      responses: [
        (200, "Canceled.", Schemas.invitationEnvelope), (403, "Not the inviter.", Schemas.error),
        (409, "No longer pending.", Schemas.error),
      ], queryParameters: []),
    Route(
      method: .post, pattern: "/api/v1/transceive", operation: .transceive, operationID: "transceive",
      summary:
        "PeerKit / ARKit MultipeerSession: advertise + browse + auto-invite + auto-accept everyone transceiving the service type into one session (led by the smallest peer id).",
      authenticated: true, requestSchema: Schemas.transceive,
      responses: [(200, "Transceiving.", Schemas.transceiveResult), (400, "Invalid service type.", Schemas.error)],
      queryParameters: []),
    Route(
      method: .post, pattern: "/api/v1/jobs", operation: .createJob, operationID: "createJob",
      summary: "Adds a job to this peer's list.", authenticated: true, requestSchema: Schemas.jobInput,
      responses: [(201, "The job.", Schemas.jobEnvelope), (400, "Invalid field.", Schemas.error)],
      queryParameters: []),
    Route(
      method: .get, pattern: "/api/v1/jobs", operation: .listJobs, operationID: "listJobs",
      summary: "This peer's jobs, oldest first, paged.", authenticated: true, requestSchema: nil,
      responses: [(200, "A page of jobs.", Schemas.jobList), (400, "Bad limit.", Schemas.error)],
      queryParameters: [
        ("limit", "Page size, 1–500, default 100.", ["type": "integer", "minimum": 1, "maximum": 500]),
        ("cursor", "The nextCursor of the previous page.", ["type": "string"]),
      ]),
    Route(
      method: .get, pattern: "/api/v1/jobs/{jobId}", operation: .getJob, operationID: "getJob", summary: "One job.",
      authenticated: true, requestSchema: nil,
      responses: [(200, "The job.", Schemas.jobEnvelope), (404, "Not in this peer's list.", Schemas.error)],
      queryParameters: []),
    Route(
      method: .patch, pattern: "/api/v1/jobs/{jobId}", operation: .updateJob, operationID: "updateJob",
      summary: "Changes a job's fields (null clears an optional one).", authenticated: true,
      requestSchema: Schemas.jobPatch,
      responses: [
        (200, "The job.", Schemas.jobEnvelope), (400, "Invalid field.", Schemas.error),
        (404, "Not in this peer's list.", Schemas.error),
      ], queryParameters: []),
    Route(
      method: .delete, pattern: "/api/v1/jobs/{jobId}", operation: .deleteJob, operationID: "deleteJob",
      summary: "Removes a job from this peer's list.", authenticated: true, requestSchema: nil,
      responses: [(204, "Deleted.", nil), (404, "Not in this peer's list.", Schemas.error)], queryParameters: []),
    Route(
      method: .post, pattern: "/api/v1/jobs/{jobId}/send", operation: .sendJob, operationID: "sendJob",
      summary:
        "Offers the job to a peer receiving jobs (advertising jobmanager-jobs): an invitation (60 s unless timeoutSeconds says otherwise) whose context is the whole job (the name, then Due:, Payment: and Notes: lines for the fields set; at most 4 KiB); on accept the job lands in their list (job.received) and yours shows assignedTo (job.delivered).",
      authenticated: true, requestSchema: Schemas.sendJob,
      responses: [
        (202, "Offered; the answer arrives as events.", Schemas.jobOffer),
        (404, "Unknown job or peer.", Schemas.error),
        (409, "Not receiving jobs, already assigned or already offered.", Schemas.error),
      ], queryParameters: []),
    Route(
      method: .post, pattern: "/api/v1/chats", operation: .createChat, operationID: "createChat",
      summary:
        "Hosts a chat room (encryption required) advertised on jobmanager-chat with its name; the host's node orders and keeps every message.",
      authenticated: true, requestSchema: Schemas.createChat,
      responses: [
        (201, "The room.", Schemas.chatEnvelope), (400, "Bad name.", Schemas.error),
        (409, "The peer hosts too many rooms to advertise them all.", Schemas.error),
      ], queryParameters: []),
    Route(
      method: .get, pattern: "/api/v1/chats", operation: .listChats, operationID: "listChats",
      summary: "The rooms this peer is in or hosts.", authenticated: true, requestSchema: nil,
      responses: [(200, "The rooms.", Schemas.chatList)], queryParameters: []),
    Route(
      method: .get, pattern: "/api/v1/chats/nearby", operation: .nearbyChats, operationID: "nearbyChats",
      summary: "Rooms other peers host, mesh-wide, from their jobmanager-chat advertisements.", authenticated: true,
      requestSchema: nil, responses: [(200, "The rooms.", Schemas.chatList)], queryParameters: []),
    Route(
      method: .get, pattern: "/api/v1/chats/{chatId}", operation: .getChat, operationID: "getChat",
      summary: "One room with its members.", authenticated: true, requestSchema: nil,
      responses: [(200, "The room.", Schemas.chatDetail), (404, "Unknown room.", Schemas.error)], queryParameters: []),
    Route(
      method: .post, pattern: "/api/v1/chats/{chatId}/join", operation: .joinChat, operationID: "joinChat",
      summary:
        "Joins a room (accepted by the host's node without a prompt); the host sends the whole history. Waits up to 10 s for the host.",
      authenticated: true, requestSchema: nil,
      responses: [
        (200, "Joined.", Schemas.chatEnvelope),
        (202, "The host's node has not answered yet; chat.member.joined follows.", Schemas.chatEnvelope),
        (404, "Unknown room.", Schemas.error),
        (409, "The room ended, or the link to its host is not encrypted.", Schemas.error),
        (503, "The host's node is not linked.", Schemas.error),
      ], queryParameters: []),
    Route(
      method: .post, pattern: "/api/v1/chats/{chatId}/leave", operation: .leaveChat, operationID: "leaveChat",
      summary: "Leaves a room; it ends when its host has left and no member remains.", authenticated: true,
      requestSchema: nil,
      responses: [
        (200, "Left.", Schemas.chatEnvelope), (403, "Not a member.", Schemas.error),
        (404, "Unknown room.", Schemas.error),
      ], queryParameters: []),
    Route(
      method: .post, pattern: "/api/v1/chats/{chatId}/messages", operation: .postChatMessage,
      operationID: "postChatMessage",
      summary:
        "Sends a message to every member. 201 once it is stored on this node; it is delivered in order, once, also across link losses and restarts. A repeated id returns the stored message (safe retries).",
      authenticated: true, requestSchema: Schemas.postChatMessage,
      responses: [
        (201, "Stored; seq is set once the host has ordered it.", Schemas.chatMessageEnvelope),
        (200, "A retry of a message already stored.", Schemas.chatMessageEnvelope),
        (400, "Bad body or id.", Schemas.error), (403, "Not a member.", Schemas.error),
        (404, "Unknown room.", Schemas.error), (409, "The room ended, or the id is taken.", Schemas.error),
      ], queryParameters: []),
    Route(
      method: .get, pattern: "/api/v1/chats/{chatId}/messages", operation: .listChatMessages,
      operationID: "listChatMessages",
      summary:
        "Messages in the host's order after a seq; the last page ends with this node's own messages not ordered yet (seq null).",
      authenticated: true, requestSchema: nil,
      responses: [
        (200, "A page of messages.", Schemas.chatMessagePage), (400, "Bad after or limit.", Schemas.error),
        (403, "Not a member.", Schemas.error), (404, "Unknown room.", Schemas.error),
      ],
      queryParameters: [
        ("after", "Return messages with seq greater than this; default 0.", ["type": "integer", "minimum": 0]),
        ("cursor", "Alias of after (the nextCursor of the previous page).", ["type": "string"]),
        ("limit", "Page size, 1–1000, default 100.", ["type": "integer", "minimum": 1, "maximum": 1000]),
      ]),
  ]
}

/// JSON Schemas shared by routes and the OpenAPI document.
enum Schemas {
  static let error: JSONValue = [
    "type": "object", "required": ["error"],
    "properties": [
      "error": [
        "type": "object", "required": ["code", "message"],
        "properties": ["code": ["type": "string"], "message": ["type": "string"]],
      ]
    ],
  ]
  static let health: JSONValue = [
    "type": "object", "required": ["status"], "properties": ["status": ["type": "string", "enum": ["ok"]]],
  ]
  static let discoveryInfo: JSONValue = [
    "type": "object", "maxProperties": 16, "additionalProperties": ["type": "string"],
    "propertyNames": ["minLength": 1, "pattern": "^[ -<>-~]+$"],
    "description": "Up to 16 string pairs, at most 400 bytes in total (Bonjour TXT-record sized).",
  ]
  static let displayName: JSONValue = [
    "type": "string", "minLength": 1, "maxLength": 63, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$",
    "description": "1–63 UTF-8 bytes, no control characters.",
  ]
  /// Discovery info where null means "none" (or "unchanged" on PATCH).
  static let optionalDiscoveryInfo: JSONValue = ["anyOf": [discoveryInfo, ["type": "null"]]]
  static let peer: JSONValue = [
    "type": "object", "required": ["id", "displayName", "nodeId", "discoveryInfo", "createdAt"],
    "properties": [
      "id": ["type": "string"], "displayName": ["type": "string"], "nodeId": ["type": "string"],
      "discoveryInfo": discoveryInfo, "createdAt": ["type": "string", "format": "date-time"],
    ],
  ]
  static let peerEnvelope: JSONValue = ["type": "object", "required": ["peer"], "properties": ["peer": peer]]
  static let createdPeer: JSONValue = [
    "type": "object", "required": ["peer", "token"], "properties": ["peer": peer, "token": ["type": "string"]],
  ]
  static let createPeer: JSONValue = [
    "type": "object", "required": ["displayName"], "additionalProperties": false,
    "properties": ["displayName": displayName, "discoveryInfo": optionalDiscoveryInfo],
  ]
  static let updatePeer: JSONValue = [
    "type": "object", "additionalProperties": false, "minProperties": 1,
    "properties": ["displayName": displayName, "discoveryInfo": optionalDiscoveryInfo],
  ]
  static let node: JSONValue = [
    "type": "object", "required": ["id", "name", "version", "startedAt", "uptimeSeconds", "peerCount"],
    "properties": [
      "id": ["type": "string"], "name": ["type": "string"], "version": ["type": "string"],
      "startedAt": ["type": "string", "format": "date-time"], "uptimeSeconds": ["type": "number"],
      "peerCount": ["type": "integer"], "openWebSockets": ["type": "integer"],
    ],
  ]
  static let serviceType: JSONValue = [
    "type": "string", "minLength": 1, "maxLength": 15, "pattern": "^(?=[a-z0-9-]*[a-z])[a-z0-9]+(-[a-z0-9]+)*$",
    "description": "1–15 of a-z 0-9 -, at least one letter, no leading, trailing or double hyphen (RFC 6335).",
  ]
  static let advertiseRequest: JSONValue = [
    "type": "object", "additionalProperties": false, "properties": ["discoveryInfo": optionalDiscoveryInfo],
  ]
  static let advertisingEntry: JSONValue = [
    "type": "object", "required": ["serviceType", "discoveryInfo"],
    "properties": ["serviceType": serviceType, "discoveryInfo": discoveryInfo],
  ]
  static let advertisingList: JSONValue = [
    "type": "object", "required": ["advertising"],
    "properties": ["advertising": ["type": "array", "items": advertisingEntry]],
  ]
  static let peerRef: JSONValue = [
    "type": "object", "required": ["id", "displayName", "nodeId"],
    "properties": ["id": ["type": "string"], "displayName": ["type": "string"], "nodeId": ["type": "string"]],
  ]
  static let advertiser: JSONValue = [
    "type": "object", "required": ["peer", "discoveryInfo"],
    "properties": ["peer": peerRef, "discoveryInfo": discoveryInfo],
  ]
  static let servicePeers: JSONValue = [
    "type": "object", "required": ["serviceType", "peers"],
    "properties": [
      "serviceType": serviceType, "peers": ["type": "array", "items": advertiser],
      "nextCursor": ["type": ["string", "null"]],
    ],
  ]
  static let browsingEntry: JSONValue = [
    "type": "object", "required": ["serviceType", "peers"],
    "properties": ["serviceType": serviceType, "peers": ["type": "array", "items": advertiser]],
  ]
  static let browsingList: JSONValue = [
    "type": "object", "required": ["browsing"],
    "properties": ["browsing": ["type": "array", "items": serviceType]],
  ]
  static let meshNode: JSONValue = [
    "type": "object", "required": ["state"],
    "properties": [
      "id": ["type": ["string", "null"]], "name": ["type": ["string", "null"]],
      "address": ["type": ["string", "null"]],
      "state": ["type": "string", "enum": ["linked", "connecting", "backoff", "waiting"]],
      "rttMillis": ["type": ["integer", "null"]],
      "source": ["type": ["string", "null"], "enum": ["seed", "beacon", "gossip", nil]],
      "direction": ["type": "string", "enum": ["inbound", "outbound"]],
      "linkedForSeconds": ["type": ["number", "null"]],
      "encrypted": ["type": ["boolean", "null"], "description": "The link runs over TLS (null when not linked)."],
      "fingerprint": [
        "type": ["string", "null"],
        "description": "SHA-256 of the node's certificate (DER), hex: the one its link presented, else the pinned one.",
      ],
      "pinned": ["type": "boolean", "description": "A certificate is pinned for this node id."],
    ],
  ]
  static let meshNodes: JSONValue = [
    "type": "object", "required": ["self", "nodes"],
    "properties": [
      "self": ["type": "object"], "nodes": ["type": "array", "items": meshNode],
      "forgotten": [
        "type": "array",
        "description": .string(
          "Admin token only: the last 64 gossiped addresses this node stopped dialling (unreachable, or answered as "
            + "another node)."),
        "items": [
          "type": "object", "required": ["address", "id", "gossipedBy", "reason", "attempts"],
          "properties": [
            "address": ["type": "string"], "id": ["type": ["string", "null"]],
            "gossipedBy": ["type": ["string", "null"]],
            "reason": ["type": "string", "enum": ["unreachable", "answered_as_another_node"]],
            "attempts": ["type": "integer"],
          ],
        ],
      ],
    ],
  ]
  static let settings: JSONValue = [
    "type": "object",
    "required": [
      "requestsPerSecond", "webSocketMessagesPerSecond", "webSocketMaxMessageBytes", "peerCreationsPerSecond",
      "maxPeers", "eventRetention", "fileConsent", "fileConsentTimeout",
    ],
    "properties": [
      "requestsPerSecond": ["type": "integer", "minimum": 0],
      "webSocketMessagesPerSecond": ["type": "integer", "minimum": 0],
      "webSocketMaxMessageBytes": ["type": "integer", "minimum": 64],
      "peerCreationsPerSecond": ["type": "integer", "minimum": 0],
      "maxPeers": ["type": "integer", "minimum": 1],
      "eventRetention": ["type": "integer", "minimum": 10],
      "fileConsent": [
        "type": "string", "enum": ["auto", "ask"],
        "description":
          "auto: incoming files are accepted at once; ask: each waits for the recipient's Accept or Decline.",
      ],
      "fileConsentTimeout": [
        "type": "integer", "minimum": 1, "maximum": 86_400,
        "description": "Seconds an incoming file waits for the recipient's answer before it fails.",
      ],
    ],
  ]
  static let settingsEnvelope: JSONValue = [
    "type": "object", "required": ["settings"], "properties": ["settings": settings],
  ]
  static let settingsPatch: JSONValue = [
    "type": "object", "additionalProperties": false, "minProperties": 1,
    "properties": [
      "requestsPerSecond": ["type": "integer", "minimum": 0, "maximum": 10_000_000],
      "webSocketMessagesPerSecond": ["type": "integer", "minimum": 0, "maximum": 10_000_000],
      "webSocketMaxMessageBytes": ["type": "integer", "minimum": 64, "maximum": 16_777_216],
      "peerCreationsPerSecond": ["type": "integer", "minimum": 0, "maximum": 1_000_000],
      "maxPeers": ["type": "integer", "minimum": 1, "maximum": 50_000],
      "eventRetention": ["type": "integer", "minimum": 10, "maximum": 10_000_000],
      "fileConsent": ["type": "string", "enum": ["auto", "ask"]],
      "fileConsentTimeout": ["type": "integer", "minimum": 1, "maximum": 86_400],
    ],
  ]
  static let addMeshNode: JSONValue = [
    "type": "object", "required": ["address"], "additionalProperties": false,
    "properties": ["address": ["type": "string", "description": "HOST:PORT, e.g. 192.168.1.20:8080"]],
  ]
  static let sessionMember: JSONValue = [
    "type": "object", "required": ["id", "displayName", "nodeId", "state"],
    "properties": [
      "id": ["type": "string"], "displayName": ["type": "string"], "nodeId": ["type": "string"],
      "state": ["type": "string", "enum": ["connecting", "connected", "notConnected"]],
    ],
  ]
  static let session: JSONValue = [
    "type": "object", "required": ["id", "strategy", "encryption", "maxPeers", "hostNodeId", "members"],
    "properties": [
      "id": ["type": "string"], "strategy": ["type": "string", "enum": ["cluster", "star", "pointToPoint"]],
      "encryption": ["type": "string", "enum": ["none", "optional", "required"]],
      "maxPeers": ["type": "integer"], "hostNodeId": ["type": "string"], "creatorPeerId": ["type": "string"],
      "members": ["type": "array", "items": sessionMember],
    ],
  ]
  static let sessionEnvelope: JSONValue = [
    "type": "object", "required": ["session"], "properties": ["session": session],
  ]
  static let sessionList: JSONValue = [
    "type": "object", "required": ["sessions"],
    "properties": ["sessions": ["type": "array", "items": session], "nextCursor": ["type": ["string", "null"]]],
  ]
  static let createSession: JSONValue = [
    "type": "object", "additionalProperties": false,
    "properties": [
      "encryption": ["type": ["string", "null"], "enum": ["none", "optional", "required", nil]],
      "strategy": ["type": ["string", "null"], "enum": ["cluster", "star", "pointToPoint", nil]],
      "maxPeers": [
        "type": ["integer", "null"], "minimum": 2, "maximum": 1024, "default": 64,
        "description": "Members plus pending invitations; pointToPoint sessions are always 2.",
      ],
    ],
  ]
  static let sendResult: JSONValue = [
    "type": "object", "required": ["accepted", "undelivered", "bytes"],
    "properties": [
      "accepted": ["type": "integer"], "undelivered": ["type": "array", "items": ["type": "string"]],
      "bytes": ["type": "integer"],
    ],
  ]
  static let namedEvent: JSONValue = [
    "type": "object", "required": ["event"], "additionalProperties": false,
    "properties": [
      "event": ["type": "string", "minLength": 1], "object": [:],
      "to": ["type": ["array", "null"], "items": ["type": "string"]],
    ],
  ]
  static let invitation: JSONValue = [
    "type": "object", "required": ["id", "state", "session", "from", "to", "verificationCode", "timeoutSeconds"],
    "properties": [
      "id": ["type": "string"],
      "state": ["type": "string", "enum": ["pending", "accepted", "declined", "expired", "canceled"]],
      "session": ["type": "object"], "from": peerRef, "to": peerRef, "context": ["type": ["string", "null"]],
      "verificationCode": ["type": "string", "pattern": "^[0-9]{6}$"], "timeoutSeconds": ["type": "number"],
      "expiresAt": ["type": "string", "format": "date-time"],
    ],
  ]
  static let invitationEnvelope: JSONValue = [
    "type": "object", "required": ["invitation"], "properties": ["invitation": invitation],
  ]
  static let invitationList: JSONValue = [
    "type": "object", "required": ["invitations"],
    "properties": [
      "invitations": ["type": "array", "items": invitation], "nextCursor": ["type": ["string", "null"]],
    ],
  ]
  static let createInvitation: JSONValue = [
    "type": "object", "required": ["to", "session"], "additionalProperties": false,
    "properties": [
      "to": ["type": "string"], "session": ["type": "string"],
      "context": ["type": "string", "description": "At most 4 KiB of UTF-8."],
      "timeoutSeconds": [
        "type": "integer", "minimum": 1, "maximum": 300, "default": 30,
        "description": .string(
          "Seconds the invitee has to answer. For an invitee on another node the inviter's node waits one grace "
            + "second more for an answer in flight (its expiresAt includes it); a later answer is 409."),
      ],
    ],
  ]
  static let transceive: JSONValue = [
    "type": "object", "required": ["serviceType"], "additionalProperties": false,
    "properties": ["serviceType": serviceType],
  ]
  static let transceiveResult: JSONValue = [
    "type": "object", "required": ["serviceType", "transceiving", "leader"],
    "properties": [
      "serviceType": serviceType, "transceiving": ["type": "boolean"],
      "leader": [
        "type": "string",
        "description":
          "The smallest peer id among the transceivers this node sees now (the caller included); partial right after a node starts or re-links, settled within about a second of the links coming up.",
      ],
      "session": [
        "type": ["object", "null"], "description": "The transceive session the caller is in; null until it joined one.",
      ],
    ],
  ]
  static let job: JSONValue = [
    "type": "object", "required": ["id", "name", "createdAt", "updatedAt"],
    "properties": [
      "id": ["type": "string"], "name": ["type": "string"], "dueDate": ["type": ["string", "null"], "format": "date"],
      "payment": ["type": ["string", "null"], "pattern": "^[0-9]+\\.[0-9]{2}$"],
      "notes": ["type": ["string", "null"]], "assignedTo": ["type": ["object", "null"]],
      "receivedFrom": ["type": ["object", "null"]], "createdAt": ["type": "string"], "updatedAt": ["type": "string"],
    ],
  ]
  static let jobInput: JSONValue = [
    "type": "object", "required": ["name"], "additionalProperties": false,
    "properties": [
      "name": ["type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$"],
      "dueDate": ["type": ["string", "null"], "format": "date"],
      "payment": [
        "type": ["number", "string", "null"], "minimum": 0, "pattern": "^[0-9]+(\\.[0-9]{1,2})?$",
        "description": "Non-negative, at most 2 decimal places, e.g. 120 or \"99.50\".",
      ],
      "notes": ["type": ["string", "null"], "description": "At most 4 KiB of UTF-8."],
    ],
  ]
  static let jobPatch: JSONValue = [
    "type": "object", "additionalProperties": false, "minProperties": 1,
    "properties": [
      "name": ["type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$"],
      "dueDate": ["type": ["string", "null"], "format": "date"],
      "payment": ["type": ["number", "string", "null"], "minimum": 0, "pattern": "^[0-9]+(\\.[0-9]{1,2})?$"],
      "notes": ["type": ["string", "null"]],
    ],
  ]
  static let jobEnvelope: JSONValue = ["type": "object", "required": ["job"], "properties": ["job": job]]
  static let jobList: JSONValue = [
    "type": "object", "required": ["jobs"],
    "properties": ["jobs": ["type": "array", "items": job], "nextCursor": ["type": ["string", "null"]]],
  ]
  static let sendJob: JSONValue = [
    "type": "object", "required": ["to"], "additionalProperties": false,
    "properties": [
      "to": ["type": "string"],
      "timeoutSeconds": [
        "type": "integer", "minimum": 1, "maximum": 300, "default": 60,
        "description":
          "As for invitations (one grace second more for a receiver on another node), but 60 s by default: a job offer is read before it is answered.",
      ],
    ],
  ]
  static let jobOffer: JSONValue = [
    "type": "object", "required": ["job", "invitation"], "properties": ["job": job, "invitation": invitation],
  ]
  static let cursor: JSONValue = ["type": "string", "pattern": "^[0-9]{1,18}$"]
  /// A cursor in a query: empty means "from the start", like leaving it out.
  static let cursorQuery: JSONValue = ["type": "string", "pattern": "^([0-9]{1,18})?$"]
  static let createChat: JSONValue = [
    "type": "object", "required": ["name"], "additionalProperties": false,
    "properties": [
      "name": [
        "type": "string", "minLength": 1, "maxLength": 63, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$",
        "description": "1–63 UTF-8 bytes, no control characters.",
      ]
    ],
  ]
  static let chat: JSONValue = [
    "type": "object", "required": ["id", "name", "host", "joined", "ended", "memberCount"],
    "properties": [
      "id": ["type": "string"], "name": ["type": "string"], "host": peerRef, "joined": ["type": "boolean"],
      "ended": ["type": "boolean"], "memberCount": ["type": ["integer", "null"]], "createdAt": ["type": "string"],
      "message": ["type": "string"],
    ],
  ]
  static let chatEnvelope: JSONValue = ["type": "object", "required": ["chat"], "properties": ["chat": chat]]
  static let chatList: JSONValue = [
    "type": "object", "required": ["chats"], "properties": ["chats": ["type": "array", "items": chat]],
  ]
  static let chatDetail: JSONValue = [
    "type": "object", "required": ["chat", "members"],
    "properties": [
      "chat": chat,
      "members": [
        "type": "array",
        "items": [
          "type": "object", "required": ["peer", "role"],
          "properties": ["peer": peerRef, "role": ["type": "string", "enum": ["host", "member"]]],
        ],
      ],
    ],
  ]
  static let postChatMessage: JSONValue = [
    "type": "object", "required": ["body"], "additionalProperties": false,
    "properties": [
      "body": ["type": "string", "minLength": 1],
      "id": ["type": "string", "pattern": "^[A-Za-z0-9_-]{8,64}$"],
    ],
  ]
  static let chatMessage: JSONValue = [
    "type": "object", "required": ["id", "chatId", "from", "body", "at", "seq"],
    "properties": [
      "id": ["type": "string"], "chatId": ["type": "string"], "from": peerRef, "body": ["type": "string"],
      "at": ["type": "string"], "seq": ["type": ["integer", "null"]],
    ],
  ]
  static let chatMessageEnvelope: JSONValue = [
    "type": "object", "required": ["message"], "properties": ["message": chatMessage],
  ]
  static let chatMessagePage: JSONValue = [
    "type": "object", "required": ["messages", "nextCursor"],
    "properties": [
      "messages": ["type": "array", "items": chatMessage], "nextCursor": ["type": ["string", "null"]],
    ],
  ]
  static let eventPage: JSONValue = [
    "type": "object", "required": ["events", "nextCursor", "truncated"],
    "properties": [
      "events": ["type": "array", "items": ["$ref": "#/components/schemas/Event"]], "nextCursor": cursor,
      "truncated": [
        "type": "boolean", "description": "True when events after the cursor were already dropped by retention.",
      ],
    ],
  ]
}

extension Router {
  /// The OpenAPI 3.1 document for these routes.
  func openAPIDocument(version: String) -> JSONValue {
    var paths = JSONObject()
    for route in routes {
      var operation = JSONObject()
      operation["operationId"] = .string(route.operationID)
      operation["summary"] = .string(route.summary)
      var parameters: [JSONValue] = []
      for segment in route.segments where segment.hasPrefix("{") {
        let name = String(segment.dropFirst().dropLast())
        parameters.append([
          "name": .string(name), "in": "path", "required": true,
          "schema": name == "serviceType" ? Schemas.serviceType : ["type": "string"],
        ])
      }
      for query in route.queryParameters {
        parameters.append([
          "name": .string(query.name), "in": "query", "required": false, "description": .string(query.description),
          "schema": query.schema,
        ])
      }
      if !parameters.isEmpty { operation["parameters"] = .array(parameters) }
      if let schema = route.requestSchema {
        // A body whose schema needs no member may be left out entirely (the handler takes an empty body).
        let needed = schema.objectValue?["required"] != nil || schema.objectValue?["minProperties"] != nil
        operation["requestBody"] = [
          "required": .bool(needed), "content": ["application/json": ["schema": schema]],
        ]
      } else if route.rawRequestBody {
        let schema: JSONValue = ["type": "string", "contentMediaType": "application/octet-stream"]
        operation["requestBody"] = ["required": true, "content": ["application/octet-stream": ["schema": schema]]]
      }
      var responses = JSONObject()
      for response in route.responses {
        var entry: JSONObject = ["description": .string(response.description)]
        if let schema = response.schema {
          entry["content"] = ["application/json": ["schema": schema]]
        }
        responses[String(response.status)] = .object(entry)
      }
      // Every peer route may also answer 401 (token) and 429 (the token's request rate); admin routes 401/403.
      var common: [(Int, String)] =
        route.authenticated
        ? [(401, "Missing or unknown token."), (429, "Over this token's request rate; see Retry-After.")]
        : route.admin ? [(401, "Missing or unknown admin token."), (403, "A peer token, not the admin token.")] : []
      // Any route may answer 400 (a malformed query or body), and one with a path parameter 404 (unknown id).
      common.append((400, "Invalid request: the message names the field and the rule."))
      // Every route answers only for the node's own names (DNS rebinding protection); a browser page from another
      // site may not change state or open a WebSocket; a JSON body must be sent as application/json.
      common.append((421, "The Host header names no name or address of this node (host_not_allowed)."))
      if route.method != .get || route.operation == .webSocket || route.operation == .streamSocket {
        common.append((403, "The Origin header names another site (origin_not_allowed)."))
      }
      if route.requestSchema != nil { common.append((415, "The body is not sent as application/json.")) }
      if route.segments.contains(where: { $0.hasPrefix("{") }) { common.append((404, "Not found for this caller.")) }
      // Any request: a head over 16 KiB (431), or a connection over --max-connections (503 too_many_connections
      // with Retry-After).
      common.append((431, "request_header_fields_too_large: the request head (cookies included) is over 16 KiB."))
      // Any write may find the data directory full, failing or gone (StorageErrors.swift, DataDirectoryHealth.swift).
      if route.method != .get {
        common.append(
          (
            503,
            "storage_unavailable (an I/O error; Retry-After) or data_directory_lost (the data directory was deleted "
              + "or replaced while the node ran; /healthz says so too): nothing was stored. Also "
              + "too_many_connections (Retry-After) when the node is at --max-connections."
          ))
        common.append((507, "storage_full: the data directory's disk is full; nothing was stored."))
      } else {
        common.append((503, "too_many_connections: the node is at --max-connections; retry after Retry-After."))
      }
      for (status, description) in common where responses[String(status)] == nil {
        responses[String(status)] = [
          "description": .string(description), "content": ["application/json": ["schema": Schemas.error]],
        ]
      }
      operation["responses"] = .object(responses)
      if route.authenticated { operation["security"] = [["bearer": []]] }
      if route.admin { operation["security"] = [["admin": []]] }
      var item = paths[route.pattern]?.objectValue ?? JSONObject()
      item[route.method.rawValue.lowercased()] = .object(operation)
      paths[route.pattern] = .object(item)
    }
    // Named schemas: the shared shapes, and one per event type with `Event`, their envelope (EventCatalog).
    var schemas: JSONObject = ["Error": Schemas.error, "Peer": Schemas.peer, "Node": Schemas.node]
    for (name, schema) in EventCatalog.openAPISchemas() { schemas[name] = schema }
    return [
      "openapi": "3.1.0",
      "info": [
        "title": "meshgate", "version": .string(version),
        "description": "LAN peer gateway: discovery, invitations, sessions and events for browsers and curl.",
      ],
      "paths": .object(paths),
      "components": [
        "securitySchemes": [
          "bearer": ["type": "http", "scheme": "bearer", "description": "A peer token from POST /api/v1/peers."],
          "admin": [
            "type": "http", "scheme": "bearer",
            "description": "The node's admin token, printed once on its first start (meshgate admin-token=…).",
          ],
        ],
        "schemas": .object(schemas),
      ],
    ]
  }
}
