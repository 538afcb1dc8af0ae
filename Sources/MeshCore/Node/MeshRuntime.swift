/// The I/O of a ``MeshNode``'s host: the gateway's `Node` (WebSockets, events, features) or the simulator (a
/// simulated network and event logs). ``interpret(_:)``, written once here, turns the node's ``MeshEffect``s into
/// calls of these verbs; a runtime implements the verbs and nothing else, so both runtimes share the order in which
/// things happen:
///
/// - **One verb per effect, in effect order**: ``connect(_:host:port:)``, ``send(_:on:)``, ``broadcast(_:on:)``,
///   ``sendToNode(_:nodeID:on:)``, ``close(_:reason:)``, ``drop(_:reason:)``, ``pin(nodeID:fingerprint:)``,
///   ``refused(_:)``, ``frameRefused(_:)``, ``linkUp(_:security:)``, ``linkReplaced(nodeID:security:)``,
///   ``linkDown(nodeID:)``, ``deliver(_:from:)``, ``chat(_:)`` (every chat effect), ``chatFrameMalformed(nodeID:detail:)``,
///   ``directoryEvent(peerID:_:)`` and ``sessionEvent(peerID:_:)``.
/// - **What local peers are told is published at flush points** (``flush()``): a runtime may gather the directory
///   and session events and publish them in one batch, but only until the next flush point. The interpreter flushes
///   before a dial (a failed one reports ``MeshInput/outboundFailed(_:now:)`` at once, which may publish again),
///   before a refused link, before a link comes up, moves or goes down (the runtime's link hooks may publish), before
///   a frame is delivered to the runtime, and at the end. So what peers were told so far is published before
///   anything else can publish.
/// - **Follow-ups come last**, once every effect is carried out and flushed: ``directoryChanged()``
///   once if any directory event was told, then ``invitationReceived(_:)`` for each invitation a local peer
///   received, then ``invitationEnded(_:)`` for each invitation whose end its local inviter was told. (Transceivers
///   reconcile and accept there; a job offer finishes.) They may interpret more effects themselves.
///
/// Package-wide (not public): only the runtimes of this package implement it, and the gateway's public `Node` can
/// conform without making its verbs public API.
///
/// Isolation: the verbs are synchronous and called on the caller's executor. The gateway's `Node` actor conforms with
/// `@preconcurrency` (its verbs are actor-isolated; every ``interpret(_:)`` call is made from its own isolated
/// methods, and the Swift runtime checks on each verb that it runs on the node's executor).
package protocol MeshRuntime {
  /// Open a connection to `host:port/mesh`; report ``MeshInput/outboundOpened(_:transport:now:)`` or
  /// ``MeshInput/outboundFailed(_:now:)``.
  func connect(_ id: LinkManager.ConnectionID, host: String, port: UInt16)
  /// Send a link or directory frame on a connection.
  func send(_ message: MeshMessage, on id: LinkManager.ConnectionID)
  /// Send one directory frame on each of several connections (encode it once).
  func broadcast(_ message: MeshMessage, on ids: [LinkManager.ConnectionID])
  /// Send a session or invitation frame to node `nodeID` on its link connection (nil: not linked now, the frame is
  /// dropped).
  func sendToNode(_ message: MeshMessage, nodeID: String, on id: LinkManager.ConnectionID?)
  /// Close a connection after sending anything already queued.
  func close(_ id: LinkManager.ConnectionID, reason: String)
  /// Close a connection at once for a protocol error.
  func drop(_ id: LinkManager.ConnectionID, reason: String)
  /// Remember `fingerprint` as the certificate of `nodeID`.
  func pin(nodeID: String, fingerprint: String)
  /// A link was refused for a security reason.
  func refused(_ refusal: LinkManager.Refusal)
  /// A frame from another node was refused by the frame guard.
  func frameRefused(_ refusal: FrameRefusal)
  /// A node is linked (the directory and sessions were told already).
  func linkUp(_ hello: NodeHello, security: SessionBook.LinkSecurity)
  /// The link to a node moved to a new connection.
  func linkReplaced(nodeID: String, security: SessionBook.LinkSecurity)
  /// A node is no longer linked.
  func linkDown(nodeID: String)
  /// Carry out a chat effect (``MeshEffect/chatStore(_:)``, ``MeshEffect/chatSend(_:toNode:)``,
  /// ``MeshEffect/chatHistory(roomID:toNode:after:)``, ``MeshEffect/chatEvent(peerID:roomID:_:)``,
  /// ``MeshEffect/chatJoinSettled(roomID:peerID:joined:)``) after every chat effect before it: a batch's effects wait
  /// for its `chatStore` writes to be durable, and are skipped when they fail.
  func chat(_ effect: MeshEffect)
  /// A chat frame from `nodeID` did not decode.
  func chatFrameMalformed(nodeID: String, detail: String)
  /// Carry out a decision of the payload book (a frame to send, a chunk to write, a transfer accepted …).
  func payload(_ effect: PayloadEffect)
  /// Tell local peer `peerID` something the directory found (publish it by the next ``flush()``).
  func directoryEvent(peerID: String, _ event: Directory.Event)
  /// Tell local peer `peerID` a session or invitation event (publish it by the next ``flush()``).
  func sessionEvent(peerID: String, _ event: SessionBook.Event)
  /// Tell each of these local peers, in order, the same session data or named event (publish it by the next
  /// ``flush()``). By default, ``sessionEvent(peerID:_:)`` for each.
  func sessionEvents(peerIDs: [String], _ event: SessionBook.Event)
  /// Publish every directory and session event told since the last flush, in order.
  func flush()
  /// Follow-up: some local peer was told a directory finding.
  func directoryChanged()
  /// Follow-up: a local peer received `invitation`.
  func invitationReceived(_ invitation: SessionBook.Invitation)
  /// Follow-up: the local inviter of `invitation` was told that it ended.
  func invitationEnded(_ invitation: SessionBook.Invitation)
}

