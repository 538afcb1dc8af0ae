/// A DNS-SD client over the dns_sd API (Avahi's compatibility library): register services, browse and resolve.
///
/// Layer 2 (thin safe wrapper). All `dns_sd` calls run on one dedicated thread that this client owns, never on
/// the caller's thread: creating a `DNSServiceRef` makes a synchronous D-Bus round trip to avahi-daemon, and the
/// replies arrive through `DNSServiceProcessResult`, which must be called when the ref's socket
/// (`DNSServiceRefSockFD`) is readable. The thread polls every live ref's socket plus a wake-up socket pair; public
/// methods (from any thread) queue a command under a `Mutex` and write one byte to the wake-up socket.
///
/// A browse resolves what it finds on its own: browse `Add` → `DNSServiceResolve` (host target, port, TXT) →
/// `DNSServiceQueryRecord` for the host's A record (Avahi's library has no `DNSServiceGetAddrInfo`) → one
/// ``DNSSDEvent/resolved(_:_:)``. Resolve and query refs are one-shot: they are deallocated after their first
/// answer, or after 10 s without one (then the resolve starts over while the instance is still there).
///
/// Ownership: each operation is a class instance kept in the thread's tables; its unretained pointer is the C
/// context. A ref is deallocated (after the `DNSServiceProcessResult` that is running, if any) before its
/// operation leaves the tables, so no callback can reach a freed operation.
internal import CDNSSD
import Dispatch
import Foundation
import Glibc
import Logging
import Synchronization

/// Registers, browses and resolves DNS-SD services on a private thread; reports through `onEvent` on that thread.
///
/// ``stop()`` is idempotent and safe from any thread (also from inside `onEvent`); once it returns (when called
/// outside `onEvent`) every registration is withdrawn and `onEvent` is not called again. `deinit` stops too.
public final class DNSSDClient: Sendable {
  private let shared: Shared
  private let nextHandle = Atomic<UInt64>(1)

  /// Starts the client's thread. Fails only if the wake-up socket pair cannot be created.
  ///
  /// Reaching the daemon is not checked here: the first registration or browse reports
  /// ``DNSSDEvent/registrationFailed(_:_:)`` / ``DNSSDEvent/browseFailed(_:_:)`` with an error whose
  /// ``DNSSDError/isDaemonUnreachable`` is true when it is not running.
  public init(onEvent: @escaping @Sendable (DNSSDEvent) -> Void) throws(DNSSDError) {
    var fds: [Int32] = [-1, -1]
    let type = Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue)
    guard socketpair(AF_UNIX, type, 0, &fds) == 0 else {
      throw DNSSDError(code: 0, operation: "socketpair", message: String(cString: strerror(errno)))
    }
    let shared = Shared(wakeRead: fds[0], wakeWrite: fds[1])
    self.shared = shared
    shared.running.enter()
    let thread = Thread {
      Loop(shared: shared, onEvent: onEvent).run()
      shared.running.leave()
    }
    thread.name = "dnssd"
    thread.start()
  }

  deinit {
    stop()
  }

  /// Publishes a service instance; the outcome arrives as ``DNSSDEvent/registered(_:name:)`` or
  /// ``DNSSDEvent/registrationFailed(_:_:)``.
  ///
  /// - Parameters:
  ///   - name: Instance name (1–63 UTF-8 bytes). The daemon picks an alternative ("name #2") on a conflict.
  ///   - type: Service type with protocol, e.g. `_meshgate._tcp`.
  ///   - port: TCP port of the service.
  ///   - txt: The TXT record, as encoded by ``TXTRecord/encode(_:)``.
  ///   - interfaceIndex: Interface to publish on; 0 publishes on every interface the daemon uses.
  @discardableResult
  public func register(name: String, type: String, port: UInt16, txt: [UInt8], interfaceIndex: UInt32 = 0)
    -> DNSSDHandle
  {
    let handle = makeHandle()
    let registration = DNSSDRegistration(name: name, type: type, port: port, txt: txt, interfaceIndex: interfaceIndex)
    shared.submit(.register(handle, registration))
    return handle
  }

  /// Replaces the TXT record of a registration (`DNSServiceUpdateRecord` on its primary TXT record).
  public func updateTXT(_ handle: DNSSDHandle, _ txt: [UInt8]) {
    shared.submit(.updateTXT(handle, txt))
  }

  /// Browses a service type (e.g. `_meshgate._tcp`) in the default domain and resolves every instance found.
  /// `interfaceIndex` 0 browses every interface the daemon uses.
  @discardableResult
  public func browse(type: String, interfaceIndex: UInt32 = 0) -> DNSSDHandle {
    let handle = makeHandle()
    shared.submit(.browse(handle, type: type, interfaceIndex: interfaceIndex))
    return handle
  }

  /// Withdraws a registration or ends a browse (and its pending resolves). Unknown handles are ignored.
  public func cancel(_ handle: DNSSDHandle) {
    shared.submit(.cancel(handle))
  }

  /// Turns off the warning Avahi's compatibility library prints on standard error the first time a process uses it
  /// ("The program ... uses the Apple Bonjour compatibility layer of Avahi"), unless `AVAHI_COMPAT_NOWARN` is set
  /// already. Changes the process environment: call once at process start, before other threads run.
  public static func silenceCompatibilityWarning() {
    setenv("AVAHI_COMPAT_NOWARN", "1", 0)
  }

  /// Withdraws everything and ends the thread. Waits for it unless called on it.
  public func stop() {
    shared.requestStop()
    if !shared.isClientThread {
      shared.running.wait()
    }
  }

  private func makeHandle() -> DNSSDHandle {
    DNSSDHandle(raw: nextHandle.add(1, ordering: .relaxed).oldValue)
  }
}

