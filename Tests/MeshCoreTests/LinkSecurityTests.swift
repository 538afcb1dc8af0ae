import Testing

@testable import MeshCore

// Pinning, the mesh secret's challenge-response and the preference for TLS links in LinkManager.

private typealias Action = LinkManager.Action
private typealias Transport = LinkManager.Transport

private func hello(_ nodeID: String) -> NodeHello {
  NodeHello(nodeID: nodeID, name: nodeID.uppercased(), softwareVersion: "0.1.0", port: 8080)
}

private func tls(_ local: String, _ remote: String?, challenge: UInt8 = 1) -> Transport {
  Transport(
    encrypted: true, localFingerprint: local, remoteFingerprint: remote,
    challenge: [UInt8](repeating: challenge, count: 32))
}

private func plaintext(challenge: UInt8 = 1) -> Transport {
  Transport(
    encrypted: false, localFingerprint: nil, remoteFingerprint: nil, challenge: [UInt8](repeating: challenge, count: 32)
  )
}

/// Node "a" dials node "b"; frames go straight across (or through a relay that forwards every frame unchanged).
private struct LinkPair {
  var dialer: LinkManager
  var acceptor: LinkManager
  var dialID: LinkManager.ConnectionID = 0
  let acceptID: LinkManager.ConnectionID = 7
  var queue: [(toAcceptor: Bool, message: MeshMessage)] = []
  /// Every frame that crossed, in order.
  var frames: [MeshMessage] = []
  var dialerActions: [Action] = []
  var acceptorActions: [Action] = []
  var closedBy: String?

  init(
    dialerSecret: String? = nil, acceptorSecret: String? = nil, dialerPins: [String: String] = [:],
    acceptorPins: [String: String] = [:]
  ) {
    dialer = LinkManager(local: hello("a"), secret: dialerSecret.map { Array($0.utf8) }, pins: dialerPins)
    acceptor = LinkManager(local: hello("b"), secret: acceptorSecret.map { Array($0.utf8) }, pins: acceptorPins)
  }

  mutating func route(_ actions: [Action], fromDialer: Bool) {
    for action in actions {
      switch action {
      case .send(_, let message):
        if closedBy == nil { queue.append((fromDialer, message)) }
      case .close:
        if closedBy == nil { closedBy = fromDialer ? "a" : "b" }
      default:
        if fromDialer { dialerActions.append(action) } else { acceptorActions.append(action) }
      }
    }
  }

  /// Opens the connection with what each side saw of it, and runs the handshake to the end.
  mutating func open(dialer dialerTransport: Transport, acceptor acceptorTransport: Transport, deliver: Bool = true) {
    guard case .connect(let id, _, _) = dialer.addSeed(host: "b.local", port: 9, now: 0).first else {
      preconditionFailure("expected a dial")
    }
    dialID = id
    route(dialer.outboundOpened(id, transport: dialerTransport, now: 0), fromDialer: true)
    route(
      acceptor.inboundOpened(acceptID, remoteHost: "a.local", transport: acceptorTransport, now: 0), fromDialer: false)
    if deliver { pump() }
  }

  mutating func pump(while keep: (MeshMessage) -> Bool = { _ in true }) {
    while let (toAcceptor, message) = queue.first, keep(message) {
      queue.removeFirst()
      frames.append(message)
      if toAcceptor {
        route(acceptor.received(message, on: acceptID, now: 0), fromDialer: false)
      } else {
        route(dialer.received(message, on: dialID, now: 0), fromDialer: true)
      }
    }
  }

  static func refusals(_ actions: [Action]) -> [LinkManager.Refusal] {
    actions.compactMap { if case .refused(let refusal) = $0 { refusal } else { nil } }
  }

  static func linkedUp(_ actions: [Action]) -> Bool {
    actions.contains { if case .linkUp = $0 { true } else { false } }
  }

  static func linkedDown(_ actions: [Action]) -> Bool {
    actions.contains { if case .linkDown = $0 { true } else { false } }
  }

