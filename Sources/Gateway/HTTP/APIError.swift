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
