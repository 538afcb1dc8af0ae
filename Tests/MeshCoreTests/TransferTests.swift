import MeshCore
import Testing

private let digest = [UInt8](repeating: 7, count: 32)

/// Drives a sender: every read is "sent" at once; returns the chunks and whether an end went out.
private func drain(_ sender: inout TransferSender, canSend: Bool = true) -> (chunks: [(UInt64, Int)], ended: Bool) {
  var chunks: [(UInt64, Int)] = []
  var ended = false
  while true {
    let actions = sender.pump(canSend: canSend)
    if actions.isEmpty { return (chunks, ended) }
    for action in actions {
      switch action {
      case .readChunk(let offset, let count):
        chunks.append((offset, count))
        sender.chunkSent(offset: offset, count: count)
      case .sendEnd(let sha):
        #expect(sha == digest)
        ended = true
      }
    }
  }
}

/// Reports the reads at `offsets` as sent, in order; returns where the sender is.
private func drainInFlight(_ sender: inout TransferSender, _ offsets: [UInt64]) -> UInt64 {
  for offset in offsets { sender.chunkSent(offset: offset, count: 16) }
  return sender.sent
}

@Suite struct TransferSenderTests {
  @Test func sendsNothingBeforeTheReceiverAccepts() {
    var sender = TransferSender(size: 100, window: 64, chunkSize: 16)
    sender.uploadCompleted(sha256: digest)
    do {
      let result = sender.pump(canSend: true).isEmpty
      #expect(result)
    }
    #expect(sender.state == .offering)
  }

  @Test func sendsInChunksWithinTheWindowThenWaitsForCredit() {
    var sender = TransferSender(size: 100, window: 40, chunkSize: 16)
    sender.uploadCompleted(sha256: digest)
    do {
      let result = sender.accepted(offset: 0)
      #expect(result)
    }
    let first = drain(&sender)
    #expect(first.chunks.map(\.0) == [0, 16, 32])
    #expect(first.chunks.map(\.1) == [16, 16, 8])
    #expect(!first.ended)
    do {
      let result = sender.credit(offset: 32)
      #expect(result)
    }
    let second = drain(&sender)
    #expect(second.chunks.map(\.0) == [40, 56])
    do {
      let result = sender.credit(offset: 72)
      #expect(result)
    }
    let third = drain(&sender)
    #expect(third.chunks.map(\.0) == [72, 88])
    #expect(third.chunks.map(\.1) == [16, 12])
    #expect(third.ended)
    #expect(drain(&sender).chunks.isEmpty)  // The end goes out once.
  }

  @Test func neverSendsBeyondWhatIsSpooled() {
    var sender = TransferSender(size: 100, window: 1000, chunkSize: 16)
    do {
      let result = sender.accepted(offset: 0)
      #expect(result)
    }
    #expect(drain(&sender).chunks.isEmpty)
    sender.spooled(upTo: 20)
    let chunks = drain(&sender).chunks
    #expect(chunks.map(\.0) == [0, 16] && chunks.map(\.1) == [16, 4])
    sender.spooled(upTo: 100)
    let rest = drain(&sender)
    #expect(rest.chunks.last.map { $0.0 + UInt64($0.1) } == 100)
    #expect(!rest.ended)  // The digest is not known until the upload completes.
    sender.uploadCompleted(sha256: digest)
    #expect(drain(&sender).ended)
  }

  @Test func oneReadAtATimeAndNothingWhileTheLinkIsFull() {
    var sender = TransferSender(size: 100, window: 100, chunkSize: 10)
    sender.uploadCompleted(sha256: digest)
    do {
      let result = sender.accepted(offset: 0)
      #expect(result)
    }
    do {
      let result = sender.pump(canSend: false).isEmpty
      #expect(result)
    }
    do {
      let result = sender.pump(canSend: true) == [.readChunk(offset: 0, count: 10)]
      #expect(result)
    }
    do {
      let result = sender.pump(canSend: true).isEmpty
      #expect(result)
    }
    sender.chunkAbandoned()
    do {
      let result = sender.pump(canSend: true) == [.readChunk(offset: 0, count: 10)]
      #expect(result)
    }
  }

