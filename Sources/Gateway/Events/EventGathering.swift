/// The one fan-out cache: events for local peers gathered until they are published together, where the same event
/// told to many peers in a row stays one entry, one fan-out, built once and serialized once.
import MeshCore

/// Events gathered for local peers, in order, until they are published (``take()``).
///
/// ``add(_:event:build:)`` tells one peer about an event named by `Key` (a session event, a chat room's event): when
/// the newest entry is the same event and does not name that peer yet, the peer joins it (nothing is built); otherwise
/// the event's data is built and a new entry starts. Only the newest entry may take another peer: joining an older one
/// would move this peer's event before events gathered for it since; and a peer already in it gets a second event. The
/// event log stores an entry as one body, serialized once, and live subscribers get those same bytes.
struct EventGathering<Key: Equatable> {
  private(set) var entries: [EventFanOut] = []
  /// The event of the newest entry, when ``add(_:event:build:)`` made it, and the peers it names.
  private var last: (key: Key, peers: Set<String>)?

  var isEmpty: Bool { entries.isEmpty }

  /// Tells `peerID` about `key`: joins the newest entry if it is the same event, else builds the event.
  mutating func add(_ peerID: String, event key: Key, build: () -> (type: String, data: JSONValue)) {
    if var newest = last, newest.key == key, !newest.peers.contains(peerID) {
      last = nil  // keeps the set uniquely referenced while it grows
      newest.peers.insert(peerID)
      last = newest
      entries[entries.count - 1].peerIDs.append(peerID)
    } else {
      let built = build()
      last = (key, [peerID])
      entries.append(EventFanOut(peerIDs: [peerID], type: built.type, data: built.data))
    }
  }

  /// Appends an entry built elsewhere (it names all its recipients already); no later event joins it.
  mutating func append(_ entry: EventFanOut) {
    last = nil
    entries.append(entry)
  }

  /// Everything gathered, in order; the gathering starts over.
  mutating func take() -> [EventFanOut] {
    last = nil
    defer { entries = [] }
    return entries
  }
}
