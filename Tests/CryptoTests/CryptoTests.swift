import Crypto
import Testing

struct CryptoTests {
  @Test func sha256MatchesKnownVectors() {
    #expect(Crypto.sha256Hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    #expect(Crypto.sha256Hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
  }

  @Test func randomBytesHaveRequestedLengthAndDiffer() throws {
    let first = try Crypto.randomBytes(32)
    let second = try Crypto.randomBytes(32)
    #expect(first.count == 32)
    #expect(first != second)
  }

  @Test func base64URLEncodesWithoutPadding() {
    #expect(Crypto.base64URL(Array("f".utf8)) == "Zg")
    #expect(Crypto.base64URL(Array("fo".utf8)) == "Zm8")
    #expect(Crypto.base64URL(Array("foo".utf8)) == "Zm9v")
    #expect(Crypto.base64URL([0xFB, 0xFF]) == "-_8")
  }

  @Test func hexIsLowercase() {
    #expect(Crypto.hex([0x00, 0xAB, 0xFF]) == "00abff")
  }
}

struct SHA256HasherTests {
  @Test func incrementalDigestMatchesOneShot() {
    let bytes = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
    let hasher = SHA256Hasher()
    var index = 0
    for size in [0, 1, 63, 64, 65, 4096, 30_000] {
      hasher.update(Array(bytes[index..<(index + size)]))
      index += size
    }
    hasher.update(Array(bytes[index...]))
    #expect(hasher.finalize() == Crypto.sha256(bytes))
  }

  @Test func emptyInputGivesTheEmptyDigest() {
    #expect(Crypto.hex(SHA256Hasher().finalize()) == Crypto.sha256Hex(""))
  }

  @Test func knownVectorAcrossPieces() {
    let hasher = SHA256Hasher()
    hasher.update(Array("ab".utf8))
    hasher.update(Array("c".utf8))
    #expect(Crypto.hex(hasher.finalize()) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
  }
}
