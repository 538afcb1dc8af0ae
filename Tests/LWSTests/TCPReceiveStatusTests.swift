import Glibc
import Testing

@testable import LWS

/// `TCPReceiveStatus` reads `struct tcp_info` counters at fixed offsets: a loopback connection checks that each one
/// reads what the kernel counted (a wrong offset reads another counter).
@Suite struct TCPReceiveStatusTests {
  /// A connected loopback pair: (the dialling socket, the accepted one).
  func loopbackPair() throws -> (Int32, Int32) {
    let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(listener) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(listener, $0, length) == 0 && listen(listener, 1) == 0 && getsockname(listener, $0, &length) == 0
      }
    }
    try #require(bound)
    let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    let connected = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, length) == 0 }
    }
    try #require(connected)
    let server = accept(listener, nil, nil)
    try #require(server >= 0)
    return (client, server)
  }

  @Test func countsWhatTheKernelReceived() throws {
    let (client, server) = try loopbackPair()
    defer {
      close(client)
      close(server)
    }
    let fresh = try #require(TCPReceiveStatus(socket: server))
    #expect(fresh.bytesReceived == 0)
    #expect(fresh.dataSegmentsIn == 0)

    let payload = [UInt8](repeating: 7, count: 5000)
    for _ in 0..<3 {
      #expect(payload.withUnsafeBytes { send(client, $0.baseAddress, $0.count, 0) } == payload.count)
      usleep(20_000)
    }
    var sink = [UInt8](repeating: 0, count: 20_000)
    var read = 0
    while read < 15_000 {
      let got = sink.withUnsafeMutableBytes { recv(server, $0.baseAddress, $0.count, 0) }
      try #require(got > 0)
      read += got
    }
    let status = try #require(TCPReceiveStatus(socket: server))
    #expect(status.bytesReceived == 15_000)
    #expect((status.dataSegmentsIn ?? 0) >= 3)
    #expect((status.segmentsIn ?? 0) >= status.dataSegmentsIn ?? 0)
    #expect(status.millisSinceData < 1000)
    #expect(status.rtoMicros >= 200_000)  // the kernel's minimum retransmission timeout

    usleep(300_000)
    let later = try #require(TCPReceiveStatus(socket: server))
    #expect(later.millisSinceData >= 250)
    #expect(later.bytesReceived == 15_000)
    // The dialling side received nothing but ACKs.
    let dialler = try #require(TCPReceiveStatus(socket: client))
    #expect(dialler.bytesReceived == 0)
    #expect(dialler.millisSinceAck < dialler.millisSinceData)
  }
}