  static func pinned(_ actions: [Action]) -> Bool {
    actions.contains { if case .pin = $0 { true } else { false } }
  }
}

/// A dialler that the other node refuses on identity: re-dials it as its backoff allows, `count` times, each time with
/// the refusal `goodbye(code)` after the other node's frames in `before`; returns the delays between dials and every
/// action the dialler took.
private func redial(
  _ dialer: inout LinkManager, refusedWith code: String, before: [MeshMessage] = [], count: Int
) -> (delays: [UInt64], actions: [Action]) {
  var delays: [UInt64] = []
  var actions: [Action] = []
  var now: UInt64 = 0
  for _ in 0..<count {
    guard let retryAt = dialer.addresses["b.local:9"]?.retryAt, retryAt > now else { break }
    delays.append(retryAt - now)
    // Nothing is dialled before the backoff ends.
    actions += dialer.tick(now: retryAt - 1)
    now = retryAt
    let tick = dialer.tick(now: now)
    actions += tick
    guard case .connect(let id, _, _) = tick.first(where: { if case .connect = $0 { true } else { false } }) else {
      break
    }
    actions += dialer.outboundOpened(id, transport: tls("fx", "fb"), now: now)
    for message in before + [.goodbye(reason: code)] { actions += dialer.received(message, on: id, now: now) }
  }
  return (delays, actions)
}

@Suite struct LinkPinningTests {
  @Test func theFirstTLSLinkPinsBothCertificates() {
    var pair = LinkPair()
    pair.open(dialer: tls("fa", "fb"), acceptor: tls("fb", "fa"))
    #expect(pair.dialerActions.contains(.pin(nodeID: "b", fingerprint: "fb")))
    #expect(pair.acceptorActions.contains(.pin(nodeID: "a", fingerprint: "fa")))
    #expect(LinkPair.linkedUp(pair.dialerActions) && LinkPair.linkedUp(pair.acceptorActions))
    #expect(pair.dialer.pins == ["b": "fb"])
    #expect(pair.acceptor.pins == ["a": "fa"])
    #expect(pair.acceptor.transport(of: "a")?.encrypted == true)
    let status = pair.dialer.status(now: 0).first { $0.nodeID == "b" }
    #expect(status?.encrypted == true)
    #expect(status?.fingerprint == "fb")
    #expect(pair.closedBy == nil)
  }

  @Test func aPlaintextLinkPinsNothing() {
    var pair = LinkPair()
    pair.open(dialer: .plaintext, acceptor: .plaintext)
    #expect(LinkPair.linkedUp(pair.acceptorActions))
    #expect(pair.acceptor.pins.isEmpty && pair.dialer.pins.isEmpty)
    #expect(pair.acceptor.status(now: 0).first?.encrypted == false)
  }

  @Test func aChangedCertificateIsRefusedWithBothFingerprints() {
    var pair = LinkPair(acceptorPins: ["a": "fa"])
    pair.open(dialer: tls("fx", "fb"), acceptor: tls("fb", "fx"))
    let refusal = LinkPair.refusals(pair.acceptorActions).first
    #expect(refusal?.code == "certificate_changed")
    #expect(refusal?.nodeID == "a")
    #expect(refusal?.pinnedFingerprint == "fa")
    #expect(refusal?.presentedFingerprint == "fx")
    #expect(refusal?.message.contains("DELETE /api/v1/mesh/pins/a") == true)
    #expect(!LinkPair.linkedUp(pair.acceptorActions))
    #expect(pair.acceptor.pins == ["a": "fa"], "the pin is kept")
    #expect(pair.closedBy == "b")
    // The refused node learns why from the goodbye.
    #expect(LinkPair.refusals(pair.dialerActions).map(\.code) == ["refused_by_node"])
    #expect(pair.dialer.linkedNodeIDs.isEmpty)
  }

