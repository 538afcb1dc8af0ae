import MeshCore
import Testing

@testable import Gateway

/// Unknown body fields are refused with a message that says what the request takes.
struct RequestBodyTests {
  func message(_ object: JSONObject, allowed: Set<String>) -> String? {
    do {
      try RequestBody(object: object).allowOnly(allowed)
      return nil
    } catch {
      #expect(error.status == 400)
      return error.message
    }
  }

  @Test func anUnknownFieldIsNamedWithTheFieldsThatAreAllowed() {
    #expect(message(["x": 1], allowed: ["name", "notes"]) == #"unknown field "x"; allowed fields are name, notes"#)
    #expect(message(["name": "a"], allowed: ["name", "notes"]) == nil)
  }

  /// A route that takes no fields said "allowed fields are " and nothing after it.
  @Test func aRouteWithoutFieldsSaysItTakesNone() {
    let text = message(["x": 1], allowed: [])
    #expect(text == #"unknown field "x"; this request takes no fields (send {} or no body)"#)
    #expect(message([:], allowed: []) == nil)
  }
}
