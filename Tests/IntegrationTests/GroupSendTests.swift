import Foundation
import MeshgateTestSupport
import Testing

/// Group sends between real nodes: one upload to recipients on the sender's node and on two other nodes, one copy
/// over each mesh link, a transfer per recipient; canceling one recipient or the whole group; a receiving node killed
/// with SIGKILL mid-transfer.
@Suite(.timeLimit(.minutes(4)))
struct GroupSendTests {
  @Test func oneUploadReachesEveryRecipientWithOneCopyPerNode() async throws {
    try await withNodes(count: 3, seeds: .allEarlier, linked: true) { nodes in
      let group = try await groupSession(nodes, perNode: [2, 3, 3])
      let size = 8 << 20 + 12_345
      let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ $0 >> 11) }
      let digest = try sha256OfBytes(bytes)
      let upload = try group.sender.uploadGroup(group.sessionID, to: group.recipients, name: "deck.pdf", body: bytes)
      #expect(upload.status == 202, "\(upload)")
      let answer = try upload.jsonObject()
      let summary = try #require(answer["group"] as? [String: Any])
      let groupID = try #require(summary["id"] as? String)
      #expect(summary["recipients"] as? Int == 8)
      #expect(summary["copies"] as? Int == 2)
      let shares = try #require(answer["transfers"] as? [[String: Any]])
      #expect(shares.count == 8)
      // Each recipient has its own transfer, with the group id, and its own file.
      for share in shares {
        let id = try #require(share["id"] as? String)
        #expect(share["groupId"] as? String == groupID)
        let to = try #require((share["to"] as? [String: Any])?["id"] as? String)
        let recipient = try #require(group.recipients.first { $0.id == to })
        let received = try await recipient.awaitTransfer(id, state: "finished", timeout: .seconds(90))
        #expect(received["sha256"] as? String == digest, "\(recipient)")
        #expect(received["groupId"] as? String == groupID)
        #expect(try recipient.events("transfer.started").contains { $0.transferID == id }, "\(recipient)")
        #expect(try recipient.events("transfer.finished").contains { $0.transferID == id }, "\(recipient)")
        let range = try recipient.get("/api/v1/transfers/\(id)/content", headers: [("Range", "bytes=100-199")])
        #expect(range.status == 206)
        #expect(range.body == Array(bytes[100...199]))
        _ = try await group.sender.awaitTransfer(id, state: "finished")
      }
      let whole = try group.recipients[4].get("/api/v1/transfers/\(shares[4]["id"] as! String)/content")
      #expect(whole.body == bytes)
      // Each link carried the file once (plus nothing: chunks are counted without their frame headers).
      for index in [1, 2] {
        let nodeID = try #require(try nodes[index].meshNodes().local["id"] as? String)
        let sent = try #require(try nodes[0].metric("meshgate_mesh_payload_bytes_total{node=\"\(nodeID)\"}"))
        #expect(sent == Double(size), "bytes over the link to node \(index): \(sent) for a \(size)-byte file")
      }
      // The sender's views of the group.
      let list = try group.sender.get("/api/v1/transfers?group=\(groupID)")
      #expect((try list.jsonObject()["transfers"] as? [Any])?.count == 8)
      let final = try #require(
        try group.sender.get("/api/v1/transfer-groups/\(groupID)").jsonObject()["group"] as? [String: Any])
      #expect(final["finished"] as? Int == 8 && final["pending"] as? Int == 0, "\(final)")
      #expect(final["bytes"] as? Int == size * 8 && final["sha256"] as? String == digest, "\(final)")
      // A recipient sees only its own transfer; the group summary is the sender's.
      #expect(try group.recipients[0].get("/api/v1/transfer-groups/\(groupID)").status == 404)
      #expect((try group.recipients[3].get("/api/v1/transfers").jsonObject()["transfers"] as? [Any])?.count == 1)
      // One stored file per receiving node, linked once per recipient (the copy's own name and one per recipient).
      var links: Set<UInt64> = []
      for recipient in group.recipients where recipient.node === nodes[1] {
        let id = try #require(shares.first { ($0["to"] as? [String: Any])?["id"] as? String == recipient.id }?["id"])
        let path = "\(nodes[1].dataDirectory)/files/received/\(id)/deck.pdf"
        let info = try FileManager.default.attributesOfItem(atPath: path)
        links.insert((info[.systemFileNumber] as? NSNumber)?.uint64Value ?? 0)
      }
      #expect(links.count == 1, "the recipients on one node share one file")
      try await expectNoSpoolsOrPartialFiles(nodes)
    }
  }

  @Test func aRecipientCancelsOnlyItsOwnCopyAndTheSenderCancelsTheGroup() async throws {
    // 3 MB/s per copy: 12 MiB take about 4 s, time enough to cancel in the middle.
    try await withNodes(count: 3, arguments: ["--transfer-rate", "3000000"], seeds: .allEarlier, linked: true) {
      nodes in
      let group = try await groupSession(nodes, perNode: [0, 2, 1])
      let size = 12 << 20
      let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7) }
      let upload = try group.sender.uploadGroup(group.sessionID, to: group.recipients, name: "a.bin", body: bytes)
      #expect(upload.status == 202, "\(upload)")
      let shares = try #require(try upload.jsonObject()["transfers"] as? [[String: Any]])
      func share(_ peer: MeshPeer) throws -> String {
        try #require(shares.first { ($0["to"] as? [String: Any])?["id"] as? String == peer.id }?["id"] as? String)
      }
      let (bob1, bob2, carol) = (group.recipients[0], group.recipients[1], group.recipients[2])
      #expect(try bob1.delete("/api/v1/transfers/\(try share(bob1))").status == 200)
      _ = try await group.sender.awaitTransfer(try share(bob1), state: "canceled")
      for peer in [bob2, carol] {
        let done = try await peer.awaitTransfer(try share(peer), state: "finished", timeout: .seconds(60))
        #expect(done["sha256"] as? String == (try sha256OfBytes(bytes)))
      }
      #expect(try bob1.transfer(try share(bob1))?["state"] as? String == "canceled")
      // A second group, canceled as a whole by the sender while it is under way.
      let second = try group.sender.uploadGroup(group.sessionID, to: group.recipients, name: "b.bin", body: bytes)
      #expect(second.status == 202, "\(second)")
      let groupID = try #require((try second.jsonObject()["group"] as? [String: Any])?["id"] as? String)
      let canceled = try group.sender.delete("/api/v1/transfer-groups/\(groupID)")
      #expect(canceled.status == 200, "\(canceled)")
      for item in try #require(try second.jsonObject()["transfers"] as? [[String: Any]]) {
        let id = try #require(item["id"] as? String)
        let to = try #require((item["to"] as? [String: Any])?["id"] as? String)
        let recipient = try #require(group.recipients.first { $0.id == to })
        _ = try await recipient.awaitTransfer(id, state: "canceled")
        #expect(try recipient.events("transfer.canceled").contains { $0.transferID == id })
      }
      #expect(try group.sender.delete("/api/v1/transfer-groups/\(groupID)").status == 409)
      // A third group: Carol leaves the session while hers is under way; she fails alone, Bob and Bob finish.
      let third = try group.sender.uploadGroup(group.sessionID, to: group.recipients, name: "c.bin", body: bytes)
      #expect(third.status == 202, "\(third)")
      let thirdShares = try #require(try third.jsonObject()["transfers"] as? [[String: Any]])
      func thirdShare(_ peer: MeshPeer) throws -> String {
        try #require(thirdShares.first { ($0["to"] as? [String: Any])?["id"] as? String == peer.id }?["id"] as? String)
      }
      #expect(try carol.delete("/api/v1/sessions/\(group.sessionID)/members/me").status == 204)
      let left = try await group.sender.awaitTransfer(try thirdShare(carol), state: "failed")
      #expect((left["reason"] as? String ?? "").contains("left the session"), "\(left)")
      _ = try await carol.awaitTransfer(try thirdShare(carol), state: "failed")
      for peer in [bob1, bob2] {
        _ = try await peer.awaitTransfer(try thirdShare(peer), state: "finished", timeout: .seconds(60))
      }
      // Spools and partial files are gone once everything ended.
      try await expectNoSpoolsOrPartialFiles(nodes)
    }
  }

  @Test func aSenderKilledMidGroupResumesEveryCopyAfterRestart() async throws {
    try await withNodes(count: 3, arguments: ["--transfer-rate", "2000000"], seeds: .allEarlier, linked: true) {
      nodes in
      let group = try await groupSession(nodes, perNode: [1, 2, 1])
      let size = 16 << 20
      let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 29 &+ $0 >> 10) }
      let digest = try sha256OfBytes(bytes)
      let upload = try group.sender.uploadGroup(group.sessionID, to: group.recipients, name: "s.bin", body: bytes)
      #expect(upload.status == 202, "\(upload)")
      let shares = try #require(try upload.jsonObject()["transfers"] as? [[String: Any]])
      let ids = shares.compactMap { $0["id"] as? String }
      #expect(ids.count == 4)
      try await eventuallyAsync(timeout: .seconds(30), message: "the remote recipients hold a few MB") {
        try group.recipients.dropFirst().allSatisfy { recipient in
          let id = ids[group.recipients.firstIndex { $0.id == recipient.id }!]
          return (try recipient.transfer(id)?["bytes"] as? Int ?? 0) > 2 << 20
        }
      }
      nodes[0].kill9()
      try await onDedicatedThread { try nodes[0].restart() }
      for (recipient, id) in zip(group.recipients, ids) {
        let done = try await recipient.awaitTransfer(id, state: "finished", timeout: .seconds(90))
        #expect(done["sha256"] as? String == digest, "\(recipient)")
        _ = try await group.sender.awaitTransfer(id, state: "finished")
      }
      for (recipient, id) in zip(group.recipients, ids).dropFirst() {
        #expect((try recipient.transfer(id)?["resumedFrom"] as? Int ?? 0) > 0, "\(recipient)")
      }
      try await expectNoSpoolsOrPartialFiles(nodes)
    }
  }

  @Test func aNodeThatRefusesTheFileFailsOnlyItsRecipients() async throws {
    // Node 2 takes files of at most 1000 bytes: its recipient's share fails with the reason, the others finish; a
    // group that only node 2's recipients would get is refused with its 413, before any byte is read.
    try await withNodes(
      count: 3, perNodeArguments: { $0 == 2 ? ["--max-transfer-bytes", "1000"] : [] }, seeds: .allEarlier,
      linked: true
    ) { nodes in
      let group = try await groupSession(nodes, perNode: [1, 1, 2])
      let bytes = (0..<5000).map { UInt8(truncatingIfNeeded: $0) }
      let upload = try group.sender.uploadGroup(group.sessionID, to: group.recipients, name: "big.txt", body: bytes)
      #expect(upload.status == 202, "\(upload)")
      let shares = try #require(try upload.jsonObject()["transfers"] as? [[String: Any]])
      for (recipient, share) in zip(group.recipients, shares) {
        let id = try #require(share["id"] as? String)
        if recipient.node === nodes[2] {
          #expect(share["state"] as? String == "failed", "\(share)")
          #expect((share["reason"] as? String ?? "").contains("accepts at most 1000"), "\(share)")
          #expect(try recipient.transfer(id) == nil, "the refusing node keeps no record for \(recipient)")
        } else {
          _ = try await recipient.awaitTransfer(id, state: "finished")
        }
      }
      let summary = try #require(try upload.jsonObject()["group"] as? [String: Any])
      let groupID = try #require(summary["id"] as? String)
      let final = try #require(
        try group.sender.get("/api/v1/transfer-groups/\(groupID)").jsonObject()["group"] as? [String: Any])
      #expect(final["finished"] as? Int == 2 && final["failed"] as? Int == 2, "\(final)")
      let refused = try group.sender.uploadGroup(
        group.sessionID, to: Array(group.recipients.suffix(2)), name: "big.txt", body: bytes)
      #expect(refused.status == 413, "\(refused)")
      #expect(errorCode(refused) == "payload_too_large")
      // Said once, with what to do about it.
      let message = errorMessage(refused) ?? ""
      #expect(message.components(separatedBy: "accepts at most 1000").count == 2, "\(message)")
      #expect(message.hasSuffix("send a smaller file, or split it"), "\(message)")
      try await expectNoSpoolsOrPartialFiles(nodes)
    }
  }

  @Test func aReceivingNodeKilledMidGroupFinishesAfterRestartAndTheOthersAreUnaffected() async throws {
    try await withNodes(count: 3, arguments: ["--transfer-rate", "2000000"], seeds: .allEarlier, linked: true) {
      nodes in
      let group = try await groupSession(nodes, perNode: [1, 2, 1])
      let size = 24 << 20
      let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 9) }
      let digest = try sha256OfBytes(bytes)
      let upload = try group.sender.uploadGroup(group.sessionID, to: group.recipients, name: "r.bin", body: bytes)
      #expect(upload.status == 202, "\(upload)")
      let shares = try #require(try upload.jsonObject()["transfers"] as? [[String: Any]])
      func share(_ peer: MeshPeer) throws -> String {
        try #require(shares.first { ($0["to"] as? [String: Any])?["id"] as? String == peer.id }?["id"] as? String)
      }
      let (local, bob1, bob2, carol) = (
        group.recipients[0], group.recipients[1], group.recipients[2], group.recipients[3]
      )
      try await eventuallyAsync(timeout: .seconds(30), message: "bob1 holds a few MB") {
        (try bob1.transfer(try share(bob1))?["bytes"] as? Int ?? 0) > 4 << 20
      }
      nodes[1].kill9()
      #expect(try group.sender.transfer(try share(bob1))?["state"] as? String != "finished")
      try await eventuallyAsync(timeout: .seconds(30), message: "bob1's share is interrupted at the sender") {
        try group.sender.transfer(try share(bob1))?["state"] as? String == "interrupted"
      }
      // The other node's recipient and the local one finish meanwhile.
      let carolDone = try await carol.awaitTransfer(try share(carol), state: "finished", timeout: .seconds(60))
      #expect(carolDone["sha256"] as? String == digest)
      #expect(try await local.awaitTransfer(try share(local), state: "finished")["sha256"] as? String == digest)
      try await onDedicatedThread { try nodes[1].restart() }
      for peer in [bob1, bob2] {
        let done = try await peer.awaitTransfer(try share(peer), state: "finished", timeout: .seconds(90))
        #expect(done["sha256"] as? String == digest, "\(peer)")
        #expect((done["resumedFrom"] as? Int ?? 0) > 0, "\(done)")
        #expect(try peer.get("/api/v1/transfers/\(try share(peer))/content").body == bytes)
        _ = try await group.sender.awaitTransfer(try share(peer), state: "finished")
      }
    }
  }
}

