// swift-tools-version:6.1
import PackageDescription

let swiftSettings: [SwiftSetting] = [
  .enableUpcomingFeature("ExistentialAny"),
  .enableUpcomingFeature("MemberImportVisibility"),
  .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
  name: "meshgate",
  products: [
    .executable(name: "meshgate", targets: ["meshgate"]),
    // For the libFuzzer harness in Fuzz/ (a separate package, so normal builds never need -sanitize=fuzzer).
    .library(name: "MeshgateFuzzTargets", targets: ["Gateway"]),
  ],
  targets: [
    // Layer 1: C module maps and shims only.
    .systemLibrary(
      name: "CLibWebSockets",
      pkgConfig: "libwebsockets",
      providers: [.apt(["libwebsockets-dev"])]
    ),
    .systemLibrary(name: "CSQLite", providers: [.apt(["libsqlite3-dev"])]),
    .systemLibrary(name: "COpenSSL", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
    .systemLibrary(name: "CDNSSD", providers: [.apt(["libavahi-compat-libdnssd-dev"])]),
    // Test support only: a TLS client (libssl) for the hostile mesh node.
    .systemLibrary(name: "CTestTLS", pkgConfig: "libssl", providers: [.apt(["libssl-dev"])]),
    // Cross-cutting: structured key=value logging.
    .target(name: "Logging", swiftSettings: swiftSettings),
    // Layer 2: thin safe wrappers.
    .target(name: "LWS", dependencies: ["CLibWebSockets", "Logging"], swiftSettings: swiftSettings),
    .target(name: "Store", dependencies: ["CSQLite"], swiftSettings: swiftSettings),
    .target(name: "Crypto", dependencies: ["COpenSSL"], swiftSettings: swiftSettings),
    .target(name: "DNSSD", dependencies: ["CDNSSD", "Logging"], swiftSettings: swiftSettings),
    // Layer 3: sans-I/O mesh core (Crypto for the link handshake's HMAC and the verification codes' SHA-256).
    .target(name: "MeshCore", dependencies: ["Crypto"], swiftSettings: swiftSettings),
    // A deterministic in-process simulator running MeshCore for many nodes (tests and bench).
    .target(name: "MeshSimulator", dependencies: ["MeshCore", "Crypto"], swiftSettings: swiftSettings),
    // Layer 4: node discovery (the UDP beacon, DNS-SD node discovery, the mode choice); knows nothing of Node.
    .target(name: "Discovery", dependencies: ["DNSSD", "Logging"], swiftSettings: swiftSettings),
    // Layers 4-6: node runtime, apps, REST/WS surface.
    .target(
      name: "Gateway",
      dependencies: ["LWS", "Store", "Crypto", "DNSSD", "Discovery", "MeshCore", "Logging"],
      swiftSettings: swiftSettings
    ),
    .executableTarget(name: "meshgate", dependencies: ["Gateway", "Logging"], swiftSettings: swiftSettings),
    // Benchmarks (run with `make bench`).
    .executableTarget(
      name: "mesh-scale", dependencies: ["MeshSimulator"], path: "bench/mesh-scale", swiftSettings: swiftSettings),
    // Test support: raw HTTP/WebSocket clients and a process harness for real nodes.
    // The hostile mesh node (HostileNode) builds frames with MeshCore and links over TLS with CTestTLS.
    .target(
      name: "MeshgateTestSupport", dependencies: ["MeshCore", "Crypto", "CTestTLS"], swiftSettings: swiftSettings),

    .testTarget(
      name: "LWSTests", dependencies: ["LWS", "MeshgateTestSupport", "Crypto"], swiftSettings: swiftSettings),
    .testTarget(name: "CryptoTests", dependencies: ["Crypto"], swiftSettings: swiftSettings),
    .testTarget(name: "DNSSDTests", dependencies: ["DNSSD"], swiftSettings: swiftSettings),
    .testTarget(name: "DiscoveryTests", dependencies: ["Discovery", "DNSSD"], swiftSettings: swiftSettings),
    .testTarget(name: "StoreTests", dependencies: ["Store"], swiftSettings: swiftSettings),
    .testTarget(name: "MeshCoreTests", dependencies: ["MeshCore"], swiftSettings: swiftSettings),
    .testTarget(
      name: "MeshSimulatorTests", dependencies: ["MeshSimulator", "MeshCore", "Crypto"], swiftSettings: swiftSettings),
    .testTarget(
      name: "GatewayTests", dependencies: ["Gateway", "Discovery", "MeshgateTestSupport"], swiftSettings: swiftSettings),
    .testTarget(
      name: "IntegrationTests",
      // Crypto and MeshCore: test certificates, fingerprints and the expected verification codes (SecurityTests).
      dependencies: ["meshgate", "MeshgateTestSupport", "Crypto", "MeshCore"],
      swiftSettings: swiftSettings
    ),
  ]
)
