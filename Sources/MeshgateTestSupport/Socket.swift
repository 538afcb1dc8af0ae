import Glibc

/// A point in time after which a blocking operation gives up.
struct Deadline {
  let instant: ContinuousClock.Instant
  let timeout: Duration

  init(_ timeout: Duration) {
    self.timeout = timeout
    self.instant = ContinuousClock.now.advanced(by: timeout)
  }

  var hasPassed: Bool { ContinuousClock.now >= instant }

  /// Milliseconds left, rounded up so that a poll never spins on a sub-millisecond remainder; 0 once passed.
  var remainingMilliseconds: Int32 {
    let left = instant - ContinuousClock.now
    if left <= .zero { return 0 }
    let (seconds, attoseconds) = left.components
    let millis = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
    return Int32(clamping: max(1, millis))
  }
}

extension Duration {
  /// The duration in (fractional) seconds, for messages.
  var secondsDouble: Double {
    let (seconds, attoseconds) = components
    return Double(seconds) + Double(attoseconds) / 1e18
  }

  /// A short rendering such as `2.5s` for error messages.
  var shortDescription: String {
    let value = secondsDouble
    if value == value.rounded() { return "\(Int(value))s" }
    return "\((value * 1000).rounded() / 1000)s"
  }
}

/// `strerror` for the current `errno`, prefixed with the failing call.
func errnoMessage(_ call: String, _ code: Int32 = errno) -> String {
  "\(call) failed: \(errnoText(code))"
}

/// `strerror` for `code` with the number, e.g. `Connection refused (errno 111)`.
func errnoText(_ code: Int32 = errno) -> String {
  "\(String(cString: strerror(code))) (errno \(code))"
}

/// Renders bytes for error messages: printable ASCII verbatim, the rest escaped, truncated to `limit` bytes.
func debugText(_ bytes: some Collection<UInt8>, limit: Int = 512) -> String {
  var out = ""
  for byte in bytes.prefix(limit) {
    switch byte {
    case 0x0A: out += "\\n"
    case 0x0D: out += "\\r"
    case 0x09: out += "\\t"
    case 0x20..<0x7F: out.unicodeScalars.append(Unicode.Scalar(byte))
    default: out += "\\x" + (byte < 16 ? "0" : "") + String(byte, radix: 16)
    }
  }
  if bytes.count > limit { out += "…(\(bytes.count - limit) more bytes)" }
  return out
}

/// What a single read attempt produced.
enum ReadResult {
  case data([UInt8])
  case eof
  case timedOut
}

/// A connected TCP socket. The descriptor stays in blocking mode; every wait goes through `poll` with a deadline and
/// every transfer uses `MSG_DONTWAIT`, so no call can block past its deadline.
///
/// Not thread-safe: one thread at a time.
final class TCPSocket {
  private(set) var fd: Int32
  let host: String
  let port: Int

  var endpoint: String { "\(host):\(port)" }

  private init(fd: Int32, host: String, port: Int) {
    self.fd = fd
    self.host = host
    self.port = port
  }

  deinit { close() }

