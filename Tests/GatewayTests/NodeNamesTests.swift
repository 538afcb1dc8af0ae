import Testing

@testable import Gateway

@Suite struct NodeNamesTests {
  @Test(arguments: ["127.0.0.1", "10.0.0.5", "::1", "[::1]", "fe80::1", "[2001:db8::7]"])
  func addressLiteralsAreDialledWithoutALookup(_ host: String) {
    #expect(NodeNames.isAddressLiteral(host))
  }

  @Test(arguments: ["localhost", "meshgate-b", "node.local", "10.0.0", "[localhost]", "", "1.2.3.4.5"])
  func namesAreLookedUp(_ host: String) {
    #expect(!NodeNames.isAddressLiteral(host))
  }

  @Test func aNameResolvesToNumericAddressesIPv4First() throws {
    let addresses = try NodeNames.resolve("localhost").get()
    #expect(addresses.first == "127.0.0.1", "\(addresses)")
    #expect(addresses.allSatisfy(NodeNames.isAddressLiteral) && Set(addresses).count == addresses.count)
  }
}
