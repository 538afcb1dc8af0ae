import Glibc
import MeshCore
import Testing

/// The parser's cost on hostile documents: a 963 KB object of 75 000 keys took 4.7 s in a release
/// build when each key was inserted with a linear search. Times are the test thread's CPU time
/// (`CLOCK_THREAD_CPUTIME_ID`), so other processes on a loaded machine do not count, and the best of three runs is
/// kept. Two checks: the cost grows linearly (4× the keys cost well under 8× the time; quadratic growth gives 16×),
/// whatever the build; and a 1 MiB document of each worst shape parses in under 50 ms in a release build (under
/// 500 ms in a debug build, whose unoptimized code is up to 10× slower).
struct JSONParserCostTests {
  #if DEBUG
    static let budgetMilliseconds = 500.0
  #else
    static let budgetMilliseconds = 50.0
  #endif

  /// The thread's CPU time in milliseconds.
  static func cpuMilliseconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
    return Double(now.tv_sec) * 1000 + Double(now.tv_nsec) / 1_000_000
  }

  /// The best of three CPU times of `work`.
  static func bestOfThree(_ work: () throws -> Void) rethrows -> Double {
    var best = Double.infinity
    for _ in 0..<3 {
      let start = cpuMilliseconds()
      try work()
      best = min(best, cpuMilliseconds() - start)
    }
    return best
  }

  /// `{"k0":0,"k1":0,…}` with `count` keys.
  static func manyKeys(_ count: Int, prefix: String = "k") -> [UInt8] {
    var text = "{"
    text.reserveCapacity(count * 12)
    for index in 0..<count {
      if index > 0 { text += "," }
      text += "\"\(prefix)\(index)\":0"
    }
    return Array((text + "}").utf8)
  }

  /// The worst shapes, each about 1 MiB and each accepted under the default limits.
  static let worstShapes: [(name: String, bytes: [UInt8])] = {
    let mebibyte = 1 << 20
    var shapes: [(String, [UInt8])] = []
    // 75 000 short keys, in objects of at most 10 000 members (the default limit per object).
    var split = "{"
    for part in 0..<8 {
      if part > 0 { split += "," }
      split += "\"p\(part)\":" + String(decoding: manyKeys(9_375, prefix: "key"), as: UTF8.self)
    }
    shapes.append(("75 000 keys in 8 objects", Array((split + "}").utf8)))
    // Nesting at the default depth limit, repeated until the document is 1 MiB.
    let nest = String(repeating: "{\"a\":", count: 63) + "0" + String(repeating: "}", count: 63)
    var nested = "[" + nest
    while nested.utf8.count + nest.utf8.count < mebibyte { nested += "," + nest }
    shapes.append(("nesting 64 deep", Array((nested + "]").utf8)))
    shapes.append(("one long string", Array(("\"" + String(repeating: "x", count: mebibyte) + "\"").utf8)))
    let escapes = String(repeating: #"\u00e9\n\"\ud83d\ude00"#, count: mebibyte / 24)
    shapes.append(("escapes", Array(("\"" + escapes + "\"").utf8)))
    var numbers = "["
    for index in 0..<(mebibyte / 8) {
      if index > 0 { numbers += "," }
      numbers += "-1.5e-3"
    }
    shapes.append(("numbers", Array((numbers + "]").utf8)))
    let item = #"{"a":1,"b":[],"c":{}}"#
    var small = "[" + item
    while small.utf8.count + item.utf8.count < mebibyte { small += "," + item }
    shapes.append(("small objects", Array((small + "]").utf8)))
    return shapes
  }()

  @Test func objectKeysCostLinearTime() throws {
    let quarter = Self.manyKeys(18_750)
    let full = Self.manyKeys(75_000)
    let small = try Self.bestOfThree { _ = try JSONValue.parse(quarter, maxMembers: .max) }
    let large = try Self.bestOfThree { _ = try JSONValue.parse(full, maxMembers: .max) }
    print("JSON parse cost: 18 750 keys \(small) ms, 75 000 keys \(large) ms of CPU")
    #expect(large < small * 8, "4× the keys cost \(large / small)× the time (\(small) ms → \(large) ms)")
    #expect(large < Self.budgetMilliseconds, "75 000 keys took \(large) ms")
  }

  @Test(arguments: 0..<6) func worstShapesParseWithinBudget(shape: Int) throws {
    let (name, bytes) = Self.worstShapes[shape]
    #expect(bytes.count >= 800_000 && bytes.count <= (1 << 20) + 64, "\(name): \(bytes.count) bytes")
    let milliseconds = try Self.bestOfThree { _ = try JSONValue.parse(bytes) }
    print("JSON parse cost: \(name), \(bytes.count) bytes: \(milliseconds) ms of CPU")
    #expect(milliseconds < Self.budgetMilliseconds, "\(name) (\(bytes.count) bytes) took \(milliseconds) ms")
  }

  @Test func refusesMoreMembersThanTheLimitQuickly() throws {
    let bytes = Self.manyKeys(75_000)
    var caught: JSONParseError?
    let milliseconds = Self.bestOfThree {
      do {
        _ = try JSONValue.parse(bytes)
      } catch {
        caught = error as? JSONParseError
      }
    }
    let error = try #require(caught)
    #expect(error.reason.contains("more than 10000 members"), "\(error)")
    #expect(error.isLimit)
    #expect(milliseconds < Self.budgetMilliseconds, "refusal took \(milliseconds) ms")
    #expect(throws: JSONParseError.self) { try JSONValue.parse(Self.manyKeys(11), maxMembers: 10) }
    #expect((try? JSONValue.parse(Self.manyKeys(10), maxMembers: 10)) != nil)
  }

  @Test func depthLimitIsALimitError() {
    let deep = String(repeating: "[", count: 65) + String(repeating: "]", count: 65)
    do {
      _ = try JSONValue.parse(deep)
      Issue.record("expected an error")
    } catch {
      #expect(error.isLimit)
      #expect(error.reason.contains("deeper than 64 levels"))
    }
    #expect((try? JSONValue.parse(String(deep.dropFirst().dropLast()))) != nil)
  }

  @Test func largeObjectsKeepOrderLookupsAndUpdates() throws {
    let value = try JSONValue.parse(Self.manyKeys(5_000), maxMembers: .max)
    var object = try #require(value.objectValue)
    #expect(object.keys.count == 5_000)
    #expect(object.keys.prefix(3) == ["k0", "k1", "k2"])
    #expect(object["k4321"] == .int(0))
    #expect(object["missing"] == nil)
    object["k10"] = "ten"
    object["new"] = true
    object["k0"] = nil
    #expect(object["k10"] == "ten")
    #expect(object["new"] == true)
    #expect(object["k0"] == nil)
    #expect(object["k1"] == .int(0))
    #expect(object["k4999"] == .int(0))
    #expect(object.keys.first == "k1")
    #expect(object.keys.last == "new")
    // Duplicates are found by the index as well as by the linear search of small objects.
    #expect(throws: JSONParseError.self) { try JSONValue.parse(#"{"a":1,"b":2,"a":3}"#) }
    var text = String(decoding: Self.manyKeys(100), as: UTF8.self)
    text.removeLast()
    #expect(throws: JSONParseError.self) { try JSONValue.parse(text + #","k57":1}"#) }
  }

  @Test func validatesUTF8OnBothPaths() throws {
    #expect(try JSONValue.parse([0x22, 0xC3, 0xA9, 0x22]) == .string("é"))
    #expect(try JSONValue.parse([0x22, 0x5C, 0x6E, 0xC3, 0xA9, 0x22]) == .string("\né"))
    #expect(throws: JSONParseError.self) { try JSONValue.parse([0x22, 0xFF, 0x22]) }
    #expect(throws: JSONParseError.self) { try JSONValue.parse([0x22, 0x5C, 0x6E, 0xC3, 0x22]) }
    #expect(throws: JSONParseError.self) { try JSONValue.parse([0x22, 0xED, 0xA0, 0x80, 0x22]) }
  }

  /// Mesh chat frames (up to 4 MiB from another node) go through the same bounded parser.
  @Test func chatFramesAreBoundedToo() {
    do {
      _ = try ChatWire.decode(Self.manyKeys(10_001))
      Issue.record("a chat frame of 10 001 members was decoded")
    } catch {
      #expect(error.description.contains("more than 10000 members"), "\(error)")
    }
  }
}
