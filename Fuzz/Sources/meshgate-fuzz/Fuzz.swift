import CFuzzDriver
// libFuzzer entry point. `MESHGATE_FUZZ_TARGET` picks the decoder: `mesh-frame` (MeshFrameCodec.decode),
// `chat-wire` (ChatWire.decode), `request-body` (JSONValue.parse and the REST request-body readers) or `all`
// (the default: every input goes through all three).
import Foundation
import Gateway

enum Target: String {
  case meshFrame = "mesh-frame"
  case chatWire = "chat-wire"
  case requestBody = "request-body"
  case all
}

let target = Target(rawValue: ProcessInfo.processInfo.environment["MESHGATE_FUZZ_TARGET"] ?? "all") ?? .all

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
  let bytes = start.map { Array(UnsafeBufferPointer(start: $0, count: count)) } ?? []
  switch target {
  case .meshFrame: FuzzTargets.meshFrame(bytes)
  case .chatWire: FuzzTargets.chatWire(bytes)
  case .requestBody: FuzzTargets.requestBody(bytes)
  case .all:
    FuzzTargets.meshFrame(bytes)
    FuzzTargets.chatWire(bytes)
    FuzzTargets.requestBody(bytes)
  }
  return 0
}

/// Called by libFuzzer before fuzzing. With `MESHGATE_FUZZ_SEED_DIR` set, writes the seed inputs of the chosen
/// target there (scripts/fuzz.sh passes the corpus directory).
@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(
  _ argc: UnsafeMutablePointer<CInt>?,
  _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>?
) -> CInt {
  guard let directory = ProcessInfo.processInfo.environment["MESHGATE_FUZZ_SEED_DIR"] else { return 0 }
  for (name, inputs) in FuzzTargets.seeds() where target == .all || target.rawValue == name {
    for (index, bytes) in inputs.enumerated() {
      FileManager.default.createFile(atPath: "\(directory)/seed-\(name)-\(index)", contents: Data(bytes))
    }
  }
  return 0
}
