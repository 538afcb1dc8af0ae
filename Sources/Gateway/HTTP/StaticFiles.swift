/// The dashboard's static files, loaded into memory once at start-up.
///
/// Layer 6 (surface). Serving from an in-memory table keeps file I/O off the lws service thread and makes
/// path traversal impossible: a request can only name a key that was found under the public directory.
/// Every file gets a strong `ETag`; responses say `Cache-Control: no-cache`, so browsers revalidate and get
/// a cheap 304 while the file is unchanged, and see a new version right after an upgrade.
import Crypto
import Foundation
import LWS

/// One file ready to serve.
struct StaticFile: Sendable {
  let body: [UInt8]
  let contentType: String
  let etag: String
}

/// The static file table.
struct StaticFiles: Sendable {
  private(set) var files: [String: StaticFile] = [:]

  /// The largest total size loaded; the dashboard is a few hundred KiB.
  static let maximumTotalBytes = 32 << 20

  static let contentTypes: [String: String] = [
    "html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8", "mjs": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8", "json": "application/json", "svg": "image/svg+xml", "png": "image/png",
    "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp", "ico": "image/x-icon",
    "txt": "text/plain; charset=utf-8", "woff2": "font/woff2", "webmanifest": "application/manifest+json",
    "map": "application/json",
  ]

  /// An empty table (no dashboard found).
  init() {}

  /// Loads every regular file under `directory`. Hidden files are skipped.
  init(directory: String) throws {
    let root = URL(fileURLWithPath: directory).standardizedFileURL
    guard
      let enumerator = FileManager.default.enumerator(
        at: root, includingPropertiesForKeys: [.isRegularFileKey], options: [.skipsHiddenFiles])
    else { return }
    var total = 0
    for case let url as URL in enumerator {
      guard (try? url.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true else { continue }
      let data = try Data(contentsOf: url)
      total += data.count
      guard total <= Self.maximumTotalBytes else {
        throw ConfigurationError(
          "the public directory \(directory) holds more than 32 MiB; point --public-dir at the dashboard")
      }
      let relative = url.standardizedFileURL.path.dropFirst(root.path.count)
      let key = relative.hasPrefix("/") ? String(relative) : "/" + relative
      let body = [UInt8](data)
      let type = Self.contentTypes[url.pathExtension.lowercased()] ?? "application/octet-stream"
      files[key] = StaticFile(body: body, contentType: type, etag: "\"\(Crypto.hex(Crypto.sha256(body).prefix(12)))\"")
    }
  }

  /// The file for a request path: `/` and directories map to their `index.html`.
  func lookup(_ path: String) -> StaticFile? {
    if path.hasSuffix("/") { return files[path + "index.html"] }
    return files[path]
  }

  /// The response for `file`, honouring `If-None-Match`.
  static func response(for file: StaticFile, head: HTTPRequestHead) -> HTTPResponse {
    var headers: [(String, String)] = [
      ("etag", file.etag), ("cache-control", "no-cache"), ("x-content-type-options", "nosniff"),
    ]
    if file.contentType.hasPrefix("text/html") {
      headers.append(
        (
          "content-security-policy",
          "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; style-src 'self'; script-src 'self'; "
            + "frame-ancestors 'none'"
        ))
      // No other site may frame the dashboard (clickjacking); X-Frame-Options for browsers without CSP level 2.
      headers.append(("x-frame-options", "DENY"))
      headers.append(("referrer-policy", "no-referrer"))
    }
    if let match = head.headers["if-none-match"],
      match.split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == file.etag || $0 == "*" })
    {
      return HTTPResponse(status: 304, headers: headers)
    }
    return HTTPResponse(
      status: 200, contentType: file.contentType, headers: headers, body: file.body, omitBody: head.method == .head)
  }
}