/// The 200 MiB group send: 30 recipients on 3 nodes, each link carries the file once, the sender's node
/// stays small. A bulk suite (make test runs it on its own).
@Suite(.timeLimit(.minutes(8)))
struct GroupSendBulkTests {
  @Test func twoHundredMiBToThirtyRecipientsOnThreeNodes() async throws {
    try await withNodes(count: 3, seeds: .allEarlier, linked: true) { nodes in
      let group = try await groupSession(nodes, perNode: [10, 10, 10])
      let directory = NSTemporaryDirectory() + "meshgate-group-\(UUID().uuidString)"
      try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
      defer { try? FileManager.default.removeItem(atPath: directory) }
      let path = "\(directory)/big.bin"
      let size = 200 << 20
      try await runTool("/bin/sh", ["-c", "head -c \(size) /dev/urandom > '\(path)'"])
      let digest = try await sha256OfFile(path)
      let before = try #require(peakRSSKiB(nodes[0]))
      print("=== sender node peak RSS before the upload: \(before / 1024) MiB")
      let started = Date()
      let (status, body) = try await group.sender.uploadGroupFile(
        group.sessionID, to: group.recipients, name: "big.bin", path: path)
      #expect(status == 202, "\(body)")
      let object = try #require(try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any])
      let shares = try #require(object["transfers"] as? [[String: Any]])
      for share in shares {
        let id = try #require(share["id"] as? String)
        let to = try #require((share["to"] as? [String: Any])?["id"] as? String)
        let recipient = try #require(group.recipients.first { $0.id == to })
        let done = try await recipient.awaitTransfer(id, state: "finished", timeout: .seconds(300))
        #expect(done["sha256"] as? String == digest)
      }
      print(
        "=== group send of 200 MiB to 30 recipients: \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
      for index in [1, 2] {
        let nodeID = try #require(try nodes[index].meshNodes().local["id"] as? String)
        let sent = try #require(try nodes[0].metric("meshgate_mesh_payload_bytes_total{node=\"\(nodeID)\"}"))
        #expect(sent == Double(size), "bytes over the link to node \(index): \(sent)")
      }
      // Every recipient's stored file hashes right (one inode per node, read through each recipient's name).
      for share in shares.prefix(3) + shares.suffix(3) {
        let id = share["id"] as! String
        let nodeID = (share["to"] as? [String: Any])?["nodeId"] as? String
        let node = try #require(try nodes.first { try $0.meshNodes().local["id"] as? String == nodeID })
        #expect(try await sha256OfFile("\(node.dataDirectory)/files/received/\(id)/big.bin") == digest)
      }
      let peak = try #require(peakRSSKiB(nodes[0]))
      print("=== sender node peak RSS: \(peak / 1024) MiB")
      #expect(peak <= 64 * 1024, "sender node peak RSS \(peak) KiB")
    }
  }
}

// MARK: - Helpers

/// A sender on node 0 and `perNode[i]` recipients on node i, all connected in one session (encryption none).
struct GroupSession {
  let sender: MeshPeer
  let recipients: [MeshPeer]
  let sessionID: String
}

func groupSession(
  _ nodes: [NodeProcess], perNode: [Int], isolation: isolated (any Actor)? = #isolation
) async throws -> GroupSession {
  try await awaitLinks(nodes)
  let sender = try nodes[0].meshPeer("sender")
  let sessionID = try #require(try sender.createSession(encryption: "none")["id"] as? String)
  var recipients: [MeshPeer] = []
  for (index, count) in perNode.enumerated() {
    for number in 0..<count {
      let peer = try nodes[index].meshPeer("r\(index)-\(number)")
      _ = try await inviteAndAccept(sender, peer, sessionID: sessionID)
      recipients.append(peer)
    }
  }
  for recipient in recipients where !(recipient.node === nodes[0]) {
    try await eventuallyAsync(timeout: .seconds(15), message: "the sender connected on \(recipient)'s node") {
      try recipient.memberStates(sessionID)[sender.id] == "connected"
    }
  }
  return GroupSession(sender: sender, recipients: recipients, sessionID: sessionID)
}

extension MeshPeer {
  /// `POST /sessions/{id}/resources?to=a,b,c&name=` with an in-memory body.
  func uploadGroup(_ sessionID: String, to targets: [MeshPeer], name: String, body: [UInt8]) throws -> HTTPResponse {
    try HTTPClient.post(
      port: node.port,
      path: "/api/v1/sessions/\(sessionID)/resources?to=\(targets.map(\.id).joined(separator: ","))&name=\(name)",
      body: body, contentType: nil, token: token, timeout: .seconds(120))
  }

