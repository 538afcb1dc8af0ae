import CTestTLS
import Crypto
import Foundation
import Glibc
public import MeshCore
import Synchronization

/// A test-only mesh node that links to a real meshgate node and then sends whatever frames a test gives it.
///
/// It speaks `meshgate-node.v1` (docs/mesh-protocol.md) over plaintext or TLS: it dials `ws[s]://host:port/mesh`
/// offering the subprotocol, presents its own self-signed certificate on TLS (created in a temporary directory),
/// sends `hello` first, answers heartbeats and sends its own every 500 ms so the link stays up, and otherwise does
/// nothing on its own. Frames are built with ``MeshFrameCodec``, so each is well-formed: what makes the node hostile
/// is what the frames say (forged session states, path-like ids, huge directories), which is what the receiving
/// node must refuse.
///
/// Threading: one I/O thread owns the socket (and the TLS state) for the link's whole life; ``send(_:)`` queues
/// frames for it and ``waitFor(timeout:_:)`` reads what it received, both under a `Mutex`. Safe from any thread.
public final class HostileNode: Sendable {
  /// The node id this node says hello with (a lowercase UUID unless a test chose another).
  public let nodeID: String
  /// The name in its hello.
  public let name: String
  /// Whether it links over TLS.
  public let tls: Bool
  /// The fingerprint of the certificate it presents on TLS (nil on plaintext).
  public let fingerprint: String?

  private let directory: String
  private let state = Mutex(State())

  private struct State {
    var outbox: [[UInt8]] = []
    var received: [MeshMessage] = []
    var peerHello: NodeHello?
    var closed = false
    var closeReason: String?
    var stopRequested = false
    /// Heartbeat sequences the other node acknowledged (only those ``roundTrip(timeout:)`` sent).
    var acknowledged: Set<UInt64> = []
    var nextMarker: UInt64 = 1 << 40
  }

  /// Creates a hostile node (nothing is dialled yet). With `tls`, a fresh self-signed certificate is made for it.
  public init(nodeID: String? = nil, name: String = "hostile", tls: Bool) throws {
    self.nodeID = nodeID ?? UUID().uuidString.lowercased()
    self.name = name
    self.tls = tls
    directory = FileManager.default.temporaryDirectory.path + "/meshgate-hostile-" + UUID().uuidString.lowercased()
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    if tls {
      let certificate = try Certificate.createSelfSigned(
        certificatePath: directory + "/cert.pem", keyPath: directory + "/key.pem", commonName: name)
      fingerprint = certificate.fingerprint
    } else {
      fingerprint = nil
    }
  }

  deinit {
    state.withLock { $0.stopRequested = true }
    try? FileManager.default.removeItem(atPath: directory)
  }

  /// The hello the other node sent, once the link is up.
  public var peerHello: NodeHello? { state.withLock { $0.peerHello } }

  /// Whether the link is closed (by either side), and why.
  public var closeReason: String? { state.withLock { $0.closed ? ($0.closeReason ?? "closed") : nil } }

  /// Every frame received so far, in order (heartbeats and their acks excluded).
  public var received: [MeshMessage] { state.withLock { $0.received } }

