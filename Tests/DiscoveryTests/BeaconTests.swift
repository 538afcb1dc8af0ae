import Glibc
import Synchronization
import Testing

@testable import Discovery

/// Collects what a beacon's `onDiscovery` reports, from the beacon's queue.
final class DiscoveryRecorder: Sendable {
  private let nodes = Mutex<[DiscoveredNode]>([])

  func record(_ node: DiscoveredNode) {
    nodes.withLock { $0.append(node) }
  }

  var all: [DiscoveredNode] { nodes.withLock { $0 } }

  func count(from nodeID: String) -> Int { all.count { $0.nodeID == nodeID } }

  func removeAll() { nodes.withLock { $0.removeAll() } }

  /// Polls until `condition` holds or `timeout` passes; returns whether it held.
  func wait(for timeout: Duration = .seconds(3), until condition: ([DiscoveredNode]) -> Bool) async -> Bool {
    let deadline = ContinuousClock.now.advanced(by: timeout)
    while ContinuousClock.now < deadline {
      if condition(all) { return true }
      try? await Task.sleep(for: .milliseconds(20))
    }
    return condition(all)
  }
}

@Suite(.timeLimit(.minutes(1)))
struct BeaconTests {
  /// A random high port per test, so parallel tests and other processes do not hear each other.
  static func randomPort() -> UInt16 { UInt16.random(in: 20000...60000) }

  static func uniqueID(_ label: String) -> String { "\(label)-\(UInt64.random(in: 0...UInt64.max))" }

  /// Loopback works with or without a default route (a bare CI VM or network namespace has only `lo`).
  static func loopback(port: UInt16, group: String = "239.255.77.77") -> BeaconConfiguration {
    BeaconConfiguration(group: group, port: port, interval: .milliseconds(100), interfaceAddress: "127.0.0.1")
  }

  static func announcement(_ nodeID: String, name: String = "node", httpPort: UInt16 = 8080) -> BeaconAnnouncement {
    BeaconAnnouncement(nodeID: nodeID, name: name, httpPort: httpPort, protocolVersion: 1)
  }

  // MARK: Wire format

