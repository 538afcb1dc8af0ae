import MeshCore

// What browsers believe, what they should believe, and running until the two agree.

extension Simulation {
  /// What the browsing peers of node `index` currently believe, from their event logs alone:
  /// browser peer id → service type → advertiser peer ids.
  public func directoryView(_ index: Int) -> [String: [String: Set<String>]] {
    var view: [String: [String: Set<String>]] = [:]
    for (peerID, peer) in nodes[index].durable where !peer.browsing.isEmpty {
      for service in peer.browsing {
        view[peerID, default: [:]][service] = Set((beliefs[peerID]?[service] ?? [:]).keys)
      }
    }
    return view
  }

  /// What the browsing peers of node `index` should believe (the ground truth), in the shape of
  /// ``directoryView(_:)``: every peer advertising the service on a running node that node `index` can reach and
  /// is configured to link with (itself included), the browser excluded.
  public func expectedView(_ index: Int) -> [String: [String: Set<String>]] {
    let advertisers = groundTruth()
    var view: [String: [String: Set<String>]] = [:]
    for (peerID, peer) in nodes[index].durable where !peer.browsing.isEmpty {
      for service in peer.browsing {
        let seen = (advertisers[service] ?? []).filter { $0.peerID != peerID && visible($0.node, from: index) }
        view[peerID, default: [:]][service] = Set(seen.map(\.peerID))
      }
    }
    return view
  }

  /// What browser `peerID` believes, with the node and discovery info of each advertiser.
  public func beliefs(of peerID: String) -> [String: [String: Advertisement]] { beliefs[peerID] ?? [:] }

  /// Whether every browser on every running node believes exactly the ground truth (advertiser ids, their nodes
  /// and their discovery info).
  public var isConverged: Bool {
    browserScores().allSatisfy { $0.correct == $0.expected && $0.believed == $0.expected }
  }

  /// How right the browsers are, from 0 to 1: correctly believed advertisers divided by the advertisers they
  /// should believe in plus the ones they wrongly believe in (a wrong node or discovery info counts as both).
  /// 1 when there is nothing to believe.
  public var agreement: Double {
    let scores = browserScores()
    let correct = scores.reduce(0) { $0 + $1.correct }
    let total = scores.reduce(0) { $0 + $1.expected + $1.believed - $1.correct }
    return total == 0 ? 1 : Double(correct) / Double(total)
  }

  /// For each browsing peer on a running node and each service type it browses: how many advertisers it should
  /// believe in, how many it believes in, and how many of those it believes in correctly (right node and info).
  func browserScores() -> [(expected: Int, believed: Int, correct: Int)] {
    let advertisers = groundTruth()
    var scores: [(expected: Int, believed: Int, correct: Int)] = []
    for node in nodes where node.alive {
      for (peerID, peer) in node.durable {
        for service in peer.browsing {
          let believed = beliefs[peerID]?[service] ?? [:]
          var expected = 0
          var correct = 0
          for advertiser in advertisers[service] ?? [] {
            guard advertiser.peerID != peerID, visible(advertiser.node, from: node.index) else { continue }
            expected += 1
            if let belief = believed[advertiser.peerID], belief.nodeID == nodes[advertiser.node].nodeID,
              belief.discoveryInfo == advertiser.info
            {
              correct += 1
            }
          }
          scores.append((expected, believed.count, correct))
        }
      }
    }
    return scores
  }

  /// Advertisers per service type on running nodes.
  func groundTruth() -> [String: [(peerID: String, node: Int, info: [String: String])]] {
    var result: [String: [(peerID: String, node: Int, info: [String: String])]] = [:]
    for node in nodes where node.alive {
      for (peerID, peer) in node.durable {
        for (service, info) in peer.advertising { result[service, default: []].append((peerID, node.index, info)) }
      }
    }
    return result
  }

  /// Whether peers on node `advertiser` should be seen from node `browser`.
  func visible(_ advertiser: Int, from browser: Int) -> Bool {
    advertiser == browser
      || (nodes[advertiser].alive && reachable(advertiser, browser) && adjacent(advertiser, browser))
  }

  /// Runs until ``isConverged`` (checked every `checkEvery` virtual ms while anything changes) or until `maxTime`
  /// virtual ms have passed. Returns the virtual ms it took, or nil if it did not converge in time.
  @discardableResult
  public func runUntilConverged(maxTime: UInt64, checkEvery: UInt64 = 10) -> UInt64? {
    let start = now
    let deadline = now + maxTime
    var nextCheck = now
    while true {
      if now >= nextCheck {
        if dirty {
          if isConverged { return now - start }
          dirty = false
        }
        nextCheck = now + checkEvery
      }
      guard let next = queue.nextTime, next <= deadline else { break }
      if next > nextCheck {
        now = nextCheck
        continue
      }
      step()
    }
    now = deadline
    return isConverged ? now - start : nil
  }

  /// Runs until browsers agree with the ground truth and nothing visible (found / lost, links up / down) has
  /// changed for `quietPeriod` virtual ms, or until `maxTime` virtual ms have passed. Returns how long after the
  /// call the last change happened (the time to convergence), or nil if it did not settle in time.
  /// ``statsAtLastChange`` holds the counters at that moment.
  @discardableResult
  public func runUntilQuiet(maxTime: UInt64, quietPeriod: UInt64 = 1000) -> UInt64? {
    let start = now
    let deadline = now + maxTime
    var checkedQuietStretch: UInt64?
    while true {
      let quietSince = max(lastChangeTime, start)
      let quietAt = quietSince + quietPeriod
      if quietAt <= deadline, checkedQuietStretch != quietSince, queue.nextTime.map({ $0 > quietAt }) ?? true {
        // Nothing happens before the stretch is complete: the state at `quietAt` is the state now.
        checkedQuietStretch = quietSince
        if isConverged {
          now = max(now, quietAt)
          return quietSince - start
        }
      }
      guard let next = queue.nextTime, next <= deadline else { break }
      step()
    }
    now = deadline
    return nil
  }
}
