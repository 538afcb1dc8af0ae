#!/usr/bin/env python3
"""Watches one transfer for bench/transfer.sh: when the receiving side's file first holds a byte, and (for meshgate)
when the receiver's event stream says the transfer ended.

usage: transfer_watch.py DIR SUFFIX READY TIMEOUT [PORT TOKEN]

- First byte: every 0.5 ms, the first file in DIR whose name ends in SUFFIX with a size above 0 (the receiving node's
  partial file). Prints `first_ns=<CLOCK_REALTIME ns>` when seen.
- End (with PORT and TOKEN): reads the receiver's SSE stream (`GET /api/v1/events/stream` on 127.0.0.1:PORT) and
  prints `end_ns=<ns> end=<finished|failed|canceled>` at the first transfer.finished/failed/canceled event.
  One long-lived reader, so waiting for the end costs the nodes no CPU (polling the REST API with curl would).
- READY is created once the poller runs and the stream has said `hello` (it is subscribed): the caller starts its
  clock after that.
Gives up after TIMEOUT seconds (exit status 1).
"""
import http.client
import os
import sys
import threading
import time

directory, suffix, ready, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
deadline = time.monotonic() + timeout
ended = threading.Event()
subscribed = threading.Event()


def stream(connection):
    response = connection.getresponse()
    if response.status != 200:
        print(f"end=http-{response.status}", flush=True)
        ended.set()
        return
    while True:
        line = response.readline()
        if not line:
            print("end=stream-closed", flush=True)
            break
        if line.startswith(b"event: hello"):
            subscribed.set()
        for kind in ("finished", "failed", "canceled"):
            if line.startswith(b"event:") and f"transfer.{kind}".encode() in line:
                print(f"end_ns={time.time_ns()} end={kind}", flush=True)
                ended.set()
                return
    ended.set()


reader = None
if len(sys.argv) > 6:
    port, token = int(sys.argv[5]), sys.argv[6]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    connection.request("GET", "/api/v1/events/stream", headers={"Authorization": f"Bearer {token}"})
    reader = threading.Thread(target=stream, args=(connection,), daemon=True)
    reader.start()
else:
    subscribed.set()

seen = signalled = False
while not seen and time.monotonic() < deadline and not ended.is_set():
    if not signalled and subscribed.is_set():
        open(ready, "w").close()
        signalled = True
    try:
        for entry in os.scandir(directory):
            if entry.name.endswith(suffix) and entry.stat().st_size > 0:
                print(f"first_ns={time.time_ns()}", flush=True)
                seen = True
                break
    except FileNotFoundError:
        pass
    if not seen:
        time.sleep(0.0005)
if reader is not None:
    ended.wait(max(0.0, deadline - time.monotonic()))
sys.exit(0 if seen and (reader is None or ended.is_set()) else 1)