  @Test func anEmptyFileEndsAtOnce() {
    var sender = TransferSender(size: 0)
    sender.uploadCompleted(sha256: digest)
    do {
      let result = sender.accepted(offset: 0)
      #expect(result)
    }
    do {
      let result = sender.pump(canSend: true) == [.sendEnd(sha256: digest)]
      #expect(result)
    }
  }

  @Test func rejectsImpossibleAnswers() {
    var sender = TransferSender(size: 10)
    do {
      let result = !sender.accepted(offset: 11)
      #expect(result)
    }
    do {
      let result = !sender.credit(offset: 1)
      #expect(result)  // Not sending yet.
    }
    do {
      let result = sender.accepted(offset: 0)
      #expect(result)
    }
    do {
      let result = !sender.accepted(offset: 0)
      #expect(result)  // A second accept is not expected.
    }
    do {
      let result = !sender.credit(offset: 5)
      #expect(result)  // Nothing was sent yet.
    }
  }

  @Test func resumesFromTheReceiversOffsetAfterALinkLoss() {
    var sender = TransferSender(size: 100, window: 30, chunkSize: 10)
    sender.uploadCompleted(sha256: digest)
    do {
      let result = sender.accepted(offset: 0)
      #expect(result)
    }
    _ = drain(&sender)
    do {
      let result = sender.credit(offset: 20)
      #expect(result)
    }
    sender.linkLost()
    #expect(sender.state == .interrupted)
    do {
      let result = sender.pump(canSend: true).isEmpty
      #expect(result)
    }
    do {
      let result = sender.linkRestored()
      #expect(result)
    }
    do {
      let result = !sender.linkRestored()
      #expect(result)
    }
    #expect(sender.state == .offering)
    do {
      let result = sender.accepted(offset: 25)
      #expect(result)
    }
    #expect(sender.resumedFrom == 25)
    let chunks = drain(&sender).chunks
    #expect(chunks.first?.0 == 25)
  }

  @Test func aStaleChunkAfterAResumeIsNotCounted() {
    var sender = TransferSender(size: 100, window: 100, chunkSize: 10)
    sender.uploadCompleted(sha256: digest)
    do {
      let result = sender.accepted(offset: 0)
      #expect(result)
    }
    do {
      let result = sender.pump(canSend: true) == [.readChunk(offset: 0, count: 10)]
      #expect(result)
    }
    sender.linkLost()
    _ = sender.linkRestored()
    do {
      let result = sender.accepted(offset: 0)
      #expect(result)
    }
    sender.chunkSent(offset: 0, count: 10)  // The read from before the loss completes late: dropped? No, same offset.
    #expect(sender.sent == 10)
    sender.chunkSent(offset: 50, count: 10)  // An offset that is not next is never counted.
    #expect(sender.sent == 10)
  }

  @Test func readsAheadInOrderWithinTheWindowAndEndsAfterTheLastRead() {
    var sender = TransferSender(size: 100, window: 48, chunkSize: 16, readAhead: 2)
    sender.uploadCompleted(sha256: digest)
    _ = sender.accepted(offset: 0)
    #expect(sender.pump(canSend: true) == [.readChunk(offset: 0, count: 16), .readChunk(offset: 16, count: 16)])
    #expect(sender.pump(canSend: true).isEmpty)  // two in flight
    sender.chunkSent(offset: 0, count: 16)
    #expect(sender.pump(canSend: true) == [.readChunk(offset: 32, count: 16)])  // the window ends at 48
    sender.chunkSent(offset: 16, count: 16)
    sender.chunkSent(offset: 32, count: 16)
    #expect(sender.pump(canSend: true).isEmpty)
    _ = sender.credit(offset: 48)
    #expect(sender.pump(canSend: true) == [.readChunk(offset: 48, count: 16), .readChunk(offset: 64, count: 16)])
    sender.chunkSent(offset: 48, count: 16)
    sender.chunkSent(offset: 64, count: 16)
    _ = sender.credit(offset: 80)
    #expect(sender.pump(canSend: true) == [.readChunk(offset: 80, count: 16), .readChunk(offset: 96, count: 4)])
    sender.chunkSent(offset: 80, count: 16)
    #expect(sender.pump(canSend: true).isEmpty)  // no end while a read is in flight
    sender.chunkSent(offset: 96, count: 4)
    #expect(sender.pump(canSend: true) == [.sendEnd(sha256: digest)])
  }

