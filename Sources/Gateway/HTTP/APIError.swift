/// The REST error shape and JSON request/response helpers.
///
/// Layer 6 (surface). Every failure a client sees is `{"error":{"code":"snake_case","message":"…"}}` with a
/// fitting status; the message says what was wrong and how to fix it.
import LWS
import MeshCore

/// An error that becomes an HTTP response.
public struct APIError: Error, Equatable, CustomStringConvertible {
  /// The HTTP status.
  public let status: Int
  /// A stable snake_case code for programs.
  public let code: String
  /// A sentence for people.
  public let message: String
  /// Extra headers (e.g. `Allow` on 405).
  public var headers: [(String, String)] = []

  public static func == (lhs: APIError, rhs: APIError) -> Bool {
    lhs.status == rhs.status && lhs.code == rhs.code && lhs.message == rhs.message
  }

  public var description: String { "\(status) \(code): \(message)" }

  static func badRequest(_ message: String, code: String = "invalid_request") -> APIError {
    APIError(status: 400, code: code, message: message)
  }

  static func notFound(_ message: String) -> APIError {
    APIError(status: 404, code: "not_found", message: message)
  }

  static let missingToken = APIError(
    status: 401, code: "unauthorized",
    message:
      "missing bearer token: send 'Authorization: Bearer <token>' (create a peer with POST /api/v1/peers to get one)")

  static let invalidToken = APIError(
    status: 401, code: "invalid_token",
    message: "the bearer token is not valid on this node: it was never issued here or its peer was deleted; "
      + "create a peer with POST /api/v1/peers")

  static func unavailable(_ message: String) -> APIError {
    APIError(status: 503, code: "unavailable", message: message)
  }

  /// The JSON error response.
  var response: HTTPResponse {
    let body: JSONValue = ["error": ["code": .string(code), "message": .string(message)]]
    var headers = headers
    if status == 401 { headers.append(("www-authenticate", "Bearer realm=\"meshgate\"")) }
    return HTTPResponse.json(body, status: status, headers: headers)
  }
}

extension HTTPResponse {
  /// A JSON response.
  static func json(_ value: JSONValue, status: Int = 200, headers: [(String, String)] = []) -> HTTPResponse {
    var body = value.serialized()
    body.append(0x0A)
    return HTTPResponse(
      status: status, contentType: "application/json", headers: headers + [("cache-control", "no-store")], body: body)
  }

  /// An empty 204.
  static let noContent = HTTPResponse(status: 204, headers: [("cache-control", "no-store")])
}

/// Reads typed members from a JSON request body, turning every mistake into a 400 that names the field.
struct RequestBody {
  let object: JSONObject

  /// Wraps an already parsed object (e.g. a WebSocket message).
  init(object: JSONObject) {
    self.object = object
  }

  /// Parses `bytes` as a JSON object. An empty body is an empty object when `allowEmpty`.
  init(_ request: HTTPRequest, allowEmpty: Bool = false) throws(APIError) {
    if request.body.isEmpty {
      guard allowEmpty else {
        throw .badRequest("the request body is empty; send a JSON object with Content-Type: application/json")
      }
      self.object = JSONObject()
      return
    }
    // A JSON body must say so: a cross-site page can send a body without a preflight only as a "simple" request
    // (no type, text/plain, a form), never as application/json.
    guard let type = request.head.headers["content-type"] else {
      throw APIError(
        status: 415, code: "unsupported_media_type",
        message: "send the JSON body with Content-Type: application/json (the request had no Content-Type)")
    }
    guard type.lowercased().hasPrefix("application/json") else {
      throw APIError(
        status: 415, code: "unsupported_media_type",
        message: "Content-Type must be application/json (got \(type.debugDescription))")
    }
    let value: JSONValue
    do {
      value = try JSONValue.parse(request.body)
    } catch {
      if error.isLimit {
        throw .badRequest(
          "the request body is over a JSON limit: \(error) (at most \(JSONValue.defaultMaxMembers) members per "
            + "object and \(JSONValue.defaultMaxDepth) levels of nesting)", code: "json_limit_exceeded")
      }
      throw .badRequest("the request body is not valid JSON: \(error)", code: "malformed_json")
    }
    guard case .object(let object) = value else {
      throw .badRequest("the request body must be a JSON object, not \(value.typeDescription)")
    }
    self.object = object
  }

  /// Rejects members other than `allowed`.
  func allowOnly(_ allowed: Set<String>) throws(APIError) {
    if let unknown = object.keys.first(where: { !allowed.contains($0) }) {
      throw .badRequest(
        allowed.isEmpty
          ? "unknown field \(unknown.debugDescription); this request takes no fields (send {} or no body)"
          : "unknown field \(unknown.debugDescription); allowed fields are \(allowed.sorted().joined(separator: ", "))")
    }
  }