  /// Dials `host:port`, upgrades to a mesh link, sends `hello` (announcing `announcedPort`) and waits for the other
  /// node's hello. Returns it. The link then stays up (heartbeats) until ``close()``.
  @discardableResult
  public func link(
    host: String = "127.0.0.1", port: Int, announcedPort: UInt16 = 1, timeout: Duration = .seconds(15)
  ) throws -> NodeHello {
    let deadline = Deadline(timeout)
    let socket = try TCPSocket.connect(host: host, port: port, deadline: deadline)
    let fd = dup(socket.fd)
    socket.close()
    guard fd >= 0 else { throw TestSupportError.io(errnoMessage("dup")) }
    let flags = fcntl(fd, F_GETFL)
    _ = fcntl(fd, F_SETFL, flags & ~O_NONBLOCK)
    var interval = timeval(tv_sec: 0, tv_usec: 50_000)
    _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &interval, socklen_t(MemoryLayout<timeval>.size))
    let transport: HostileTransport
    do {
      transport = try HostileTransport(fd: fd, tls: tls, directory: directory)
      try transport.upgrade(host: host, port: port, deadline: deadline)
    } catch {
      Glibc.close(fd)
      throw error
    }
    let hello = NodeHello(nodeID: nodeID, name: name, softwareVersion: "0.1.0", port: announcedPort)
    state.withLock { $0.outbox.append(MeshFrameCodec.encode(.hello(hello))) }
    let thread = Thread { [self] in run(transport) }
    thread.name = "hostile-node"
    thread.start()
    try waitUntil(deadline, "the other node's hello") { $0.peerHello != nil || $0.closed }
    if let reason = closeReason {
      throw TestSupportError.connectionClosed("the node closed the hostile link before hello: \(reason)")
    }
    return peerHello!
  }

  /// Queues one frame (built with ``MeshFrameCodec``).
  public func send(_ message: MeshMessage) {
    sendRaw(MeshFrameCodec.encode(message))
  }

  /// Queues raw frame bytes as one binary WebSocket message.
  public func sendRaw(_ frame: [UInt8]) {
    state.withLock { $0.outbox.append(frame) }
  }

  /// Waits until a received frame matches `predicate`, and returns the first that does.
  @discardableResult
  public func waitFor(
    timeout: Duration = .seconds(30), _ what: String = "a matching frame", _ predicate: (MeshMessage) -> Bool
  ) throws -> MeshMessage {
    let deadline = Deadline(timeout)
    while true {
      if let found = state.withLock({ $0.received.first(where: predicate) }) { return found }
      if let reason = closeReason {
        throw TestSupportError.connectionClosed("the hostile link closed while waiting for \(what): \(reason)")
      }
      if deadline.hasPassed {
        throw TestSupportError.timeout("no \(what) within \(timeout.shortDescription) on the hostile link")
      }
      sleep(for: .milliseconds(10))
    }
  }

  /// Sends a heartbeat and waits for its acknowledgement. The other node handles a link's frames in order, so when
  /// this returns it has handled every frame sent before (what those frames made it do synchronously is done).
  public func roundTrip(timeout: Duration = .seconds(30)) throws {
    let marker = state.withLock { state in
      state.nextMarker += 1
      return state.nextMarker
    }
    send(.heartbeat(sequence: marker, sentAtMillis: 0))
    try waitUntil(Deadline(timeout), "acknowledgement of heartbeat \(marker)") {
      $0.acknowledged.contains(marker) || $0.closed
    }
    if let reason = closeReason {
      throw TestSupportError.connectionClosed("the hostile link closed during a round trip: \(reason)")
    }
  }

  /// Waits until the link is closed (by the other node); returns the reason.
  @discardableResult
  public func waitForClose(timeout: Duration = .seconds(30)) throws -> String {
    try waitUntil(Deadline(timeout), "the link to close") { $0.closed }
    return closeReason ?? "closed"
  }

  /// Sends `goodbye` and closes the link.
  public func close() {
    send(.goodbye(reason: "shutdown"))
    state.withLock { $0.stopRequested = true }
    _ = try? waitUntil(Deadline(.seconds(5)), "the link to close") { $0.closed }
  }

  private func waitUntil(_ deadline: Deadline, _ what: String, _ condition: (State) -> Bool) throws {
    while !state.withLock({ condition($0) }) {
      if deadline.hasPassed {
        throw TestSupportError.timeout("no \(what) within \(deadline.timeout.shortDescription) on the hostile link")
      }
      sleep(for: .milliseconds(10))
    }
  }

  // MARK: - The I/O thread

  private func run(_ transport: HostileTransport) {
    var sequence: UInt64 = 0
    var lastHeartbeat = ContinuousClock.now
    var reason = "stopped"
    var draining = false
    defer {
      transport.close()
      state.withLock {
        $0.closed = true
        if $0.closeReason == nil { $0.closeReason = reason }
      }
    }
    while true {
      let (frames, stop, linked) = state.withLock { state in
        let frames = state.outbox
        state.outbox.removeAll()
        return (frames, state.stopRequested, state.peerHello != nil)
      }
      do {
        for frame in frames { try transport.sendMessage(frame) }
        if draining { return }
        if stop {
          try transport.sendClose()
          draining = true
          continue
        }
        if linked && ContinuousClock.now - lastHeartbeat >= .milliseconds(500) {
          sequence += 1
          lastHeartbeat = ContinuousClock.now
          let now = UInt64(DispatchTime.now().uptimeNanoseconds / 1_000_000)
          try transport.sendMessage(MeshFrameCodec.encode(.heartbeat(sequence: sequence, sentAtMillis: now)))
        }
        guard let message = try transport.receiveMessage() else { continue }
        let decoded: MeshMessage
        do {
          decoded = try MeshFrameCodec.decode(message)
        } catch {
          reason = "undecodable frame from the node: \(error)"
          return
        }
        switch decoded {
        case .hello(let hello):
          state.withLock { $0.peerHello = hello }
        case .heartbeat(let sequence, let sentAt):
          try transport.sendMessage(
            MeshFrameCodec.encode(.heartbeatAck(sequence: sequence, sentAtMillis: sentAt)))
        case .heartbeatAck(let sequence, _):
          if sequence > 1 << 40 { state.withLock { _ = $0.acknowledged.insert(sequence) } }
        case .goodbye(let text):
          state.withLock {
            $0.received.append(decoded)
            $0.closeReason = "goodbye(\(text))"
          }
          return
        default:
          state.withLock { $0.received.append(decoded) }
        }
      } catch let error as HostileTransport.Closed {
        reason = error.reason
        return
      } catch {
        reason = "\(error)"
        return
      }
    }
  }
}

