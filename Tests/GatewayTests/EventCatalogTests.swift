import Foundation
import MeshCore
import Testing

@testable import Gateway

/// The event types the code publishes, the ones docs/events.md documents and the OpenAPI document's named event
/// schemas are the same set (``EventCatalog``), and each documented event names every member of its `data`.
struct EventCatalogTests {
  static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

  /// `"peer.found"`-like literals in Sources/Gateway that are not dictionary keys (log metadata such as
  /// `"node.id": …` is), and the prefixes of interpolated types (`"transfer.\(state)"`).
  static func publishedTypes() throws -> (exact: Set<String>, families: Set<String>, settled: Set<String>) {
    let directory = root.appendingPathComponent("Sources/Gateway")
    // Gateway's files live in folders (Node/, Events/, Features/<X>/, …): every Swift file below it.
    let files = (FileManager.default.subpaths(atPath: directory.path) ?? []).filter { $0.hasSuffix(".swift") }
    let literal = #/"((?:peer|presence|invitation|session|job|chat|transfer|stream|node)\.[a-z.]*)(\\\(|")(?!\s*:)/#
    let settle = #/settle\([^)]*state: \.([a-zA-Z]+)/#
    var exact: Set<String> = []
    var families: Set<String> = []
    var settled: Set<String> = []
    for file in files where !file.hasSuffix("EventCatalog.swift") {
      let text = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
      for match in text.matches(of: literal) {
        if match.output.2 == "\"" {
          exact.insert(String(match.output.1))
        } else {
          families.insert(String(match.output.1))
        }
      }
      for match in text.matches(of: settle) { settled.insert(String(match.output.1)) }
    }
    return (exact, families, settled)
  }