// MARK: - Shared state (any thread)

extension DNSSDClient {
  fileprivate enum Command {
    case register(DNSSDHandle, DNSSDRegistration)
    case updateTXT(DNSSDHandle, [UInt8])
    case browse(DNSSDHandle, type: String, interfaceIndex: UInt32)
    case cancel(DNSSDHandle)
  }

  /// What the public object and the thread share. The wake-up sockets close when both have let go of it, so a wake-up can
  /// never write to a closed (or reused) descriptor.
  fileprivate final class Shared: Sendable {
    let wakeRead: Int32
    let wakeWrite: Int32
    /// Left when the thread has finished.
    let running = DispatchGroup()
    let stopping = Atomic<Bool>(false)
    let threadID = Atomic<UInt>(0)
    private let commands = Mutex<[Command]>([])

    init(wakeRead: Int32, wakeWrite: Int32) {
      self.wakeRead = wakeRead
      self.wakeWrite = wakeWrite
    }

    deinit {
      _ = Glibc.close(wakeRead)
      _ = Glibc.close(wakeWrite)
    }

    var isClientThread: Bool { threadID.load(ordering: .acquiring) == UInt(pthread_self()) }

    func submit(_ command: Command) {
      guard !stopping.load(ordering: .acquiring) else { return }
      let wasEmpty = commands.withLock { commands in
        commands.append(command)
        return commands.count == 1
      }
      if wasEmpty { wake() }
    }

    func requestStop() {
      if !stopping.exchange(true, ordering: .acquiringAndReleasing) { wake() }
    }

    func takeCommands() -> [Command] {
      commands.withLock { commands in
        defer { commands.removeAll() }
        return commands
      }
    }

    /// One byte makes the read end readable; a full buffer (EAGAIN) is already readable.
    func wake() {
      var byte: UInt8 = 1
      _ = Glibc.write(wakeWrite, &byte, 1)
    }

    func drainWakeups() {
      var buffer = [UInt8](repeating: 0, count: 64)
      while Glibc.read(wakeRead, &buffer, buffer.count) > 0 {}
    }
  }
}

// MARK: - The client thread

/// One `DNSServiceRef` and what its replies mean. Confined to the client thread.
private final class Operation {
  enum Kind {
    case registration
    case browse
    /// Resolving one instance of `browse`.
    case resolve(browse: Operation, instance: String)
    /// Looking up the A record of an instance of `browse` that resolved to `partial`.
    case query(browse: Operation, instance: String, partial: DNSSDService)
  }

  let handle: DNSSDHandle
  let kind: Kind
  unowned let loop: Loop
  var ref: OpaquePointer?
  var deadline: UInt64?
  var retired = false
  /// For browses: instances seen (per interface, name, type, domain).
  var instances: [String: Instance] = [:]

  struct Instance {
    var name: String
    var type: String
    var domain: String
    var interfaceIndex: UInt32
    /// Adds minus removes: Avahi reports an instance once per IP protocol.
    var count = 0
    var resolved = false
    var pending: Operation?
  }

  init(handle: DNSSDHandle, kind: Kind, loop: Loop) {
    self.handle = handle
    self.kind = kind
    self.loop = loop
  }

  var context: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

  static func from(_ context: UnsafeMutableRawPointer?) -> Operation? {
    guard let context else { return nil }
    return Unmanaged<Operation>.fromOpaque(context).takeUnretainedValue()
  }
}

