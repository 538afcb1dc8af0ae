import Crypto
import Foundation
import LWS
import MeshgateTestSupport
import Synchronization
import Testing

/// Records what each WebSocket saw of its transport. Service-thread only, like every delegate; the Mutex lets the
/// test thread read the results.
final class TLSDelegate: ServerDelegate {
  unowned(unsafe) var server: Server!
  let seen = Mutex<[String: TransportSecurity]>([:])
  let failures = Mutex<[String]>([])
  /// Binary messages received, in order; and the id of the connection this server dialled.
  let received = Mutex<[[UInt8]]>([])
  let dialledID = Mutex<WebSocketID?>(nil)
  let acceptedID = Mutex<WebSocketID?>(nil)
  /// Pause reading after every this many messages, and resume on the next service pass (0: never).
  let pauseEvery = Mutex(0)
  /// Leave an error on the service thread's OpenSSL error queue after each message received.
  let leaveOpenSSLErrors = Mutex(false)
  let staleErrorsLeft = Mutex(0)
  let closed = Mutex(0)

  func bodyPolicy(for head: HTTPRequestHead) -> RequestBodyPolicy { RequestBodyPolicy(limit: 1000) }

  func handle(_ request: HTTPRequest) {
    let body = Array((request.head.isTLS ? "tls" : "plain").utf8)
    server.respond(to: request.id, with: LWS.HTTPResponse(status: 200, contentType: "text/plain", body: body))
  }

  func requestClosed(_ id: RequestID) {}
  func shouldAccept(webSocket head: HTTPRequestHead) -> WebSocketDecision { .accept }

  func webSocketOpened(_ id: WebSocketID, head: HTTPRequestHead) {
    let security = server.transportSecurity(of: id)
    seen.withLock { $0["accepted"] = security }
    acceptedID.withLock { $0 = id }
  }

  func webSocketReceived(_ id: WebSocketID, _ message: LWS.WebSocketMessage) {
    guard case .binary(let bytes) = message else { return }
    let count = received.withLock {
      $0.append(bytes)
      return $0.count
    }
    if leaveOpenSSLErrors.withLock({ $0 }) && OpenSSLErrorQueue.leaveStaleError() {
      staleErrorsLeft.withLock { $0 += 1 }
    }
    let every = pauseEvery.withLock { $0 }
    if every > 0 && count % every == 0 {
      server.setReceiveFlow(id, enabled: false)
      let server = self.server!
      server.execute { server.setReceiveFlow(id, enabled: true) }
    }
  }
  func webSocketClosed(_ id: WebSocketID) { closed.withLock { $0 += 1 } }

  func webSocketConnected(_ id: WebSocketID) {
    let security = server.transportSecurity(of: id)
    seen.withLock { $0["dialled"] = security }
    dialledID.withLock { $0 = id }
  }

  func webSocketConnectFailed(_ id: WebSocketID, reason: String) {
    failures.withLock { $0.append(reason) }
  }

  func errorResponse(status: Int, message: String, head: HTTPRequestHead) -> LWS.HTTPResponse {
    LWS.HTTPResponse(status: status)
  }
}

/// A running server with `tls`, its delegate, and a way to stop it.
final class RunningServer {
  let server: Server
  let delegate = TLSDelegate()
  private let finished = DispatchSemaphore(value: 0)

  init(tls: TLSConfiguration?, bindAddress: String = "127.0.0.1") throws {
    server = try Server(
      configuration: ServerConfiguration(bindAddress: bindAddress, port: 0, subprotocols: ["tls-test.v1"], tls: tls))
    delegate.server = server
    server.delegate = delegate
    let server = self.server
    let finished = self.finished
    Thread {
      server.run()
      finished.signal()
    }.start()
  }

  func stop() {
    server.stop()
    finished.wait()
  }
}

extension TLSTests {
  /// Whether a TCP socket can bind `::1` here (IPv6 can be switched off on a machine).
  static let hasIPv6Loopback: Bool = {
    let fd = socket(AF_INET6, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var address = sockaddr_in6()
    address.sin6_family = sa_family_t(AF_INET6)
    address.sin6_addr = in6addr_loopback
    return withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) == 0
      }
    }
  }()
}