  @Test func encodesTheDocumentedLayout() {
    let bytes = BeaconDatagram.encode(
      BeaconAnnouncement(nodeID: "ab", name: "é", httpPort: 0x1F90, protocolVersion: 7))
    #expect(
      bytes == [0x4D, 0x47, 0x42, 0x31, 7, 0x1F, 0x90, 0, 2, 0x61, 0x62, 0, 2, 0xC3, 0xA9])
  }

  @Test func roundTripsAnnouncements() throws {
    let announcements = [
      Self.announcement("0F8FAD5B-D9CB-469F-A165-70867728950E", name: "alpha", httpPort: 8080),
      BeaconAnnouncement(nodeID: "n", name: "Café 東京 🚀", httpPort: 65535, protocolVersion: 255),
      BeaconAnnouncement(
        nodeID: String(repeating: "x", count: 128), name: String(repeating: "é", count: 127), httpPort: 1,
        protocolVersion: 0),
    ]
    for announcement in announcements {
      #expect(try BeaconDatagram.decode(BeaconDatagram.encode(announcement)) == announcement)
    }
  }

  @Test func ignoresTrailingBytesForLaterVersions() throws {
    let announcement = Self.announcement("node-1")
    let bytes = BeaconDatagram.encode(announcement) + [1, 2, 3, 4]
    #expect(try BeaconDatagram.decode(bytes) == announcement)
  }

  @Test func rejectsEveryTruncation() {
    let bytes = BeaconDatagram.encode(Self.announcement("node-1", name: "alpha"))
    for length in 0..<bytes.count {
      #expect(throws: BeaconDatagram.Malformed.self, "prefix of \(length) bytes") {
        try BeaconDatagram.decode(bytes.prefix(length))
      }
    }
  }

  @Test func rejectsMalformedDatagrams() {
    let valid = BeaconDatagram.encode(Self.announcement("ab", name: "cd"))
    var wrongMagic = valid
    wrongMagic[3] = 0x32  // "MGB2"
    var badNodeID = valid
    badNodeID[9] = 0xFF  // not UTF-8
    var badName = valid
    badName[13] = 0xC3  // a lone lead byte
    var hugeNodeID = valid
    hugeNodeID[7...8] = [0xFF, 0xFF]
    var pastTheEnd = valid
    pastTheEnd[11...12] = [0, 3]
    let cases: [(String, [UInt8])] = [
      ("empty", []),
      ("wrong magic", wrongMagic),
      ("foreign text", Array("M-SEARCH * HTTP/1.1\r\n".utf8)),
      ("nodeID not UTF-8", badNodeID),
      ("name not UTF-8", badName),
      ("huge nodeID length", hugeNodeID),
      ("huge nodeID, bytes present", BeaconDatagram.magic + [1, 0, 80, 1, 0] + Array(repeating: 0x61, count: 258)),
      ("name length past the end", pastTheEnd),
      ("empty nodeID", [0x4D, 0x47, 0x42, 0x31, 1, 0, 80, 0, 0, 0, 1, 0x61]),
      ("control character in name", [0x4D, 0x47, 0x42, 0x31, 1, 0, 80, 0, 1, 0x61, 0, 1, 0x07]),
      ("http port 0", [0x4D, 0x47, 0x42, 0x31, 1, 0, 0, 0, 1, 0x61, 0, 1, 0x62]),
    ]
    for (label, bytes) in cases {
      #expect(throws: BeaconDatagram.Malformed.self, "\(label)") { try BeaconDatagram.decode(bytes) }
    }
  }

  @Test func survivesRandomBytes() {
    var generator = SystemRandomNumberGenerator()
    for round in 0..<5_000 {
      let length = Int.random(in: 0...80, using: &generator)
      var bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
      if round.isMultiple(of: 2) { bytes = BeaconDatagram.magic + bytes }
      _ = try? BeaconDatagram.decode(bytes)
    }
  }

  // MARK: Validation and setup errors

  @Test func rejectsInvalidAnnouncements() {
    let announcements = [
      Self.announcement(""),
      Self.announcement(String(repeating: "x", count: 129)),
      Self.announcement("n", name: ""),
      Self.announcement("n", name: String(repeating: "x", count: 256)),
      Self.announcement("n", name: "line\nbreak"),
      Self.announcement("n", httpPort: 0),
    ]
    for announcement in announcements {
      let error = #expect(throws: BeaconError.self) {
        _ = try Beacon(configuration: Self.loopback(port: Self.randomPort()), announcement: announcement) { _ in }
      }
      #expect(error?.code == .invalidAnnouncement)
    }
  }

  @Test func rejectsInvalidConfigurations() {
    let port = Self.randomPort()
    let configurations = [
      BeaconConfiguration(group: "10.1.2.3", port: port),
      BeaconConfiguration(group: "not-an-address", port: port),
      BeaconConfiguration(group: "ff02::1", port: port),
      BeaconConfiguration(port: 0),
      BeaconConfiguration(port: port, interval: .milliseconds(1)),
      BeaconConfiguration(port: port, interfaceAddress: "eth0"),
    ]
    for configuration in configurations {
      let error = #expect(throws: BeaconError.self, "\(configuration)") {
        _ = try Beacon(configuration: configuration, announcement: Self.announcement("n")) { _ in }
      }
      #expect(error?.code == .invalidConfiguration)
    }
  }

  @Test func explainsAFailedJoinAndTheFallback() {
    let port = Self.randomPort()
    // 203.0.113.7 (TEST-NET-3) is not an address of this host, so the kernel has no interface to join on.
    let configuration = BeaconConfiguration(port: port, interfaceAddress: "203.0.113.7")
    let error = #expect(throws: BeaconError.self) {
      _ = try Beacon(configuration: configuration, announcement: Self.announcement("n")) { _ in }
    }
    #expect(error?.code == .multicastJoinFailed)
    #expect(error?.systemError != nil)
    #expect(error?.message.hasPrefix("cannot join multicast group 239.255.77.77 on port \(port)") == true)
    #expect(error?.message.hasSuffix("; use --discovery static") == true)
  }

  // MARK: Discovery over loopback multicast

  @Test func twoBeaconsDiscoverEachOtherButNotThemselves() async throws {
    let port = Self.randomPort()
    let (idA, idB) = (Self.uniqueID("a"), Self.uniqueID("b"))
    let heardByA = DiscoveryRecorder()
    let heardByB = DiscoveryRecorder()
    let a = try Beacon(
      configuration: Self.loopback(port: port), announcement: Self.announcement(idA, name: "alpha", httpPort: 8081),
      onDiscovery: heardByA.record)
    let b = try Beacon(
      configuration: Self.loopback(port: port), announcement: Self.announcement(idB, name: "beta", httpPort: 8082),
      onDiscovery: heardByB.record)
    defer {
      a.stop()
      b.stop()
    }
    a.start()
    b.start()

    // Repeats are reported too: the caller tracks liveness from them.
    #expect(await heardByA.wait { nodes in nodes.count { $0.nodeID == idB } >= 2 })
    #expect(await heardByB.wait { nodes in nodes.count { $0.nodeID == idA } >= 2 })
    #expect(heardByA.count(from: idA) == 0)
    #expect(heardByB.count(from: idB) == 0)
    #expect(
      heardByA.all.first { $0.nodeID == idB }
        == DiscoveredNode(nodeID: idB, name: "beta", host: "127.0.0.1", httpPort: 8082, protocolVersion: 1))
    #expect(
      heardByB.all.first { $0.nodeID == idA }
        == DiscoveredNode(nodeID: idA, name: "alpha", host: "127.0.0.1", httpPort: 8081, protocolVersion: 1))
  }

  @Test func stopEndsAnnouncingAndReporting() async throws {
    let port = Self.randomPort()
    let (idA, idB) = (Self.uniqueID("a"), Self.uniqueID("b"))
    let heardByA = DiscoveryRecorder()
    let heardByB = DiscoveryRecorder()
    let a = try Beacon(
      configuration: Self.loopback(port: port), announcement: Self.announcement(idA), onDiscovery: heardByA.record)
    let b = try Beacon(
      configuration: Self.loopback(port: port), announcement: Self.announcement(idB), onDiscovery: heardByB.record)
    defer { b.stop() }
    a.start()
    b.start()
    #expect(await heardByB.wait { nodes in nodes.contains { $0.nodeID == idA } })
    #expect(await heardByA.wait { nodes in nodes.contains { $0.nodeID == idB } })

    a.stop()
    a.stop()  // idempotent
    a.start()  // a stopped beacon stays stopped
    try await Task.sleep(for: .milliseconds(50))  // a datagram already in flight may still land
    heardByA.removeAll()
    heardByB.removeAll()
    try await Task.sleep(for: .milliseconds(600))  // six of b's intervals
    #expect(heardByB.count(from: idA) == 0)
    #expect(heardByA.all.isEmpty)
  }

  @Test func stopIsSafeBeforeStartAndFromInsideOnDiscovery() async throws {
    let port = Self.randomPort()
    let idle = try Beacon(configuration: Self.loopback(port: port), announcement: Self.announcement("idle")) { _ in }
    idle.stop()
    idle.stop()

    let calls = Mutex(0)
    let box = Mutex<Beacon?>(nil)
    let listener = try Beacon(configuration: Self.loopback(port: port), announcement: Self.announcement("l")) { _ in
      calls.withLock { $0 += 1 }
      box.withLock { $0 }?.stop()
    }
    box.withLock { $0 = listener }
    let talker = try Beacon(configuration: Self.loopback(port: port), announcement: Self.announcement("t")) { _ in }
    defer { talker.stop() }
    listener.start()
    talker.start()
    try await Task.sleep(for: .milliseconds(500))
    #expect(calls.withLock { $0 } == 1)
    box.withLock { $0 = nil }
  }

  @Test func groupsOnTheSamePortDoNotHearEachOther() async throws {
    let port = Self.randomPort()
    let heard = DiscoveryRecorder()
    let listener = try Beacon(
      configuration: Self.loopback(port: port), announcement: Self.announcement(Self.uniqueID("l")),
      onDiscovery: heard.record)
    let otherGroup = try Beacon(
      configuration: Self.loopback(port: port, group: "239.255.77.78"),
      announcement: Self.announcement(Self.uniqueID("o"))
    ) { _ in }
    defer {
      listener.stop()
      otherGroup.stop()
    }
    listener.start()
    otherGroup.start()
    try await Task.sleep(for: .milliseconds(400))
    #expect(heard.all.isEmpty)
  }

  @Test func ignoresForeignDatagramsAndKeepsListening() async throws {
    let port = Self.randomPort()
    let heard = DiscoveryRecorder()
    let beacon = try Beacon(
      configuration: Self.loopback(port: port), announcement: Self.announcement(Self.uniqueID("b")),
      onDiscovery: heard.record)
    defer { beacon.stop() }
    beacon.start()

    let sender = try LoopbackMulticastSender(group: "239.255.77.77", port: port)
    defer { sender.close() }
    sender.send(Array("hello".utf8))
    sender.send(BeaconDatagram.magic + [1, 0, 80, 0xFF, 0xFF])
    sender.send(Array(repeating: 0x4D, count: 4000))  // larger than the receive buffer
    let foreign = Self.announcement("foreign", name: "raw", httpPort: 9000)
    sender.send(BeaconDatagram.encode(foreign) + [0xEE])

    #expect(await heard.wait { nodes in nodes.contains { $0.nodeID == "foreign" } })
    #expect(
      heard.all == [
        DiscoveredNode(nodeID: "foreign", name: "raw", host: "127.0.0.1", httpPort: 9000, protocolVersion: 1)
      ])
  }

  // MARK: The default interface

  /// What a node does with `--discovery beacon` and no interface configured. Machines without a multicast route
  /// (a loopback-only VM) cannot join the group there; the test is then canceled and says so.
  @Test func twoBeaconsDiscoverEachOtherOnTheDefaultInterface() async throws {
    let port = Self.randomPort()
    let configuration = BeaconConfiguration(port: port, interval: .milliseconds(100))
    let (idA, idB) = (Self.uniqueID("a"), Self.uniqueID("b"))
    let heardByA = DiscoveryRecorder()
    let made = Result { () throws(BeaconError) in
      try Beacon(configuration: configuration, announcement: Self.announcement(idA), onDiscovery: heardByA.record)
    }
    if case .failure(let error) = made, error.code == .multicastJoinFailed, error.systemError == ENODEV {
      try Test.cancel("No multicast route on this machine (\(error.message)); the loopback tests cover discovery.")
    }
    let a = try made.get()
    let b = try Beacon(configuration: configuration, announcement: Self.announcement(idB)) { _ in }
    defer {
      a.stop()
      b.stop()
    }
    a.start()
    b.start()
    #expect(await heardByA.wait { nodes in nodes.contains { $0.nodeID == idB } })
    #expect(heardByA.count(from: idA) == 0)
  }
}