@available(*, unavailable)
extension Operation: Sendable {}

/// The thread's state and work. Created and used only on the client thread.
private final class Loop {
  static let oneShotTimeout: UInt64 = 10_000

  let shared: DNSSDClient.Shared
  let onEvent: @Sendable (DNSSDEvent) -> Void
  let logger = Logger(component: "dnssd")
  /// Registrations and browses by handle.
  var owners: [DNSSDHandle: Operation] = [:]
  /// Every operation holding a live ref (owners and their resolves and queries).
  var live: [ObjectIdentifier: Operation] = [:]
  /// Operations whose ref is deallocated after the current round of `DNSServiceProcessResult`.
  var retiring: [Operation] = []

  init(shared: DNSSDClient.Shared, onEvent: @escaping @Sendable (DNSSDEvent) -> Void) {
    self.shared = shared
    self.onEvent = onEvent
  }

  static func nowMillis() -> UInt64 { DispatchTime.now().uptimeNanoseconds / 1_000_000 }

  func run() {
    shared.threadID.store(UInt(pthread_self()), ordering: .releasing)
    while !shared.stopping.load(ordering: .acquiring) {
      for command in shared.takeCommands() { execute(command) }
      if shared.stopping.load(ordering: .acquiring) { break }
      expireOneShots(now: Self.nowMillis())
      deallocateRetired()
      waitAndProcess()
      deallocateRetired()
    }
    for operation in live.values { retire(operation) }
    deallocateRetired()
    owners.removeAll()
  }

  func emit(_ event: DNSSDEvent) {
    guard !shared.stopping.load(ordering: .acquiring) else { return }
    onEvent(event)
  }

  // MARK: Commands

  func execute(_ command: DNSSDClient.Command) {
    switch command {
    case .register(let handle, let registration):
      let operation = Operation(handle: handle, kind: .registration, loop: self)
      var ref: OpaquePointer?
      let code = registration.txt.withUnsafeBytes { txt in
        DNSServiceRegister(
          &ref, 0, registration.interfaceIndex, registration.name, registration.type, nil, nil,
          registration.port.bigEndian, UInt16(clamping: txt.count), txt.baseAddress, Self.registerReply,
          operation.context)
      }
      guard code == kDNSServiceErr_NoError, let ref else {
        emit(.registrationFailed(handle, DNSSDError(code: code, operation: "DNSServiceRegister")))
        return
      }
      adopt(operation, ref: ref)
      owners[handle] = operation
      logger.debug(
        "DNS-SD registration requested.",
        ["dnssd.type": registration.type, "dnssd.name": registration.name, "dnssd.port": registration.port])
    case .updateTXT(let handle, let txt):
      guard let operation = owners[handle], case .registration = operation.kind, let ref = operation.ref else { return }
      let code = txt.withUnsafeBytes {
        DNSServiceUpdateRecord(ref, nil, 0, UInt16(clamping: $0.count), $0.baseAddress, 0)
      }
      if code != kDNSServiceErr_NoError {
        logger.debug(
          "DNS-SD TXT update failed.", ["dnssd.error": DNSSDError(code: code, operation: "DNSServiceUpdateRecord")])
      }
    case .browse(let handle, let type, let interfaceIndex):
      let operation = Operation(handle: handle, kind: .browse, loop: self)
      var ref: OpaquePointer?
      let code = DNSServiceBrowse(&ref, 0, interfaceIndex, type, "", Self.browseReply, operation.context)
      guard code == kDNSServiceErr_NoError, let ref else {
        emit(.browseFailed(handle, DNSSDError(code: code, operation: "DNSServiceBrowse")))
        return
      }
      adopt(operation, ref: ref)
      owners[handle] = operation
    case .cancel(let handle):
      guard let operation = owners.removeValue(forKey: handle) else { return }
      retire(operation)
    }
  }

  func adopt(_ operation: Operation, ref: OpaquePointer) {
    operation.ref = ref
    live[ObjectIdentifier(operation)] = operation
  }

  /// Marks an operation (and a browse's pending resolves) for deallocation after the current round.
  func retire(_ operation: Operation) {
    guard !operation.retired else { return }
    operation.retired = true
    retiring.append(operation)
    for instance in operation.instances.values {
      if let pending = instance.pending { retire(pending) }
    }
  }

  func deallocateRetired() {
    while let operation = retiring.popLast() {
      if let ref = operation.ref {
        operation.ref = nil
        DNSServiceRefDeallocate(ref)
      }
      live[ObjectIdentifier(operation)] = nil
    }
  }

  // MARK: Polling