/// Serialized: lws 4.1.6 keeps the OpenSSL ex-data indexes it finds its connections by in process-wide variables
/// and takes new ones whenever a TLS context is created, so a TLS server created while another one is mid-handshake
/// makes the first one's verify callback read an empty slot and crash (seen as SIGSEGV under X509_verify_cert). A node
/// process has one context; tests that run several in one process must not create them concurrently.
@Suite(.serialized, .timeLimit(.minutes(1)))
struct TLSTests {
  let directory = NSTemporaryDirectory() + "meshgate-lws-tls-\(UUID().uuidString)"

  func certificate(_ name: String) throws -> (Certificate, TLSConfiguration) {
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let (cert, key) = (directory + "/\(name).pem", directory + "/\(name).key")
    let certificate = try Certificate.createSelfSigned(certificatePath: cert, keyPath: key, commonName: name)
    return (
      certificate,
      TLSConfiguration(
        certificatePath: cert, keyPath: key, requestClientCertificates: true, clientCertificatePath: cert,
        clientKeyPath: key)
    )
  }

  @Test func oneTLSPortServesPlainHTTPAndHTTPS() throws {
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let (_, tls) = try certificate("a")
    let running = try RunningServer(tls: tls)
    defer { running.stop() }
    let plain = try HTTPClient.get(port: running.server.port, path: "/")
    #expect(plain.status == 200)
    #expect(plain.text == "plain")
    let output = try runCommand(
      "/usr/bin/curl", ["-sk", "--max-time", "10", "https://127.0.0.1:\(running.server.port)/"]
    )
    .stdout
    #expect(output == "tls", "HTTP/1.1 over TLS (no h2 through ALPN)")
  }

  /// Starts server `a` with `tlsA` and server `b` with `tlsB`, then has `b` dial `a` (over TLS when `b` has a
  /// certificate). The caller stops both.
  private func dial(to tlsA: TLSConfiguration, from tlsB: TLSConfiguration?) throws -> (
    a: RunningServer, b: RunningServer
  ) {
    let a = try RunningServer(tls: tlsA)
    let b: RunningServer
    do { b = try RunningServer(tls: tlsB) } catch {
      a.stop()
      throw error
    }
    let port = a.server.port
    let server = b.server
    let tls = tlsB != nil
    server.execute {
      _ = server.connect(host: "127.0.0.1", port: port, path: "/x", subprotocol: "tls-test.v1", tls: tls)
    }
    return (a, b)
  }

  /// Servers `a` and `b` (b over TLS with `tls`), `b` having dialled `a` and both ends seeing the connection open.
  /// The caller stops both.
  private func acceptedDial(tls: Bool) async throws -> (a: RunningServer, b: RunningServer) {
    let (_, tlsA) = try certificate("a")
    let (_, tlsB) = try certificate("b")
    let (a, b) = try dial(to: tlsA, from: tls ? tlsB : nil)
    do {
      try await eventuallyAsync(timeout: .seconds(10), message: "the dial is accepted") {
        a.delegate.acceptedID.withLock { $0 } != nil && b.delegate.dialledID.withLock { $0 } != nil
      }
    } catch {
      b.stop()
      a.stop()
      throw error
    }
    return (a, b)
  }