  /// The same with the file at `path`, streamed by curl.
  func uploadGroupFile(_ sessionID: String, to targets: [MeshPeer], name: String, path: String) async throws -> (
    Int, String
  ) {
    let url =
      "http://127.0.0.1:\(node.port)/api/v1/sessions/\(sessionID)/resources?to=\(targets.map(\.id).joined(separator: ","))&name=\(name)"
    let output = try await runTool(
      "/usr/bin/curl",
      [
        "-sS", "-X", "POST", "-H", "Authorization: Bearer \(token)", "-H", "Content-Type: application/octet-stream",
        "-T", path, "-w", "\n%{http_code}", url,
      ], check: false)
    let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
    return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
  }
}

/// Waits until no node keeps a spool or a partial file (`<data dir>/transfers` is empty everywhere).
func expectNoSpoolsOrPartialFiles(_ nodes: [NodeProcess], isolation: isolated (any Actor)? = #isolation) async throws {
  var left: [[String]] = []
  try await eventuallyAsync(timeout: .seconds(10), message: "no spool or partial file left: \(left)") {
    left = nodes.map { node in
      (try? FileManager.default.contentsOfDirectory(atPath: "\(node.dataDirectory)/transfers")) ?? []
    }
    return left.allSatisfy(\.isEmpty)
  }
}

func sha256OfBytes(_ bytes: [UInt8]) throws -> String {
  let path = NSTemporaryDirectory() + "meshgate-sha-\(UUID().uuidString)"
  defer { try? FileManager.default.removeItem(atPath: path) }
  try Data(bytes).write(to: URL(fileURLWithPath: path))
  return String(try runCommand("/usr/bin/sha256sum", [path]).stdout.prefix(64))
}