  /// Found by black-box QA: a node that got a new certificate (same node id) dialled a node that had pinned its old
  /// one. Both said hello at once, so it took the other's hello for a link (`node.linked`) before the refusal came
  /// (`node.unlinked`), and re-dialled at the next tick as after any lost link: ~10 link events and dials a second.
  /// The accepting node now says hello only after the dialler's hello passed its checks, so the refused dialler
  /// never sees one: it reports only the refusal, pins nothing, and backs off like a failed dial, up to the ceiling.
  @Test func aDiallerRefusedForItsChangedCertificateNeverReportsTheLinkAndBacksOff() {
    var pair = LinkPair(dialerPins: ["b": "fb"], acceptorPins: ["a": "fa"])
    pair.open(dialer: tls("fx", "fb"), acceptor: tls("fb", "fx"))
    #expect(LinkPair.refusals(pair.acceptorActions).map(\.code) == ["certificate_changed"])
    #expect(!pair.frames.contains { if case .hello(let hello) = $0 { hello.nodeID == "b" } else { false } })
    #expect(!LinkPair.linkedUp(pair.dialerActions) && !LinkPair.linkedDown(pair.dialerActions), "\(pair.dialerActions)")
    #expect(!LinkPair.pinned(pair.dialerActions) && pair.dialer.pins == ["b": "fb"])
    #expect(LinkPair.refusals(pair.dialerActions).map(\.code) == ["refused_by_node"])
    #expect(pair.dialer.linkedNodeIDs.isEmpty)
    #expect(!pair.dialer.tick(now: 100).contains { if case .connect = $0 { true } else { false } })
    // Every retry is refused the same way: the delays double (±20 % jitter) up to the 5 s ceiling.
    let (delays, actions) = redial(&pair.dialer, refusedWith: "certificate_changed", count: 8)
    let minimum = pair.dialer.configuration.backoffMinimum
    let maximum = pair.dialer.configuration.backoffMaximum
    #expect(delays.count == 8, "\(delays)")
    for (attempt, delay) in delays.enumerated() {
      let base = min(maximum, minimum << UInt64(attempt))
      #expect(delay >= base * 4 / 5 && delay <= base * 6 / 5, "attempt \(attempt): \(delay) ms, \(delays)")
    }
    #expect(!LinkPair.linkedUp(actions) && !LinkPair.linkedDown(actions) && !LinkPair.pinned(actions))
  }

  /// The same for the other refusals on identity: a plaintext link from a pinned node, and a TLS link without a
  /// client certificate.
  @Test(arguments: ["plaintext_from_pinned_node", "certificate_missing"])
  func aDiallerRefusedOnIdentityNeverSeesAHello(code: String) {
    var pair = LinkPair(acceptorPins: ["a": "fa"])
    if code == "plaintext_from_pinned_node" {
      pair.open(dialer: .plaintext, acceptor: .plaintext)
    } else {
      pair.open(dialer: tls("fa", "fb"), acceptor: tls("fb", nil))
    }
    #expect(LinkPair.refusals(pair.acceptorActions).map(\.code) == [code])
    #expect(!pair.frames.contains { if case .hello(let hello) = $0 { hello.nodeID == "b" } else { false } })
    #expect(!LinkPair.linkedUp(pair.dialerActions) && !LinkPair.linkedDown(pair.dialerActions))
    #expect(LinkPair.refusals(pair.dialerActions).map(\.code) == ["refused_by_node"])
    let retryAt = pair.dialer.addresses["b.local:9"]?.retryAt
    #expect(retryAt.map { $0 >= pair.dialer.configuration.backoffMinimum * 4 / 5 } == true, "retry at \(retryAt ?? 0)")
  }