  @Test func anAbandonedHeadReadIsReadAgainAndTheReadsAfterItAreDropped() {
    var sender = TransferSender(size: 64, window: 64, chunkSize: 16, readAhead: 3)
    sender.uploadCompleted(sha256: digest)
    _ = sender.accepted(offset: 0)
    #expect(sender.pump(canSend: true).count == 3)
    sender.chunkAbandoned(offset: 0)  // the link had no room for the chunk at 0
    sender.chunkAbandoned(offset: 16)
    sender.chunkAbandoned(offset: 32)
    #expect(sender.sent == 0)
    #expect(
      sender.pump(canSend: true) == [
        .readChunk(offset: 0, count: 16), .readChunk(offset: 16, count: 16), .readChunk(offset: 32, count: 16),
      ])
    #expect(drainInFlight(&sender, [0, 16, 32]) == 48)
  }

  @Test func aLateReadOfAnotherLengthAfterAResumeDoesNotStallTheReads() {
    var sender = TransferSender(size: 64, window: 64, chunkSize: 16, readAhead: 2)
    _ = sender.accepted(offset: 0)
    sender.spooled(upTo: 10)
    #expect(sender.pump(canSend: true) == [.readChunk(offset: 0, count: 10)])
    sender.linkLost()
    _ = sender.linkRestored()
    _ = sender.accepted(offset: 0)
    sender.uploadCompleted(sha256: digest)
    // The late read (10 bytes at 0) is still in flight: one more fits, at 0 again, now 16 long.
    #expect(sender.pump(canSend: true) == [.readChunk(offset: 0, count: 16)])
    sender.chunkSent(offset: 0, count: 10)  // the late read lands first and is sent: same bytes
    #expect(sender.pump(canSend: true) == [.readChunk(offset: 16, count: 16)])
    sender.chunkAbandoned(offset: 0)  // the new read at 0 no longer lines up
    sender.chunkAbandoned(offset: 16)  // nor does the one after it: reading restarts at 10
    #expect(sender.pump(canSend: true) == [.readChunk(offset: 10, count: 16), .readChunk(offset: 26, count: 16)])
  }

  @Test func restoredTransfersWaitForTheLink() {
    var sender = TransferSender.restored(size: 50, digest: digest)
    #expect(sender.state == .interrupted)
    do {
      let result = sender.linkRestored()
      #expect(result)
    }
    do {
      let result = sender.accepted(offset: 50)
      #expect(result)
    }
    #expect(sender.resumedFrom == 50)
    do {
      let result = sender.pump(canSend: true) == [.sendEnd(sha256: digest)]
      #expect(result)
    }
  }

  @Test func finishesOnlyWithAMatchingDigest() {
    var good = TransferSender(size: 0)
    good.uploadCompleted(sha256: digest)
    good.receiverFinished(sha256: digest)
    #expect(good.state == .finished)
    var bad = TransferSender(size: 0)
    bad.uploadCompleted(sha256: digest)
    bad.receiverFinished(sha256: [UInt8](repeating: 0, count: 32))
    #expect(bad.state == .failed("the receiver's SHA-256 does not match the upload"))
  }

  @Test func terminalStatesStick() {
    var sender = TransferSender(size: 10)
    sender.cancel()
    #expect(sender.state == .canceled)
    sender.fail("late")
    sender.linkLost()
    #expect(sender.state == .canceled)
    do {
      let result = !sender.linkRestored()
      #expect(result)
    }
    #expect(sender.state.isTerminal)
  }
}

@Suite struct TransferReceiverTests {
  @Test func writesChunksInOrderAndCreditsWhatIsDurable() {
    var receiver = TransferReceiver(size: 30)
    do {
      let result = receiver.chunk(offset: 0, count: 10) == .write
      #expect(result)
    }
    do {
      let result = receiver.chunk(offset: 10, count: 10) == .write
      #expect(result)
    }
    do {
      let result = receiver.wrote(upTo: 10) == [.sendCredit(offset: 10)]
      #expect(result)
    }
    do {
      let result = receiver.wrote(upTo: 10).isEmpty
      #expect(result)  // No credit twice.
    }
    do {
      let result = receiver.wrote(upTo: 25).isEmpty
      #expect(result)  // Beyond what was received: impossible, ignored.
    }
    do {
      let result = receiver.wrote(upTo: 20) == [.sendCredit(offset: 20)]
      #expect(result)
    }
    #expect(receiver.written == 20 && receiver.received == 20)
  }

