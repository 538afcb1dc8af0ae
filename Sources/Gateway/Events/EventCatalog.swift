/// Every event type the node can push, with the JSON Schema of its `data`: the one list the OpenAPI document's
/// named event schemas, docs/events.md and the publish path are checked against.
///
/// Layer 6 (surface). ``EventHub``'s publish path asserts (in debug builds, which the integration tests run) that
/// every published type is listed here, and `EventCatalogTests` checks that the types in the source, in
/// docs/events.md and in the OpenAPI document are exactly these, so the documentation cannot drift from the code.
import Logging
import MeshCore

/// One event type and the shape of its `data`.
struct EventKind: Sendable {
  /// The `type` member, e.g. `peer.found`.
  let type: String
  /// When it is sent.
  let summary: String
  /// The JSON Schema of `data`.
  let data: JSONValue

  /// The name of its schema under `components/schemas`: the type's words capitalized, then `Event`
  /// (`peer.found` → `PeerFoundEvent`).
  var schemaName: String {
    type.split(separator: ".").map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined() + "Event"
  }
}

enum EventCatalog {
  /// `{id, displayName, nodeId}`; a peer that is no longer known may be given by `id` alone.
  static let peerByID: JSONValue = [
    "type": "object", "required": ["id"],
    "properties": ["id": ["type": "string"], "displayName": ["type": "string"], "nodeId": ["type": "string"]],
  ]
  static let chatRef: JSONValue = [
    "type": "object", "required": ["id", "name"],
    "properties": ["id": ["type": "string"], "name": ["type": "string"]],
  ]
  static let nullableString: JSONValue = ["type": ["string", "null"]]

  static func object(_ required: [String], _ properties: JSONObject) -> JSONValue {
    ["type": "object", "required": .array(required.map { .string($0) }), "properties": .object(properties)]
  }

  /// The first message on every `/api/v1/ws` socket and `/api/v1/events/stream` stream (SSE `event: hello`).
  /// Not stored in the log: it has no `id` or `at`.
  static let hello = EventKind(
    type: "hello",
    summary: "First message of every WebSocket and SSE connection: who you are and the newest cursor.",
    data: object(
      ["peer", "node", "cursor"],
      ["peer": Schemas.peer, "node": Schemas.node, "cursor": Schemas.cursor]))

