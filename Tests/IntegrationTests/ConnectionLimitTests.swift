import Foundation
import MeshgateTestSupport
import Testing

/// File descriptors, connection cap, request heads, stalled bodies and upgrade refusals, on a real node.
@Suite(.timeLimit(.minutes(3)))
struct ConnectionLimitTests {
  @Test func aNodeAtItsFileLimitStaysUpAndAnswersHealthz() async throws {
    // 256 open files at most, and twice that many browser WebSockets.
    let node = try NodeProcess(wrapper: ["prlimit", "--nofile=256:256"])
    defer { node.cleanup() }
    try node.start()
    let peer = try node.createPeer("crowd")
    let port = node.port
    let (opened, refused) = try await onDedicatedThread { () -> (Int, Int) in
      var sockets: [WebSocketClient] = []
      defer { sockets.forEach { $0.abort() } }
      var refused = 0
      var silent = 0
      for _ in 0..<512 {
        do {
          sockets.append(try WebSocketClient(port: port, path: "/api/v1/ws?token=\(peer.token)", timeout: .seconds(3)))
        } catch TestSupportError.httpStatus(let status, _) where status == 503 {
          refused += 1
        } catch {
          // Closed unanswered (over the overflow too), or no answer at all; a node that stops answering fails below.
          silent += 1
          if silent > 40 { break }
        }
      }
      // Still serving while the sockets are held: health check and an API request on a refused connection.
      let health = try HTTPClient.get(port: port, path: "/healthz", timeout: .seconds(10))
      guard health.status == 200 else { throw TestSupportError.unexpectedMessage("healthz: \(health.status)") }
      return (sockets.count, refused)
    }
    #expect(opened > 100, "only \(opened) sockets were served")
    #expect(refused > 0, "no connection was answered 503")
    #expect(node.isRunning)
    #expect(try HTTPClient.get(port: port, path: "/healthz").status == 200)
    #expect(try (node.metric("meshgate_connections_refused_total") ?? 0) > 0)
    let log = node.stderrText()
    #expect(log.utf8.count < 2 << 20, "the log grew to \(log.utf8.count) bytes")
    #expect(!log.contains("accept: errno"), "the node ran out of descriptors")
  }

