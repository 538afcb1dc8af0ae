public import MeshCore

extension SimulatedRuntime {
  func payload(_ effect: PayloadEffect) {}
}
