import Foundation
import MeshgateTestSupport
import Testing

/// The Job Manager on real nodes: CRUD and validation over REST, paging, isolation between peers, and sending a job
/// across the mesh (not receiving → 409; accept delivers it into both lists; decline and expiry leave both lists as
/// they were and tell the sender), with everything surviving node restarts.
@Suite(.timeLimit(.minutes(3)))
struct JobTests {
  static let receiveJobs = "jobmanager-jobs"

  // MARK: - CRUD, validation, paging, isolation

  @Test func crudValidationPagingAndIsolationOverREST() async throws {
    try await withNodes(count: 2, seeds: .allEarlier) { nodes in
      let alice = try nodes[0].meshPeer("alice")
      let carol = try nodes[0].meshPeer("carol")
      let bob = try nodes[1].meshPeer("bob")

      // Create with every field; payment given as a string comes back as a string with two places.
      let created = try alice.post(
        "/api/v1/jobs",
        json: #"{"name":"Fix the sink","dueDate":"2027-03-31","payment":"120","notes":"Kitchen, 2nd floor"}"#)
      #expect(created.status == 201, "\(created)")
      let job = try #require(try created.jsonObject()["job"] as? [String: Any])
      let jobID = try #require(job["id"] as? String)
      #expect(created.header("location") == "/api/v1/jobs/\(jobID)")
      #expect(job["name"] as? String == "Fix the sink")
      #expect(job["dueDate"] as? String == "2027-03-31")
      #expect(job["payment"] as? String == "120.00")
      #expect(job["notes"] as? String == "Kitchen, 2nd floor")
      #expect(job["assignedTo"] is NSNull)
      #expect(job["receivedFrom"] is NSNull)
      let createdAt = try #require(job["createdAt"] as? String)
      #expect(isTimestamp(createdAt), "\(createdAt)")
      #expect(job["updatedAt"] as? String == createdAt)
      #expect(try canonical(alice.jobIfPresent(jobID)) == canonical(job))

      // Only a name: the optional fields are null; numbers become exact two-place strings.
      let minimal = try alice.createJob(#"{"name":"Walk the dog"}"#)
      for field in ["dueDate", "payment", "notes", "assignedTo", "receivedFrom"] {
        #expect(minimal[field] is NSNull, "\(field) of a job created with a name only: \(minimal)")
      }
      #expect(try alice.createJob(#"{"name":"a","payment":12.5}"#)["payment"] as? String == "12.50")
      #expect(try alice.createJob(#"{"name":"b","payment":0}"#)["payment"] as? String == "0.00")
      #expect(try alice.createJob(#"{"name":"c","payment":"0.01","dueDate":null}"#)["payment"] as? String == "0.01")
      // 200 characters of 25-byte emoji are fine; names are kept exactly (not trimmed).
      let emojiName = String(repeating: "👨‍👩‍👧‍👦", count: 200)
      #expect(try alice.createJob(try jsonText(["name": emojiName]))["name"] as? String == emojiName)
      #expect(try alice.createJob(#"{"name":"  spaced  "}"#)["name"] as? String == "  spaced  ")
      let notes4096 = String(repeating: "€", count: 1_365) + "a"
      #expect(try alice.createJob(try jsonText(["name": "n", "notes": notes4096]))["notes"] as? String == notes4096)
      let aliceCount = try alice.allJobs().count
      #expect(aliceCount == 8)

      // Rule violations: 400 validation_failed naming the field; type errors and unknown fields: 400 naming it.
      let name201 = String(repeating: "a", count: 201)
      let notes4097 = String(repeating: "€", count: 1_365) + "ab"
      let invalid: [(body: String, field: String, ruleViolation: Bool)] = [
        (#"{"name":""}"#, "name", true),
        (#"{"name":"   "}"#, "name", true),
        (#"{"name":"\u3000\u00a0"}"#, "name", true),
        (try jsonText(["name": name201]), "name", true),
        (try jsonText(["name": String(repeating: "👍", count: 201)]), "name", true),
        (#"{"name":"bell\u0007"}"#, "name", true),
        (#"{"name":"two\nlines"}"#, "name", true),
        (#"{"name":"x","dueDate":"2023-02-29"}"#, "dueDate", true),
        (#"{"name":"x","dueDate":"2100-02-29"}"#, "dueDate", true),
        (#"{"name":"x","dueDate":"2027-13-01"}"#, "dueDate", true),
        (#"{"name":"x","dueDate":"2027-3-1"}"#, "dueDate", true),
        (#"{"name":"x","dueDate":"20270301"}"#, "dueDate", true),
        (#"{"name":"x","dueDate":"2027-03-01T10:00:00Z"}"#, "dueDate", true),
        (#"{"name":"x","payment":-1}"#, "payment", true),
        (#"{"name":"x","payment":1.234}"#, "payment", true),
        (#"{"name":"x","payment":"1.234"}"#, "payment", true),
        (#"{"name":"x","payment":"abc"}"#, "payment", true),
        (#"{"name":"x","payment":"1."}"#, "payment", true),
        (#"{"name":"x","payment":".5"}"#, "payment", true),
        (#"{"name":"x","payment":true}"#, "payment", true),
        (#"{"name":"x","payment":1e20}"#, "payment", true),
        (#"{"name":"x","payment":100000000000000000000000}"#, "payment", true),
        (try jsonText(["name": "x", "notes": notes4097]), "notes", true),
        (#"{"dueDate":"2027-03-01"}"#, "name", false),
        (#"{"name":42}"#, "name", false),
        (#"{"name":null}"#, "name", false),
        (#"{"name":"x","dueDate":20270301}"#, "dueDate", false),
        (#"{"name":"x","notes":7}"#, "notes", false),
        (#"{"name":"x","colour":"red"}"#, "colour", false),
      ]
      for (body, field, ruleViolation) in invalid {
        let response = try alice.post("/api/v1/jobs", json: body)
        let shown = body.count > 120 ? "\(body.prefix(60))… (\(body.utf8.count) bytes)" : body
        #expect(response.status == 400, "POST /jobs \(shown) → \(response.status) \(response.text.prefix(300))")
        #expect(errorMessage(response)?.contains(field) == true, "POST /jobs \(shown): \(response.text.prefix(300))")
        if ruleViolation {
          #expect(errorCode(response) == "validation_failed", "POST /jobs \(shown): \(response.text.prefix(300))")
        }
      }
      let malformed = try alice.post("/api/v1/jobs", json: #"{"name":"#)
      #expect(malformed.status == 400 && errorCode(malformed) == "malformed_json", "\(malformed)")
      let notAnObject = try alice.post("/api/v1/jobs", json: #"["name"]"#)
      #expect(notAnObject.status == 400, "\(notAnObject)")
      #expect(try alice.allJobs().count == aliceCount, "a rejected POST must not create a job")

      // PATCH changes only what it names; null clears an optional field; the name cannot be cleared.
      let patched = try alice.patchJob(jobID, #"{"name":"Fix the kitchen sink","payment":99.5}"#)
      #expect(patched.status == 200, "\(patched)")
      let afterPatch = try #require(try patched.jsonObject()["job"] as? [String: Any])
      #expect(afterPatch["id"] as? String == jobID)
      #expect(afterPatch["name"] as? String == "Fix the kitchen sink")
      #expect(afterPatch["payment"] as? String == "99.50")
      #expect(afterPatch["dueDate"] as? String == "2027-03-31")
      #expect(afterPatch["notes"] as? String == "Kitchen, 2nd floor")
      #expect(afterPatch["createdAt"] as? String == createdAt)
      let updatedAt = try #require(afterPatch["updatedAt"] as? String)
      #expect(isTimestamp(updatedAt) && updatedAt >= createdAt, "updatedAt \(updatedAt), createdAt \(createdAt)")
      #expect(try canonical(alice.jobIfPresent(jobID)) == canonical(afterPatch))

      let cleared = try alice.patchJob(jobID, #"{"dueDate":null,"payment":null,"notes":null}"#)
      #expect(cleared.status == 200, "\(cleared)")
      let afterClear = try #require(try alice.jobIfPresent(jobID))
      for field in ["dueDate", "payment", "notes"] {
        #expect(afterClear[field] is NSNull, "\(field) after PATCH null: \(afterClear)")
      }
      #expect(afterClear["name"] as? String == "Fix the kitchen sink")
      let restored = try alice.patchJob(jobID, #"{"dueDate":"2024-02-29","payment":"0.01","notes":"again"}"#)
      #expect(restored.status == 200, "\(restored)")
      let beforeBadPatches = try canonical(alice.jobIfPresent(jobID))
      let badPatches: [(body: String, field: String?)] = [
        ("{}", nil),
        (#"{"name":null}"#, "name"),
        (#"{"name":""}"#, "name"),
        (#"{"name":"\#(name201)"}"#, "name"),
        (#"{"dueDate":"2023-02-29"}"#, "dueDate"),
        (#"{"payment":"1.234"}"#, "payment"),
        (#"{"payment":-5}"#, "payment"),
        (try jsonText(["notes": notes4097]), "notes"),
        (#"{"colour":"red"}"#, "colour"),
        // Nothing of a PATCH applies when any field is invalid.
        (#"{"name":"Renamed","dueDate":"2027-02-30"}"#, "dueDate"),
        (#"{"notes":"changed","payment":"x"}"#, "payment"),
      ]
      for (body, field) in badPatches {
        let response = try alice.patchJob(jobID, body)
        let shown = body.count > 120 ? "\(body.prefix(60))… (\(body.utf8.count) bytes)" : body
        #expect(response.status == 400, "PATCH \(shown) → \(response.status) \(response.text.prefix(300))")
        if let field {
          #expect(errorMessage(response)?.contains(field) == true, "PATCH \(shown): \(response.text.prefix(300))")
        }
      }
      #expect(try canonical(alice.jobIfPresent(jobID)) == beforeBadPatches, "a rejected PATCH must change nothing")
      #expect(try alice.patchJob("no-such-job", #"{"name":"x"}"#).status == 404)

      // Paging: limit/cursor walk every job once, oldest first (createdAt, then id), the same order as one page.
      var carolJobs: [[String: Any]] = []
      for index in 1...7 { carolJobs.append(try carol.createJob(try jsonText(["name": "carol \(index)"]))) }
      let expectedOrder = carolJobs.sorted {
        ($0["createdAt"] as! String, $0["id"] as! String) < ($1["createdAt"] as! String, $1["id"] as! String)
      }.map { $0["id"] as! String }
      var pages: [[String]] = []
      var cursor: String?
      repeat {
        let page = try carol.jobPage(limit: 3, cursor: cursor)
        pages.append(page.jobs.map { $0["id"] as? String ?? "?" })
        #expect(page.jobs.count <= 3)
        cursor = page.nextCursor
        if cursor != nil { #expect(page.jobs.count == 3, "a page with a next cursor is full: \(pages)") }
      } while cursor != nil && pages.count < 10
      #expect(pages.map(\.count) == [3, 3, 1], "\(pages)")
      #expect(pages.flatMap { $0 } == expectedOrder, "paged order \(pages), expected \(expectedOrder)")
      #expect(try carol.jobPage().jobs.map { $0["id"] as? String ?? "?" } == expectedOrder)
      #expect(try carol.jobPage().nextCursor == nil)
      let exact = try carol.jobPage(limit: 7)
      #expect(exact.jobs.count == 7)
      if let next = exact.nextCursor {
        let after = try carol.jobPage(limit: 7, cursor: next)
        #expect(after.jobs.isEmpty && after.nextCursor == nil, "past the last job: \(after)")
      }
      #expect(try carol.jobPage(limit: 500).jobs.count == 7)
      for limit in ["0", "501", "-1", "abc", "2.5", ""] {
        let response = try carol.get("/api/v1/jobs?limit=\(limit)")
        #expect(response.status == 400, "limit=\(limit) → \(response.status) \(response.text.prefix(200))")
      }

      // Isolation: a peer sees, changes, deletes and sends only its own jobs, on its node or any other.
      #expect(Set(try carol.allJobs().compactMap { $0["id"] as? String }) == Set(expectedOrder))
      #expect(try !alice.allJobs().contains { expectedOrder.contains($0["id"] as? String ?? "") })
      #expect(try bob.allJobs().isEmpty)
      for (stranger, otherJob) in [(carol, jobID), (bob, jobID), (alice, expectedOrder[0])] {
        #expect(try stranger.get("/api/v1/jobs/\(otherJob)").status == 404, "\(stranger) reading \(otherJob)")
        #expect(try stranger.patchJob(otherJob, #"{"name":"mine"}"#).status == 404, "\(stranger) patching")
        #expect(try stranger.delete("/api/v1/jobs/\(otherJob)").status == 404, "\(stranger) deleting")
        let send = try stranger.post("/api/v1/jobs/\(otherJob)/send", json: try jsonText(["to": bob.id]))
        #expect(send.status == 404, "\(stranger) sending \(otherJob): \(send)")
      }
      // A cursor naming another peer's job (or no job) is refused and reveals nothing of it.
      let foreign = try alice.get("/api/v1/jobs?limit=100&cursor=\(expectedOrder[3])")
      #expect(foreign.status == 400, "\(foreign)")
      #expect(errorMessage(foreign)?.contains("cursor") == true)
      #expect(try alice.jobIfPresent(jobID)?["name"] as? String == "Fix the kitchen sink")
      #expect(try carol.jobIfPresent(expectedOrder[0]) != nil)
      let unauthenticated = try HTTPClient.get(port: nodes[0].port, path: "/api/v1/jobs")
      #expect(unauthenticated.status == 401, "\(unauthenticated)")
      let wrongNode = try HTTPClient.get(port: nodes[1].port, path: "/api/v1/jobs", token: alice.token)
      #expect(wrongNode.status == 401, "alice's token on node1: \(wrongNode)")

      // DELETE removes the job for good.
      #expect(try alice.delete("/api/v1/jobs/\(jobID)").status == 204)
      #expect(try alice.get("/api/v1/jobs/\(jobID)").status == 404)
      #expect(try alice.delete("/api/v1/jobs/\(jobID)").status == 404)
      #expect(try alice.allJobs().count == aliceCount - 1)
      #expect(try !alice.allJobs().contains { $0["id"] as? String == jobID })
    }
  }

  // MARK: - Sending across the mesh

  @Test func acceptedOfferDeliversTheJobToBothListsAndSurvivesRestarts() async throws {
    try await withNodes(count: 2, seeds: .allEarlier, linked: true) { nodes in
      let alice = try nodes[0].meshPeer("alice")
      let bob = try nodes[1].meshPeer("bob")
      let job = try alice.createJob(
        #"{"name":"Fix the sink","dueDate":"2027-03-31","payment":"120.00","notes":"Kitchen, 2nd floor"}"#)
      let jobID = try #require(job["id"] as? String)

      // Bob is known to alice's node but does not receive jobs: 409 (once node0 has heard of bob at all).
      var notReceiving: HTTPResponse?
      try await eventuallyAsync(timeout: .seconds(15), message: "node0 learning of bob") {
        notReceiving = try alice.sendJob(jobID, to: bob.id)
        return notReceiving!.status != 404
      }
      #expect(notReceiving!.status == 409, "\(notReceiving!)")
      #expect(errorCode(notReceiving!) == "not_receiving_jobs", "\(notReceiving!)")

      // Other bad sends.
      let unknownPeer = try alice.sendJob(jobID, to: UUID().uuidString.lowercased())
      #expect(unknownPeer.status == 404, "\(unknownPeer)")
      #expect(try alice.sendJob("no-such-job", to: bob.id).status == 404)
      #expect(try alice.sendJob(jobID, to: alice.id).status == 400)
      for body in [
        #"{}"#, #"{"to":42}"#, "{\"to\":\"\(bob.id)\",\"timeoutSeconds\":0}",
        "{\"to\":\"\(bob.id)\",\"timeoutSeconds\":301}", "{\"to\":\"\(bob.id)\",\"timeoutSeconds\":\"soon\"}",
        "{\"to\":\"\(bob.id)\",\"colour\":\"red\"}",
      ] {
        let response = try alice.post("/api/v1/jobs/\(jobID)/send", json: body)
        #expect(response.status == 400, "send \(body) → \(response)")
      }

      // Bob turns on "Receive Jobs"; once alice's node sees it, the offer goes out as an invitation.
      try await awaitReceiving(bob, seenBy: alice)
      let aliceMark = try alice.lastEventID()
      let bobMark = try bob.lastEventID()
      let offered = try alice.sendJob(jobID, to: bob.id, timeoutSeconds: 60)
      #expect(offered.status == 202, "\(offered)")
      let offer = try offered.jsonObject()
      #expect(try canonical(offer["job"]) == canonical(job), "the 202 carries the job as it is")
      let invitation = try #require(offer["invitation"] as? [String: Any], "\(offer)")
      let invitationID = try #require(invitation["id"] as? String)
      #expect(
        invitation["context"] as? String == "Fix the sink\nDue: 2027-03-31\nPayment: 120.00\nNotes: Kitchen, 2nd floor",
        "the whole job in the offer")
      #expect(((invitation["to"] as? [String: Any])?["id"] as? String) == bob.id, "\(invitation)")
      let code = try #require(invitation["verificationCode"] as? String, "\(invitation)")
      #expect(code.count == 6 && code.allSatisfy(\.isNumber), "verification code \(code)")

      // One offer at a time per job.
      let again = try alice.sendJob(jobID, to: bob.id)
      #expect(again.status == 409 && errorCode(again) == "already_sending", "\(again)")

      // Bob sees who offers what, with the same verification code.
      let received = try await bob.awaitEvent("invitation.received", since: bobMark) {
        $0.invitationID == invitationID
      }
      #expect(
        received.invitation?["context"] as? String
          == "Fix the sink\nDue: 2027-03-31\nPayment: 120.00\nNotes: Kitchen, 2nd floor", "\(received)")
      #expect(received.invitation?["verificationCode"] as? String == code, "\(received)")
      let from = received.invitation?["from"] as? [String: Any]
      #expect(from?["id"] as? String == alice.id && from?["displayName"] as? String == "alice", "\(received)")
      #expect(try bob.allJobs().isEmpty, "nothing lands in bob's list before he accepts")

      try await bob.answerWhenReceived(invitationID, "accept")

      // Bob's copy: a new job in his list, receivedFrom alice, the same fields.
      let delivered = try await bob.awaitEvent("job.received", since: bobMark)
      let bobJob = try #require(delivered.data["job"] as? [String: Any], "\(delivered)")
      let bobJobID = try #require(bobJob["id"] as? String)
      #expect(bobJobID != jobID, "the receiver's copy is a job of its own")
      for field in ["name", "dueDate", "payment", "notes"] {
        #expect(bobJob[field] as? String == job[field] as? String, "\(field) of bob's copy: \(bobJob)")
      }
      expectParty(bobJob["receivedFrom"], alice, nodeID: nodes[0].nodeID, "bob's receivedFrom")
      #expect(bobJob["assignedTo"] is NSNull, "\(bobJob)")
      let bobList = try bob.allJobs()
      #expect(bobList.count == 1, "\(bobList)")
      #expect(try canonical(bobList.first) == canonical(bobJob), "bob's list shows what job.received said")

      // Alice's job stays in her list, now assignedTo bob.
      let assigned = try await alice.awaitEvent("job.delivered", since: aliceMark)
      let aliceJob = try #require(assigned.data["job"] as? [String: Any], "\(assigned)")
      #expect(aliceJob["id"] as? String == jobID)
      expectParty(aliceJob["assignedTo"], bob, nodeID: nodes[1].nodeID, "alice's assignedTo")
      #expect(aliceJob["receivedFrom"] is NSNull)
      let aliceList = try alice.allJobs()
      #expect(aliceList.count == 1, "\(aliceList)")
      #expect(try canonical(alice.jobIfPresent(jobID)) == canonical(aliceJob), "alice's GET shows job.delivered's job")
      #expect(try alice.events("job.send.failed", since: aliceMark).isEmpty)
      #expect(try bob.events("job.received", since: bobMark).count == 1, "delivered exactly once")

      // Each sees only their own copy.
      #expect(try bob.get("/api/v1/jobs/\(jobID)").status == 404)
      #expect(try alice.get("/api/v1/jobs/\(bobJobID)").status == 404)

      // An assigned job cannot be offered again.
      let assignedAgain = try alice.sendJob(jobID, to: bob.id)
      #expect(assignedAgain.status == 409 && errorCode(assignedAgain) == "already_assigned", "\(assignedAgain)")

      // Both lists survive a restart of either node (same data dir), assignment and origin included.
      let aliceSnapshot = try canonical(alice.jobIfPresent(jobID))
      let bobSnapshot = try canonical(bob.jobIfPresent(bobJobID))
      for (index, node) in nodes.enumerated() {
        try await onDedicatedThread { try node.restart() }
        #expect(try canonical(alice.jobIfPresent(jobID)) == aliceSnapshot, "alice's job after restarting node\(index)")
        #expect(try canonical(bob.jobIfPresent(bobJobID)) == bobSnapshot, "bob's job after restarting node\(index)")
        #expect(try alice.allJobs().count == 1 && bob.allJobs().count == 1, "after restarting node\(index)")
      }
      let afterRestart = try #require(try alice.jobIfPresent(jobID))
      expectParty(afterRestart["assignedTo"], bob, nodeID: nodes[1].nodeID, "alice's assignedTo after restarts")
      let bobAfterRestart = try #require(try bob.jobIfPresent(bobJobID))
      expectParty(bobAfterRestart["receivedFrom"], alice, nodeID: nodes[0].nodeID, "bob's receivedFrom after restarts")
      let stillAssigned = try alice.sendJob(jobID, to: bob.id)
      #expect(stillAssigned.status == 409 && errorCode(stillAssigned) == "already_assigned", "\(stillAssigned)")
      #expect(try alice.events("job.delivered").count == 1)
      #expect(try bob.events("job.received").count == 1)
    }
  }

  @Test func declineExpiryAndCancelLeaveBothListsUnchangedAndTellTheSenderThenAResendWorks() async throws {
    try await withNodes(count: 2, seeds: .allEarlier, linked: true) { nodes in
      let alice = try nodes[0].meshPeer("alice")
      let bob = try nodes[1].meshPeer("bob")
      let job = try alice.createJob(#"{"name":"Paint the fence","payment":80}"#)
      let jobID = try #require(job["id"] as? String)
      let original = try canonical(job)
      try await awaitReceiving(bob, seenBy: alice)

      // Declined: job.send.failed (declined) for alice, nothing changes in either list.
      let declineMark = try alice.lastEventID()
      let bobMark = try bob.lastEventID()
      let first = try alice.sendJob(jobID, to: bob.id, timeoutSeconds: 60)
      #expect(first.status == 202, "\(first)")
      let firstID = try #require((try first.jsonObject()["invitation"] as? [String: Any])?["id"] as? String)
      let declined = try await bob.answerWhenReceived(firstID, "decline")
      #expect(declined["state"] as? String == "declined", "\(declined)")
      let declineFailure = try await alice.awaitEvent("job.send.failed", since: declineMark) {
        $0.data["jobId"] as? String == jobID
      }
      #expect(declineFailure.data["reason"] as? String == "declined", "\(declineFailure)")
      #expect(partyID(declineFailure.data["to"]) == bob.id, "\(declineFailure)")
      // Like job.received and job.delivered, job.send.failed carries the job itself (docs/events.md).
      #expect(try canonical(declineFailure.data["job"]) == original, "job.send.failed's job: \(declineFailure)")
      #expect(try canonical(alice.jobIfPresent(jobID)) == original, "alice's job after a decline")
      #expect(try alice.allJobs().count == 1)
      #expect(try bob.allJobs().isEmpty, "bob's list after declining")
      #expect(try alice.events("job.delivered").isEmpty)
      #expect(try bob.events("job.received").isEmpty)

      // Re-sent right away (no longer pending), this time left to expire after 1 s.
      let expiryMark = try alice.lastEventID()
      let second = try alice.sendJob(jobID, to: bob.id, timeoutSeconds: 1)
      #expect(second.status == 202, "re-send after a decline: \(second)")
      let secondID = try #require((try second.jsonObject()["invitation"] as? [String: Any])?["id"] as? String)
      #expect(secondID != firstID)
      let expiryFailure = try await alice.awaitEvent("job.send.failed", since: expiryMark) {
        $0.data["jobId"] as? String == jobID
      }
      #expect(expiryFailure.data["reason"] as? String == "expired", "\(expiryFailure)")
      #expect(try canonical(expiryFailure.data["job"]) == original, "job.send.failed's job: \(expiryFailure)")
      #expect(partyID(expiryFailure.data["to"]) == bob.id, "\(expiryFailure)")
      // A late accept is refused and delivers nothing.
      let late = try bob.answer(secondID, "accept")
      #expect(late.status == 409 || late.status == 404, "accepting an expired job offer: \(late)")
      #expect(try canonical(alice.jobIfPresent(jobID)) == original, "alice's job after an expiry")
      #expect(try bob.allJobs().isEmpty, "bob's list after an expiry")
      #expect(try alice.events("job.delivered").isEmpty)
      #expect(try bob.events("job.received").isEmpty)
      let failures = try alice.events("job.send.failed", since: declineMark)
      #expect(failures.count == 2, "one job.send.failed per failed offer: \(failures)")
      // Bob's own view of the offers: the first declined, the second expired.
      try await bob.awaitEvent("invitation.expired", since: bobMark) { $0.invitationID == secondID }

      // Re-sent a third time and withdrawn by alice: job.send.failed (canceled), nothing changes.
      let cancelMark = try alice.lastEventID()
      let third = try alice.sendJob(jobID, to: bob.id, timeoutSeconds: 60)
      #expect(third.status == 202, "re-send after an expiry: \(third)")
      let thirdID = try #require((try third.jsonObject()["invitation"] as? [String: Any])?["id"] as? String)
      let canceled = try alice.answer(thirdID, "cancel")
      #expect(canceled.status == 200, "alice withdrawing her offer: \(canceled)")
      let cancelFailure = try await alice.awaitEvent("job.send.failed", since: cancelMark) {
        $0.data["jobId"] as? String == jobID
      }
      #expect(cancelFailure.data["reason"] as? String == "canceled", "\(cancelFailure)")
      #expect(try canonical(cancelFailure.data["job"]) == original, "job.send.failed's job: \(cancelFailure)")
      #expect(try canonical(alice.jobIfPresent(jobID)) == original, "alice's job after withdrawing the offer")
      #expect(try bob.allJobs().isEmpty, "bob's list after a withdrawn offer")

      // Re-sent a fourth time and accepted: delivered once, to the right list.
      let acceptMark = try alice.lastEventID()
      let fourth = try alice.sendJob(jobID, to: bob.id, timeoutSeconds: 60)
      #expect(fourth.status == 202, "re-send after a decline, an expiry and a cancel: \(fourth)")
      let fourthID = try #require((try fourth.jsonObject()["invitation"] as? [String: Any])?["id"] as? String)
      try await bob.answerWhenReceived(fourthID, "accept")
      let received = try await bob.awaitEvent("job.received", since: bobMark)
      let bobJob = try #require(received.data["job"] as? [String: Any])
      #expect(bobJob["name"] as? String == "Paint the fence" && bobJob["payment"] as? String == "80.00", "\(bobJob)")
      expectParty(bobJob["receivedFrom"], alice, nodeID: nodes[0].nodeID, "bob's receivedFrom")
      let delivered = try await alice.awaitEvent("job.delivered", since: acceptMark)
      expectParty(
        (delivered.data["job"] as? [String: Any])?["assignedTo"], bob, nodeID: nodes[1].nodeID, "alice's assignedTo")
      expectParty(try alice.jobIfPresent(jobID)?["assignedTo"], bob, nodeID: nodes[1].nodeID, "alice's GET")
      #expect(try bob.allJobs().count == 1)
      #expect(try alice.events("job.send.failed", since: acceptMark).isEmpty)
    }
  }

  @Test func aValidNameOfManyBytesCanBeOfferedAcrossTheMesh() async throws {
    // 200 characters is a valid name, but 200 family emoji are 5 000 UTF-8 bytes: more than an invitation context
    // (4 KiB) may carry. Offering such a job must neither crash the sender's node nor lose the job.
    try await withNodes(count: 2, seeds: .allEarlier, linked: true) { nodes in
      let alice = try nodes[0].meshPeer("alice")
      let bob = try nodes[1].meshPeer("bob")
      let name = String(repeating: "👨‍👩‍👧‍👦", count: 200)
      let job = try alice.createJob(try jsonText(["name": name]))
      let jobID = try #require(job["id"] as? String)
      try await awaitReceiving(bob, seenBy: alice)
      let bobMark = try bob.lastEventID()
      let offered: HTTPResponse
      do {
        offered = try alice.sendJob(jobID, to: bob.id)
      } catch {
        // The node may still be printing its backtrace; give it a moment to exit, then quote its last words.
        try? await eventuallyAsync(timeout: .seconds(10)) { !nodes[0].isRunning }
        let lastWords = nodes[0].stderrText().split(separator: "\n").filter {
          $0.contains("Fatal error") || $0.contains("Precondition failed") || $0.contains("crashed")
            || $0.contains("JobsFeature.swift")
        }
        let problem =
          "offering a job with a valid 200-character (5 000-byte) name failed: \(error)\nnode0 running: "
          + "\(nodes[0].isRunning), exit status \(String(describing: nodes[0].exitStatus)); its stderr says:\n  "
          + lastWords.prefix(8).joined(separator: "\n  ")
        Issue.record("\(problem)")
        return
      }
      #expect(offered.status == 202, "\(offered)")
      #expect(nodes[0].isRunning, "the sender's node must survive the offer: \(nodes[0].logTail(lines: 15))")
      let invitationID = try #require((try offered.jsonObject()["invitation"] as? [String: Any])?["id"] as? String)
      let invited = try await bob.awaitEvent("invitation.received", since: bobMark) { $0.invitationID == invitationID }
      let context = invited.invitation?["context"] as? String ?? ""
      #expect(!context.isEmpty && name.hasPrefix(context), "the context shows (the start of) the job name")
      try await bob.answerWhenReceived(invitationID, "accept")
      let received = try await bob.awaitEvent("job.received", since: bobMark)
      #expect((received.data["job"] as? [String: Any])?["name"] as? String == name, "the whole name is delivered")
    }
  }

  @Test func offersBetweenPeersOfTheSameNodeAndStoppingToReceive() async throws {
    try await withNodes(count: 1) { nodes in
      let alice = try nodes[0].meshPeer("alice")
      let carol = try nodes[0].meshPeer("carol")
      let job = try alice.createJob(#"{"name":"Mow the lawn","dueDate":"2000-02-29","notes":"front and back"}"#)
      let jobID = try #require(job["id"] as? String)
      let refused = try alice.sendJob(jobID, to: carol.id)
      #expect(refused.status == 409 && errorCode(refused) == "not_receiving_jobs", "\(refused)")

      try await awaitReceiving(carol, seenBy: alice)
      let aliceMark = try alice.lastEventID()
      let carolMark = try carol.lastEventID()
      let offered = try alice.sendJob(jobID, to: carol.id)
      #expect(offered.status == 202, "\(offered)")
      let invitationID = try #require((try offered.jsonObject()["invitation"] as? [String: Any])?["id"] as? String)
      let invited = try await carol.awaitEvent("invitation.received", since: carolMark) {
        $0.invitationID == invitationID
      }
      #expect(invited.invitation?["context"] as? String == "Mow the lawn\nDue: 2000-02-29\nNotes: front and back")
      // Without timeoutSeconds a job offer waits 60 s (long enough to read it), not the invitations' 30 s.
      let timeout = (try offered.jsonObject()["invitation"] as? [String: Any])?["timeoutSeconds"] as? Double
      #expect(timeout == 60, "the default job offer expiry: \(String(describing: timeout))")
      try await carol.answerWhenReceived(invitationID, "accept")
      let received = try await carol.awaitEvent("job.received", since: carolMark)
      let carolJob = try #require(received.data["job"] as? [String: Any])
      #expect(carolJob["dueDate"] as? String == "2000-02-29" && carolJob["notes"] as? String == "front and back")
      #expect(carolJob["payment"] is NSNull, "\(carolJob)")
      expectParty(carolJob["receivedFrom"], alice, nodeID: nodes[0].nodeID, "carol's receivedFrom")
      try await alice.awaitEvent("job.delivered", since: aliceMark)
      expectParty(try alice.jobIfPresent(jobID)?["assignedTo"], carol, nodeID: nodes[0].nodeID, "alice's assignedTo")
      #expect(try carol.allJobs().count == 1 && alice.allJobs().count == 1)

      // Carol turns "Receive Jobs" off: new offers to her are 409 again.
      try carol.stopAdvertising(Self.receiveJobs)
      let other = try alice.createJob(#"{"name":"Wash the car"}"#)
      let otherID = try #require(other["id"] as? String)
      try await eventuallyAsync(timeout: .seconds(10), message: "carol no longer receiving jobs") {
        try alice.sendJob(otherID, to: carol.id).status == 409
      }
      #expect(errorCode(try alice.sendJob(otherID, to: carol.id)) == "not_receiving_jobs")
      #expect(try alice.jobIfPresent(otherID)?["assignedTo"] is NSNull)
    }
  }

  // MARK: - Helpers

  /// `receiver` turns on "Receive Jobs"; waits until `sender`'s node lists it as advertising `jobmanager-jobs`.
  func awaitReceiving(
    _ receiver: MeshPeer, seenBy sender: MeshPeer, isolation: isolated (any Actor)? = #isolation
  ) async throws {
    try receiver.advertise(Self.receiveJobs)
    try sender.browse(Self.receiveJobs)
    try await eventuallyAsync(timeout: .seconds(15), message: "\(sender) seeing \(receiver) receive jobs") {
      try sender.servicePeerIDs(Self.receiveJobs).contains(receiver.id)
    }
  }

  /// Expects `value` to be the peer reference `{id, displayName, nodeId}` of `peer` on node `nodeID`.
  func expectParty(
    _ value: Any?, _ peer: MeshPeer, nodeID: String, _ what: String, sourceLocation: SourceLocation = #_sourceLocation
  ) {
    let party = value as? [String: Any]
    #expect(party?["id"] as? String == peer.id, "\(what): \(String(describing: value))", sourceLocation: sourceLocation)
    #expect(
      party?["displayName"] as? String == peer.peer.displayName, "\(what): \(String(describing: value))",
      sourceLocation: sourceLocation)
    #expect(
      party?["nodeId"] as? String == nodeID, "\(what): \(String(describing: value))", sourceLocation: sourceLocation)
  }
}

/// Sorted-key JSON text of a JSON value (nil → "nil"), to compare whole jobs.
private func canonical(_ value: Any?) throws -> String {
  guard let value, !(value is NSNull) else { return "nil" }
  return try jsonText(value)
}

/// The peer id in a `to` field, whether it is a peer reference object or a bare id.
private func partyID(_ value: Any?) -> String? {
  (value as? [String: Any])?["id"] as? String ?? value as? String
}

/// Whether `text` looks like the server's ISO 8601 timestamps, e.g. `2027-03-31T12:00:00.000Z`.
private func isTimestamp(_ text: String) -> Bool {
  let formatter = ISO8601DateFormatter()
  formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
  return formatter.date(from: text) != nil
}

extension MeshPeer {
  /// `POST /api/v1/jobs` with a JSON body; expects 201 and returns the job.
  fileprivate func createJob(_ json: String) throws -> [String: Any] {
    let response = try post("/api/v1/jobs", json: json)
    guard response.status == 201, let job = try response.jsonObject()["job"] as? [String: Any] else {
      throw TestSupportError.unexpectedMessage("creating a job \(json.prefix(200)) for \(self) answered \(response)")
    }
    return job
  }

  /// `GET /api/v1/jobs/{id}`; nil when it answers 404.
  fileprivate func jobIfPresent(_ id: String) throws -> [String: Any]? {
    let response = try get("/api/v1/jobs/\(id)")
    if response.status == 404 { return nil }
    guard response.status == 200, let job = try response.jsonObject()["job"] as? [String: Any] else {
      throw TestSupportError.unexpectedMessage("GET job \(id) for \(self) answered \(response)")
    }
    return job
  }

  /// One page of `GET /api/v1/jobs`.
  fileprivate func jobPage(limit: Int? = nil, cursor: String? = nil) throws
    -> (jobs: [[String: Any]], nextCursor: String?)
  {
    var query: [String] = []
    if let limit { query.append("limit=\(limit)") }
    if let cursor { query.append("cursor=\(cursor)") }
    let response = try get("/api/v1/jobs" + (query.isEmpty ? "" : "?" + query.joined(separator: "&")))
    let object = response.status == 200 ? try response.jsonObject() : [:]
    guard let jobs = object["jobs"] as? [[String: Any]] else {
      throw TestSupportError.unexpectedMessage("GET jobs \(query) for \(self) answered \(response)")
    }
    return (jobs, object["nextCursor"] as? String)
  }

  /// Every job in this peer's list, following `nextCursor` (at most 100 pages).
  fileprivate func allJobs(pageSize: Int = 50) throws -> [[String: Any]] {
    var jobs: [[String: Any]] = []
    var cursor: String?
    for _ in 0..<100 {
      let page = try jobPage(limit: pageSize, cursor: cursor)
      jobs += page.jobs
      guard let next = page.nextCursor else { return jobs }
      cursor = next
    }
    throw TestSupportError.unexpectedMessage("GET jobs for \(self) never ended after 100 pages")
  }

  /// `PATCH /api/v1/jobs/{id}` with a JSON body, as is.
  fileprivate func patchJob(_ id: String, _ json: String) throws -> HTTPResponse {
    try HTTPClient.patch(port: node.port, path: "/api/v1/jobs/\(id)", json: json, token: token)
  }

  /// `POST /api/v1/jobs/{id}/send {to, timeoutSeconds?}`, as is.
  fileprivate func sendJob(_ id: String, to peerID: String, timeoutSeconds: Int? = nil) throws -> HTTPResponse {
    var fields: [String: Any] = ["to": peerID]
    if let timeoutSeconds { fields["timeoutSeconds"] = timeoutSeconds }
    return try post("/api/v1/jobs/\(id)/send", json: try jsonText(fields))
  }
}
