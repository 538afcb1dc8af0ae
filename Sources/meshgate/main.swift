// The `meshgate` executable: parses the command line and runs a node (see Gateway.MeshgateCommand).
import Foundation
import Gateway

let status = await MeshgateCommand.main(
  arguments: Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment)
exit(status)
