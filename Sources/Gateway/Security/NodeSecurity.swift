/// The node's certificate and mesh security settings: creating the node certificate on first start, choosing what
/// the port serves over TLS, and the settings the mesh runtime enforces (docs/security.md).
///
/// Layer 4 (node runtime).
import Crypto
import Foundation
import LWS
import Logging

/// Security settings the node actor needs.
struct NodeSecurity: Sendable {
  /// The fingerprint (SHA-256 of the DER, lowercase hex) of the certificate this node presents on TLS links.
  var fingerprint: String
  /// Mesh links are dialled over TLS.
  var meshTLS: Bool
  /// The dashboard and API are served over HTTPS (`--tls-cert`); plain HTTP API requests are refused.
  var servesHTTPS: Bool
  /// The mesh secret's bytes, if any.
  var secret: [UInt8]?
  /// Pinned fingerprints by node id, as stored.
  var pins: [String: String]

  /// Plaintext, no certificate, no secret (unit tests that build a node without TLS).
  static let none = NodeSecurity(fingerprint: "", meshTLS: false, servesHTTPS: false, secret: nil, pins: [:])
}

/// The node certificate in the data directory.
enum NodeIdentity {
  static let certificateFile = "node-cert.pem"
  static let keyFile = "node-key.pem"

  /// Loads `node-cert.pem` / `node-key.pem` from `directory`, creating a new self-signed pair when either is missing
  /// (first start, or deleted on purpose: other nodes that pinned the old one will then refuse this node).
  static func loadOrCreate(
    in directory: URL, nodeID: String, logger: Logger
  ) throws(StartupError) -> (certificatePath: String, keyPath: String, certificate: Certificate) {
    let certificatePath = directory.appendingPathComponent(certificateFile).path
    let keyPath = directory.appendingPathComponent(keyFile).path
    let manager = FileManager.default
    do {
      if manager.fileExists(atPath: certificatePath) && manager.fileExists(atPath: keyPath) {
        // The key must stay private to the node's user.
        if let mode = (try? manager.attributesOfItem(atPath: keyPath))?[.posixPermissions] as? Int, mode & 0o077 != 0 {
          chmod(keyPath, 0o600)
          logger.notice("Node key was readable by others; set it to 0600.", ["tls.key": keyPath])
        }
        let certificate = try Certificate.load(certificatePath: certificatePath, keyPath: keyPath)
        return (certificatePath, keyPath, certificate)
      }
      try? manager.removeItem(atPath: certificatePath)
      try? manager.removeItem(atPath: keyPath)
      let certificate = try Certificate.createSelfSigned(
        certificatePath: certificatePath, keyPath: keyPath, commonName: "meshgate node \(nodeID)")
      logger.notice(
        "Created the node certificate.",
        ["tls.cert": certificatePath, "tls.fingerprint": certificate.fingerprint])
      return (certificatePath, keyPath, certificate)
    } catch {
      throw StartupError(
        message:
          "cannot use the node certificate in \(directory.path): \(error.message); delete \(certificateFile) and "
          + "\(keyFile) there to create a new one (nodes that pinned the old one will refuse the new one)")
    }
  }

  /// The certificate `--tls-cert`/`--tls-key` name, nil without them. ``NodeRuntime/start(_:)`` reads them before it
  /// creates anything, so unusable files stop the node with one line and nothing left behind.
  static func userCertificate(_ configuration: NodeConfiguration) throws(StartupError) -> Certificate? {
    guard let certificate = configuration.tlsCertificatePath, let key = configuration.tlsKeyPath else { return nil }
    do {
      return try Certificate.load(certificatePath: certificate, keyPath: key)
    } catch {
      throw StartupError(message: "--tls-cert/--tls-key: \(error.message); give a PEM certificate and its PEM key")
    }
  }

  /// The TLS settings of the server and the node's security settings for `configuration`.
  static func setUp(
    _ configuration: NodeConfiguration, dataDirectory: URL, nodeID: String, pins: [String: String], logger: Logger
  ) throws(StartupError) -> (tls: TLSConfiguration?, security: NodeSecurity) {
    let node = try loadOrCreate(in: dataDirectory, nodeID: nodeID, logger: logger)
    var certificatePath = node.certificatePath
    var keyPath = node.keyPath
    var certificate = node.certificate
    if let loaded = try userCertificate(configuration), let userPath = configuration.tlsCertificatePath,
      let userKey = configuration.tlsKeyPath
    {
      certificate = loaded
      // The port presents one certificate to everyone, so with --tls-cert that one is also the node's TLS identity.
      certificatePath = userPath
      keyPath = userKey
    }
    let servesHTTPS = configuration.tlsCertificatePath != nil
    let tls: TLSConfiguration? =
      configuration.meshTLS || servesHTTPS
      ? TLSConfiguration(
        certificatePath: certificatePath, keyPath: keyPath, requestClientCertificates: true,
        clientCertificatePath: configuration.meshTLS ? certificatePath : nil,
        clientKeyPath: configuration.meshTLS ? keyPath : nil)
      : nil
    let security = NodeSecurity(
      fingerprint: certificate.fingerprint, meshTLS: configuration.meshTLS, servesHTTPS: servesHTTPS,
      secret: configuration.meshSecret.map { Array($0.utf8) }, pins: pins)
    return (tls, security)
  }
}
