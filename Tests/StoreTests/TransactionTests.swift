import Store
import Testing

private struct Boom: Error, Equatable {}

@Suite struct TransactionTests {
  private func makeConnection() throws -> Connection {
    let connection = try Connection(path: ":memory:")
    try connection.execute("CREATE TABLE t (v INTEGER)")
    return connection
  }

  private func values(_ connection: Connection) throws -> [Int] {
    try connection.query("SELECT v FROM t ORDER BY v").map { try $0.int(0) }
  }

  @Test func commitsWhenTheBodyReturns() throws {
    let connection = try self.makeConnection()
    let result = try connection.transaction {
      try connection.execute("INSERT INTO t VALUES (1)")
      #expect(connection.isInTransaction)
      return "done"
    }
    #expect(result == "done")
    #expect(!connection.isInTransaction)
    #expect(try self.values(connection) == [1])
  }

  @Test func rollsBackAndRethrowsWhenTheBodyThrows() throws {
    let connection = try self.makeConnection()
    #expect(throws: Boom()) {
      try connection.transaction {
        try connection.execute("INSERT INTO t VALUES (1)")
        throw Boom()
      }
    }
    #expect(!connection.isInTransaction)
    #expect(try self.values(connection) == [])
  }

  @Test func rollsBackWhenAStatementFails() throws {
    let connection = try self.makeConnection()
    try connection.execute("CREATE UNIQUE INDEX t_v ON t (v)")
    let error = #expect(throws: SQLiteError.self) {
      try connection.transaction {
        try connection.execute("INSERT INTO t VALUES (1)")
        try connection.execute("INSERT INTO t VALUES (1)")
      }
    }
    #expect(error?.code == 2067)
    #expect(try self.values(connection) == [])
  }

  @Test func nestedTransactionsUseSavepoints() throws {
    let connection = try self.makeConnection()
    try connection.transaction {
      try connection.execute("INSERT INTO t VALUES (1)")
      #expect(throws: Boom()) {
        try connection.transaction {
          try connection.execute("INSERT INTO t VALUES (2)")
          throw Boom()
        }
      }
      try connection.transaction { try connection.execute("INSERT INTO t VALUES (3)") }
    }
    #expect(try self.values(connection) == [1, 3])

    #expect(throws: Boom()) {
      try connection.transaction {
        try connection.transaction { try connection.execute("INSERT INTO t VALUES (4)") }
        throw Boom()
      }
    }
    #expect(try self.values(connection) == [1, 3])  // The outer rollback also undoes released savepoints.
    #expect(!connection.isInTransaction)
  }
}
