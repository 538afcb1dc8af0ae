/// The jobs table: a peer's jobs, paged by id.
import Foundation
import MeshCore
import Store
import Synchronization

/// A jobs cursor that names no job of the caller.
struct JobCursorError: Error {}

/// A page of jobs as `GET /api/v1/jobs` shows it.
struct JobPage: Sendable {
  /// The jobs' JSON array, already written.
  let json: JSONValue
  let count: Int
  /// The last job's id (the next page's cursor when the page is full).
  let lastID: String?
}

extension NodeStore {
  // MARK: - Jobs

  static func encodeParty(_ party: JobParty?) -> SQLValue {
    guard let party else { return .null }
    let value: JSONValue = [
      "id": .string(party.peerID), "displayName": .string(party.displayName), "nodeId": .string(party.nodeID),
    ]
    return .text(value.serializedString())
  }

  static func decodeParty(_ text: String?) -> JobParty? {
    guard let text, case .object(let object)? = try? JSONValue.parse(text) else { return nil }
    return JobParty(
      peerID: object["id"]?.stringValue ?? "", displayName: object["displayName"]?.stringValue ?? "",
      nodeID: object["nodeId"]?.stringValue ?? "")
  }

  static let jobColumns =
    "id, owner_peer_id, name, due_date, payment_cents, notes, assigned_to, received_from, created_at, updated_at"

  static func job(_ row: Row) throws -> Job {
    Job(
      id: try row.string(0), ownerPeerID: try row.string(1), name: try row.string(2),
      dueDate: try row.optionalString(3),
      paymentCents: try row.optionalInt64(4), notes: try row.optionalString(5),
      assignedTo: decodeParty(try row.optionalString(6)), receivedFrom: decodeParty(try row.optionalString(7)),
      createdAt: try row.string(8), updatedAt: try row.string(9))
  }

  /// Inserts or updates a job; returns once it is committed (WAL, `synchronous=NORMAL`: it survives `kill -9`).
  ///
  /// Group commit: writes that arrive while a batch is being written wait and go into the next batch, one transaction
  /// for all of them (each in its own savepoint, so one failing write fails only its caller). Under load that is one
  /// commit and a page or two of WAL for many jobs instead of a commit and several pages each; alone, a write is
  /// written at once.
  nonisolated(nonsending) func saveJob(_ job: Job) async throws {
    try await withCheckedThrowingContinuation { (waiter: CheckedContinuation<Void, any Error>) in
      let lead = jobWrites.withLock { queue in
        queue.waiting.append((job, waiter))
        guard !queue.writing else { return false }
        queue.writing = true
        return true
      }
      // Started here, on the caller's executor, so the first batch goes straight to the store queue.
      if lead { Task.immediate { await self.writeJobBatches() } }
    }
  }

  /// Writes waiting jobs a batch at a time until none wait.
  func writeJobBatches() async {
    while true {
      let batch = jobWrites.withLock { queue in
        let batch = queue.waiting
        queue.waiting = []
        if batch.isEmpty { queue.writing = false } else { queue.batches += 1 }
        return batch
      }
      if batch.isEmpty { return }
      let jobs = batch.map(\.job)
      let outcome: Result<[(any Error)?], any Error>
      do {
        outcome = .success(
          try await database.write { connection in
            jobs.map { job -> (any Error)? in
              do {
                // A savepoint: a failing write is rolled back alone, the batch's other writes commit.
                try connection.transaction { try Self.upsertJob(job, connection) }
                return nil
              } catch {
                return error
              }
            }
          })
      } catch {
        outcome = .failure(error)
      }
      for (index, entry) in batch.enumerated() {
        switch outcome {
        case .success(let errors):
          if let error = errors[index] { entry.waiter.resume(throwing: error) } else { entry.waiter.resume() }
        case .failure(let error):
          entry.waiter.resume(throwing: error)
        }
      }
    }
  }

  static func upsertJob(_ job: Job, _ connection: Connection) throws {
    try connection.execute(
      """
      INSERT INTO jobs(\(Self.jobColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT(id) DO UPDATE SET name = excluded.name, due_date = excluded.due_date,
        payment_cents = excluded.payment_cents, notes = excluded.notes, assigned_to = excluded.assigned_to,
        updated_at = excluded.updated_at
      """,
      [
        .text(job.id), .text(job.ownerPeerID), .text(job.name), job.dueDate.map { .text($0) } ?? .null,
        job.paymentCents.map { .integer($0) } ?? .null, job.notes.map { .text($0) } ?? .null,
        Self.encodeParty(job.assignedTo), Self.encodeParty(job.receivedFrom), .text(job.createdAt),
        .text(job.updatedAt),
      ])
  }

  nonisolated(nonsending) func job(id: String, owner: String) async throws -> Job? {
    try await database.read { connection in
      try connection.queryOne(
        "SELECT \(Self.jobColumns) FROM jobs WHERE id = ? AND owner_peer_id = ?", [.text(id), .text(owner)]
      ).map(Self.job)
    }
  }

  /// A page of `owner`'s jobs in creation order, after the job `cursor` (exclusive), as the JSON array the API
  /// answers with. The array is written here, on the store's queue beside the read, so the service thread only copies
  /// its bytes (a page of 20 jobs took the service thread longer to render than all the rest of the request).
  nonisolated(nonsending) func jobPage(owner: String, after cursor: String?, limit: Int) async throws -> JobPage {
    try await database.read { connection in
      let jobs = try Self.jobs(connection, owner: owner, after: cursor, limit: limit)
      return JobPage(json: JSONValue.array(jobs.map(\.json)).preserialized, count: jobs.count, lastID: jobs.last?.id)
    }
  }

  static func jobs(_ connection: Connection, owner: String, after cursor: String?, limit: Int) throws -> [Job] {
    if let cursor,
      let anchor = try connection.queryOne(
        "SELECT created_at FROM jobs WHERE id = ? AND owner_peer_id = ?", [.text(cursor), .text(owner)])
    {
      return try connection.query(
        """
        SELECT \(Self.jobColumns) FROM jobs WHERE owner_peer_id = ? AND (created_at, id) > (?, ?)
        ORDER BY created_at, id LIMIT ?
        """, [.text(owner), .text(try anchor.string(0)), .text(cursor), .integer(Int64(limit))]
      ).map(Self.job)
    }
    if cursor != nil { throw JobCursorError() }
    return try connection.query(
      "SELECT \(Self.jobColumns) FROM jobs WHERE owner_peer_id = ? ORDER BY created_at, id LIMIT ?",
      [.text(owner), .integer(Int64(limit))]
    ).map(Self.job)
  }

  nonisolated(nonsending) func deleteJob(id: String, owner: String) async throws -> Bool {
    try await database.write { connection in
      try connection.execute("DELETE FROM jobs WHERE id = ? AND owner_peer_id = ?", [.text(id), .text(owner)])
      return connection.changes > 0
    }
  }
}
