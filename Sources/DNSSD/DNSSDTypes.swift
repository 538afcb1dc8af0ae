/// Value types of the DNS-SD wrapper: errors, handles, registrations, resolved services, events and TXT records.
///
/// Layer 2 (thin safe wrapper). Nothing here touches C; ``DNSSDClient`` turns the C callbacks into these values.
internal import CDNSSD

/// A DNS-SD call that failed, with the library's error code.
public struct DNSSDError: Error, Equatable, Sendable, CustomStringConvertible {
  /// The `DNSServiceErrorType` (negative), or 0 for failures detected by this wrapper (see ``message``).
  public var code: Int32
  /// The C function or step that failed, e.g. `DNSServiceRegister`.
  public var operation: String
  /// What went wrong, in words.
  public var message: String

  public init(code: Int32, operation: String, message: String? = nil) {
    self.code = code
    self.operation = operation
    self.message = message ?? Self.name(of: code)
  }

  /// True for the codes a missing avahi-daemon or system D-Bus produces.
  ///
  /// Avahi's compatibility library maps "no daemon", "not connected" and D-Bus errors to `kDNSServiceErr_Unknown`;
  /// Apple's mDNSResponder reports `kDNSServiceErr_ServiceNotRunning` (-65563).
  public var isDaemonUnreachable: Bool {
    code == Int32(kDNSServiceErr_Unknown) || code == -65563
  }

  public var description: String { "\(operation) failed: \(message) (\(code))" }

  /// The name of a `DNSServiceErrorType`.
  static func name(of code: Int32) -> String {
    switch Int(code) {
    case kDNSServiceErr_NoError: "no error"
    case kDNSServiceErr_Unknown: "daemon not reachable or unknown error"
    case kDNSServiceErr_NoSuchName: "no such name"
    case kDNSServiceErr_NoMemory: "out of memory"
    case kDNSServiceErr_BadParam: "bad parameter"
    case kDNSServiceErr_BadReference: "bad reference"
    case kDNSServiceErr_BadState: "bad state"
    case kDNSServiceErr_BadFlags: "bad flags"
    case kDNSServiceErr_Unsupported: "unsupported by this DNS-SD implementation"
    case kDNSServiceErr_NotInitialized: "not initialized"
    case kDNSServiceErr_AlreadyRegistered: "already registered"
    case kDNSServiceErr_NameConflict: "name conflict"
    case kDNSServiceErr_Invalid: "invalid"
    case kDNSServiceErr_Incompatible: "client library incompatible with the daemon"
    case kDNSServiceErr_BadInterfaceIndex: "bad interface index"
    case kDNSServiceErr_Refused: "refused by the daemon"
    case -65563: "daemon not running"
    default: "DNS-SD error"
    }
  }
}

/// Identifies one registration or browse of a ``DNSSDClient``.
public struct DNSSDHandle: Hashable, Sendable, CustomStringConvertible {
  let raw: UInt64

  public var description: String { "dnssd#\(raw)" }
}

/// A service instance to publish, as ``DNSSDClient/register(name:type:port:txt:interfaceIndex:)`` queues it.
struct DNSSDRegistration: Sendable, Equatable {
  var name: String
  var type: String
  var port: UInt16
  var txt: [UInt8]
  var interfaceIndex: UInt32
}

/// A browsed service instance, resolved to a host, port, TXT record and IPv4 address.
public struct DNSSDService: Sendable, Equatable {
  /// Instance name.
  public var name: String
  /// Service type, e.g. `_meshgate._tcp.`.
  public var type: String
  /// Domain, e.g. `local.`.
  public var domain: String
  /// Interface the instance was found on.
  public var interfaceIndex: UInt32
  /// The SRV target host, e.g. `vm.local.`.
  public var hostTarget: String
  /// The SRV port.
  public var port: UInt16
  /// The TXT record's key/value pairs (keys lowercased; a key without `=` has an empty value).
  public var txt: [String: String]
  /// The host's IPv4 address as dotted-quad text.
  public var address: String
}

/// What a ``DNSSDClient`` reports; delivered on its thread, in order.
public enum DNSSDEvent: Sendable, Equatable {
  /// A registration is established under `name` (which may differ from the requested name after a conflict).
  case registered(DNSSDHandle, name: String)
  /// A registration could not be made or was lost (e.g. the daemon went away); the handle is dead.
  case registrationFailed(DNSSDHandle, DNSSDError)
  /// A browse found an instance and resolved it.
  case resolved(DNSSDHandle, DNSSDService)
  /// A previously resolved instance of a browse went away.
  case removed(DNSSDHandle, name: String, interfaceIndex: UInt32)
  /// A browse could not be started or was lost (e.g. the daemon went away); the handle is dead.
  case browseFailed(DNSSDHandle, DNSSDError)
}

/// DNS-SD TXT records (RFC 6763 §6): a sequence of length-prefixed `key=value` strings.
public enum TXTRecord {
  /// Why a TXT record cannot be encoded.
  public struct EncodingError: Error, Equatable, Sendable, CustomStringConvertible {
    /// What is wrong, naming the key.
    public var message: String
    public var description: String { message }
  }

  /// Encodes pairs in the given order. Keys are 1–9 printable ASCII characters without `=` (RFC 6763 §6.4
  /// recommends at most 9); each `key=value` is at most 255 bytes. No pairs encode as one empty string.
  public static func encode(_ pairs: [(key: String, value: String)]) throws(EncodingError) -> [UInt8] {
    var bytes: [UInt8] = []
    for (key, value) in pairs {
      guard !key.isEmpty, key.utf8.count <= 9, key.utf8.allSatisfy({ $0 >= 0x20 && $0 <= 0x7E && $0 != 0x3D }) else {
        throw EncodingError(message: "TXT key \(key.debugDescription) must be 1–9 printable ASCII characters, no '='")
      }
      let entry = Array("\(key)=\(value)".utf8)
      guard entry.count <= 255 else {
        throw EncodingError(message: "TXT entry \(key) is \(entry.count) bytes; at most 255 fit")
      }
      bytes.append(UInt8(entry.count))
      bytes += entry
    }
    if bytes.isEmpty { bytes = [0] }
    return bytes
  }

  /// Decodes a TXT record defensively: a length past the end ends the record, entries without a key are skipped,
  /// the first occurrence of a key wins (RFC 6763 §6.4), keys are lowercased, values that are not UTF-8 are skipped.
  public static func decode(_ record: some Collection<UInt8>) -> [String: String] {
    let bytes = Array(record)
    var pairs: [String: String] = [:]
    var offset = 0
    while offset < bytes.count {
      let length = Int(bytes[offset])
      offset += 1
      guard length <= bytes.count - offset else { break }
      let entry = bytes[offset..<offset + length]
      offset += length
      let keyBytes = entry.prefix { $0 != 0x3D }
      guard !keyBytes.isEmpty, let key = String(validating: keyBytes, as: UTF8.self)?.lowercased() else { continue }
      let valueBytes = entry.dropFirst(keyBytes.count + 1)
      guard let value = String(validating: valueBytes, as: UTF8.self) else { continue }
      if pairs[key] == nil { pairs[key] = value }
    }
    return pairs
  }
}
