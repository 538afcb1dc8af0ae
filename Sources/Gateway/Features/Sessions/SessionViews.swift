/// JSON views of sessions, members and invitations, the mapping of ``MeshFailure`` to the JSON error shape, and the
/// request-body readers the session and invitation routes share.
import Foundation
import LWS
import MeshCore

extension SessionDescription {
  /// `{"id","strategy","encryption","maxPeers","hostNodeId","creatorPeerId","members"}`, the session shape.
  var json: JSONValue {
    [
      "id": .string(sessionID), "strategy": .string(strategy.rawValue),
      "encryption": .string(encryption.rawValue), "maxPeers": .int(Int64(maxPeers)),
      "hostNodeId": .string(hostNodeID), "creatorPeerId": .string(creatorPeerID),
      "members": .array(
        members.map { member in
          [
            "id": .string(member.peerID), "displayName": .string(member.displayName),
            "nodeId": .string(member.nodeID), "state": .string(member.state.rawValue),
          ]
        }),
    ]
  }
}

extension SessionMember {
  /// A local peer as a connected member of a session it creates.
  init(hosting peer: StoredPeer, nodeID: String) {
    self.init(peerID: peer.id, displayName: peer.displayName, nodeID: nodeID, state: .connected)
  }

  /// `{"id","displayName","nodeId"}`, the peer shape of every event.
  var refJSON: JSONValue {
    ["id": .string(peerID), "displayName": .string(displayName), "nodeId": .string(nodeID)]
  }
}

extension SessionBook.Invitation {
  /// The invitation shape of the invitation routes and `invitation.*` events (the invitee's name from this node's
  /// peers or the directory when the offer does not carry it; `expiresAt` from the monotonic deadline).
  func json(node: isolated Node) -> JSONValue {
    let toName =
      toDisplayName.isEmpty
      ? (node.peers[offer.toPeerID]?.displayName ?? node.mesh.node.directory.peer(offer.toPeerID)?.displayName ?? "")
      : toDisplayName
    let remaining = Double(expiresAt) - Double(Node.monotonicMillis())
    var object: JSONObject = [
      "id": .string(offer.invitationID), "state": .string(state.rawValue),
      "session": [
        "id": .string(offer.session.sessionID), "strategy": .string(offer.session.strategy.rawValue),
        "encryption": .string(offer.session.encryption.rawValue),
      ],
      "from": [
        "id": .string(offer.fromPeerID), "displayName": .string(offer.fromDisplayName),
        "nodeId": .string(fromNodeID),
      ],
      "to": ["id": .string(offer.toPeerID), "displayName": .string(toName), "nodeId": .string(toNodeID)],
      "verificationCode": .string(offer.verificationCode),
      "timeoutSeconds": .double(Double(offer.timeoutMillis) / 1000),
      "expiresAt": .string(Timestamp.format(Date().addingTimeInterval(remaining / 1000))),
    ]
    object["context"] = String(validating: offer.context, as: UTF8.self).map { .string($0) } ?? .null
    return .object(object)
  }
}

extension RequestBody {
  /// `timeoutSeconds`: an integer within DESIGN.md's invitation range, or the default when absent.
  func timeoutSeconds() throws(APIError) -> Int {
    guard let value = object["timeoutSeconds"], value != .null else { return Validate.defaultTimeoutSeconds }
    guard let number = value.intValue else {
      throw .badRequest("timeoutSeconds must be an integer, not \(value.typeDescription)")
    }
    do {
      return try Validate.timeoutSeconds(Int(number))
    } catch {
      throw error.apiError
    }
  }

  func optionalString(_ key: String) throws(APIError) -> String? {
    guard let value = object[key], value != .null else { return nil }
    guard case .string(let string) = value else {
      throw .badRequest("\(key) must be a string, not \(value.typeDescription)")
    }
    return string
  }

  func optionalStringArray(_ key: String) throws(APIError) -> [String]? {
    guard let value = object[key], value != .null else { return nil }
    guard case .array(let items) = value else {
      throw .badRequest("\(key) must be an array of peer ids, not \(value.typeDescription)")
    }
    var strings: [String] = []
    for item in items {
      guard case .string(let string) = item else {
        throw .badRequest("\(key) must contain only strings, not \(item.typeDescription)")
      }
      strings.append(string)
    }
    return strings
  }

  func optionalEnum<T: RawRepresentable & CaseIterable>(_ key: String, _ type: T.Type) throws(APIError) -> T?
  where T.RawValue == String {
    guard let text = try optionalString(key) else { return nil }
    guard let value = T(rawValue: text) else {
      throw .badRequest(
        "\(key) must be one of \(T.allCases.map(\.rawValue).joined(separator: ", ")), not \(text.debugDescription)")
    }
    return value
  }
}
