import Crypto
import Foundation
import Testing

struct CertificateTests {
  /// A fresh empty directory, removed after `body`.
  func withDirectory(_ body: (String) throws -> Void) throws {
    let path = NSTemporaryDirectory() + "meshgate-cert-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: path) }
    try body(path)
  }

  @Test func createsASelfSignedCertificateWithAPrivateKeyFile() throws {
    try withDirectory { directory in
      let certificate = try Certificate.createSelfSigned(
        certificatePath: directory + "/cert.pem", keyPath: directory + "/key.pem", commonName: "meshgate node test")
      let keyMode = try FileManager.default.attributesOfItem(atPath: directory + "/key.pem")[.posixPermissions] as? Int
      #expect(keyMode == 0o600)
      let pem = try String(contentsOfFile: directory + "/cert.pem", encoding: .utf8)
      #expect(pem.hasPrefix("-----BEGIN CERTIFICATE-----"))
      #expect(try String(contentsOfFile: directory + "/key.pem", encoding: .utf8).contains("PRIVATE KEY"))
      // DER starts with a SEQUENCE; the fingerprint is the SHA-256 of exactly those bytes.
      #expect(certificate.der.first == 0x30)
      #expect(certificate.fingerprint == Crypto.hex(Crypto.sha256(certificate.der)))
      #expect(certificate.fingerprint.count == 64)
      #expect(certificate.fingerprint.allSatisfy { "0123456789abcdef".contains($0) })
      // Loading gives the same certificate, with or without checking the key.
      #expect(
        try Certificate.load(certificatePath: directory + "/cert.pem", keyPath: directory + "/key.pem") == certificate)
      #expect(try Certificate.load(certificatePath: directory + "/cert.pem", keyPath: nil) == certificate)
      // The DER is the PEM's base64 body.
      let body = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
      #expect(Data(base64Encoded: body).map { Array($0) } == certificate.der)
    }
  }

  @Test func everyCertificateIsNew() throws {
    try withDirectory { directory in
      let first = try Certificate.createSelfSigned(
        certificatePath: directory + "/a.pem", keyPath: directory + "/a.key", commonName: "x")
      let second = try Certificate.createSelfSigned(
        certificatePath: directory + "/b.pem", keyPath: directory + "/b.key", commonName: "x")
      #expect(first.fingerprint != second.fingerprint)
    }
  }

  @Test func refusesAnExistingKeyFile() throws {
    try withDirectory { directory in
      try Data("keep me".utf8).write(to: URL(fileURLWithPath: directory + "/key.pem"))
      #expect(throws: CertificateError.self) {
        try Certificate.createSelfSigned(
          certificatePath: directory + "/cert.pem", keyPath: directory + "/key.pem", commonName: "x")
      }
    }
  }

  @Test func loadingReportsMissingFilesAndAForeignKey() throws {
    try withDirectory { directory in
      try Certificate.createSelfSigned(
        certificatePath: directory + "/a.pem", keyPath: directory + "/a.key", commonName: "a")
      try Certificate.createSelfSigned(
        certificatePath: directory + "/b.pem", keyPath: directory + "/b.key", commonName: "b")
      let foreign = #expect(throws: CertificateError.self) {
        try Certificate.load(certificatePath: directory + "/a.pem", keyPath: directory + "/b.key")
      }
      #expect(foreign?.message.contains("does not belong") == true)
      let missing = #expect(throws: CertificateError.self) {
        try Certificate.load(certificatePath: directory + "/none.pem", keyPath: nil)
      }
      #expect(missing?.message.contains("no readable PEM certificate") == true)
      let noKey = #expect(throws: CertificateError.self) {
        try Certificate.load(certificatePath: directory + "/a.pem", keyPath: directory + "/a.pem")
      }
      #expect(noKey?.message.contains("private key") == true)
    }
  }

  @Test func hmacSHA256MatchesRFC4231() {
    // RFC 4231 test case 2.
    let mac = Crypto.hmacSHA256(key: Array("Jefe".utf8), data: Array("what do ya want for nothing?".utf8))
    #expect(Crypto.hex(mac) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    #expect(Crypto.hmacSHA256(key: [], data: []).count == 32)
  }

  @Test func constantTimeEqualCompares() {
    #expect(Crypto.constantTimeEqual([1, 2, 3], [1, 2, 3]))
    #expect(!Crypto.constantTimeEqual([1, 2, 3], [1, 2, 4]))
    #expect(!Crypto.constantTimeEqual([1, 2], [1, 2, 3]))
    #expect(Crypto.constantTimeEqual([], []))
  }
}
