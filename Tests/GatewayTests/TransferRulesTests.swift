import Testing

@testable import Gateway

/// File names, ranges and the attachment header of resource transfers.
struct TransferRulesTests {
  @Test func fileNamesKeepOnlyTheirLastComponentWithoutControlCharacters() {
    #expect(TransferFile.sanitizedFileName("report.pdf") == "report.pdf")
    #expect(TransferFile.sanitizedFileName("../../etc/passwd") == "passwd")
    #expect(TransferFile.sanitizedFileName("..\\..\\boot.ini") == "boot.ini")
    #expect(TransferFile.sanitizedFileName("dir/") == "dir")
    #expect(TransferFile.sanitizedFileName("a\u{0}b\u{7F}c\u{85}d\u{2028}e") == "abcde")
    #expect(TransferFile.sanitizedFileName("  .env") == "env")
    #expect(TransferFile.sanitizedFileName("résumé 📄.txt") == "résumé 📄.txt")
    for hopeless in ["", ".", "..", "/", "\u{1}", " ", "../..", "..."] {
      #expect(TransferFile.sanitizedFileName(hopeless) == nil, "\(hopeless.debugDescription)")
    }
    let long = String(repeating: "é", count: 200)
    let cut = TransferFile.sanitizedFileName(long)
    #expect(cut.map { $0.utf8.count <= 255 && $0.allSatisfy { $0 == "é" } } == true)
  }

  @Test func rangesFollowRFC9110() {
    #expect(ByteRange.parse("bytes=0-9", size: 100) == .range(0, 9))
    #expect(ByteRange.parse("bytes=90-", size: 100) == .range(90, 99))
    #expect(ByteRange.parse("bytes=-10", size: 100) == .range(90, 99))
    #expect(ByteRange.parse("bytes=-500", size: 100) == .range(0, 99))
    #expect(ByteRange.parse("bytes=50-5000", size: 100) == .range(50, 99))
    #expect(ByteRange.parse("bytes=100-", size: 100) == .unsatisfiable)
    #expect(ByteRange.parse("bytes=-0", size: 100) == .unsatisfiable)
    #expect(ByteRange.parse("bytes=0-", size: 0) == .unsatisfiable)
    // Malformed or multiple ranges: the whole file, as RFC 9110 allows.
    for ignored in ["bytes=9-0", "bytes=a-b", "items=0-1", "bytes=0-1,5-6", "bytes=", "bytes=-x"] {
      #expect(ByteRange.parse(ignored, size: 100) == .none, "\(ignored)")
    }
  }

  @Test func contentDispositionHasAnASCIIFallbackAndTheUTF8Name() {
    #expect(TransferRecord.contentDisposition("a.txt") == "attachment; filename=\"a.txt\"; filename*=UTF-8''a.txt")
    #expect(
      TransferRecord.contentDisposition("q\"é.txt")
        == "attachment; filename=\"q__.txt\"; filename*=UTF-8''q%22%C3%A9.txt")
  }

  @Test func curlsFormLabelIsNotKeptForFiles() {
    #expect(TransferRecord.cleanContentType("application/x-www-form-urlencoded") == nil)
    #expect(TransferRecord.cleanContentType(" text/plain ") == "text/plain")
    #expect(TransferRecord.cleanContentType("bad\u{1}type") == nil)
  }
}
