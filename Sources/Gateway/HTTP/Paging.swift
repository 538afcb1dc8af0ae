/// `?limit=&cursor=` paging for lists held in memory (sessions, invitations, advertisers).
///
/// Layer 6 (surface). The list must be in a stable order; the cursor is the id of the last item of the previous page
/// (`nextCursor`), so a page never repeats or skips an item that existed on both calls.
import LWS
import MeshCore

extension QueryItems {
  /// `?limit=`: an integer from 1 to `maximum`, or `defaultLimit` when absent.
  func limit(maximum: Int, default defaultLimit: Int = 100) throws(APIError) -> Int {
    guard let text = self["limit"] else { return defaultLimit }
    guard let value = Int(text), (1...maximum).contains(value) else {
      throw APIError.badRequest("limit must be an integer from 1 to \(maximum), not \(text.debugDescription)")
    }
    return value
  }
}

struct Page<Item> {
  var items: [Item]
  /// The cursor for the next page, or nil when this was the last.
  var nextCursor: String?

  /// `nextCursor` as JSON (`null` on the last page).
  var nextCursorJSON: JSONValue { nextCursor.map { .string($0) } ?? .null }

  /// Pages `items` by `id` after the query's `cursor`, `limit` items (default 100, 1–500).
  init(_ items: [Item], id: (Item) -> String, query: QueryItems) throws(APIError) {
    let limit = try query.limit(maximum: 500)
    var start = items.startIndex
    if let cursor = query["cursor"], !cursor.isEmpty {
      guard let index = items.firstIndex(where: { id($0) == cursor }) else {
        throw APIError.badRequest("cursor must be the nextCursor of the previous page (it names no item of this list)")
      }
      start = items.index(after: index)
    }
    let end = min(items.endIndex, start + limit)
    self.items = Array(items[start..<end])
    self.nextCursor = end < items.endIndex ? self.items.last.map(id) : nil
  }
}