  /// Every event type stored in a peer's log and pushed live.
  static let logged: [EventKind] = [
    EventKind(
      type: "peer.updated",
      summary: "This peer's display name or discovery info changed (PATCH /api/v1/peers/me).",
      data: object(["peer"], ["peer": Schemas.peer])),
    EventKind(
      type: "peer.found",
      summary: "A peer anywhere in the mesh advertises a service type this peer browses.",
      data: object(
        ["peer", "serviceType", "discoveryInfo"],
        ["peer": Schemas.peerRef, "serviceType": Schemas.serviceType, "discoveryInfo": Schemas.discoveryInfo])),
    EventKind(
      type: "peer.lost",
      summary: "A peer stopped advertising a browsed service type, left, or its node was lost.",
      data: object(["peer", "serviceType"], ["peer": Schemas.peerRef, "serviceType": Schemas.serviceType])),
    EventKind(
      type: "presence.found",
      summary: "A peer signed in anywhere in the mesh, or changed its display name (to peers watching presence).",
      data: object(["peer"], ["peer": Schemas.peerRef])),
    EventKind(
      type: "presence.lost",
      summary: "A present peer was deleted or its node was lost (to peers watching presence).",
      data: object(["peer"], ["peer": Schemas.peerRef])),
    EventKind(
      type: "node.linked",
      summary: "This node linked with another node (to every local peer).",
      data: object(
        ["node"],
        [
          "node": object(
            ["id", "name", "version", "encrypted", "fingerprint"],
            [
              "id": ["type": "string"], "name": ["type": "string"], "version": ["type": "string"],
              "encrypted": ["type": "boolean"], "fingerprint": nullableString,
            ])
        ])),
    EventKind(
      type: "node.unlinked",
      summary: "The link to another node was lost (to every local peer).",
      data: object(["node"], ["node": object(["id"], ["id": ["type": "string"]])])),
    EventKind(
      type: "node.link.refused",
      summary: "A node was refused a link: changed certificate, missing or wrong mesh secret (to every local peer).",
      data: object(
        ["node", "code", "message", "pinnedFingerprint", "presentedFingerprint"],
        [
          "node": object(["id", "name"], ["id": nullableString, "name": nullableString]),
          "code": ["type": "string"], "message": ["type": "string"], "pinnedFingerprint": nullableString,
          "presentedFingerprint": nullableString,
        ])),
    invitationEvent("received", "This peer was invited into a session."),
    invitationEvent("accepted", "An invitation this peer sent or got was accepted."),
    invitationEvent("declined", "An invitation this peer sent or got was declined."),
    invitationEvent("expired", "An invitation this peer sent or got timed out."),
    invitationEvent("canceled", "The inviter withdrew an invitation."),
    EventKind(
      type: "session.peer.state",
      summary: "A member of one of this peer's sessions is connecting, connected or notConnected.",
      data: object(
        ["sessionId", "peer", "state"],
        [
          "sessionId": ["type": "string"], "peer": Schemas.peerRef,
          "state": ["type": "string", "enum": ["connecting", "connected", "notConnected"]],
        ])),
    EventKind(
      type: "session.data",
      summary: "Data from another member (POST /api/v1/sessions/{id}/data or the WebSocket send op).",
      data: object(
        ["sessionId", "from", "mode", "bytes", "dataBase64"],
        [
          "sessionId": ["type": "string"], "from": peerByID,
          "mode": ["type": "string", "enum": ["reliable", "unreliable"]], "bytes": ["type": "integer"],
          "dataBase64": ["type": "string", "contentEncoding": "base64"],
          "text": ["type": "string", "description": "The payload as text, present when it is valid UTF-8."],
        ])),
    EventKind(
      type: "session.event",
      summary: "A PeerKit named event from another member (POST /api/v1/sessions/{id}/events).",
      data: object(
        ["sessionId", "from", "event", "object"],
        [
          "sessionId": ["type": "string"], "from": peerByID, "event": ["type": "string"],
          "object": ["description": "The JSON value the sender gave (null when none)."],
        ])),
    EventKind(
      type: "session.send.failed",
      summary: "Reliable data or a named event this peer sent was not acknowledged by some recipients.",
      data: object(
        ["sessionId", "undelivered", "reason"],
        [
          "sessionId": ["type": "string"], "undelivered": ["type": "array", "items": ["type": "string"]],
          "reason": ["type": "string"],
        ])),
    EventKind(
      type: "job.received",
      summary: "A job offered to this peer was accepted and is now in its list (with receivedFrom).",
      data: object(["job"], ["job": Schemas.job])),
    EventKind(
      type: "job.delivered",
      summary: "A job this peer sent was accepted; the job now shows assignedTo.",
      data: object(["job"], ["job": Schemas.job])),
    EventKind(
      type: "job.send.failed",
      summary: "A job offer this peer sent was declined, expired, canceled, or could not be delivered.",
      data: object(
        ["job", "jobId", "to", "reason"],
        [
          "job": [
            "anyOf": [Schemas.job, ["type": "null"]],
            "description": "The job as it is now (null only if it was deleted meanwhile).",
          ],
          "jobId": ["type": "string"], "to": Schemas.peerRef,
          "reason": [
            "type": "string",
            "description": "declined, expired, canceled, or why the delivery failed (e.g. the link was lost).",
          ],
        ])),
    chatEvent(
      "chat.message", "A message in a room this peer is in.", ["message": Schemas.chatMessage]),
    chatEvent("chat.member.joined", "A peer joined a room.", ["peer": Schemas.peerRef]),
    chatEvent("chat.member.left", "A peer left a room.", ["peer": Schemas.peerRef]),
    chatEvent("chat.ended", "A room ended (its host left and nobody remains).", [:]),
    transferEvent(
      "offered",
      "A file waits for this peer's Accept or Decline (file consent; state awaitingConsent).",
      ["timeoutSeconds": ["type": "integer", "minimum": 1]]),
    transferEvent("started", "A transfer this peer sends or receives started.", [:]),
    transferEvent(
      "accepted", "The recipient accepted a file this peer sends, which waited for consent.",
      [:]),
    transferEvent(
      "declined", "The recipient declined the file (both sides get it).",
      ["reason": ["type": "string"]]),
    transferEvent(
      "progress", "Bytes so far (at most 10 a second per side).",
      ["bytes": ["type": "integer"], "total": ["type": "integer"]]),
    transferEvent(
      "interrupted",
      "The other side's node became unreachable during the transfer (state interrupted); it resumes by itself.",
      ["nodeId": ["type": "string"]]),
    transferEvent("resumed", "An interrupted transfer goes on (state inProgress, resumedFrom).", [:]),
    transferEvent(
      "finished", "The file arrived whole and its SHA-256 matched.",
      ["sha256": ["type": "string", "pattern": "^[0-9a-f]{64}$"]]),
    transferEvent("failed", "The transfer failed.", ["reason": ["type": "string"]]),
    transferEvent(
      "canceled", "The sender or the receiver canceled it.", ["reason": ["type": "string"]]),
    EventKind(
      type: "stream.opened",
      summary: "A member opened a byte stream to this peer (read it with GET /api/v1/streams/{id}).",
      data: object(["stream"], ["stream": Schemas.stream])),
    EventKind(
      type: "stream.closed",
      summary: "A stream this peer writes or reads ended: closed, or failed with a reason.",
      data: object(["stream", "reason"], ["stream": Schemas.stream, "reason": nullableString])),
  ]

