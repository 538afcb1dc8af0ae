import DNSSD
import Testing

struct TXTRecordTests {
  @Test func encodesLengthPrefixedPairsInOrder() throws {
    let bytes = try TXTRecord.encode([("id", "ab"), ("pv", "1")])
    #expect(bytes == [5] + Array("id=ab".utf8) + [4] + Array("pv=1".utf8))
  }

  @Test func encodesNoPairsAsOneEmptyString() throws {
    #expect(try TXTRecord.encode([]) == [0])
  }

  @Test func rejectsBadKeysAndOversizedEntries() {
    #expect(throws: TXTRecord.EncodingError.self) { try TXTRecord.encode([("", "x")]) }
    #expect(throws: TXTRecord.EncodingError.self) { try TXTRecord.encode([("a=b", "x")]) }
    #expect(throws: TXTRecord.EncodingError.self) { try TXTRecord.encode([("muchtoolongkey", "x")]) }
    #expect(throws: TXTRecord.EncodingError.self) { try TXTRecord.encode([("k", String(repeating: "v", count: 254))]) }
    #expect((try? TXTRecord.encode([("k", String(repeating: "v", count: 253))]))?.count == 256)
  }

  @Test func decodesRoundTripAndLowercasesKeys() throws {
    let bytes = try TXTRecord.encode([("ID", "Node-1"), ("fp", "ab:cd"), ("flag", "")])
    #expect(TXTRecord.decode(bytes) == ["id": "Node-1", "fp": "ab:cd", "flag": ""])
  }

  @Test func decodesDefensively() {
    // A key without "=" has an empty value; the first occurrence wins; an empty entry and a length past the end
    // are tolerated; invalid UTF-8 values are skipped.
    let bytes: [UInt8] =
      [4] + Array("flag".utf8) + [3] + Array("a=1".utf8) + [3] + Array("a=2".utf8) + [0]
      + [3] + [0x62, 0x3D, 0xFF] + [9] + Array("c=3".utf8)
    #expect(TXTRecord.decode(bytes) == ["flag": "", "a": "1"])
    #expect(TXTRecord.decode([]) == [:])
    #expect(TXTRecord.decode([0]) == [:])
    #expect(TXTRecord.decode([2] + Array("=x".utf8)) == [:])
  }
}

struct NetworkInterfacesTests {
  @Test func wildcardAddressesMeanEveryInterface() {
    #expect(NetworkInterfaces.index(servingBindAddress: "0.0.0.0") == 0)
    #expect(NetworkInterfaces.index(servingBindAddress: "::") == 0)
  }

  @Test func loopbackAddressesMapToTheLoopbackInterface() {
    let loopback = NetworkInterfaces.index(servingBindAddress: "127.0.0.1")
    #expect(loopback != nil && loopback != 0)
    #expect(NetworkInterfaces.index(servingBindAddress: "127.0.0.2") == loopback)
  }

  @Test func unknownAddressesHaveNoInterface() {
    #expect(NetworkInterfaces.index(servingBindAddress: "203.0.113.254") == nil)
    #expect(NetworkInterfaces.index(servingBindAddress: "not an address") == nil)
  }
}
