import MeshCore
import Testing

@Suite struct StreamFlowTests {
  @Test func theWindowClosesAndCreditsReopenIt() {
    var flow = StreamFlow(window: 100)
    #expect(flow.room == 100 && !flow.isBlocked)
    flow.didSend(60)
    #expect(flow.room == 40)
    flow.didSend(60)  // One piece may overshoot.
    #expect(flow.isBlocked && flow.room == 0)
    var accepted = flow.credit(50)
    #expect(accepted)
    #expect(flow.room == 30 && !flow.isBlocked)
    accepted = flow.credit(120)
    #expect(accepted && flow.isDrained && flow.room == 100)
  }

  @Test func impossibleCreditsAreRefused() {
    var flow = StreamFlow(window: 10)
    flow.didSend(5)
    var accepted = flow.credit(6)
    #expect(!accepted)
    accepted = flow.credit(4)
    #expect(accepted)
    accepted = flow.credit(3)
    #expect(!accepted)
    #expect(flow.credited == 4)
  }

  @Test func intakeAcceptsOnlyTheNextPiece() {
    var intake = StreamIntake()
    var ok = intake.arrived(offset: 0, count: 10)
    #expect(ok)
    ok = intake.arrived(offset: 5, count: 1)
    #expect(!ok)
    ok = intake.arrived(offset: 10, count: 0)
    #expect(ok)
    intake.handedOver(4)
    intake.handedOver(100)
    #expect(intake.delivered == 10 && intake.received == 10)
  }
}