  /// A node of an earlier version says hello at once and refuses afterwards, so the dialler does see the link come up
  /// and go: the refusal goodbye still makes it back off, growing, rather than re-dial at the next tick.
  @Test func aRefusalAfterTheLinkCameUpStillBacksOff() {
    var dialer = LinkManager(local: hello("a"), pins: ["b": "fb"])
    guard case .connect(let id, _, _) = dialer.addSeed(host: "b.local", port: 9, now: 0).first else {
      preconditionFailure("expected a dial")
    }
    _ = dialer.outboundOpened(id, transport: tls("fx", "fb"), now: 0)
    #expect(LinkPair.linkedUp(dialer.received(.hello(hello("b")), on: id, now: 0)))
    let refusal = dialer.received(.goodbye(reason: "certificate_changed"), on: id, now: 0)
    #expect(LinkPair.linkedDown(refusal) && LinkPair.refusals(refusal).map(\.code) == ["refused_by_node"])
    let (delays, _) = redial(&dialer, refusedWith: "certificate_changed", before: [.hello(hello("b"))], count: 7)
    let minimum = dialer.configuration.backoffMinimum
    #expect(delays.count == 7, "\(delays)")
    for (attempt, delay) in delays.enumerated() {
      let base = min(dialer.configuration.backoffMaximum, minimum << UInt64(attempt))
      #expect(delay >= base * 4 / 5 && delay <= base * 6 / 5, "attempt \(attempt): \(delay) ms, \(delays)")
    }
    // A link that ends for any other reason is re-dialled at once, as before.
    guard let retryAt = dialer.addresses["b.local:9"]?.retryAt,
      case .connect(let next, _, _) = dialer.tick(now: retryAt).first(where: {
        if case .connect = $0 { true } else { false }
      })
    else {
      Issue.record("expected a dial")
      return
    }
    _ = dialer.outboundOpened(next, transport: tls("fx", "fb"), now: retryAt)
    _ = dialer.received(.hello(hello("b")), on: next, now: retryAt)
    _ = dialer.received(.goodbye(reason: "shutdown"), on: next, now: retryAt + 10)
    #expect(dialer.addresses["b.local:9"]?.retryAt == retryAt + 10)
    #expect(dialer.addresses["b.local:9"]?.attempts == 0)
  }

  /// The accepting node holds its hello until the dialler's, so a dialler of an earlier version (hello at once, as
  /// now) and an acceptor of an earlier version (hello at once) both still link.
  @Test func anAcceptorSaysHelloOnlyAfterTheDiallersHello() {
    var acceptor = LinkManager(local: hello("b"))
    let opened = acceptor.inboundOpened(7, remoteHost: "a.local", transport: tls("fb", "fa"), now: 0)
    #expect(!opened.contains { if case .send(_, .hello) = $0 { true } else { false } }, "\(opened)")
    let answered = acceptor.received(.hello(hello("a")), on: 7, now: 1)
    #expect(answered.first == .send(7, .hello(hello("b"))), "\(answered)")
    #expect(LinkPair.linkedUp(answered))
    // An acceptor of an earlier version says hello at once; this dialler does not mind either order.
    var dialer = LinkManager(local: hello("a"))
    guard case .connect(let id, _, _) = dialer.addSeed(host: "b.local", port: 9, now: 0).first else {
      preconditionFailure("expected a dial")
    }
    #expect(dialer.outboundOpened(id, transport: tls("fa", "fb"), now: 0) == [.send(id, .hello(hello("a")))])
    #expect(LinkPair.linkedUp(dialer.received(.hello(hello("b")), on: id, now: 0)))
  }

  @Test func thePinnedCertificateLinksAgain() {
    var pair = LinkPair(acceptorPins: ["a": "fa"])
    pair.open(dialer: tls("fa", "fb"), acceptor: tls("fb", "fa"))
    #expect(LinkPair.refusals(pair.acceptorActions).isEmpty)
    #expect(LinkPair.linkedUp(pair.acceptorActions))
    #expect(!pair.acceptorActions.contains { if case .pin = $0 { true } else { false } }, "already pinned")
  }

