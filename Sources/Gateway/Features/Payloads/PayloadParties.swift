/// What a file transfer and a byte stream have in common: who it goes between, in which session, seen from which
/// side. Both record types hold one ``PayloadParties`` and share its accessors and JSON through ``PayloadRecord``.
import MeshCore

/// One side of a payload: a peer and the node it is on (the directory's peer reference).
typealias PayloadParty = Directory.PeerRef

/// The parties of a transfer or a stream.
struct PayloadParties: Sendable, Equatable {
  var direction: TransferDirection
  var sessionID: String
  var from: PayloadParty
  var to: PayloadParty
}

/// A transfer's or a stream's record.
protocol PayloadRecord {
  var id: String { get }
  var parties: PayloadParties { get }
  var name: String { get }
  /// The state as the API spells it.
  var stateName: String { get }
  var bytes: UInt64 { get }
  var reason: String? { get }
  var createdAt: String { get }
}

extension PayloadRecord {
  var direction: TransferDirection { parties.direction }
  var sessionID: String { parties.sessionID }
  var fromPeerID: String { parties.from.peerID }
  var fromDisplayName: String { parties.from.displayName }
  var fromNodeID: String { parties.from.nodeID }
  var toPeerID: String { parties.to.peerID }
  var toDisplayName: String { parties.to.displayName }
  var toNodeID: String { parties.to.nodeID }

  /// The members every payload view has, in the stream view's order (a transfer's view adds its own in between).
  var commonJSON: JSONObject {
    [
      "id": .string(id), "sessionId": .string(sessionID), "direction": .string(direction.rawValue),
      "name": .string(name), "state": .string(stateName), "bytes": .int(Int64(bytes)), "from": parties.from.json,
      "to": parties.to.json, "createdAt": .string(createdAt), "reason": reason.map { .string($0) } ?? .null,
    ]
  }
}

extension TransferRecord {
  var stateName: String { state.rawValue }
}

extension StreamRecord {
  var stateName: String { state.rawValue }
}

extension TransferDirection {
  /// The same side as the payload book names it.
  var payload: PayloadBook.Direction {
    switch self {
    case .outgoing: .outgoing
    case .incoming: .incoming
    }
  }
}
