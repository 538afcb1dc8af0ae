import Testing

@testable import Gateway

/// File names, ranges and the attachment header of resource transfers.
struct TransferRulesTests {
  @Test func fileNamesKeepOnlyTheirLastComponentWithoutControlCharacters() {
    #expect(PayloadsFeature.sanitizedFileName("report.pdf") == "report.pdf")
    #expect(PayloadsFeature.sanitizedFileName("../../etc/passwd") == "passwd")
    #expect(PayloadsFeature.sanitizedFileName("..\\..\\boot.ini") == "boot.ini")
    #expect(PayloadsFeature.sanitizedFileName("dir/") == "dir")
    #expect(PayloadsFeature.sanitizedFileName("a\u{0}b\u{7F}c\u{85}d\u{2028}e") == "abcde")
    #expect(PayloadsFeature.sanitizedFileName("  .env") == "env")
    #expect(PayloadsFeature.sanitizedFileName("résumé 📄.txt") == "résumé 📄.txt")
    for hopeless in ["", ".", "..", "/", "\u{1}", " ", "../..", "..."] {
      #expect(PayloadsFeature.sanitizedFileName(hopeless) == nil, "\(hopeless.debugDescription)")
    }
    let long = String(repeating: "é", count: 200)
    let cut = PayloadsFeature.sanitizedFileName(long)
    #expect(cut.map { $0.utf8.count <= 255 && $0.allSatisfy { $0 == "é" } } == true)
  }

  @Test func rangesFollowRFC9110() {
    #expect(PayloadsFeature.parseRange("bytes=0-9", size: 100) == .range(0, 9))
    #expect(PayloadsFeature.parseRange("bytes=90-", size: 100) == .range(90, 99))
    #expect(PayloadsFeature.parseRange("bytes=-10", size: 100) == .range(90, 99))
    #expect(PayloadsFeature.parseRange("bytes=-500", size: 100) == .range(0, 99))
    #expect(PayloadsFeature.parseRange("bytes=50-5000", size: 100) == .range(50, 99))
    #expect(PayloadsFeature.parseRange("bytes=100-", size: 100) == .unsatisfiable)
    #expect(PayloadsFeature.parseRange("bytes=-0", size: 100) == .unsatisfiable)
    #expect(PayloadsFeature.parseRange("bytes=0-", size: 0) == .unsatisfiable)
    // Malformed or multiple ranges: the whole file, as RFC 9110 allows.
    for ignored in ["bytes=9-0", "bytes=a-b", "items=0-1", "bytes=0-1,5-6", "bytes=", "bytes=-x"] {
      #expect(PayloadsFeature.parseRange(ignored, size: 100) == .none, "\(ignored)")
    }
  }

  @Test func contentDispositionHasAnASCIIFallbackAndTheUTF8Name() {
    #expect(PayloadsFeature.contentDisposition("a.txt") == "attachment; filename=\"a.txt\"; filename*=UTF-8''a.txt")
    #expect(
      PayloadsFeature.contentDisposition("q\"é.txt")
        == "attachment; filename=\"q__.txt\"; filename*=UTF-8''q%22%C3%A9.txt")
  }

  @Test func curlsFormLabelIsNotKeptForFiles() {
    #expect(PayloadsFeature.cleanContentType("application/x-www-form-urlencoded") == nil)
    #expect(PayloadsFeature.cleanContentType(" text/plain ") == "text/plain")
    #expect(PayloadsFeature.cleanContentType("bad\u{1}type") == nil)
  }
}