  static func invitationEvent(_ state: String, _ summary: String) -> EventKind {
    EventKind(
      type: "invitation.\(state)", summary: summary,
      data: object(["invitation"], ["invitation": Schemas.invitation]))
  }

  static func chatEvent(_ type: String, _ summary: String, _ extra: JSONObject) -> EventKind {
    var properties: JSONObject = ["chat": chatRef]
    for (key, value) in extra { properties[key] = value }
    return EventKind(
      type: type, summary: summary,
      data: object(["chat"] + extra.keys.sorted(), properties))
  }

  static func transferEvent(_ state: String, _ summary: String, _ extra: JSONObject) -> EventKind {
    var properties: JSONObject = ["transfer": Schemas.transfer]
    for (key, value) in extra { properties[key] = value }
    return EventKind(
      type: "transfer.\(state)", summary: summary,
      data: object(["transfer"] + extra.keys.sorted(), properties))
  }

  /// The types that may be published to a log.
  static let loggedTypes: Set<String> = Set(logged.map(\.type))

  /// The envelope of one kind: `{id, type, at, data}` (hello: `{type, data}`).
  static func envelope(_ kind: EventKind, logged: Bool) -> JSONValue {
    var properties: JSONObject = ["type": ["type": "string", "const": .string(kind.type)], "data": kind.data]
    var required: [JSONValue] = ["type", "data"]
    if logged {
      properties["id"] = Schemas.cursor
      properties["at"] = ["type": "string", "format": "date-time"]
      required = ["id", "type", "at", "data"]
    }
    return [
      "type": "object", "description": .string(kind.summary), "required": .array(required),
      "properties": .object(properties),
    ]
  }

  /// `components/schemas` entries: one per event type, and `Event`, the envelope of any logged event (a `oneOf`
  /// with a discriminator on `type`).
  static func openAPISchemas() -> JSONObject {
    var schemas = JSONObject()
    var mapping = JSONObject()
    var refs: [JSONValue] = []
    for kind in logged {
      schemas[kind.schemaName] = envelope(kind, logged: true)
      let ref = "#/components/schemas/\(kind.schemaName)"
      mapping[kind.type] = .string(ref)
      refs.append(["$ref": .string(ref)])
    }
    schemas[hello.schemaName] = envelope(hello, logged: false)
    schemas["Event"] = [
      "description": "Any event of a peer's log (GET /api/v1/events, WebSocket, SSE); see docs/events.md.",
      "oneOf": .array(refs), "discriminator": ["propertyName": "type", "mapping": .object(mapping)],
    ]
    return schemas
  }
}