  @Test func aPinnedNodeCannotComeBackOverPlaintext() {
    var pair = LinkPair(acceptorPins: ["a": "fa"])
    pair.open(dialer: .plaintext, acceptor: .plaintext)
    #expect(LinkPair.refusals(pair.acceptorActions).map(\.code) == ["plaintext_from_pinned_node"])
    #expect(!LinkPair.linkedUp(pair.acceptorActions))
  }

  @Test func aTLSLinkWithoutAClientCertificateIsRefused() {
    var pair = LinkPair()
    pair.open(dialer: tls("fa", "fb"), acceptor: tls("fb", nil))
    #expect(LinkPair.refusals(pair.acceptorActions).map(\.code) == ["certificate_missing"])
    #expect(pair.acceptor.pins.isEmpty)
  }

  @Test func unpinningLetsANewCertificateIn() {
    var pair = LinkPair(acceptorPins: ["a": "fa"])
    let removed = pair.acceptor.unpin("a")
    let removedAgain = pair.acceptor.unpin("a")
    #expect(removed && !removedAgain)
    pair.open(dialer: tls("fx", "fb"), acceptor: tls("fb", "fx"))
    #expect(pair.acceptorActions.contains(.pin(nodeID: "a", fingerprint: "fx")))
    #expect(LinkPair.linkedUp(pair.acceptorActions))
  }

  @Test func aTLSLinkReplacesAPlaintextDuplicateWhateverTheNodeIDs() {
    // "a" dials "z" over plaintext; then "z" dials "a" over TLS. By node id the link "a" dialled would stay; the TLS
    // one wins instead.
    var manager = LinkManager(local: hello("a"))
    guard case .connect(let dialled, _, _) = manager.addSeed(host: "z.local", port: 9, now: 0).first else {
      Issue.record("expected a dial")
      return
    }
    _ = manager.outboundOpened(dialled, transport: .plaintext, now: 0)
    #expect(LinkPair.linkedUp(manager.received(.hello(hello("z")), on: dialled, now: 0)))
    _ = manager.inboundOpened(1, remoteHost: "z.local", transport: tls("fa", "fz"), now: 1)
    let actions = manager.received(.hello(hello("z")), on: 1, now: 1)
    #expect(actions.contains(.close(dialled, reason: "duplicate link")))
    #expect(actions.contains(.linkReplaced(nodeID: "z")))
    #expect(manager.connection(of: "z") == 1)
    #expect(manager.transport(of: "z")?.encrypted == true)

    // A later plaintext duplicate from "z" loses, though "a" dialled it.
    var second = LinkManager(local: hello("a"))
    _ = second.inboundOpened(1, remoteHost: "z.local", transport: tls("fa", "fz"), now: 0)
    _ = second.received(.hello(hello("z")), on: 1, now: 0)
    // Unpin so that the plaintext link gets as far as the duplicate rule.
    _ = second.unpin("z")
    guard case .connect(let later, _, _) = second.addSeed(host: "z.local", port: 9, now: 1).first else {
      Issue.record("expected a dial")
      return
    }
    _ = second.outboundOpened(later, transport: .plaintext, now: 1)
    let lost = second.received(.hello(hello("z")), on: later, now: 1)
    #expect(lost.contains(.close(later, reason: "duplicate link")))
    #expect(second.connection(of: "z") == 1)
  }
}