/// A bare UDP socket that sends to a multicast group over loopback, for datagrams a `Beacon` would never send.
struct LoopbackMulticastSender {
  let fd: Int32
  var destination = sockaddr_in()

  struct Failure: Error {
    var call: String
    var code: Int32
  }

  init(group: String, port: UInt16) throws {
    fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
    guard fd >= 0 else { throw Failure(call: "socket", code: errno) }
    var interface = in_addr()
    inet_pton(AF_INET, "127.0.0.1", &interface)
    guard setsockopt(fd, Int32(IPPROTO_IP), IP_MULTICAST_IF, &interface, socklen_t(MemoryLayout<in_addr>.size)) == 0
    else { throw Failure(call: "setsockopt(IP_MULTICAST_IF)", code: errno) }
    destination.sin_family = sa_family_t(AF_INET)
    destination.sin_port = port.bigEndian
    inet_pton(AF_INET, group, &destination.sin_addr)
  }

  func send(_ bytes: [UInt8]) {
    var destination = self.destination
    let sent = bytes.withUnsafeBytes { buffer in
      withUnsafePointer(to: &destination) { address in
        address.withMemoryRebound(to: sockaddr.self, capacity: 1) {
          sendto(fd, buffer.baseAddress, buffer.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
      }
    }
    #expect(sent == bytes.count, "sendto: \(String(cString: strerror(errno)))")
  }

  func close() {
    _ = Glibc.close(fd)
  }
}