  /// Resolves `host` and connects to the first address that accepts before `deadline`, from the IPv4
  /// `sourceAddress` when given (any 127.x.y.z works on Linux's loopback: many clients from one machine).
  static func connect(host: String, port: Int, deadline: Deadline, sourceAddress: String? = nil) throws -> TCPSocket {
    var hints = addrinfo()
    hints.ai_family = AF_UNSPEC
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    hints.ai_protocol = Int32(IPPROTO_TCP)
    var list: UnsafeMutablePointer<addrinfo>?
    let rc = getaddrinfo(host, String(port), &hints, &list)
    guard rc == 0, let first = list else {
      throw TestSupportError.connectionFailed("cannot resolve \(host):\(port): \(String(cString: gai_strerror(rc)))")
    }
    defer { freeaddrinfo(list) }

    var failures: [String] = []
    var cursor: UnsafeMutablePointer<addrinfo>? = first
    while let info = cursor {
      cursor = info.pointee.ai_next
      let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), 0)
      if fd < 0 {
        failures.append(errnoMessage("socket"))
        continue
      }
      let sock = TCPSocket(fd: fd, host: host, port: port)
      if let sourceAddress, info.pointee.ai_family == AF_INET {
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        guard inet_pton(AF_INET, sourceAddress, &local.sin_addr) == 1 else {
          throw TestSupportError.connectionFailed("\(sourceAddress) is not an IPv4 address")
        }
        let bound = withUnsafePointer(to: &local) {
          $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
          }
        }
        guard bound == 0 else { throw TestSupportError.connectionFailed(errnoMessage("bind \(sourceAddress)")) }
      }
      do {
        try sock.connect(address: info.pointee.ai_addr, length: info.pointee.ai_addrlen, deadline: deadline)
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        return sock
      } catch let error as TestSupportError {
        failures.append(error.message)
        if case .timeout = error { break }
      }
    }
    let detail = failures.isEmpty ? "no addresses" : failures.joined(separator: "; ")
    if deadline.hasPassed {
      throw TestSupportError.timeout(
        "connecting to \(host):\(port) within \(deadline.timeout.shortDescription): \(detail)")
    }
    throw TestSupportError.connectionFailed("cannot connect to \(host):\(port): \(detail)")
  }

  private func connect(address: UnsafeMutablePointer<sockaddr>, length: socklen_t, deadline: Deadline) throws {
    let flags = fcntl(fd, F_GETFL)
    _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
    defer { _ = fcntl(fd, F_SETFL, flags) }
    if Glibc.connect(fd, address, length) == 0 { return }
    guard errno == EINPROGRESS || errno == EINTR else {
      throw TestSupportError.connectionFailed(errnoText())
    }
    guard try waitFor(Int16(POLLOUT), deadline: deadline) else {
      throw TestSupportError.timeout("no answer within \(deadline.timeout.shortDescription)")
    }
    var soError: Int32 = 0
    var len = socklen_t(MemoryLayout<Int32>.size)
    if getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &len) != 0 {
      throw TestSupportError.connectionFailed(errnoMessage("getsockopt(SO_ERROR) for \(endpoint)"))
    }
    if soError != 0 {
      throw TestSupportError.connectionFailed(errnoText(soError))
    }
  }

  /// Polls for `events`; returns false when the deadline passes first. Error/hang-up conditions count as ready so
  /// that the following call reports them.
  func waitFor(_ events: Int16, deadline: Deadline) throws -> Bool {
    guard fd >= 0 else { throw TestSupportError.io("socket to \(endpoint) is already closed") }
    while true {
      var pfd = pollfd(fd: fd, events: events, revents: 0)
      let timeout = deadline.remainingMilliseconds
      let rc = poll(&pfd, 1, timeout)
      if rc > 0 { return true }
      if rc == 0 {
        if timeout == 0 || deadline.hasPassed { return false }
        continue
      }
      if errno == EINTR { continue }
      throw TestSupportError.io(errnoMessage("poll on \(endpoint)"))
    }
  }

  /// Writes every byte or throws (timeout, reset, closed).
  func sendAll(_ bytes: [UInt8], deadline: Deadline) throws {
    var offset = 0
    while offset < bytes.count {
      guard try waitFor(Int16(POLLOUT), deadline: deadline) else {
        throw TestSupportError.timeout(
          "sending to \(endpoint): wrote \(offset) of \(bytes.count) bytes within \(deadline.timeout.shortDescription)")
      }
      let sent = bytes.withUnsafeBytes { raw in
        Glibc.send(fd, raw.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT))
      }
      if sent >= 0 {
        offset += sent
        continue
      }
      if errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK { continue }
      if errno == EPIPE || errno == ECONNRESET {
        throw TestSupportError.connectionClosed(
          "\(endpoint) closed the connection after \(offset) of \(bytes.count) bytes were sent (\(errnoMessage("send")))"
        )
      }
      throw TestSupportError.io(errnoMessage("send to \(endpoint)"))
    }
  }

  /// Reads whatever is available (up to `maxBytes`), waiting until `deadline`. A connection reset is reported as EOF
  /// when `resetIsEOF` is set (servers commonly reset after answering a malformed request).
  func read(maxBytes: Int = 65536, deadline: Deadline, resetIsEOF: Bool = false) throws -> ReadResult {
    while true {
      guard try waitFor(Int16(POLLIN), deadline: deadline) else { return .timedOut }
      var buffer = [UInt8](repeating: 0, count: maxBytes)
      let count = buffer.withUnsafeMutableBytes { raw in
        recv(fd, raw.baseAddress!, maxBytes, Int32(MSG_DONTWAIT))
      }
      if count > 0 {
        buffer.removeSubrange(count...)
        return .data(buffer)
      }
      if count == 0 { return .eof }
      if errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK { continue }
      if errno == ECONNRESET {
        if resetIsEOF { return .eof }
        throw TestSupportError.connectionClosed("\(endpoint) reset the connection (\(errnoMessage("recv")))")
      }
      throw TestSupportError.io(errnoMessage("recv from \(endpoint)"))
    }
  }

  /// Half-closes the sending side.
  func shutdownWrite() {
    if fd >= 0 { _ = shutdown(fd, Int32(SHUT_WR)) }
  }

  /// Closes the descriptor; idempotent.
  func close() {
    if fd >= 0 {
      _ = Glibc.close(fd)
      fd = -1
    }
  }

  var isClosed: Bool { fd < 0 }
}

