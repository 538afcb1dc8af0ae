/// JSON Schemas shared by routes of several features and by the OpenAPI document; each feature declares its own in an
/// `extension Schemas` beside its routes.
import MeshCore

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
  static let discoveryInfo: JSONValue = [
    "type": "object", "maxProperties": 16, "additionalProperties": ["type": "string"],
    "propertyNames": ["minLength": 1, "pattern": "^[ -<>-~]+$"],
    "description": "Up to 16 string pairs, at most 400 bytes in total (Bonjour TXT-record sized).",
  ]
  static let displayName: JSONValue = [
    "type": "string", "minLength": 1, "maxLength": 63, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$",
    "description": "1–63 characters (Unicode code points), no control characters, not only spaces.",
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
  static let peerRef: JSONValue = [
    "type": "object", "required": ["id", "displayName", "nodeId"],
    "properties": ["id": ["type": "string"], "displayName": ["type": "string"], "nodeId": ["type": "string"]],
  ]
  /// `{"<key>": item}`: one resource in its envelope.
  static func envelope(_ key: String, _ item: JSONValue) -> JSONValue {
    ["type": "object", "required": [.string(key)], "properties": .object(JSONObject([(key, item)]))]
  }
  /// `{"<key>": [item], "nextCursor": string|null}`: one page of a list that `?cursor=` continues.
  static func page(_ key: String, of item: JSONValue) -> JSONValue {
    let items: JSONValue = ["type": "array", "items": item]
    return [
      "type": "object", "required": [.string(key)],
      "properties": .object(JSONObject([(key, items), ("nextCursor", nullableString)])),
    ]
  }
  static let nullableString: JSONValue = ["type": ["string", "null"]]
  static let cursor: JSONValue = ["type": "string", "pattern": "^[0-9]{1,18}$"]
  /// A cursor in a query: empty means "from the start", like leaving it out.
  static let cursorQuery: JSONValue = ["type": "string", "pattern": "^([0-9]{1,18})?$"]
}
