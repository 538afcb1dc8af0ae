internal import CLibWebSockets
import Glibc

/// What the kernel received on one TCP connection, from Linux `TCP_INFO` (`struct tcp_info` of linux/tcp.h; glibc's
/// copy of the struct stops before the counters, so they are read at their fixed ABI offsets, which the kernel only
/// ever appends to).
public struct TCPReceiveStatus: Sendable, Equatable {
  /// Milliseconds since the last in-order data segment arrived (`tcpi_last_data_recv`). A segment that arrives out of
  /// order, behind a lost one, does not count until the hole is filled.
  public var millisSinceData: UInt32
  /// Milliseconds since the last acceptable ACK arrived (`tcpi_last_ack_recv`): every segment of the other side
  /// carries one, data in or out of order and pure ACKs alike.
  public var millisSinceAck: UInt32
  /// In-order payload bytes received (`tcpi_bytes_received`); nil on kernels older than 4.1.
  public var bytesReceived: UInt64?
  /// Segments with payload received, in order or not, retransmitted duplicates included (`tcpi_data_segs_in`); nil
  /// on kernels older than 4.6.
  public var dataSegmentsIn: UInt32?
  /// All segments received (`tcpi_segs_in`); nil on kernels older than 4.2.
  public var segmentsIn: UInt32?
  /// Retransmission timeout (µs) and how many times it backed off (`tcpi_rto`, `tcpi_backoff`).
  public var rtoMicros: UInt32
  public var backoff: UInt8

  /// Offsets in `struct tcp_info` (stable kernel ABI).
  static let lastDataRecvOffset = 52
  static let lastAckRecvOffset = 56
  static let bytesReceivedOffset = 128
  static let segmentsInOffset = 140
  static let dataSegmentsInOffset = 152
  static let rtoOffset = 8
  static let backoffOffset = 4

  public init(
    millisSinceData: UInt32, millisSinceAck: UInt32, bytesReceived: UInt64? = nil, dataSegmentsIn: UInt32? = nil,
    segmentsIn: UInt32? = nil, rtoMicros: UInt32 = 0, backoff: UInt8 = 0
  ) {
    self.millisSinceData = millisSinceData
    self.millisSinceAck = millisSinceAck
    self.bytesReceived = bytesReceived
    self.dataSegmentsIn = dataSegmentsIn
    self.segmentsIn = segmentsIn
    self.rtoMicros = rtoMicros
    self.backoff = backoff
  }

  /// Reads `TCP_INFO` of socket `fd`; nil when the kernel does not answer.
  public init?(socket fd: Int32) {
    var buffer = [UInt8](repeating: 0, count: 256)
    var length = socklen_t(buffer.count)
    let answered = buffer.withUnsafeMutableBytes { raw in
      getsockopt(fd, Int32(IPPROTO_TCP), TCP_INFO, raw.baseAddress, &length) == 0
    }
    guard answered, length >= 64 else { return nil }
    let filled = Int(length)
    func field<T: FixedWidthInteger>(_ offset: Int, _: T.Type) -> T? {
      guard offset + MemoryLayout<T>.size <= filled else { return nil }
      return buffer.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: T.self) }
    }
    self.init(
      millisSinceData: field(Self.lastDataRecvOffset, UInt32.self) ?? 0,
      millisSinceAck: field(Self.lastAckRecvOffset, UInt32.self) ?? 0,
      bytesReceived: field(Self.bytesReceivedOffset, UInt64.self),
      dataSegmentsIn: field(Self.dataSegmentsInOffset, UInt32.self),
      segmentsIn: field(Self.segmentsInOffset, UInt32.self),
      rtoMicros: field(Self.rtoOffset, UInt32.self) ?? 0,
      backoff: field(Self.backoffOffset, UInt8.self) ?? 0)
  }
}