extension EventCatalog {
  /// Where `value` breaks `schema` (the JSON Schema subset these schemas use: type, const, enum, required,
  /// properties, additionalProperties, maxProperties, items, anyOf/oneOf, minimum/maximum, pattern); empty when it
  /// conforms. Debug builds check every published event with it (``EventHub/checkDocumented(_:_:node:)``), so a change to an
  /// event's data that the documentation does not follow shows up in the integration tests.
  static func violations(_ value: JSONValue, against schema: JSONValue, at path: String = "data") -> [String] {
    var value = value
    if case .serialized(let bytes) = value {
      guard let parsed = try? JSONValue.parse(bytes) else { return ["\(path): not valid JSON"] }
      value = parsed
    }
    guard let schema = schema.objectValue else { return [] }
    var problems: [String] = []
    for key in ["anyOf", "oneOf"] {
      if case .array(let alternatives)? = schema[key],
        !alternatives.contains(where: { violations(value, against: $0, at: path).isEmpty })
      {
        problems.append("\(path): matches none of \(key)")
      }
    }
    if let type = schema["type"] {
      let allowed: [String] =
        switch type {
        case .string(let one): [one]
        case .array(let many): many.compactMap(\.stringValue)
        default: []
        }
      if !allowed.contains(where: { Self.isOfType(value, $0) }) {
        problems.append("\(path): \(value.typeDescription), expected \(allowed.joined(separator: " or "))")
        return problems
      }
    }
    if let constant = schema["const"], constant != value {
      problems.append("\(path): not \(constant.serializedString())")
    }
    if case .array(let options)? = schema["enum"], !options.contains(value) {
      problems.append(
        "\(path): \(value.serializedString()) is not one of \(JSONValue.array(options).serializedString())")
    }
    if case .string(let text) = value, let pattern = schema["pattern"]?.stringValue,
      let regex = try? Regex(pattern), (try? regex.firstMatch(in: text)) == nil
    {
      problems.append("\(path): does not match \(pattern)")
    }
    if let number = Self.number(value) {
      if let minimum = schema["minimum"].flatMap(Self.number), number < minimum {
        problems.append("\(path): < \(minimum)")
      }
      if let maximum = schema["maximum"].flatMap(Self.number), number > maximum {
        problems.append("\(path): > \(maximum)")
      }
    }
    if case .array(let items) = value, let itemSchema = schema["items"] {
      for (index, item) in items.enumerated() {
        problems += violations(item, against: itemSchema, at: "\(path)[\(index)]")
      }
    }
    if case .object(let object) = value {
      if case .array(let required)? = schema["required"] {
        for key in required.compactMap(\.stringValue) where object[key] == nil {
          problems.append("\(path).\(key): missing")
        }
      }
      let properties = schema["properties"]?.objectValue ?? [:]
      if let most = schema["maxProperties"]?.intValue, object.keys.count > most {
        problems.append("\(path): more than \(most) members")
      }
      for (key, member) in object {
        if let property = properties[key] {
          problems += violations(member, against: property, at: "\(path).\(key)")
        } else if let additional = schema["additionalProperties"] {
          if additional == .bool(false) {
            problems.append("\(path).\(key): not allowed")
          } else {
            problems += violations(member, against: additional, at: "\(path).\(key)")
          }
        }
      }
    }
    return problems
  }

  static func isOfType(_ value: JSONValue, _ type: String) -> Bool {
    switch (type, value) {
    case ("null", .null), ("boolean", .bool), ("string", .string), ("array", .array), ("object", .object): true
    case ("number", .int), ("number", .double): true
    case ("integer", _): value.intValue != nil
    default: false
    }
  }

  static func number(_ value: JSONValue) -> Double? {
    switch value {
    case .int(let number): Double(number)
    case .double(let number): number
    default: nil
    }
  }

  /// The kind for a type, hello included.
  static func kind(_ type: String) -> EventKind? {
    type == hello.type ? hello : logged.first { $0.type == type }
  }
}