/// The hostile node's socket: plaintext or TLS bytes, WebSocket framing on top.
// @unchecked: created by `link` and then handed to the I/O thread, the only one that touches it afterwards.
final class HostileTransport: @unchecked Sendable {
  struct Closed: Error {
    let reason: String
  }

  private let fd: Int32
  private var context: OpaquePointer?
  private var ssl: OpaquePointer?
  private var buffer: [UInt8] = []
  private var fragments: [UInt8] = []

  init(fd: Int32, tls: Bool, directory: String) throws {
    self.fd = fd
    guard tls else { return }
    guard let context = ctesttls_client_context(directory + "/cert.pem", directory + "/key.pem") else {
      throw TestSupportError.io("cannot make a TLS client context for the hostile node")
    }
    self.context = context
    // The handshake blocks; the receive timeout (50 ms) would cut it short, so it runs without one.
    var none = timeval(tv_sec: 10, tv_usec: 0)
    _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, socklen_t(MemoryLayout<timeval>.size))
    guard let ssl = ctesttls_connect(context, fd) else {
      throw TestSupportError.connectionFailed("the TLS handshake of the hostile node failed")
    }
    var short = timeval(tv_sec: 0, tv_usec: 50_000)
    _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &short, socklen_t(MemoryLayout<timeval>.size))
    self.ssl = ssl
  }

  func close() {
    ctesttls_free(ssl)
    ssl = nil
    ctesttls_context_free(context)
    context = nil
    Glibc.close(fd)
  }

  /// The HTTP upgrade to a mesh link.
  func upgrade(host: String, port: Int, deadline: Deadline) throws {
    let key = Data((0..<16).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
    let request =
      "GET /mesh HTTP/1.1\r\nHost: \(host):\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      + "Sec-WebSocket-Key: \(key)\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: meshgate-node.v1\r\n\r\n"
    try write(Array(request.utf8))
    while true {
      if let end = headEnd() {
        let head = String(decoding: buffer[..<end], as: UTF8.self)
        buffer.removeSubrange(..<(end + 4))
        guard head.hasPrefix("HTTP/1.1 101") else {
          throw TestSupportError.httpStatus(
            Int(head.dropFirst(9).prefix(3)) ?? 0, "mesh upgrade refused: \(head.prefix(200))")
        }
        guard head.lowercased().contains("sec-websocket-protocol: meshgate-node.v1") else {
          throw TestSupportError.protocolViolation("the mesh upgrade did not select meshgate-node.v1: \(head)")
        }
        return
      }
      if deadline.hasPassed { throw TestSupportError.timeout("no answer to the hostile node's mesh upgrade") }
      _ = try fill()
    }
  }

  private func headEnd() -> Int? {
    guard buffer.count >= 4 else { return nil }
    for index in 0...(buffer.count - 4)
    where buffer[index] == 13 && buffer[index + 1] == 10 && buffer[index + 2] == 13 && buffer[index + 3] == 10 {
      return index
    }
    return nil
  }

  func sendMessage(_ payload: [UInt8]) throws {
    try write(WebSocketClient.encodeFrame(opcode: WebSocketOpcode.binary.rawValue, payload: payload))
  }

  func sendClose() throws {
    try write(WebSocketClient.encodeFrame(opcode: WebSocketOpcode.close.rawValue, payload: [0x03, 0xE8]))
  }

  /// One complete binary message, or nil when none arrived within the receive timeout.
  func receiveMessage() throws -> [UInt8]? {
    while true {
      if let message = try parseFrame() {
        if let message { return message }
        continue
      }
      guard try fill() else { return nil }
    }
  }

  /// nil: need more bytes; .some(nil): a control frame was handled; .some(bytes): a whole message.
  private func parseFrame() throws -> [UInt8]?? {
    guard buffer.count >= 2 else { return nil }
    let opcode = buffer[0] & 0x0F
    let fin = buffer[0] & 0x80 != 0
    var length = Int(buffer[1] & 0x7F)
    var offset = 2
    if length == 126 {
      guard buffer.count >= 4 else { return nil }
      length = Int(buffer[2]) << 8 | Int(buffer[3])
      offset = 4
    } else if length == 127 {
      guard buffer.count >= 10 else { return nil }
      length = buffer[2..<10].reduce(0) { $0 << 8 | Int($1) }
      offset = 10
    }
    guard buffer.count >= offset + length else { return nil }
    let payload = Array(buffer[offset..<(offset + length)])
    buffer.removeSubrange(..<(offset + length))
    switch opcode {
    case 0x8:
      let code = payload.count >= 2 ? Int(payload[0]) << 8 | Int(payload[1]) : 1005
      throw Closed(reason: "WebSocket close \(code) \(String(decoding: payload.dropFirst(2), as: UTF8.self))")
    case 0x9:
      try write(WebSocketClient.encodeFrame(opcode: WebSocketOpcode.pong.rawValue, payload: payload))
      return .some(nil)
    case 0xA:
      return .some(nil)
    default:
      fragments += payload
      guard fin else { return .some(nil) }
      defer { fragments.removeAll() }
      return .some(fragments)
    }
  }

  /// Reads what is there (waiting up to the socket's receive timeout); false when nothing came.
  private func fill() throws -> Bool {
    var chunk = [UInt8](repeating: 0, count: 65536)
    let count: Int
    if let ssl {
      count = Int(chunk.withUnsafeMutableBytes { ctesttls_read(ssl, $0.baseAddress!, Int32($0.count)) })
      if count == -1 { return false }
      if count == -2 { throw Closed(reason: "TLS read failed") }
    } else {
      count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, 0) }
      if count < 0 {
        if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { return false }
        throw Closed(reason: errnoMessage("recv"))
      }
    }
    if count == 0 { throw Closed(reason: "the node closed the connection") }
    buffer += chunk[..<count]
    return true
  }

  private func write(_ bytes: [UInt8]) throws {
    if let ssl {
      let ok = bytes.withUnsafeBytes { ctesttls_write_all(ssl, $0.baseAddress!, Int32($0.count)) }
      if ok != 1 { throw Closed(reason: "TLS write failed") }
      return
    }
    var offset = 0
    while offset < bytes.count {
      let sent = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
      if sent < 0 {
        if errno == EINTR || errno == EAGAIN { continue }
        throw Closed(reason: errnoMessage("send"))
      }
      offset += sent
    }
  }
}