  @Test func rejectsGapsRepeatsAndOverruns() {
    var receiver = TransferReceiver(size: 30)
    do {
      let result = receiver.chunk(offset: 5, count: 10) == .reject("chunk at offset 5, expected 0")
      #expect(result)
    }
    do {
      let result = receiver.chunk(offset: 0, count: 31) == .reject("chunk past the announced size of 30 bytes")
      #expect(result)
    }
    do {
      let result = receiver.chunk(offset: 0, count: 30) == .write
      #expect(result)
    }
    do {
      let result = receiver.chunk(offset: 0, count: 1) == .reject("chunk at offset 0, expected 30")
      #expect(result)
    }
  }

  @Test func verifiesOnceEndAndLastWriteHaveBothHappened() {
    var receiver = TransferReceiver(size: 20)
    do {
      let result = receiver.chunk(offset: 0, count: 20) == .write
      #expect(result)
    }
    let end = receiver.end(size: 20, sha256: digest)
    #expect(end.actions.isEmpty && end.failure == nil)  // Not written yet.
    do {
      let result = receiver.wrote(upTo: 20) == [.sendCredit(offset: 20), .verify(expected: digest)]
      #expect(result)
    }
    #expect(receiver.state == .verifying)
    do {
      let result = receiver.verified(sha256: digest)
      #expect(result)
    }
    #expect(receiver.state == .finished)
  }

  @Test func endAfterTheLastWriteVerifiesAtOnce() {
    var receiver = TransferReceiver(size: 5)
    _ = receiver.chunk(offset: 0, count: 5)
    _ = receiver.wrote(upTo: 5)
    do {
      let result = receiver.end(size: 5, sha256: digest).actions == [.verify(expected: digest)]
      #expect(result)
    }
  }

  @Test func anEmptyFileVerifiesOnEnd() {
    var receiver = TransferReceiver(size: 0)
    do {
      let result = receiver.end(size: 0, sha256: digest).actions == [.verify(expected: digest)]
      #expect(result)
    }
  }

  @Test func aShortEndFails() {
    var receiver = TransferReceiver(size: 10)
    _ = receiver.chunk(offset: 0, count: 4)
    let end = receiver.end(size: 10, sha256: digest)
    #expect(end.failure == "the sender ended after 4 of 10 bytes")
    #expect(receiver.state == .failed("the sender ended after 4 of 10 bytes"))
  }

  @Test func aDigestMismatchFails() {
    var receiver = TransferReceiver(size: 0)
    _ = receiver.end(size: 0, sha256: digest)
    do {
      let result = !receiver.verified(sha256: [UInt8](repeating: 1, count: 32))
      #expect(result)
    }
    #expect(receiver.state == .failed("SHA-256 mismatch: the received content differs from what was sent"))
  }

  @Test func resumesFromWhatItHolds() {
    var receiver = TransferReceiver(size: 100, offset: 40)
    #expect(receiver.received == 40 && receiver.written == 40)
    receiver.linkLost()
    #expect(receiver.state == .interrupted)
    do {
      let result = receiver.chunk(offset: 40, count: 10) == .ignore
      #expect(result)
    }
    do {
      let result = receiver.resumeOffered() == 40
      #expect(result)
    }
    do {
      let result = receiver.chunk(offset: 40, count: 10) == .write
      #expect(result)
    }
    // A write that completes while interrupted counts, but is credited only after the resume.
    receiver.linkLost()
    do {
      let result = receiver.wrote(upTo: 50).isEmpty
      #expect(result)
    }
    do {
      let result = receiver.resumeOffered() == 50
      #expect(result)
    }
  }

  @Test func aFinishedOrCanceledTransferCannotResume() {
    var receiver = TransferReceiver(size: 10)
    receiver.cancel()
    do {
      let result = receiver.resumeOffered() == nil
      #expect(result)
    }
    do {
      let result = receiver.chunk(offset: 0, count: 1) == .ignore
      #expect(result)
    }
    receiver.fail("x")
    #expect(receiver.state == .canceled)
  }
}

