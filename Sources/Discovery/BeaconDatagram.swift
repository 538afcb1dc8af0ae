/// The beacon datagram: what a node says about itself, and its pure codec (no sockets, no clock).
///
/// Module `Discovery`. Every ``Beacon`` sends ``BeaconDatagram/encode(_:)`` of its ``BeaconAnnouncement`` and
/// decodes what it hears with ``BeaconDatagram/decode(_:)``.
///
/// Wire format: one datagram per announcement, integers big-endian.
///
///     offset   size  field
///     0        4     magic "MGB1" (0x4D 0x47 0x42 0x31); the "1" is this datagram format's version
///     4        1     protocolVersion: the sender's mesh protocol version (u8)
///     5        2     httpPort: the sender's HTTP/WebSocket port (u16, 1...65535)
///     7        2     N: length of nodeID in bytes (u16, 1...128)
///     9        N     nodeID, UTF-8, no control characters
///     9+N      2     M: length of name in bytes (u16, 1...255)
///     11+N     M     name, UTF-8, no control characters
///     11+N+M   ...   reserved: receivers ignore trailing bytes, so a later version can append fields
///
/// The sender's address is not in the datagram: receivers take it from the datagram's source IP. Receivers
/// drop anything else (foreign traffic on the port, truncated or oversized datagrams, bad UTF-8, lengths past
/// the end) with a `debug` log line, and drop their own announcements (same node id).

/// What a node says about itself in every beacon datagram.
public struct BeaconAnnouncement: Sendable, Equatable {
  /// The node's id (its UUID); 1–128 UTF-8 bytes, no control characters.
  public var nodeID: String
  /// The node's display name; 1–255 UTF-8 bytes, no control characters.
  public var name: String
  /// The node's HTTP/WebSocket port, where other nodes link to it.
  public var httpPort: UInt16
  /// The node's mesh protocol version.
  public var protocolVersion: UInt8
}

/// Encoding and defensive decoding of beacon datagrams (the format is in this file's header comment).
enum BeaconDatagram {
  /// "MGB1".
  static let magic: [UInt8] = [0x4D, 0x47, 0x42, 0x31]
  /// Longest node id in UTF-8 bytes.
  static let maxNodeIDBytes = 128
  /// Longest name in UTF-8 bytes.
  static let maxNameBytes = 255

  /// Why a datagram was dropped; only ever logged at `debug`.
  struct Malformed: Error, Equatable {
    var reason: String
  }

  /// What is wrong with an announcement, or nil when it can be sent.
  static func problem(with announcement: BeaconAnnouncement) -> String? {
    if let problem = fieldProblem("nodeID", announcement.nodeID, maxBytes: maxNodeIDBytes) { return problem }
    if let problem = fieldProblem("name", announcement.name, maxBytes: maxNameBytes) { return problem }
    if announcement.httpPort == 0 { return "httpPort must be 1...65535" }
    return nil
  }

  /// The datagram for a valid announcement (see ``problem(with:)``).
  static func encode(_ announcement: BeaconAnnouncement) -> [UInt8] {
    let nodeID = Array(announcement.nodeID.utf8)
    let name = Array(announcement.name.utf8)
    precondition(nodeID.count <= UInt16.max && name.count <= UInt16.max, "beacon fields must be validated first")
    var bytes = magic
    bytes.reserveCapacity(11 + nodeID.count + name.count)
    bytes.append(announcement.protocolVersion)
    append(announcement.httpPort, to: &bytes)
    append(UInt16(nodeID.count), to: &bytes)
    bytes += nodeID
    append(UInt16(name.count), to: &bytes)
    bytes += name
    return bytes
  }

  /// Parses a datagram; throws for anything that is not a valid announcement. Never traps.
  static func decode(_ bytes: some Collection<UInt8>) throws(Malformed) -> BeaconAnnouncement {
    var reader = Reader(bytes: Array(bytes))
    guard let head = reader.take(magic.count), head.elementsEqual(magic) else {
      throw Malformed(reason: "not a meshgate beacon (magic)")
    }
    guard let protocolVersion = reader.take(1)?.first, let httpPort = reader.uint16() else {
      throw Malformed(reason: "truncated header")
    }
    let nodeID = try reader.string("nodeID", maxBytes: maxNodeIDBytes)
    let name = try reader.string("name", maxBytes: maxNameBytes)
    let announcement = BeaconAnnouncement(
      nodeID: nodeID, name: name, httpPort: httpPort, protocolVersion: protocolVersion)
    if let problem = problem(with: announcement) { throw Malformed(reason: problem) }
    return announcement
  }

  private static func fieldProblem(_ field: String, _ value: String, maxBytes: Int) -> String? {
    let count = value.utf8.count
    if count == 0 || count > maxBytes { return "\(field) must be 1–\(maxBytes) UTF-8 bytes (is \(count))" }
    if value.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) {
      return "\(field) must not contain control characters"
    }
    return nil
  }

  private static func append(_ value: UInt16, to bytes: inout [UInt8]) {
    bytes.append(UInt8(value >> 8))
    bytes.append(UInt8(value & 0xFF))
  }

  /// A bounds-checked cursor over a datagram.
  private struct Reader {
    let bytes: [UInt8]
    var offset = 0

    mutating func take(_ count: Int) -> ArraySlice<UInt8>? {
      guard count >= 0, count <= bytes.count - offset else { return nil }
      defer { offset += count }
      return bytes[offset..<offset + count]
    }

    mutating func uint16() -> UInt16? {
      guard let pair = take(2) else { return nil }
      return UInt16(pair[pair.startIndex]) << 8 | UInt16(pair[pair.startIndex + 1])
    }

    mutating func string(_ field: String, maxBytes: Int) throws(Malformed) -> String {
      guard let length = uint16() else { throw Malformed(reason: "truncated \(field) length") }
      guard Int(length) <= maxBytes else { throw Malformed(reason: "\(field) length \(length) exceeds \(maxBytes)") }
      guard let raw = take(Int(length)) else { throw Malformed(reason: "truncated \(field)") }
      guard let text = String(validating: raw, as: UTF8.self) else {
        throw Malformed(reason: "\(field) is not valid UTF-8")
      }
      return text
    }
  }
}
