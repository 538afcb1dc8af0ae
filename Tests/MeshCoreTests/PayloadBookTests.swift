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
