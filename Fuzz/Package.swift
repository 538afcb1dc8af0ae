// swift-tools-version:6.1
// The libFuzzer harness (`make fuzz`, short runs in `make test`). A package of its own, so that the main package's
// normal builds never compile it: it only links with `swift build -Xswiftc -sanitize=fuzzer` (libFuzzer brings
// `main`). Build from this directory:
//   swift build -c debug -Xswiftc -sanitize=fuzzer -Xswiftc -parse-as-library --scratch-path ../.build/fuzz
import PackageDescription

let package = Package(
  name: "meshgate-fuzz",
  dependencies: [.package(name: "meshgate", path: "..")],
  targets: [
    .target(name: "CFuzzDriver"),
    .executableTarget(
      name: "meshgate-fuzz",
      dependencies: ["CFuzzDriver", .product(name: "MeshgateFuzzTargets", package: "meshgate")]
    ),
  ]
)