/// The link drops just after the receiver finished: the sender never saw `transferFinished`, offers again when the
/// link returns, and must end `finished` (not `failed`) because the receiver holds the complete, verified file.
@Suite struct TransferReofferTests {
  /// Runs a whole transfer of `content` up to the receiver's verdict; returns both sides.
  private func finishedAtTheReceiver(_ content: [UInt8]) -> (TransferSender, TransferReceiver) {
    var sender = TransferSender(size: UInt64(content.count), window: 64, chunkSize: 8)
    var receiver = TransferReceiver(size: UInt64(content.count))
    sender.uploadCompleted(sha256: digest)
    do {
      let result = sender.accepted(offset: 0)
      #expect(result)
    }
    let (chunks, ended) = drain(&sender)
    #expect(ended)
    for (offset, count) in chunks {
      do {
        let result = receiver.chunk(offset: offset, count: count) == .write
        #expect(result)
      }
    }
    _ = receiver.wrote(upTo: UInt64(content.count))
    let (actions, failure) = receiver.end(size: UInt64(content.count), sha256: digest)
    #expect(failure == nil)
    #expect(actions == [.verify(expected: digest)])
    do {
      let result = receiver.verified(sha256: digest)
      #expect(result)
    }
    return (sender, receiver)
  }

  @Test func aReceiverThatFinishedAnswersTheReofferFinishedAndTheSenderFinishes() {
    var (sender, receiver) = finishedAtTheReceiver(Array(repeating: 1, count: 40))
    // The verdict is lost with the link.
    sender.linkLost()
    receiver.linkLost()
    #expect(sender.state == .interrupted)
    do {
      let result = sender.linkRestored()
      #expect(result)
    }
    do {
      let result = receiver.reoffered() == .finished(sha256: digest)
      #expect(result)
    }
    sender.receiverFinished(sha256: digest)
    #expect(sender.state == .finished)
    #expect(receiver.state == .finished)
  }

  @Test func aDifferentDigestInTheReplyFailsTheSender() {
    var (sender, _) = finishedAtTheReceiver(Array(repeating: 2, count: 16))
    sender.linkLost()
    do {
      let result = sender.linkRestored()
      #expect(result)
    }
    sender.receiverFinished(sha256: [UInt8](repeating: 9, count: 32))
    #expect(sender.state == .failed("the receiver's SHA-256 does not match the upload"))
  }

  @Test func aReceiverRestoredAsFinishedAnswersFinished() {
    var receiver = TransferReceiver.finished(size: 10, sha256: digest)
    do {
      let result = receiver.reoffered() == .finished(sha256: digest)
      #expect(result)
    }
    do {
      let result = receiver.chunk(offset: 0, count: 1) == .ignore
      #expect(result)
    }
  }

  @Test func otherStatesAnswerAsBefore() {
    var receiving = TransferReceiver(size: 100, offset: 30)
    receiving.linkLost()
    do {
      let result = receiving.reoffered() == .accept(offset: 30)
      #expect(result)
    }
    var verifying = TransferReceiver(size: 4)
    do {
      let result = verifying.chunk(offset: 0, count: 4) == .write
      #expect(result)
    }
    _ = verifying.wrote(upTo: 4)
    _ = verifying.end(size: 4, sha256: digest)
    #expect(verifying.state == .verifying)
    do {
      let result = verifying.reoffered() == .pending
      #expect(result)
    }
    var canceled = TransferReceiver(size: 4)
    canceled.cancel()
    do {
      let result = canceled.reoffered() == .refuse("the transfer was canceled here")
      #expect(result)
    }
    var failed = TransferReceiver(size: 4)
    failed.fail("disk full")
    do {
      let result = failed.reoffered() == .refuse("the transfer failed here: disk full")
      #expect(result)
    }
  }
}

@Suite struct ProgressThrottleTests {
  @Test func reportsAtMostTenTimesPerSecond() {
    var throttle = ProgressThrottle()
    var reports = 0
    for millis in stride(from: UInt64(0), to: 1000, by: 5) where throttle.shouldReport(bytes: millis + 1, now: millis) {
      reports += 1
    }
    #expect(reports == 10)
  }

  @Test func skipsUnchangedCounts() {
    var throttle = ProgressThrottle()
    do {
      let result = throttle.shouldReport(bytes: 5, now: 0)
      #expect(result)
    }
    do {
      let result = !throttle.shouldReport(bytes: 5, now: 500)
      #expect(result)
    }
    do {
      let result = throttle.shouldReport(bytes: 6, now: 500)
      #expect(result)
    }
  }
}