  /// What the accepting side sends reaches the side that dialled whole and in order: every frame-length form, many
  /// frames per read and frames across reads, with the dialler pausing its reading every few messages. Over TLS and
  /// plain.
  @Test(arguments: [true, false])
  func messagesToTheDiallerArriveWholeAndInOrder(tls: Bool) async throws {
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let (a, b) = try await acceptedDial(tls: tls)
    defer {
      b.stop()
      a.stop()
    }
    b.delegate.pauseEvery.withLock { $0 = 7 }
    let id = try #require(a.delegate.acceptedID.withLock { $0 })
    var generator = SystemRandomNumberGenerator()
    let sizes =
      [0, 1, 125, 126, 127, 65_535, 65_536, 300_000]
      + (0..<300).map { _ in Int.random(in: 0...3_000, using: &generator) }
    let messages = sizes.enumerated().map { index, size in
      (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ index) }
    }
    let server = a.server
    for message in messages {
      server.execute { _ = server.send(OutboundMessage(bytes: message, binary: true), to: id) }
    }
    try await eventuallyAsync(timeout: .seconds(30), message: "every message arrived") {
      b.delegate.received.withLock { $0.count } >= messages.count
    }
    let received = b.delegate.received.withLock { $0 }
    #expect(received.count == messages.count)
    #expect(received == messages)
  }

  /// OpenSSL's error queue is per thread, and lws's own TLS connections leave errors in it. A dialled TLS connection
  /// reads its session's state with `SSL_get_error`, which looks at that queue: a stale error from elsewhere on the
  /// service thread must not end it (it ended links ~300 ms after a duplicate link was closed).
  @Test func aStaleOpenSSLErrorOnTheServiceThreadDoesNotEndADialledConnection() async throws {
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let (a, b) = try await acceptedDial(tls: true)
    defer {
      b.stop()
      a.stop()
    }
    b.delegate.leaveOpenSSLErrors.withLock { $0 = true }
    let id = try #require(a.delegate.acceptedID.withLock { $0 })
    let server = a.server
    for index in 0..<20 {
      // One message per pass on the sender: each is read by its own receive, after the last one left an error.
      server.execute { _ = server.send(OutboundMessage(bytes: [UInt8(index)], binary: true), to: id) }
      try await eventuallyAsync(timeout: .seconds(10), message: "message \(index) arrived") {
        b.delegate.received.withLock { $0.count } > index || b.delegate.closed.withLock { $0 } > 0
      }
    }
    #expect(b.delegate.closed.withLock { $0 } == 0)
    #expect(b.delegate.received.withLock { $0 } == (0..<20).map { [UInt8($0)] })
    #expect(b.delegate.staleErrorsLeft.withLock { $0 } == 20)
  }

  /// A close from either end reaches the other at once through the close handshake: the dialler answers the
  /// accepting side's close frame, and the accepting side answers the dialler's (the dialler gives up waiting for that
  /// answer only after 5 s). Over TLS and plain.
  @Test(arguments: [(true, true), (true, false), (false, true), (false, false)])
  func aCloseFromEitherEndReachesTheOtherAtOnce(tls: Bool, dialerCloses: Bool) async throws {
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let (a, b) = try await acceptedDial(tls: tls)
    defer {
      b.stop()
      a.stop()
    }
    let closer = dialerCloses ? b : a
    let id = try #require(dialerCloses ? b.delegate.dialledID.withLock { $0 } : a.delegate.acceptedID.withLock { $0 })
    let start = ContinuousClock.now
    let server = closer.server
    server.execute { _ = server.close(id, code: 4001, reason: "done here") }
    try await eventuallyAsync(timeout: .seconds(10), message: "both ends saw the close") {
      a.delegate.closed.withLock { $0 } == 1 && b.delegate.closed.withLock { $0 } == 1
    }
    #expect(ContinuousClock.now - start < .seconds(4), "closed only by a timeout")
  }

  /// A server listening on IPv4 only (lws then has IPv6 off for its whole context) still dials an IPv6 address: the
  /// `--peer [fe80::1]:8080` form the help shows, on a node with the default `--bind 0.0.0.0`.
  @Test(.enabled(if: TLSTests.hasIPv6Loopback, "this machine has no IPv6 loopback (::1)"))
  func aServerListeningOnIPv4DialsAnIPv6Address() async throws {
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let (_, tlsA) = try certificate("a")
    let (_, tlsB) = try certificate("b")
    let a = try RunningServer(tls: tlsA, bindAddress: "::1")
    defer { a.stop() }
    let b = try RunningServer(tls: tlsB)
    defer { b.stop() }
    let port = a.server.port
    let server = b.server
    server.execute {
      _ = server.connect(host: "[::1]", port: port, path: "/x", subprotocol: "tls-test.v1", tls: true)
    }
    try await eventuallyAsync(timeout: .seconds(10), message: "the dial over IPv6 is accepted") {
      (a.delegate.acceptedID.withLock { $0 } != nil && b.delegate.dialledID.withLock { $0 } != nil)
        || !b.delegate.failures.withLock { $0.isEmpty }
    }
    #expect(b.delegate.failures.withLock { $0 }.isEmpty)
    let id = try #require(a.delegate.acceptedID.withLock { $0 })
    let accepting = a.server
    accepting.execute { _ = accepting.send(OutboundMessage(bytes: [7, 8, 9], binary: true), to: id) }
    try await eventuallyAsync(timeout: .seconds(10), message: "a message over the IPv6 link") {
      b.delegate.received.withLock { $0 } == [[7, 8, 9]]
    }
  }

  @Test func aTLSDialPresentsAndReceivesCertificates() async throws {
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let (certificateA, tlsA) = try certificate("a")
    let (certificateB, tlsB) = try certificate("b")
    let (a, b) = try dial(to: tlsA, from: tlsB)
    defer {
      b.stop()
      a.stop()
    }
    try await eventuallyAsync(timeout: .seconds(30), message: "both ends saw the connection") {
      a.delegate.seen.withLock { $0["accepted"] } != nil && b.delegate.seen.withLock { $0["dialled"] } != nil
    }
    let accepted = try #require(a.delegate.seen.withLock { $0["accepted"] })
    let dialled = try #require(b.delegate.seen.withLock { $0["dialled"] })
    #expect(accepted.encrypted && dialled.encrypted)
    #expect(accepted.peerCertificate == certificateB.der, "the dialler presented its client certificate")
    #expect(dialled.peerCertificate == certificateA.der, "the server presented its certificate")
    #expect(b.delegate.failures.withLock { $0 }.isEmpty)
  }

  @Test func aPlaintextDialReportsNoEncryption() async throws {
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let (_, tlsA) = try certificate("a")
    let (a, b) = try dial(to: tlsA, from: nil)
    defer {
      b.stop()
      a.stop()
    }
    try await eventuallyAsync(timeout: .seconds(30), message: "both ends saw the connection") {
      a.delegate.seen.withLock { $0["accepted"] } != nil && b.delegate.seen.withLock { $0["dialled"] } != nil
    }
    #expect(a.delegate.seen.withLock { $0["accepted"] } == TransportSecurity(encrypted: false, peerCertificate: nil))
    #expect(b.delegate.seen.withLock { $0["dialled"] } == TransportSecurity(encrypted: false, peerCertificate: nil))
  }

  @Test func singleUseMessagesFromADiallerArriveIntactBesideCopiedOnes() async throws {
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let (_, tlsA) = try certificate("a")
    let (_, tlsB) = try certificate("b")
    let (a, b) = try dial(to: tlsA, from: tlsB)
    defer {
      b.stop()
      a.stop()
    }
    let server = b.server
    try await eventuallyAsync(timeout: .seconds(30), message: "the dial completed") {
      b.delegate.dialledID.withLock { $0 } != nil
    }
    let id = try #require(b.delegate.dialledID.withLock { $0 })
    // Every header length (7-bit, 16-bit, 64-bit) and payloads that are not a multiple of 8 bytes; the dialler masks
    // single-use messages itself and copies the others for lws to mask.
    let sizes = [0, 1, 7, 125, 126, 1000, 65535, 65536, 262_144 + 51]
    let payloads = sizes.map { size in (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ size) } }
    server.execute {
      for (index, payload) in payloads.enumerated() {
        let message =
          index.isMultiple(of: 2)
          ? OutboundMessage.filled(count: payload.count, binary: true, singleUse: true) { buffer in
            payload.withUnsafeBytes { buffer.copyMemory(from: $0) }
            return true
          }! : OutboundMessage(bytes: payload, binary: true)
        _ = server.send(message, to: id)
      }
    }
    try await eventuallyAsync(timeout: .seconds(30), message: "every message arrived") {
      a.delegate.received.withLock { $0.count } == payloads.count
    }
    #expect(a.delegate.received.withLock { $0 } == payloads)
  }

  /// Runs `openssl` with `arguments` and `input` on standard input; returns its exit status and all its output.
  private func openssl(_ arguments: [String], input: String = "Q\n") throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
    process.arguments = ["20", "openssl"] + arguments
    let output = Pipe()
    let stdin = Pipe()
    process.standardOutput = output
    process.standardError = output
    process.standardInput = stdin
    try process.run()
    stdin.fileHandleForWriting.write(Data(input.utf8))
    try? stdin.fileHandleForWriting.close()
    let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    return (process.terminationStatus, text)
  }

  @Test func tls12HandshakesOfferingOnlyCBCSuitesFailAndAEADOnesWork() throws {
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let (_, tls) = try certificate("a")
    let running = try RunningServer(tls: tls)
    defer { running.stop() }
    let connect = "127.0.0.1:\(running.server.port)"
    for suite in ["ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA", "ECDHE-ECDSA-AES128-SHA256"] {
      let result = try openssl(["s_client", "-connect", connect, "-tls1_2", "-cipher", suite])
      #expect(result.status != 0, "\(suite) was accepted:\n\(result.output.suffix(600))")
      #expect(!result.output.contains("Cipher is \(suite)"))
    }
    for suite in ["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"] {
      let result = try openssl(["s_client", "-connect", connect, "-tls1_2", "-cipher", suite])
      #expect(result.output.contains("Cipher is \(suite)"), "\(suite) was refused:\n\(result.output.suffix(600))")
    }
    let old = try openssl(["s_client", "-connect", connect, "-tls1_1", "-cipher", "ALL:@SECLEVEL=0"])
    #expect(old.output.contains("Cipher is (NONE)"), "TLS 1.1 was accepted:\n\(old.output.suffix(600))")
  }

  @Test func outgoingTLSLinksOfferOnlyAEADSuites() async throws {
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let (_, tls) = try certificate("b")
    // A TLS server that speaks only CBC suites: the dialler must find no suite in common.
    let port = try freeLoopbackPort()
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
    process.arguments = [
      "s_server", "-accept", "127.0.0.1:\(port)", "-cert", directory + "/b.pem", "-key",
      directory + "/b.key", "-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES128-SHA256",
    ]
    let log = directory + "/s_server.log"
    _ = FileManager.default.createFile(atPath: log, contents: nil)
    let output = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
    process.standardOutput = output
    process.standardError = output
    // s_server quits at the end of its standard input: keep it open.
    let input = Pipe()
    process.standardInput = input
    try process.run()
    defer {
      // s_server ignores SIGTERM while it serves.
      if process.isRunning { kill(process.processIdentifier, SIGKILL) }
      try? input.fileHandleForWriting.close()
    }
    try eventually(timeout: .seconds(20), message: "s_server listens") {
      (try? HTTPConnection(port: port, timeout: .milliseconds(200))).map {
        _ = $0; return true
      } ?? false
    }
    let dialler = try RunningServer(tls: tls)
    defer { dialler.stop() }
    let server = dialler.server
    server.execute {
      _ = server.connect(host: "127.0.0.1", port: port, path: "/x", subprotocol: "tls-test.v1", tls: true)
    }
    try await eventuallyAsync(timeout: .seconds(30), message: "the dial failed") {
      dialler.delegate.failures.withLock { !$0.isEmpty } || dialler.delegate.seen.withLock { $0["dialled"] } != nil
    }
    #expect(dialler.delegate.seen.withLock { $0["dialled"] } == nil)
    // s_server logs the failed handshake before the dialler hears of it.
    try eventually(timeout: .seconds(10), message: "s_server logged the handshake") {
      ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("no shared cipher")
    }
  }
}