  @Test func theSoftFileLimitIsRaisedToTheHardLimit() async throws {
    let node = try NodeProcess(wrapper: ["prlimit", "--nofile=256:4096"])
    defer { node.cleanup() }
    try node.start()
    let pid = try #require(node.pid)
    let limits = try String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)
    let line = try #require(limits.split(separator: "\n").first { $0.hasPrefix("Max open files") })
    let numbers = line.split(separator: " ").compactMap { Int($0) }
    #expect(numbers == [4096, 4096], "\(line)")
    // 4096 less a reserve of 512, less 64 overflow slots.
    #expect(try node.metric("meshgate_connections_max") == 3520)
  }

  @Test func aRefusedWebSocketUpgradeIsAnHTTP11JSONError() async throws {
    try await withNode { node in
      let request =
        "GET /api/v1/ws HTTP/1.1\r\nHost: 127.0.0.1:\(node.port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
      let answer = String(decoding: try HTTPClient.raw(port: node.port, bytes: Array(request.utf8)), as: UTF8.self)
      #expect(answer.hasPrefix("HTTP/1.1 401 Unauthorized\r\n"), "got: \(answer.prefix(300))")
      #expect(answer.lowercased().contains("content-type: application/json"))
      let body = try #require(answer.range(of: "\r\n\r\n").map { answer[$0.upperBound...] })
      let object = try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any]
      let error = try #require(object?["error"] as? [String: Any])
      #expect(error["code"] as? String != nil)
      #expect((error["message"] as? String)?.isEmpty == false)
    }
  }

  @Test func sixKiBOfCookiesLoadTheDashboardAndAnOversizedHeadIs431() async throws {
    try await withNode { node in
      let cookies = (0..<6).map { "c\($0)=\(String(repeating: "v", count: 1000))" }.joined(separator: "; ")
      let dashboard = try HTTPClient.get(port: node.port, path: "/", headers: [("Cookie", cookies)])
      #expect(dashboard.status == 200)
      #expect(dashboard.text.contains("<html") || dashboard.text.contains("<!doctype"))
      let health = try HTTPClient.get(port: node.port, path: "/healthz", headers: [("Cookie", cookies)])
      #expect(health.status == 200)
      let tooLarge = try HTTPClient.get(
        port: node.port, path: "/healthz", headers: [("Cookie", "big=" + String(repeating: "x", count: 20_000))])
      #expect(tooLarge.status == 431)
      #expect(errorCode(tooLarge) == "request_header_fields_too_large")
      #expect(errorMessage(tooLarge)?.contains("16384 bytes") == true)
    }
  }

  /// What docs/operations.md ("Request limits") and docs/api.md say of heads libwebsockets' parser handles before the node sees them:
  /// headers it knows by name count towards 16 KiB (431), others only towards the 64 KiB buffer (served, then closed
  /// unanswered past it); an invalid escape gets its 403 page and a `%00` no answer.
  @Test func headsThatOnlyTheParserSeesAreAnsweredAsDocumented() async throws {
    try await withNode { node in
      func answer(_ head: String) throws -> String {
        let bytes = try HTTPClient.raw(port: node.port, bytes: Array(head.utf8), timeout: .seconds(10))
        return String(decoding: bytes.prefix(64), as: UTF8.self).components(separatedBy: "\r\n").first ?? ""
      }
      let host = "Host: 127.0.0.1:\(node.port)\r\n"
      func padded(_ name: String, _ count: Int) -> String {
        "GET /healthz HTTP/1.1\r\n\(host)\(name): \(String(repeating: "p", count: count))\r\n\r\n"
      }
      let known = try answer(padded("User-Agent", 20_000))
      #expect(known.hasSuffix(" 431 Request Header Fields Too Large") || known.hasSuffix(" 431 "), "\(known)")
      let other = try answer(padded("X-Big", 20_000))
      #expect(other.hasPrefix("HTTP/1.1 200"), "\(other)")
      let huge = try answer(padded("X-Big", 70_000))
      #expect(huge.isEmpty, "\(huge)")
      #expect(try answer("GET /healthz?x=%zz HTTP/1.1\r\n\(host)\r\n").contains(" 403"))
      #expect(try answer("GET /healthz?x=%00 HTTP/1.1\r\n\(host)\r\n").isEmpty)
      // The node is unharmed.
      #expect(try HTTPClient.get(port: node.port, path: "/healthz").status == 200)
    }
  }

  @Test func aStalledRequestBodyIsClosedAfterTheBodyTimeout() async throws {
    try await withNode(arguments: ["--body-timeout", "2"]) { node in
      let connection = try HTTPConnection(port: node.port)
      defer { connection.close() }
      try connection.sendRaw(
        Array(
          ("POST /api/v1/peers HTTP/1.1\r\nHost: 127.0.0.1:\(node.port)\r\nContent-Type: application/json\r\n"
            + "Content-Length: 100\r\n\r\n{\"displayName\":").utf8))
      #expect(try connection.isClosedByPeer(within: .seconds(20)))
      #expect(try node.metric("meshgate_body_timeouts_total") == 1)
    }
  }

  /// With the connection cap and its overflow slots held, every further connection is closed at once: the warning
  /// saying so is written once per 10 s with the count it suppressed, not once per connection.
  @Test func connectionsRefusedAtTheCapLogOneLineNotOnePerConnection() async throws {
    try await withNode(arguments: ["--max-connections", "16"]) { node in
      let port = node.port
      let (refusedLines, attempts) = try await onDedicatedThread { () -> (Int, Int) in
        // Hold the served and overflow slots with idle connections (the node has at most 64 overflow slots).
        var held: [HTTPConnection] = []
        defer { held.forEach { $0.close() } }
        for _ in 0..<(16 + 64 + 8) { held.append(try HTTPConnection(port: port)) }
        var attempts = 0
        let until = ContinuousClock.now + .seconds(2)
        while ContinuousClock.now < until {
          if let connection = try? HTTPConnection(port: port, timeout: .seconds(1)) { connection.close() }
          attempts += 1
        }
        return (node.stderrText().components(separatedBy: "Connection closed at once").count - 1, attempts)
      }
      #expect(attempts > 50, "only \(attempts) connections were tried")
      // The held connections are closing: /metrics is served once the node has seen them go.
      var refused = 0.0
      try await eventuallyAsync(timeout: .seconds(20), message: "/metrics answers") {
        guard let value = try? node.metric("meshgate_connections_refused_total") else { return false }
        refused = value ?? 0
        return true
      }
      #expect(refused > 20, "\(refused) connections refused")
      #expect(refusedLines >= 1 && refusedLines <= 2, "\(refusedLines) lines for \(refused) refused connections")
    }
  }

  /// A request body must keep a minimum rate (docs/security.md): a body trickled a byte every 2 s (never idle for the
  /// body timeout) is answered 408 and closed, while a slow but real upload at 600 bytes a second completes.
  @Test func aTrickledBodyIsClosedWithRequestTimeoutButASlowUploadCompletes() async throws {
    try await withNode { node in
      let port = node.port
      let trickle = Task {
        try await onDedicatedThread { () -> String in
          let connection = try HTTPConnection(port: port)
          defer { connection.close() }
          try connection.sendRaw(
            Array(
              ("POST /api/v1/peers HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nContent-Type: application/json\r\n"
                + "Content-Length: 1000\r\n\r\n{").utf8))
          let until = ContinuousClock.now + .seconds(40)
          while ContinuousClock.now < until {
            Thread.sleep(forTimeInterval: 2)
            do {
              try connection.sendRaw([UInt8(ascii: " ")], timeout: .seconds(2))
            } catch {
              break
            }
            if try connection.isClosedByPeer() { break }
          }
          return (try? connection.readResponse(method: "POST", timeout: .seconds(2)))?.description ?? "no answer"
        }
      }
      let slow = Task {
        try await onDedicatedThread { () -> Int in
          // 12 s at about 600 bytes a second: spaces inside a JSON object, then its field.
          let tail = Array(#""displayName":"slow"}"#.utf8)
          let padding = 7_200
          let connection = try HTTPConnection(port: port)
          defer { connection.close() }
          try connection.sendRaw(
            Array(
              ("POST /api/v1/peers HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nContent-Type: application/json\r\n"
                + "Content-Length: \(1 + padding + tail.count)\r\n\r\n{").utf8))
          for _ in 0..<(padding / 60) {
            try connection.sendRaw([UInt8](repeating: UInt8(ascii: " "), count: 60))
            Thread.sleep(forTimeInterval: 0.1)
          }
          try connection.sendRaw(tail)
          return try connection.readResponse(method: "POST", timeout: .seconds(10)).status
        }
      }
      let trickled = try await trickle.value
      #expect(trickled.contains("408"), "the trickled body got: \(trickled)")
      #expect(try await slow.value == 201)
      #expect(node.stderrText().contains("Request body too slow"))
    }
  }
}