  func waitAndProcess() {
    let operations = live.values.filter { !$0.retired && $0.ref != nil }
    var fds = [pollfd(fd: shared.wakeRead, events: Int16(POLLIN), revents: 0)]
    for operation in operations {
      fds.append(pollfd(fd: DNSServiceRefSockFD(operation.ref), events: Int16(POLLIN), revents: 0))
    }
    let now = Self.nowMillis()
    let nextDeadline = operations.compactMap(\.deadline).min()
    let timeout = nextDeadline.map { Int32(clamping: $0 > now ? $0 - now : 0) } ?? -1
    let ready = poll(&fds, nfds_t(fds.count), timeout)
    guard ready > 0 else { return }
    if fds[0].revents != 0 { shared.drainWakeups() }
    for (index, operation) in operations.enumerated() where fds[index + 1].revents != 0 {
      // An earlier callback of this round may have retired it; its ref is still valid until deallocateRetired().
      guard !operation.retired, let ref = operation.ref else { continue }
      let code = DNSServiceProcessResult(ref)
      if code != kDNSServiceErr_NoError && !operation.retired {
        failed(operation, DNSSDError(code: code, operation: "DNSServiceProcessResult"))
      }
    }
  }

  func expireOneShots(now: UInt64) {
    for operation in live.values where !operation.retired {
      guard let deadline = operation.deadline, deadline <= now else { continue }
      switch operation.kind {
      case .resolve(let browse, let instance), .query(let browse, let instance, _):
        logger.debug("DNS-SD resolve timed out; trying again.", ["dnssd.instance": instance])
        retire(operation)
        browse.instances[instance]?.pending = nil
        startResolve(browse, instance: instance)
      case .registration, .browse:
        break
      }
    }
  }

  /// A registration or browse is dead (daemon gone, socket closed); resolves and queries just end.
  func failed(_ operation: Operation, _ error: DNSSDError) {
    switch operation.kind {
    case .registration:
      owners[operation.handle] = nil
      retire(operation)
      emit(.registrationFailed(operation.handle, error))
    case .browse:
      owners[operation.handle] = nil
      retire(operation)
      emit(.browseFailed(operation.handle, error))
    case .resolve(let browse, let instance), .query(let browse, let instance, _):
      retire(operation)
      if browse.instances[instance]?.pending === operation { browse.instances[instance]?.pending = nil }
      logger.debug("DNS-SD resolve failed.", ["dnssd.instance": instance, "dnssd.error": error])
    }
  }

  // MARK: Replies (called from DNSServiceProcessResult on this thread)

  func registered(_ operation: Operation, code: Int32, name: String?) {
    guard !operation.retired else { return }
    guard code == kDNSServiceErr_NoError else {
      failed(operation, DNSSDError(code: code, operation: "DNSServiceRegister"))
      return
    }
    emit(.registered(operation.handle, name: name ?? ""))
  }

  func browsed(
    _ browse: Operation, flags: DNSServiceFlags, interfaceIndex: UInt32, code: Int32, name: String?, type: String?,
    domain: String?
  ) {
    guard !browse.retired else { return }
    guard code == kDNSServiceErr_NoError else {
      failed(browse, DNSSDError(code: code, operation: "DNSServiceBrowse"))
      return
    }
    guard let name, let type, let domain else { return }
    let key = "\(interfaceIndex)\u{0}\(name)\u{0}\(type)\u{0}\(domain)"
    if flags & DNSServiceFlags(kDNSServiceFlagsAdd) != 0 {
      var instance =
        browse.instances[key]
        ?? Operation.Instance(name: name, type: type, domain: domain, interfaceIndex: interfaceIndex)
      instance.count += 1
      browse.instances[key] = instance
      if instance.count == 1 { startResolve(browse, instance: key) }
    } else {
      guard var instance = browse.instances[key] else { return }
      instance.count -= 1
      guard instance.count <= 0 else {
        browse.instances[key] = instance
        return
      }
      browse.instances[key] = nil
      if let pending = instance.pending { retire(pending) }
      if instance.resolved { emit(.removed(browse.handle, name: name, interfaceIndex: interfaceIndex)) }
    }
  }

  func startResolve(_ browse: Operation, instance key: String) {
    guard let instance = browse.instances[key], instance.pending == nil, !browse.retired else { return }
    let operation = Operation(handle: browse.handle, kind: .resolve(browse: browse, instance: key), loop: self)
    var ref: OpaquePointer?
    let code = DNSServiceResolve(
      &ref, 0, instance.interfaceIndex, instance.name, instance.type, instance.domain, Self.resolveReply,
      operation.context)
    guard code == kDNSServiceErr_NoError, let ref else {
      failed(browse, DNSSDError(code: code, operation: "DNSServiceResolve"))
      return
    }
    operation.deadline = Self.nowMillis() + Self.oneShotTimeout
    adopt(operation, ref: ref)
    browse.instances[key]?.pending = operation
  }