  func requiredString(_ key: String) throws(APIError) -> String {
    guard let value = object[key] else { throw .badRequest("\(key) is required") }
    guard case .string(let string) = value else {
      throw .badRequest("\(key) must be a string, not \(value.typeDescription)")
    }
    return string
  }

  func optionalStringMap(_ key: String) throws(APIError) -> [String: String]? {
    guard let value = object[key], value != .null else { return nil }
    guard case .object(let map) = value else {
      throw .badRequest("\(key) must be an object of string values, not \(value.typeDescription)")
    }
    var result: [String: String] = [:]
    for member in map {
      guard case .string(let string) = member.value else {
        throw .badRequest("\(key).\(member.key) must be a string, not \(member.value.typeDescription)")
      }
      result[member.key] = string
    }
    return result
  }
}

extension ValidationError {
  /// The 400 for a rule violation.
  var apiError: APIError { .badRequest(description, code: "validation_failed") }
}

extension APIError {
  /// The REST answer to a mesh core failure: its status, code and message (docs/api.md, "Errors").
  init(_ failure: MeshFailure) {
    switch failure {
    case .notSessionMember(let sessionID):
      self.init(status: 404, code: "not_found", message: "no session \(sessionID) with this peer as a member")
    case .inviterNotSessionMember(let sessionID):
      self.init(
        status: 404, code: "not_found",
        message: "no session \(sessionID) with this peer as a member; create one with POST /api/v1/sessions")
    case .inviterNotConnected(let state):
      self.init(
        status: 409, code: "not_connected", message: "only connected members can invite; this peer is \(state.rawValue)"
      )
    case .selfInvitation:
      self.init(status: 400, code: "invalid_request", message: "a peer cannot invite itself")
    case .contextTooLarge(let maxBytes):
      self.init(status: 400, code: "validation_failed", message: "context must be at most \(maxBytes) bytes")
    case .alreadyMember(let displayName):
      self.init(status: 409, code: "already_member", message: "\(displayName) is already a member of this session")
    case .alreadyInvited(let displayName):
      self.init(
        status: 409, code: "already_invited",
        message: "\(displayName) already has a pending invitation to this session")
    case .onlyHubInvites:
      self.init(
        status: 409, code: "strategy_violation", message: "in a star session only the hub (its creator) invites")
    case .encryptionUnavailable(let displayName):
      self.init(
        status: 409, code: "encryption_unavailable",
        message: "this session requires encryption, but the link to \(displayName)'s node is not encrypted (TLS); link "
          + "the nodes over TLS (the default; not --mesh-tls off), use encryption optional or none, or invite a peer "
          + "on this node")
    case .pointToPointFull:
      self.init(
        status: 409, code: "strategy_violation", message: "a pointToPoint session holds exactly two peers and is full")
    case .sessionFull(let maxPeers):
      self.init(
        status: 409, code: "session_full",
        message: "the session is full (maxPeers \(maxPeers), members and pending invitations)")
    case .invitationNotFound(let invitationID, let sentByPeer):
      self.init(
        status: 404, code: "not_found",
        message: "no invitation \(invitationID) \(sentByPeer ? "sent by this peer" : "for this peer")")
    case .invitationExpired:
      self.init(status: 409, code: "invitation_closed", message: "the invitation has expired; ask for a new one")
    case .invitationClosed(let state, let answering):
      self.init(
        status: 409, code: "invitation_closed",
        message: "the invitation is already \(state.rawValue)" + (answering ? "; ask for a new one" : ""))
    case .senderNotConnected(let state):
      self.init(status: 409, code: "not_connected", message: "this peer is \(state.rawValue) in the session")
    case .targetNotConnected(let peerID):
      self.init(status: 409, code: "not_connected", message: "\(peerID) is not a connected member of this session")
    case .spokeSendsOnlyToHub:
      self.init(status: 409, code: "strategy_violation", message: "in a star session spokes send only to the hub")
    case .unknownPeer(let peerID):
      self.init(status: 404, code: "not_found", message: "no peer \(peerID) in the mesh")
    case .chatNotFound(let roomID):
      self.init(status: 404, code: "not_found", message: "no chat room \(roomID); see GET /api/v1/chats/nearby")
    case .chatEnded(let roomID):
      self.init(status: 409, code: "chat_ended", message: "chat room \(roomID) has ended: everyone left")
    case .notChatMember(let roomID):
      self.init(
        status: 403, code: "not_a_member",
        message: "this peer is not in chat room \(roomID); join it first with POST /api/v1/chats/\(roomID)/join")
    case .chatHostUnreachable(let roomID, let hostName):
      self.init(
        status: 503, code: "host_unreachable",
        message: "the node hosting chat room \(roomID) (\(hostName)'s) is not linked right now; try again when it is "
          + "back (GET /api/v1/mesh/nodes)")
    }
  }
}
