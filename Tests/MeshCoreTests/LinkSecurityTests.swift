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

  init(dialerSecret: String? = nil, acceptorSecret: String? = nil, acceptorPins: [String: String] = [:]) {
    dialer = LinkManager(local: hello("a"), secret: dialerSecret.map { Array($0.utf8) })
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