  @Test func theCatalogListsExactlyTheTypesTheCodePublishes() throws {
    let (exact, families, settled) = try Self.publishedTypes()
    #expect(families == ["invitation.", "transfer."], "interpolated event types the catalog does not expand")
    var expected = exact
    // `invitation.\(state)` for every state an invitation ends in, `transfer.\(state)` for every state it settles in.
    for state in SessionBook.InvitationState.allCases where state != .pending {
      expected.insert("invitation.\(state.rawValue)")
    }
    for state in settled { expected.insert("transfer.\(state)") }
    #expect(settled == ["finished", "failed", "canceled", "declined"])
    let catalog = EventCatalog.loggedTypes
    #expect(
      expected.subtracting(catalog).isEmpty, "published but not in EventCatalog: \(expected.subtracting(catalog))")
    #expect(
      catalog.subtracting(expected).isEmpty, "in EventCatalog but never published: \(catalog.subtracting(expected))")
    #expect(EventCatalog.logged.count == catalog.count, "a type listed twice")
  }

  /// The `### \`type\`` sections of docs/events.md, with their text.
  static func documentedSections() throws -> [String: String] {
    let text = try String(contentsOf: root.appendingPathComponent("docs/events.md"), encoding: .utf8)
    var sections: [String: String] = [:]
    var current: String?
    for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
      if line.hasPrefix("### `"), line.hasSuffix("`") {
        current = String(line.dropFirst(5).dropLast())
        sections[current!] = ""
      } else if line.hasPrefix("## ") {
        current = nil
      } else if let current {
        sections[current, default: ""] += line + "\n"
      }
    }
    return sections
  }

  @Test func docsEventsDocumentsEveryTypeAndEveryDataMember() throws {
    let sections = try Self.documentedSections()
    let kinds = EventCatalog.logged + [EventCatalog.hello]
    #expect(Set(sections.keys) == Set(kinds.map(\.type)))
    for kind in kinds {
      let section = try #require(sections[kind.type], "docs/events.md has no section for \(kind.type)")
      #expect(section.contains("Schema `\(kind.schemaName)`"), "\(kind.type) names its OpenAPI schema")
      let members = kind.data.objectValue?["properties"]?.objectValue?.keys ?? []
      #expect(!members.isEmpty)
      for member in members {
        #expect(section.contains("| `\(member)` |"), "docs/events.md, \(kind.type): no row for data.\(member)")
      }
      // And nothing documented that the schema does not have.
      for line in section.split(separator: "\n") where line.hasPrefix("| `") {
        let name = line.dropFirst(3).prefix { $0 != "`" }
        #expect(members.contains(String(name)), "docs/events.md, \(kind.type): data.\(name) is not in the schema")
      }
    }
  }

  @Test func openAPINamesASchemaPerEventAndAnEnvelopeWithADiscriminator() throws {
    let document = Router.standard.openAPIDocument(version: "test")
    let schemas = try #require(document.objectValue?["components"]?.objectValue?["schemas"]?.objectValue)
    for kind in EventCatalog.logged + [EventCatalog.hello] {
      let schema = try #require(schemas[kind.schemaName]?.objectValue, "no components/schemas/\(kind.schemaName)")
      #expect(schema["properties"]?.objectValue?["type"]?.objectValue?["const"] == .string(kind.type))
    }
    let event = try #require(schemas["Event"]?.objectValue)
    let mapping = try #require(event["discriminator"]?.objectValue?["mapping"]?.objectValue)
    #expect(Set(mapping.keys) == EventCatalog.loggedTypes)
    guard case .array(let oneOf)? = event["oneOf"] else {
      Issue.record("Event has no oneOf")
      return
    }
    #expect(oneOf.count == EventCatalog.logged.count)
    // The event log's page refers to it.
    let page = document.objectValue?["paths"]?.objectValue?["/api/v1/events"]?.objectValue?["get"]?.objectValue?[
      "responses"]?.objectValue?["200"]
    #expect(page?.serializedString().contains("#/components/schemas/Event") == true)
  }

  @Test func theReadmeLinksTheEventReference() throws {
    let readme = try String(contentsOf: Self.root.appendingPathComponent("README.md"), encoding: .utf8)
    #expect(readme.contains("(docs/events.md)"))
  }

  @Test func theSchemaCheckAcceptsDocumentedDataAndNamesWhatIsWrong() throws {
    let kind = try #require(EventCatalog.kind("job.send.failed"))
    let job: JSONValue = [
      "id": "j1", "name": "Paint", "dueDate": .null, "payment": "80.00", "notes": .null, "assignedTo": .null,
      "receivedFrom": .null, "createdAt": "2026-12-03T09:00:00.000Z", "updatedAt": "2026-12-03T09:00:00.000Z",
    ]
    let to: JSONValue = ["id": "p2", "displayName": "bob", "nodeId": "n2"]
    let good: JSONValue = ["job": job, "jobId": "j1", "to": to, "reason": "declined"]
    #expect(EventCatalog.violations(good, against: kind.data).isEmpty)
    #expect(EventCatalog.violations(.serialized(Array(good.serializedString().utf8)), against: kind.data).isEmpty)
    let deleted: JSONValue = ["job": .null, "jobId": "j1", "to": to, "reason": "expired"]
    #expect(EventCatalog.violations(deleted, against: kind.data).isEmpty)
    // The shape before this change: no job.
    let old: JSONValue = ["jobId": "j1", "to": to, "reason": "declined"]
    #expect(EventCatalog.violations(old, against: kind.data) == ["data.job: missing"])
    let wrong: JSONValue = ["job": job, "jobId": .int(1), "to": ["id": "p2"], "reason": "declined"]
    #expect(
      Set(EventCatalog.violations(wrong, against: kind.data))
        == ["data.jobId: a number, expected string", "data.to.displayName: missing", "data.to.nodeId: missing"])
    let state = try #require(EventCatalog.kind("session.peer.state"))
    let peer: JSONValue = ["id": "p", "displayName": "a", "nodeId": "n"]
    #expect(
      EventCatalog.violations(["sessionId": "s", "peer": peer, "state": "gone"], against: state.data)
        == [#"data.state: "gone" is not one of ["connecting","connected","notConnected"]"#])
  }
}
