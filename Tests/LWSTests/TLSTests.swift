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

  func bodyLimit(for head: HTTPRequestHead) -> Int { 1000 }

  func handle(_ request: HTTPRequest) {
    let body = Array((request.head.isTLS ? "tls" : "plain").utf8)
    server.respond(to: request.id, with: LWS.HTTPResponse(status: 200, contentType: "text/plain", body: body))
  }

  func requestClosed(_ id: RequestID) {}
  func shouldAccept(webSocket head: HTTPRequestHead) -> WebSocketDecision { .accept }

  func webSocketOpened(_ id: WebSocketID, head: HTTPRequestHead) {
    let security = server.transportSecurity(of: id)
    seen.withLock { $0["accepted"] = security }
  }

  func webSocketReceived(_ id: WebSocketID, _ message: LWS.WebSocketMessage) {}
  func webSocketClosed(_ id: WebSocketID) {}

  func webSocketConnected(_ id: WebSocketID) {
    let security = server.transportSecurity(of: id)
    seen.withLock { $0["dialled"] = security }
  }

  func webSocketConnectFailed(_ id: WebSocketID, reason: String) {
    failures.withLock { $0.append(reason) }
  }

  func errorResponse(status: Int, message: String, head: HTTPRequestHead) -> LWS.HTTPResponse {
    LWS.HTTPResponse(status: status)
  }
}

/// A running server with `tls`, its delegate, and a way to stop it.
private final class RunningServer {
  let server: Server
  let delegate = TLSDelegate()
  private let finished = DispatchSemaphore(value: 0)

  init(tls: TLSConfiguration?) throws {
    server = try Server(
      configuration: ServerConfiguration(bindAddress: "127.0.0.1", port: 0, subprotocols: ["tls-test.v1"], tls: tls))
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

@Suite(.timeLimit(.minutes(1)))
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

  @Test func aTLSDialPresentsAndReceivesCertificates() async throws {
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let (certificateA, tlsA) = try certificate("a")
    let (certificateB, tlsB) = try certificate("b")
    let a = try RunningServer(tls: tlsA)
    defer { a.stop() }
    let b = try RunningServer(tls: tlsB)
    defer { b.stop() }
    let port = a.server.port
    let server = b.server
    server.execute {
      _ = server.connect(host: "127.0.0.1", port: port, path: "/x", subprotocol: "tls-test.v1", tls: true)
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
    let a = try RunningServer(tls: tlsA)
    defer { a.stop() }
    let b = try RunningServer(tls: nil)
    defer { b.stop() }
    let port = a.server.port
    let server = b.server
    server.execute { _ = server.connect(host: "127.0.0.1", port: port, path: "/x", subprotocol: "tls-test.v1") }
    try await eventuallyAsync(timeout: .seconds(30), message: "both ends saw the connection") {
      a.delegate.seen.withLock { $0["accepted"] } != nil && b.delegate.seen.withLock { $0["dialled"] } != nil
    }
    #expect(a.delegate.seen.withLock { $0["accepted"] } == TransportSecurity(encrypted: false, peerCertificate: nil))
    #expect(b.delegate.seen.withLock { $0["dialled"] } == TransportSecurity(encrypted: false, peerCertificate: nil))
  }
}
