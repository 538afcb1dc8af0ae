import DNSSD
import Testing

@testable import Discovery

struct DNSSDAnnouncementTests {
  static let announcement = DNSSDAnnouncement(
    nodeID: "6f1c2d3e-0000-4000-8000-000000000001", name: "lab", port: 8080, protocolVersion: 1, tlsFingerprint: nil,
    interfaceIndex: 0)

  @Test func meshRecordCarriesIDAndVersionAndNoFingerprintWithoutTLS() throws {
    let txt = TXTRecord.decode(try Self.announcement.meshTXT())
    #expect(txt == ["txtvers": "1", "id": "6f1c2d3e-0000-4000-8000-000000000001", "pv": "1"])
  }

  @Test func meshRecordPublishesTheFingerprintOnceThereIsOne() throws {
    var announcement = Self.announcement
    announcement.tlsFingerprint = String(repeating: "ab", count: 32)
    let txt = TXTRecord.decode(try announcement.meshTXT())
    #expect(txt["fp"] == String(repeating: "ab", count: 32))
    #expect(txt["id"] == announcement.nodeID)
  }

  @Test func serviceTypeRecordCountsAdvertisingPeers() throws {
    let txt = TXTRecord.decode(try Self.announcement.serviceTypeTXT(peers: 3))
    #expect(txt == ["txtvers": "1", "id": "6f1c2d3e-0000-4000-8000-000000000001", "peers": "3"])
  }
}
