import LWS
import MeshCore
import Testing

@testable import Gateway

struct RouterTests {
  let router = Router.standard

  @Test func matchesStaticAndParameterisedPatterns() {
    let route = Route(.get, "/api/v1/things/{id}", "x", access: .open, "") { _, _ in .json(.null) }
    #expect(route.match(["api", "v1", "things", "42"]) == ["id": "42"])
    #expect(route.match(["api", "v1", "things"]) == nil)
    #expect(route.match(["api", "v1", "other", "42"]) == nil)
  }

  @Test func documentationIsTheSummaryThenOneLinePerAnswer() {
    let route = Route(
      .post, "/api/v1/things", "createThing", returns: ["type": "object"],
      """
      Creates a thing
      in two lines.
      201 Created.
      202 Accepted; done later.
      409 Taken.
      """
    ) { _, _ in .json(.null) }
    #expect(route.summary == "Creates a thing in two lines.")
    #expect(route.responses.map(\.status) == [201, 202, 409])
    #expect(route.responses.map(\.description) == ["Created.", "Accepted; done later.", "Taken."])
    #expect(route.responses.map(\.schema) == [["type": "object"], ["type": "object"], Schemas.error])
  }

  @Test func parametersAndLiteralsOfTheSameLengthResolveInTableOrder() {
    let first = Route(.get, "/api/v1/things/special", "special", access: .open, "") { _, _ in .json(.null) }
    let second = Route(.get, "/api/v1/things/{id}", "thing", access: .open, "") { _, _ in .json(.null) }
    let third = Route(.post, "/api/v1/things/{id}", "postThing", access: .open, "") { _, _ in .json(.null) }
    let router = Router(routes: [first, second, third])
    guard case .found(let special, let none) = router.match(method: .get, path: "/api/v1/things/special"),
      case .found(let thing, let parameters) = router.match(method: .get, path: "/api/v1/things/42"),
      case .found(let posted, let postParameters) = router.match(method: .post, path: "/api/v1/things/special"),
      case .methodNotAllowed(let pattern, let allowed) = router.match(method: .delete, path: "/api/v1/things/7")
    else {
      Issue.record("expected three matches and a 405")
      return
    }
    #expect(special.operationID == "special" && none.isEmpty)
    #expect(thing.operationID == "thing" && parameters == ["id": "42"])
    #expect(posted.operationID == "postThing" && postParameters == ["id": "special"])
    #expect(pattern == "/api/v1/things/{id}" && allowed == [.get, .post, .head])
    guard case .notFound = router.match(method: .get, path: "/api/v1/things/42/more"),
      case .notFound = router.match(method: .get, path: "/api/v1/thing/42")
    else {
      Issue.record("expected notFound")
      return
    }
  }

  @Test func unknownPathIsNotFound() {
    guard case .notFound = router.match(method: .get, path: "/api/v1/nothing") else {
      Issue.record("expected notFound")
      return
    }
  }

  @Test func wrongMethodListsAllowedMethods() {
    guard case .methodNotAllowed(let pattern, let allowed) = router.match(method: .put, path: "/api/v1/peers/me") else {
      Issue.record("expected methodNotAllowed")
      return
    }
    #expect(pattern == "/api/v1/peers/me")
    #expect(Set(allowed) == [.get, .head, .patch, .delete])
  }

  @Test func headMatchesGetRoutes() {
    guard case .found(let route, _) = router.match(method: .head, path: "/healthz") else {
      Issue.record("expected a match")
      return
    }
    #expect(route.operationID == "getHealth")
  }

  @Test func openAPIDescribesExactlyTheRouteTable() throws {
    let document = router.openAPIDocument(version: "test")
    guard case .object(let paths)? = document.objectValue?["paths"] else {
      Issue.record("no paths")
      return
    }
    var described: Set<String> = []
    for (path, item) in paths {
      for method in item.objectValue?.keys ?? [] { described.insert("\(method.uppercased()) \(path)") }
    }
    let routes = Set(router.routes.map { "\($0.method.rawValue) \($0.pattern)" })
    #expect(described == routes)
    #expect(document.objectValue?["openapi"] == "3.1.0")
  }

  /// The server answers 413 for a body over --max-body-bytes on every route that takes a JSON (or empty) body, so
  /// the document must say so for each of them (it said so for POST /api/v1/peers alone). Raw bodies (uploads, stream
  /// PUTs) have limits of their own, declared with their routes.
  @Test func everyRouteWithABodyDocuments413() throws {
    let document = router.openAPIDocument(version: "test")
    let paths = try #require(document.objectValue?["paths"]?.objectValue)
    var missing: [String] = []
    for route in router.routes where route.method.hasRequestBody && !route.rawRequestBody {
      let operation = paths[route.pattern]?.objectValue?[route.method.rawValue.lowercased()]?.objectValue
      if operation?["responses"]?.objectValue?["413"] == nil { missing.append("\(route.method) \(route.pattern)") }
    }
    #expect(missing == [], "no 413 documented for \(missing)")
  }

  /// Every link goes from a route's first 2xx answer, whose schema has the pointer's path, to an operation that exists
  /// and takes the parameter in its path.
  @Test func everyLinkNamesAnOperationAndItsPathParameter() throws {
    let document = router.openAPIDocument(version: "test")
    let paths = try #require(document.objectValue?["paths"]?.objectValue)
    var linked = 0
    for route in router.routes {
      for link in route.links {
        let target = try #require(router.routes.first { $0.operationID == link.operationID }, "\(link.operationID)")
        #expect(target.pattern.contains("{\(link.parameter)}"), "\(route.operationID) → \(link.operationID)")
        var schema = route.responses.first { (200..<300).contains($0.status) }?.schema
        for name in link.pointer.split(separator: "/") {
          schema = schema?.objectValue?["properties"]?.objectValue?[String(name)]
        }
        #expect(schema != nil, "\(route.operationID)'s answer has no \(link.pointer)")
        linked += 1
      }
      let status = route.responses.first { (200..<300).contains($0.status) }?.status
      let operation = paths[route.pattern]?.objectValue?[route.method.rawValue.lowercased()]?.objectValue
      let links = status.flatMap { operation?["responses"]?.objectValue?[String($0)]?.objectValue?["links"] }
      #expect((links?.objectValue?.keys.count ?? 0) == route.links.count, "\(route.operationID)")
    }
    #expect(linked > 20)
  }

  @Test func everyRouteHasAUniqueOperationID() {
    let ids = router.routes.map(\.operationID)
    #expect(Set(ids).count == ids.count)
  }
}