@Suite struct MeshSecretTests {
  @Test func nodesWithTheSameSecretLinkAfterBothProofsAndTheSecretNeverTravels() {
    var pair = LinkPair(dialerSecret: "correct horse", acceptorSecret: "correct horse")
    pair.open(dialer: tls("fa", "fb", challenge: 1), acceptor: tls("fb", "fa", challenge: 2), deliver: false)
    // Hellos and challenges first; no link before the proof.
    pair.pump { if case .authProof = $0 { false } else { true } }
    #expect(!LinkPair.linkedUp(pair.acceptorActions) && !LinkPair.linkedUp(pair.dialerActions))
    pair.pump()
    #expect(LinkPair.linkedUp(pair.acceptorActions) && LinkPair.linkedUp(pair.dialerActions))
    #expect(LinkPair.refusals(pair.acceptorActions + pair.dialerActions).isEmpty)
    let secret = Array("correct horse".utf8)
    for frame in pair.frames {
      let bytes = MeshFrameCodec.encode(frame)
      let leaks = bytes.indices.contains { start in
        start + secret.count <= bytes.count && Array(bytes[start..<start + secret.count]) == secret
      }
      #expect(!leaks, "\(frame) carries the secret")
    }
    let proofs = pair.frames.compactMap { if case .authProof(let mac) = $0 { mac } else { nil } }
    #expect(proofs.count == 2 && proofs.allSatisfy { $0.count == 32 } && proofs[0] != proofs[1])
  }

  @Test func differentSecretsCannotLink() {
    var pair = LinkPair(dialerSecret: "secret-one", acceptorSecret: "secret-two")
    pair.open(dialer: tls("fa", "fb", challenge: 1), acceptor: tls("fb", "fa", challenge: 2))
    #expect(!LinkPair.linkedUp(pair.acceptorActions) && !LinkPair.linkedUp(pair.dialerActions))
    let codes = LinkPair.refusals(pair.acceptorActions + pair.dialerActions).map(\.code)
    #expect(codes.contains("mesh_secret_mismatch"))
    #expect(pair.acceptor.pins.isEmpty, "nothing is pinned for a node that failed the secret")
  }

  @Test func aNodeWithoutTheSecretCannotLink() {
    var pair = LinkPair(dialerSecret: nil, acceptorSecret: "the-secret")
    pair.open(dialer: tls("fa", "fb"), acceptor: tls("fb", "fa", challenge: 2))
    #expect(!LinkPair.linkedUp(pair.acceptorActions))
    #expect(LinkPair.refusals(pair.acceptorActions).map(\.code) == ["mesh_secret_missing"])
    #expect(pair.frames.contains(.authProof(mac: [])), "the secretless node says so")
    #expect(pair.dialer.linkedNodeIDs.isEmpty, "the goodbye ends the link on the secretless side too")
  }

  /// Found by black-box QA: the secretless side took the other node's hello for a link (`node.linked`, then
  /// `node.unlinked` at the refusal) and, as after any lost link, re-dialled at the next tick: ~10 link events and
  /// ~23 dials a second. It now never reports the link, reports the refusal, and backs off like a failed dial.
  @Test func aNodeWithoutTheSecretNeverReportsTheLinkAndBacksOff() {
    var pair = LinkPair(dialerSecret: nil, acceptorSecret: "the-secret")
    pair.open(dialer: tls("fa", "fb"), acceptor: tls("fb", "fa", challenge: 2))
    #expect(!LinkPair.linkedUp(pair.dialerActions), "\(pair.dialerActions)")
    #expect(!pair.dialerActions.contains { if case .linkDown = $0 { true } else { false } })
    #expect(LinkPair.refusals(pair.dialerActions).map(\.code) == ["refused_by_node"])
    #expect(pair.dialer.connection(of: "b") == nil)
    #expect(pair.dialer.pins.isEmpty, "nothing is pinned for a link that never came up")
    let retryAt = pair.dialer.addresses["b.local:9"]?.retryAt
    #expect(retryAt.map { $0 >= pair.dialer.configuration.backoffMinimum * 4 / 5 } == true, "retry at \(retryAt ?? 0)")
    #expect(!pair.dialer.tick(now: 100).contains { if case .connect = $0 { true } else { false } })
  }

  @Test func aRelayWithItsOwnCertificatesCannotReuseTheProofs() {
    // Both ends know the secret, but each terminates TLS with a relay (fm1 towards a, fm2 towards b) that forwards
    // every frame: the proofs are bound to the fingerprints each end saw, so they do not verify.
    var pair = LinkPair(dialerSecret: "shared-secret", acceptorSecret: "shared-secret")
    pair.open(dialer: tls("fa", "fm1", challenge: 1), acceptor: tls("fb", "fm2", challenge: 2))
    #expect(!LinkPair.linkedUp(pair.acceptorActions))
    #expect(LinkPair.refusals(pair.acceptorActions + pair.dialerActions).map(\.code).contains("mesh_secret_mismatch"))
  }