  func resolved(
    _ operation: Operation, interfaceIndex: UInt32, code: Int32, hostTarget: String?, port: UInt16,
    txt: UnsafeBufferPointer<UInt8>
  ) {
    guard !operation.retired, case .resolve(let browse, let key) = operation.kind else { return }
    retire(operation)
    browse.instances[key]?.pending = nil
    guard code == kDNSServiceErr_NoError, let hostTarget, let instance = browse.instances[key] else {
      if code != kDNSServiceErr_NoError { failed(operation, DNSSDError(code: code, operation: "DNSServiceResolve")) }
      return
    }
    let partial = DNSSDService(
      name: instance.name, type: instance.type, domain: instance.domain, interfaceIndex: instance.interfaceIndex,
      hostTarget: hostTarget, port: UInt16(bigEndian: port), txt: TXTRecord.decode(txt), address: "")
    let query = Operation(
      handle: browse.handle, kind: .query(browse: browse, instance: key, partial: partial), loop: self)
    var ref: OpaquePointer?
    let queryCode = DNSServiceQueryRecord(
      &ref, 0, interfaceIndex, hostTarget, UInt16(kDNSServiceType_A), UInt16(kDNSServiceClass_IN), Self.queryReply,
      query.context)
    guard queryCode == kDNSServiceErr_NoError, let ref else {
      logger.debug(
        "DNS-SD address lookup could not start.",
        ["dnssd.host": hostTarget, "dnssd.error": DNSSDError(code: queryCode, operation: "DNSServiceQueryRecord")])
      return
    }
    query.deadline = Self.nowMillis() + Self.oneShotTimeout
    adopt(query, ref: ref)
    browse.instances[key]?.pending = query
  }

  func answered(
    _ operation: Operation, flags: DNSServiceFlags, code: Int32, type: UInt16, data: UnsafeRawBufferPointer
  ) {
    guard !operation.retired, case .query(let browse, let key, var service) = operation.kind else { return }
    guard code == kDNSServiceErr_NoError else {
      failed(operation, DNSSDError(code: code, operation: "DNSServiceQueryRecord"))
      return
    }
    guard flags & DNSServiceFlags(kDNSServiceFlagsAdd) != 0, type == UInt16(kDNSServiceType_A), data.count == 4
    else { return }
    retire(operation)
    guard browse.instances[key] != nil else { return }
    browse.instances[key]?.pending = nil
    browse.instances[key]?.resolved = true
    service.address = "\(data[0]).\(data[1]).\(data[2]).\(data[3])"
    emit(.resolved(browse.handle, service))
  }

  // MARK: C callbacks (non-capturing; the operation comes back through the context pointer)

  static let registerReply: DNSServiceRegisterReply = { _, _, code, name, _, _, context in
    guard let operation = Operation.from(context) else { return }
    operation.loop.registered(operation, code: code, name: name.map { String(cString: $0) })
  }

  static let browseReply: DNSServiceBrowseReply = { _, flags, interfaceIndex, code, name, type, domain, context in
    guard let operation = Operation.from(context) else { return }
    operation.loop.browsed(
      operation, flags: flags, interfaceIndex: interfaceIndex, code: code, name: name.map { String(cString: $0) },
      type: type.map { String(cString: $0) }, domain: domain.map { String(cString: $0) })
  }

  static let resolveReply: DNSServiceResolveReply = {
    _, _, interfaceIndex, code, _, hostTarget, port, txtLength, txt, context in
    guard let operation = Operation.from(context) else { return }
    let record = UnsafeBufferPointer(start: txt, count: txt == nil ? 0 : Int(txtLength))
    operation.loop.resolved(
      operation, interfaceIndex: interfaceIndex, code: code, hostTarget: hostTarget.map { String(cString: $0) },
      port: port, txt: record)
  }

  static let queryReply: DNSServiceQueryRecordReply = {
    _, flags, _, code, _, type, _, length, data, _, context in
    guard let operation = Operation.from(context) else { return }
    operation.loop.answered(
      operation, flags: flags, code: code, type: type,
      data: UnsafeRawBufferPointer(start: data, count: data == nil ? 0 : Int(length)))
  }
}

@available(*, unavailable)
extension Loop: Sendable {}
