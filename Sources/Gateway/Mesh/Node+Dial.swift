/// Dialling a mesh address: a host name is looked up first, off the service thread (``NodeNames``), and its
/// addresses are tried in turn on the same link connection.
///
/// Layer 4 (node runtime). The ``MeshRuntime`` verb `connect` and what follows it, on the node's executor.
import Dispatch
import LWS
import Logging
package import MeshCore

extension Node {
  package func connect(_ connection: LinkManager.ConnectionID, host: String, port: UInt16) {
    guard !NodeNames.isAddressLiteral(host) else {
      dial(connection, address: host, port: port)
      return
    }
    // A name is looked up on a worker thread (NodeNames.swift); the dial follows on the service thread.
    mesh.resolving[connection] = false
    let resolve = mesh.resolveName
    DispatchQueue.global(qos: .utility).async { [weak self] in
      let result = resolve(host)
      self?.onLoop { node in node.resolved(connection, host: host, result, port: port) }
    }
  }

  /// The lookup for connection `connection` ended: dial the address, unless the link manager closed the connection
  /// meanwhile (then it learns the dial failed) or the name did not resolve.
  func resolved(
    _ connection: LinkManager.ConnectionID, host: String, _ result: Result<[String], NodeNameError>, port: UInt16
  ) {
    guard let closed = mesh.resolving.removeValue(forKey: connection) else { return }
    switch result {
    case .success(let addresses) where !closed:
      mesh.unresolvedNames.remove(host)
      if addresses.count > 1 { mesh.dialFallbacks[connection] = (port, Array(addresses.dropFirst())) }
      dial(connection, address: addresses[0], port: port)
    case .success:
      feed(.outboundFailed(connection, now: Self.monotonicMillis()))
    case .failure(let error):
      // Said once per name at info (a redial every few seconds would flood the log), then at debug. The set is
      // bounded: gossip may name ever new hosts.
      if mesh.unresolvedNames.count >= 1024 { mesh.unresolvedNames.removeAll() }
      let level: LogLevel = mesh.unresolvedNames.insert(error.host).inserted ? .info : .debug
      meshLogger.log(level, "Could not dial a node.", ["mesh.address": "\(error.host):\(port)", "reason": "\(error)"])
      feed(.outboundFailed(connection, now: Self.monotonicMillis()))
    }
  }

  /// Looks host names up with `resolve` from now on (tests: a name with fixed addresses).
  func useNameResolver(_ resolve: @escaping @Sendable (String) -> Result<[String], NodeNameError>) {
    mesh.resolveName = resolve
  }

  /// Opens the WebSocket of connection `connection` to `address` (an address literal).
  func dial(_ connection: LinkManager.ConnectionID, address host: String, port: UInt16) {
    if openLink(connection, to: host, port: port) == nil {
      feed(.outboundFailed(connection, now: Self.monotonicMillis()))
    }
  }

  /// Starts connection `connection`'s WebSocket to `host` (an address literal) with `scheduler`, the frames already
  /// queued for the connection; nil when it cannot even be started.
  func openLink(
    _ connection: LinkManager.ConnectionID, to host: String, port: UInt16,
    carrying scheduler: LinkScheduler<MeshOutbound> = LinkScheduler()
  ) -> WebSocketID? {
    guard
      let socket = server.connect(
        host: host, port: Int(port), path: "/mesh", subprotocol: meshSubprotocol, tls: security.meshTLS)
    else { return nil }
    mesh.connectionBySocket[socket] = connection
    mesh.socketByConnection[connection] = socket
    openScheduler(socket, carrying: scheduler)
    return socket
  }

  /// A dialled socket could not connect: the name's next address is tried on the same link connection (with the frames
  /// queued for it), or the link manager learns the connection is closed.
  func meshSocketFailed(_ id: WebSocketID) {
    if let connection = mesh.connectionBySocket[id], var fallback = mesh.dialFallbacks[connection],
      !fallback.addresses.isEmpty
    {
      let next = fallback.addresses.removeFirst()
      mesh.dialFallbacks[connection] = fallback.addresses.isEmpty ? nil : fallback
      if openLink(connection, to: next, port: fallback.port, carrying: mesh.schedulers[id] ?? LinkScheduler()) != nil {
        mesh.connectionBySocket[id] = nil
        mesh.schedulers[id] = nil
        return
      }
    }
    meshSocketClosed(id)
  }

  /// The link manager closed connection `connection`: a lookup in progress ends as a failed dial, and no further
  /// address is tried.
  func abandonDial(_ connection: LinkManager.ConnectionID) {
    if mesh.resolving[connection] != nil { mesh.resolving[connection] = true }
    mesh.dialFallbacks[connection] = nil
  }
}