  @Test func aProofDependsOnEveryInput() {
    let base = LinkManager.proof(
      secret: [1], challenge: [2], proverIsDialler: true, proverFingerprint: "fa", verifierFingerprint: "fb")
    #expect(base.count == 32)
    #expect(
      base
        == LinkManager.proof(
          secret: [1], challenge: [2], proverIsDialler: true, proverFingerprint: "fa", verifierFingerprint: "fb"))
    let variants = [
      LinkManager.proof(
        secret: [9], challenge: [2], proverIsDialler: true, proverFingerprint: "fa", verifierFingerprint: "fb"),
      LinkManager.proof(
        secret: [1], challenge: [3], proverIsDialler: true, proverFingerprint: "fa", verifierFingerprint: "fb"),
      LinkManager.proof(
        secret: [1], challenge: [2], proverIsDialler: false, proverFingerprint: "fa", verifierFingerprint: "fb"),
      LinkManager.proof(
        secret: [1], challenge: [2], proverIsDialler: true, proverFingerprint: "fx", verifierFingerprint: "fb"),
      LinkManager.proof(
        secret: [1], challenge: [2], proverIsDialler: true, proverFingerprint: "fa", verifierFingerprint: "fx"),
    ]
    #expect(variants.allSatisfy { $0 != base })
  }

  @Test func aMissingProofTimesOut() {
    var pair = LinkPair(dialerSecret: "shared-secret", acceptorSecret: "shared-secret")
    pair.open(dialer: tls("fa", "fb"), acceptor: tls("fb", "fa", challenge: 2), deliver: false)
    // The challenges are lost (say, a node of an older version that ignores them), so no proof comes.
    pair.queue.removeAll { if case .authChallenge = $0.message { true } else { false } }
    pair.pump()
    let timeout = pair.acceptor.configuration.handshakeTimeout
    let actions = pair.acceptor.tick(now: timeout + 1)
    #expect(actions.contains(.close(pair.acceptID, reason: "no mesh-secret proof within \(timeout) ms")))
    #expect(!LinkPair.linkedUp(pair.acceptorActions))
  }

  @Test func withoutSecretsNoChallengeIsSent() {
    var pair = LinkPair()
    pair.open(dialer: .plaintext, acceptor: .plaintext)
    #expect(!pair.frames.contains { if case .authChallenge = $0 { true } else { false } })
    #expect(LinkPair.linkedUp(pair.acceptorActions))
  }
}

@Suite struct AuthFrameCodecTests {
  @Test func challengeAndProofRoundTripWithTheirBytes() throws {
    let nonce = [UInt8](0..<32)
    let challenge = MeshFrameCodec.encode(.authChallenge(nonce: nonce))
    #expect(challenge == [0x4D, 0x47, 0x01, 0x04, 0, 0, 0, 36, 0, 0, 0, 32] + nonce)
    #expect(try MeshFrameCodec.decode(challenge) == .authChallenge(nonce: nonce))
    let proof = MeshFrameCodec.encode(.authProof(mac: []))
    #expect(proof == [0x4D, 0x47, 0x01, 0x05, 0, 0, 0, 4, 0, 0, 0, 0])
    #expect(try MeshFrameCodec.decode(proof) == .authProof(mac: []))
  }

  @Test func anOversizeChallengeIsRejected() {
    let frame: [UInt8] = [0x4D, 0x47, 0x01, 0x04, 0, 0, 0, 69, 0, 0, 0, 65] + [UInt8](repeating: 7, count: 65)
    #expect(throws: MeshFrameError.self) { try MeshFrameCodec.decode(frame) }
  }
}