/// A growable byte queue with a read cursor, compacted lazily.
struct ByteBuffer {
  private(set) var storage: [UInt8] = []
  private(set) var readIndex = 0

  var readableCount: Int { storage.count - readIndex }
  var isEmpty: Bool { readableCount == 0 }
  var readable: ArraySlice<UInt8> { storage[readIndex...] }

  mutating func append(_ bytes: [UInt8]) {
    if readIndex > 0 && readIndex >= storage.count / 2 {
      storage.removeSubrange(0..<readIndex)
      readIndex = 0
    }
    storage.append(contentsOf: bytes)
  }

  func peek(_ offset: Int) -> UInt8 { storage[readIndex + offset] }

  mutating func read(_ count: Int) -> [UInt8] {
    let out = Array(storage[readIndex..<readIndex + count])
    readIndex += count
    return out
  }

  mutating func readAll() -> [UInt8] { read(readableCount) }

  mutating func skip(_ count: Int) { readIndex += count }

  /// Index (relative to the read cursor) of the first `byte`, if any.
  func firstIndex(of byte: UInt8) -> Int? {
    storage[readIndex...].firstIndex(of: byte).map { $0 - readIndex }
  }

  /// Index (relative to the read cursor, searching from `offset`) of the first CR or LF, if any; memchr, so a
  /// megabyte-long SSE data line costs a debug-built test microseconds, not a byte-by-byte loop.
  func firstLineBreak(from offset: Int) -> Int? {
    guard readIndex + offset < storage.count else { return nil }
    return storage.withUnsafeBufferPointer { all in
      let base = all.baseAddress! + readIndex + offset
      let count = all.count - readIndex - offset
      let newline = memchr(base, 0x0A, count).map { UnsafeRawPointer($0) - UnsafeRawPointer(base) }
      let carriage = memchr(base, 0x0D, newline ?? count).map { UnsafeRawPointer($0) - UnsafeRawPointer(base) }
      return (carriage ?? newline).map { $0 + offset }
    }
  }

  /// Removes and returns one line terminated by LF (a preceding CR is dropped), or nil if no full line is buffered.
  mutating func readLine() -> [UInt8]? {
    guard let newline = firstIndex(of: 0x0A) else { return nil }
    var line = read(newline)
    skip(1)
    if line.last == 0x0D { line.removeLast() }
    return line
  }
}

/// A socket plus an input buffer, with line/exact/EOF reads bounded by a deadline.
final class BufferedConnection {
  let socket: TCPSocket
  var buffer = ByteBuffer()
  /// Set once the peer has closed its sending side.
  private(set) var sawEOF = false

  init(socket: TCPSocket) { self.socket = socket }

  var endpoint: String { socket.endpoint }

  /// Reads once more from the socket into the buffer. Returns false at EOF; throws on timeout with `context`.
  @discardableResult
  func fill(deadline: Deadline, context: @autoclosure () -> String) throws -> Bool {
    guard let filled = try tryFill(deadline: deadline) else {
      throw TestSupportError.timeout("\(context()) within \(deadline.timeout.shortDescription)")
    }
    return filled
  }

  /// Like `fill` but returns nil on timeout instead of throwing.
  func tryFill(deadline: Deadline) throws -> Bool? {
    if sawEOF { return false }
    switch try socket.read(deadline: deadline) {
    case .data(let bytes):
      buffer.append(bytes)
      return true
    case .eof:
      sawEOF = true
      return false
    case .timedOut:
      return nil
    }
  }

  func readLine(deadline: Deadline, context: @autoclosure () -> String) throws -> [UInt8] {
    while true {
      if let line = buffer.readLine() { return line }
      if buffer.readableCount > 1 << 20 {
        throw TestSupportError.protocolViolation("\(context()): line longer than 1 MiB from \(endpoint)")
      }
      guard try fill(deadline: deadline, context: context()) else {
        throw TestSupportError.connectionClosed(
          "\(context()): EOF before end of line; partial line: \"\(debugText(buffer.readable))\"")
      }
    }
  }

  func readExactly(_ count: Int, deadline: Deadline, context: @autoclosure () -> String) throws -> [UInt8] {
    while buffer.readableCount < count {
      guard try fill(deadline: deadline, context: context()) else {
        throw TestSupportError.connectionClosed(
          "\(context()): EOF after \(buffer.readableCount) of \(count) expected bytes")
      }
    }
    return buffer.read(count)
  }

  func readToEOF(deadline: Deadline, context: @autoclosure () -> String) throws -> [UInt8] {
    while try fill(deadline: deadline, context: context()) {}
    return buffer.readAll()
  }
}