extension MeshRuntime {
  /// Tells each peer in turn (a runtime that has no use for fan-outs).
  package func sessionEvents(peerIDs: [String], _ event: SessionBook.Event) {
    for peerID in peerIDs { sessionEvent(peerID: peerID, event) }
  }

  /// Carries out `effects` in order (see ``MeshRuntime`` for the flush points and the follow-ups).
  package func interpret(_ effects: [MeshEffect]) {
    var directoryTold = false
    var received: [SessionBook.Invitation] = []
    var ended: [SessionBook.Invitation] = []
    for effect in effects {
      switch effect {
      case .connect(let id, let host, let port):
        flush()
        connect(id, host: host, port: port)
      case .send(let message, let id):
        send(message, on: id)
      case .broadcast(let message, let ids):
        broadcast(message, on: ids)
      case .sendToNode(let message, let nodeID, let id):
        sendToNode(message, nodeID: nodeID, on: id)
      case .close(let id, let reason):
        close(id, reason: reason)
      case .drop(let id, let reason):
        drop(id, reason: reason)
      case .pin(let nodeID, let fingerprint):
        pin(nodeID: nodeID, fingerprint: fingerprint)
      case .refused(let refusal):
        flush()
        refused(refusal)
      case .frameRefused(let refusal):
        frameRefused(refusal)
      case .linkUp(let hello, let security):
        flush()
        linkUp(hello, security: security)
      case .linkReplaced(let nodeID, let security):
        flush()
        linkReplaced(nodeID: nodeID, security: security)
      case .linkDown(let nodeID):
        flush()
        linkDown(nodeID: nodeID)
      case .chatStore, .chatSend, .chatHistory, .chatEvent, .chatJoinSettled:
        chat(effect)
      case .chatFrameMalformed(let nodeID, let detail):
        chatFrameMalformed(nodeID: nodeID, detail: detail)
      case .payload(let effect):
        flush()
        payload(effect)
      case .directoryEvent(let peerID, let event):
        directoryTold = true
        directoryEvent(peerID: peerID, event)
      case .sessionEvents(let peerIDs, let event):
        sessionEvents(peerIDs: peerIDs, event)
      case .sessionEvent(let peerID, let event):
        sessionEvent(peerID: peerID, event)
        switch event {
        case .invitationReceived(let invitation):
          received.append(invitation)
        case .invitationEnded(let invitation) where invitation.offer.fromPeerID == peerID:
          ended.append(invitation)
        default:
          break
        }
      }
    }
    flush()
    if directoryTold { directoryChanged() }
    for invitation in received { invitationReceived(invitation) }
    for invitation in ended { invitationEnded(invitation) }
  }
}
