/// Credit-based flow control of one byte stream (frames 0x49–0x4C, docs/mesh-protocol.md section 5), sans I/O.
///
/// A stream has no length and nothing is stored: the sender's node forwards what its client writes, the receiver's
/// node hands it to the reading client. The sender may have at most `window` bytes beyond the receiver's last
/// credit; the receiver credits bytes once its reading client has taken them. So a slow reader slows the writer,
/// and memory on both nodes stays bounded by the window.
public struct StreamFlow: Sendable, Equatable {
  /// Bytes the sender may have in flight beyond the last credit.
  public let window: UInt64
  /// Bytes sent so far (the offset of the next byte).
  public private(set) var sent: UInt64 = 0
  /// Bytes the receiver has handed to its reader.
  public private(set) var credited: UInt64 = 0

  public init(window: UInt64) {
    precondition(window > 0, "StreamFlow: the window must be positive")
    self.window = window
  }

  /// Bytes that may be sent now.
  public var room: UInt64 { window - min(window, sent - credited) }

  /// Whether the writer should be paused (no room left).
  public var isBlocked: Bool { room == 0 }

  /// `count` bytes went out. Sending beyond the window is allowed by one piece (the writer's piece that was already
  /// read when the window closed), so pieces never need splitting.
  public mutating func didSend(_ count: Int) {
    sent += UInt64(count)
  }

  /// The receiver credits every byte before `offset`. Returns false (and changes nothing) for a credit beyond what
  /// was sent or behind an earlier one.
  public mutating func credit(_ offset: UInt64) -> Bool {
    guard offset <= sent, offset >= credited else { return false }
    credited = offset
    return true
  }

  /// Whether every byte sent was credited.
  public var isDrained: Bool { credited == sent }
}

/// The receiver's side: checks that data arrives in order and counts what the reader took.
public struct StreamIntake: Sendable, Equatable {
  /// The offset of the next expected byte.
  public private(set) var received: UInt64 = 0
  /// Bytes handed to the reader.
  public private(set) var delivered: UInt64 = 0

  public init() {}

  /// A piece of `count` bytes at `offset` arrived; false when it is not the next one (a protocol error).
  public mutating func arrived(offset: UInt64, count: Int) -> Bool {
    guard offset == received else { return false }
    received += UInt64(count)
    return true
  }

  /// `count` more bytes were handed to the reader.
  public mutating func handedOver(_ count: Int) {
    delivered = min(received, delivered + UInt64(count))
  }
}
