import MeshCore
import Testing

@Suite struct PayloadBookTests {
  private func book() -> PayloadBook {
    var book = PayloadBook()
    var sender = TransferSender(size: 40, window: 20, chunkSize: 10)
    sender.uploadCompleted(sha256: [1])
    book.send("out", to: "B", sender: sender)
    book.receive("in", from: "C", receiver: TransferReceiver(size: 20))
    return book
  }

  private func offer(_ id: String, resume: Bool = false) -> MeshMessage {
    .transferOffer(
      TransferOffer(
        transferID: id, sessionID: "s", fromPeerID: "p", fromDisplayName: "P", toPeerID: "q", name: "f",
        contentType: "text/plain", size: 20, resume: resume))
  }

  private func reject(_ id: String, _ code: TransferRejection, _ text: String, to nodeID: String) -> PayloadEffect {
    .send(.transferReject(transferID: id, code: code, message: text), to: nodeID)
  }

  /// Offers are judged in the book: a new one goes to the runtime, one made again is answered from the receiver, a
  /// resume of an unknown transfer and a reused id are refused, and an offer from another node than the transfer's
  /// changes nothing.
  @Test func anOfferIsNewMadeAgainOrRefused() {
    var book = PayloadBook(nodeID: "A")
    var sender = TransferSender(size: 40, window: 20, chunkSize: 10)
    sender.uploadCompleted(sha256: [1])
    book.send("out", to: "B", sender: sender)
    book.receive("in", from: "C", receiver: TransferReceiver(size: 20))
    book.receive("asks", from: "C", receiver: nil)
    guard case .transferOffer(let new) = offer("new") else { return }
    #expect(book.received(offer("new"), from: "C") == [.offered(new, from: "C")])
    #expect(
      book.received(offer("ghost", resume: true), from: "C") == [
        reject("ghost", .unknownTransfer, "this node has no transfer ghost", to: "C")
      ])
    _ = book.received(.transferChunk(transferID: "in", offset: 0, bytes: [1, 2, 3]), from: "C")
    _ = book.wrote("in", upTo: 3)
    _ = book.linkLost("C")
    #expect(
      book.received(offer("in", resume: true), from: "C") == [
        .resumed(transferID: "in", offset: 3), .send(.transferAccept(transferID: "in", offset: 3), to: "C"),
      ])
    #expect(
      book.received(offer("in", resume: true), from: "B") == [
        reject("in", .unknownTransfer, "transfer in comes from another node", to: "B")
      ])
    #expect(
      book.received(offer("asks", resume: true), from: "C") == [.reofferedUnanswered(transferID: "asks", from: "C")])
    let reused = book.received(offer("out"), from: "C")
    guard case .refused(let refusal)? = reused.first else {
      Issue.record("a reused id was not refused: \(reused)")
      return
    }
    #expect(refusal.reason == "invalid_id" && refusal.nodeID == "C" && refusal.answer != nil)
    // Between two peers of this node one id is both outgoing and incoming.
    guard case .transferOffer(let local) = offer("out") else { return }
    #expect(book.received(offer("out"), from: "A") == [.offered(local, from: "A")])
  }

  /// After a start the runtime restores its transfers before offers can be told from resumes: they wait in the book
  /// and are judged, in order, once it knows them.
  @Test func offersWaitUntilTheRecordsAreRestored() {
    var book = PayloadBook(nodeID: "A", holdsOffers: true)
    #expect(book.received(offer("kept", resume: true), from: "C") == [])
    #expect(book.received(offer("ghost", resume: true), from: "C") == [])
    #expect(book.heldOffers.count == 2)
    var receiver = TransferReceiver(size: 20, offset: 5)
    receiver.linkLost()
    book.receive("kept", from: "C", receiver: receiver)
    #expect(
      book.recordsRestored() == [
        .resumed(transferID: "kept", offset: 5), .send(.transferAccept(transferID: "kept", offset: 5), to: "C"),
        reject("ghost", .unknownTransfer, "this node has no transfer ghost", to: "C"),
      ])
    guard case .transferOffer(let new) = offer("new") else { return }
    #expect(book.received(offer("new"), from: "C") == [.offered(new, from: "C")])
  }

  /// The offers held while the runtime restores are bounded: past the bound an offer is refused, not queued.
  @Test func heldOffersAreBounded() {
    var book = PayloadBook(nodeID: "A", holdsOffers: true)
    for index in 0..<PayloadBook.mostHeldOffers { _ = book.received(offer("o\(index)"), from: "C") }
    #expect(book.heldOffers.count == PayloadBook.mostHeldOffers)
    let refused = book.received(offer("one-more"), from: "C")
    guard case .send(.transferReject("one-more", .refused, _), "C")? = refused.first else {
      Issue.record("the offer past the bound was not refused: \(refused)")
      return
    }
    #expect(book.heldOffers.count == PayloadBook.mostHeldOffers)
  }

  @Test func framesFromAnotherNodeThanTheTransfersAreDropped() {
    var book = book()
    #expect(book.received(.transferAccept(transferID: "out", offset: 0), from: "C") == [])
    #expect(book.received(.transferChunk(transferID: "in", offset: 0, bytes: [1]), from: "B") == [])
    #expect(book.received(.transferCancel(transferID: "out", reason: "x"), from: "C") == [])
    #expect(book.sender("out")?.state == .offering)
  }

  @Test func aChunkEntersOnceAndComesOutAsAWriteOrAFailure() {
    var book = book()
    #expect(
      book.received(.transferChunk(transferID: "in", offset: 0, bytes: [1, 2]), from: "C")
        == [.write(transferID: "in", offset: 0, bytes: [1, 2])])
    #expect(book.wrote("in", upTo: 2) == [.send(.transferCredit(transferID: "in", offset: 2), to: "C")])
    #expect(
      book.received(.transferChunk(transferID: "in", offset: 5, bytes: [1]), from: "C")
        == [.failed(transferID: "in", .incoming, reason: "protocol error: chunk at offset 5, expected 2", notify: true)]
    )
  }

  @Test func creditNeverOpensMoreThanTheWindow() {
    var book = book()
    #expect(
      book.received(.transferAccept(transferID: "out", offset: 0), from: "B")
        == [.accepted(transferID: "out", offset: 0, resumedFrom: nil)])
    #expect(book.pump("out", canSend: true) == [.readChunk(offset: 0, count: 10)])
    book.chunkSent("out", offset: 0, count: 10)
    #expect(book.pump("out", canSend: true) == [.readChunk(offset: 10, count: 10)])
    book.chunkSent("out", offset: 10, count: 10)
    #expect(book.pump("out", canSend: true) == [])
    #expect(book.received(.transferCredit(transferID: "out", offset: 30), from: "B") == [])
    #expect(
      book.received(.transferCredit(transferID: "out", offset: 10), from: "B")
        == [.credited(transferID: "out", acknowledged: 10)])
    #expect(book.pump("out", canSend: true) == [.readChunk(offset: 20, count: 10)])
  }

  @Test func aLinkLossInterruptsAndTheReturnOffersAgainFromTheReceiversOffset() {
    var book = book()
    _ = book.received(.transferAccept(transferID: "out", offset: 0), from: "B")
    _ = book.received(.transferChunk(transferID: "in", offset: 0, bytes: [1, 2, 3]), from: "C")
    let lost = book.linkLost("B")
    #expect(lost.outgoing == ["out"] && lost.incoming == [])
    #expect(book.linkLost("C").incoming == ["in"])
    #expect(book.linkRestored("B") == ["out"])
    #expect(
      book.received(.transferAccept(transferID: "out", offset: 10), from: "B")
        == [.accepted(transferID: "out", offset: 10, resumedFrom: 10)])
    #expect(book.reoffered("in") == .accept(offset: 3))
  }

  @Test func aStreamTakesDataInOrderOnlyWhileOpen() {
    var book = PayloadBook()
    book.acceptStream("s", from: "B")
    #expect(
      book.received(.streamData(streamID: "s", offset: 0, bytes: [7]), from: "B")
        == [.streamData(streamID: "s", bytes: [7])])
    #expect(
      book.received(.streamData(streamID: "s", offset: 5, bytes: [7]), from: "B")
        == [.streamFailed(streamID: "s", .incoming, reason: "protocol error: stream data out of order", notify: true)])
    book.streamHandedOver("s", count: 1)
    #expect(book.streamCreditDue("s") == 1)
    #expect(book.streamCreditDue("s") == nil)
    book.closeStream("s", .incoming)
    #expect(book.received(.streamData(streamID: "s", offset: 1, bytes: [8]), from: "B") == [])
    #expect(book.received(.streamClose(streamID: "s", reason: ""), from: "B") == [.streamEnded(streamID: "s")])
  }
}
