import Foundation
import LWS
import MeshgateTestSupport
import Synchronization
import Testing

/// A connection the server dials, against a scripted server that breaks the rules: the dial or the connection ends
/// with the right reason or close code, the process survives, and the rules it must keep (answering a PING) hold.
/// The server is a short Python script (one connection, a scripted answer, then a log of every frame the dialler sends).
@Suite(.timeLimit(.minutes(1)))
struct DialledSocketTests {
  /// The scripted server: prints `PORT n`, answers the upgrade as `scenario` says, then prints `FRAME opcode hex` for
  /// each frame the client sends (unmasked) and `EOF` when the client closes (or after 3 s of silence).
  static let script = #"""
    import base64, hashlib, socket, struct, sys
    scenario = sys.argv[1]
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    print("PORT", listener.getsockname()[1], flush=True)
    connection, _ = listener.accept()
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(4096)
        if not chunk:
            sys.exit(1)
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    key = [l.split(b":", 1)[1].strip() for l in head.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key:")][0]
    accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    ok = (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "
          + accept + b"\r\nSec-WebSocket-Protocol: tls-test.v1\r\n\r\n")
    answers = {
        "status403": b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n",
        "badaccept": ok.replace(accept, base64.b64encode(b"x" * 20)),
        "extension": ok.replace(b"\r\n\r\n", b"\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n"),
        "masked": ok + bytes([0x82, 0x83, 1, 2, 3, 4, 0, 0, 0]),
        "hugelength": ok + bytes([0x82, 0x7F]) + struct.pack(">Q", 1 << 62),
        "reserved": ok + bytes([0xC2, 0x01, 0x00]),
        "ping": ok + bytes([0x89, 0x02]) + b"hi" + bytes([0x82, 0x01, 0x2A]),
        "pings": ok + b"".join(bytes([0x89, 0x01]) + bytes([c]) for c in b"abcdefghij") + bytes([0x82, 0x01, 0x2A]),
    }
    connection.sendall(answers[scenario])
    connection.settimeout(3)
    buffer = rest
    try:
        while True:
            while len(buffer) >= 6:
                length = buffer[1] & 0x7F
                offset = 2
                if length == 126:
                    length, offset = struct.unpack(">H", buffer[2:4])[0], 4
                elif length == 127:
                    length, offset = struct.unpack(">Q", buffer[2:10])[0], 10
                if len(buffer) < offset + 4 + length:
                    break
                mask = buffer[offset:offset + 4]
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(buffer[offset + 4:offset + 4 + length]))
                print("FRAME", buffer[0] & 0x0F, payload.hex(), flush=True)
                buffer = buffer[offset + 4 + length:]
            chunk = connection.recv(65536)
            if not chunk:
                break
            buffer += chunk
    except socket.timeout:
        pass
    print("EOF", flush=True)
    """#

  /// Runs `scenario` against a server that dials the script; returns the dialler's delegate once the script ended,
  /// and the script's output lines.
  func run(_ scenario: String) async throws -> (delegate: TLSDelegate, lines: [String]) {
    let directory = NSTemporaryDirectory() + "meshgate-dialled-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let scriptPath = directory + "/server.py"
    let outputPath = directory + "/server.out"
    try Self.script.write(toFile: scriptPath, atomically: true, encoding: .utf8)
    let output = open(outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    defer { close(output) }
    let child = try ChildProcess("/usr/bin/python3", [scriptPath, scenario], stdout: output, stderr: output)
    defer { child.stop() }
    func lines() -> [String] {
      ((try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }
    try await eventuallyAsync(timeout: .seconds(20), message: "the script listens") {
      lines().contains { $0.hasPrefix("PORT ") }
    }
    let port = try #require(lines().first { $0.hasPrefix("PORT ") }.flatMap { Int($0.dropFirst(5)) })
    let dialler = try RunningServer(tls: nil)
    defer { dialler.stop() }
    let server = dialler.server
    server.execute { _ = server.connect(host: "127.0.0.1", port: port, path: "/x", subprotocol: "tls-test.v1") }
    #expect(child.waitForExit(timeout: .seconds(20)) != nil, "the script ended")
    return (dialler.delegate, lines())
  }

  @Test(arguments: [
    ("status403", "HTTP 403"), ("badaccept", "Sec-WebSocket-Accept"), ("extension", "extensions"),
  ])
  func aRefusedOrInvalidUpgradeFailsTheDialWithItsReason(scenario: String, reason: String) async throws {
    let (delegate, lines) = try await run(scenario)
    try await eventuallyAsync(timeout: .seconds(10), message: "the dial failed") {
      !delegate.failures.withLock { $0.isEmpty }
    }
    let failures = delegate.failures.withLock { $0 }
    #expect(failures.count == 1 && failures[0].contains(reason), "\(failures)")
    #expect(delegate.dialledID.withLock { $0 } == nil, "never reported connected")
    #expect(!lines.contains { $0.hasPrefix("FRAME") }, "no frame after a failed upgrade: \(lines)")
  }

  /// A frame that breaks RFC 6455 closes the connection with the code the RFC names, after a close frame; nothing of
  /// it is delivered.
  @Test(arguments: [("masked", 1002), ("hugelength", 1009), ("reserved", 1002)])
  func aFrameThatBreaksTheProtocolClosesWithItsCode(scenario: String, code: Int) async throws {
    let (delegate, lines) = try await run(scenario)
    #expect(delegate.dialledID.withLock { $0 } != nil, "the upgrade was accepted")
    let close = try #require(lines.first { $0.hasPrefix("FRAME 8 ") }, "a close frame: \(lines)")
    let payload = close.dropFirst("FRAME 8 ".count)
    #expect(Int(payload.prefix(4), radix: 16) == code, "\(close)")
    #expect(lines.last == "EOF")
    try await eventuallyAsync(timeout: .seconds(10), message: "the connection closed") {
      delegate.closed.withLock { $0 } == 1
    }
    #expect(delegate.received.withLock { $0.isEmpty })
  }

  /// PINGs that come faster than the dialler writes (ten in one read) get one PONG, for the latest (RFC 6455 5.5.3):
  /// what waits to be written does not grow with the pings.
  @Test func pingsReadTogetherGetOnePongForTheLatest() async throws {
    let (delegate, lines) = try await run("pings")
    let pongs = lines.filter { $0.hasPrefix("FRAME 10 ") }
    #expect(pongs == ["FRAME 10 6a"], "one pong, for ping \"j\": \(lines)")
    #expect(delegate.received.withLock { $0 } == [[0x2A]])
  }

  /// A PING is answered with a PONG carrying its payload, and the message behind it is delivered.
  @Test func aPingIsAnsweredWithItsPayload() async throws {
    let (delegate, lines) = try await run("ping")
    #expect(lines.contains("FRAME 10 \(Array("hi".utf8).map { String(format: "%02x", $0) }.joined())"), "\(lines)")
    #expect(delegate.received.withLock { $0 } == [[0x2A]])
  }
}
