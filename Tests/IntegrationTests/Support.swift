import Foundation
import MeshgateTestSupport
import Testing

/// A peer created on a node for a test.
struct TestPeer {
  let id: String
  let token: String
  let displayName: String
}

extension NodeProcess {
  /// Creates a peer over REST and returns its id and token.
  func createPeer(_ displayName: String, discoveryInfo: String? = nil) throws -> TestPeer {
    var json = #"{"displayName":\#(jsonString(displayName))"#
    if let discoveryInfo { json += #","discoveryInfo":\#(discoveryInfo)"# }
    json += "}"
    let response = try HTTPClient.post(port: port, path: "/api/v1/peers", json: json)
    guard response.status == 201 else {
      throw TestSupportError.unexpectedMessage(
        "creating peer \(displayName) answered \(response.status): \(response.text)")
    }
    let object = try response.jsonObject()
    let peer = try #require(object["peer"] as? [String: Any])
    return TestPeer(
      id: try #require(peer["id"] as? String), token: try #require(object["token"] as? String),
      displayName: displayName)
  }

  /// Opens the browser WebSocket for `peer` and returns it with the hello event already read.
  func openEvents(_ peer: TestPeer, since: String? = nil) throws -> (socket: WebSocketClient, hello: [String: Any]) {
    var path = "/api/v1/ws?token=\(peer.token)"
    if let since { path += "&since=\(since)" }
    let socket = try WebSocketClient(port: port, path: path)
    let hello = try socket.receiveJSONObject()
    guard hello["type"] as? String == "hello" else {
      throw TestSupportError.unexpectedMessage("the first WebSocket message was not hello: \(hello)")
    }
    return (socket, hello)
  }

  /// The admin token the node printed on its first start (`meshgate admin-token=…` on standard output).
  func adminToken() throws -> String {
    for line in stdoutText().split(separator: "\n") where line.hasPrefix("meshgate admin-token=") {
      if let token = line.dropFirst("meshgate admin-token=".count).split(separator: " ").first {
        return String(token)
      }
    }
    throw TestSupportError.unexpectedMessage("node printed no admin token; stdout:\n\(stdoutText())")
  }

  /// The value of one Prometheus sample line, e.g. `meshgate_peers`.
  func metric(_ sample: String) throws -> Double? {
    let text = try HTTPClient.get(port: port, path: "/metrics").text
    for line in text.split(separator: "\n") where line.hasPrefix(sample + " ") {
      return Double(line.dropFirst(sample.count + 1))
    }
    return nil
  }
}

/// A JSON string literal for `text`.
func jsonString(_ text: String) -> String {
  let data = try! JSONSerialization.data(withJSONObject: [text], options: [])
  let array = String(decoding: data, as: UTF8.self)
  return String(array.dropFirst().dropLast())
}

/// The `error.code` of a JSON error response.
func errorCode(_ response: HTTPResponse) -> String? {
  guard let object = try? response.jsonObject(), let error = object["error"] as? [String: Any] else { return nil }
  return error["code"] as? String
}

/// The `error.message` of a JSON error response.
func errorMessage(_ response: HTTPResponse) -> String? {
  guard let object = try? response.jsonObject(), let error = object["error"] as? [String: Any] else { return nil }
  return error["message"] as? String
}
