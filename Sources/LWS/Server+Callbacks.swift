/// The lws protocol callback: each reason goes to the part of the server it concerns (the service loop, the server
/// side, the dialled links).
///
/// Everything in this file runs on the service thread, inside lws callbacks. Returning non-zero from a
/// callback makes lws close the connection.
internal import CLibWebSockets
import Glibc
import Logging

extension Server {
  /// Whether lws may make this callback from its timers (a timed-out connection torn down, a dial that timed out),
  /// which it runs before it polls, rather than while serving a socket after the poll.
  static func mayRunBeforePoll(_ reason: lws_callback_reasons) -> Bool {
    switch reason {
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED, LWS_CALLBACK_HTTP, LWS_CALLBACK_HTTP_BODY,
      LWS_CALLBACK_HTTP_BODY_COMPLETION, LWS_CALLBACK_HTTP_WRITEABLE, LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION,
      LWS_CALLBACK_ESTABLISHED, LWS_CALLBACK_RECEIVE, LWS_CALLBACK_SERVER_WRITEABLE,
      LWS_CALLBACK_FILTER_NETWORK_CONNECTION, LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED, LWS_CALLBACK_RAW_RX,
      LWS_CALLBACK_RAW_WRITEABLE:
      false
    default:
      true
    }
  }
}

/// The one protocol callback. A plain global function converts to a C function pointer; it finds the
/// server through the context's user pointer.
func serverCallback(
  _ wsi: OpaquePointer?, _ reason: lws_callback_reasons, _ user: UnsafeMutableRawPointer?,
  _ input: UnsafeMutableRawPointer?, _ length: Int
) -> Int32 {
  guard let wsi, let raw = lws_context_user(lws_get_context(wsi)),
    let server = Unmanaged<ContextUser>.fromOpaque(raw).takeUnretainedValue().server
  else {
    return 0
  }
  // What a callback queues for the service thread itself runs when the service pass returns (``Server/run()``), with
  // no wake-up, if lws called it while serving sockets, after its poll. Teardown callbacks may come from lws's
  // timers instead, which run before the poll: what they queue wakes the loop, or it would wait for the next event.
  let result = server.loop.withWakeForOwnWork(Server.mayRunBeforePoll(reason)) {
    serve(server, wsi, reason, user, input, length)
  }
  // A shutdown stops the loop once the last WebSocket and stream are gone, which only a callback can bring about.
  if server.draining { server.stopWhenIdle() }
  return result
}

/// What `serverCallback` does for each reason.
private func serve(
  _ server: Server, _ wsi: OpaquePointer, _ reason: lws_callback_reasons, _ user: UnsafeMutableRawPointer?,
  _ input: UnsafeMutableRawPointer?, _ length: Int
) -> Int32 {
  let side = server.side
  switch reason {
  case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
    // Delivered after lws_cancel_service; returning non-zero here would close the event pipe.
    server.loop.drainInbox()
    return 0
  case LWS_CALLBACK_HTTP:
    return side.httpRequestStarted(wsi)
  case LWS_CALLBACK_HTTP_BODY:
    return side.httpBodyReceived(wsi, input, length)
  case LWS_CALLBACK_HTTP_BODY_COMPLETION:
    return side.httpBodyCompleted(wsi)
  case LWS_CALLBACK_HTTP_WRITEABLE:
    return side.httpWritable(wsi)
  case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
    return side.webSocketUpgradeRequested(wsi)
  case LWS_CALLBACK_ESTABLISHED:
    return side.webSocketEstablished(wsi)
  case LWS_CALLBACK_RECEIVE:
    return side.webSocketReceived(wsi, input, length)
  case LWS_CALLBACK_SERVER_WRITEABLE:
    return side.webSocketWritable(wsi)
  case LWS_CALLBACK_CLOSED:
    side.webSocketClosed(wsi)
    return 0
  case LWS_CALLBACK_RAW_RX:
    return server.links.received(wsi, input, length)
  case LWS_CALLBACK_RAW_WRITEABLE:
    return server.links.writable(wsi)
  case LWS_CALLBACK_RAW_CLOSE:
    server.links.closed(wsi)
    return 0
  case LWS_CALLBACK_WSI_DESTROY:
    side.connectionDestroyed(wsi)
    server.links.closed(wsi)
    return 0
  case LWS_CALLBACK_FILTER_NETWORK_CONNECTION:
    // `wsi` is the listening socket; non-zero makes lws close the new connection at once.
    return side.admission.accepted()
  case LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED:
    side.admission.adopted(wsi)
    return lws_callback_http_dummy(wsi, reason, user, input, length)
  case LWS_CALLBACK_OPENSSL_PERFORM_CLIENT_CERT_VERIFICATION:
    // Any client certificate is accepted here (self-signed node certificates); the node pins it by fingerprint.
    return 0
  default:
    return lws_callback_http_dummy(wsi, reason, user, input, length)
  }
}
