#!/usr/bin/env python3
"""Event replay cost: a peer with a backlog reads it back, by REST pages and by SSE replay (stdlib only).

One node per binary; peers alice and bob on it share a session; alice sends bob EVENTS reliable messages of SIZE
bytes, so bob's log holds EVENTS `session.data` events. Then, for each binary in turn (alternating, ROUNDS rounds):
- `GET /api/v1/events?since=…&limit=1000` until the log is read (every page timed);
- `GET /api/v1/events/stream?since=0` (SSE) until the last event arrived.
It prints each binary's median time per 1000 events and the ratio of the binary under test to the baseline binary
(the same build before a change). Both nodes run at once with the same backlog; only one is read at a time.

    bench/replay.py --bin NEW --baseline-bin OLD [--events 5000] [--size 1024] [--rounds 5] [--perf DIR]

With --perf DIR, each node's reads run under `perf record -g` (DIR/baseline.data, DIR/new.data).
"""

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def call(port, method, path, body=None, token=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=60) as answer:
        text = answer.read()
        return json.loads(text) if text else None


class Node:
    def __init__(self, binary, work):
        self.dir = tempfile.mkdtemp(dir=work)
        self.out = open(os.path.join(self.dir, "out.log"), "w+")
        self.process = subprocess.Popen(
            [binary, "--port", "0", "--bind", "127.0.0.1", "--data-dir", os.path.join(self.dir, "data"),
             "--discovery", "off", "--log-level", "warning", "--event-retention", "100000"],
            stdout=self.out, stderr=subprocess.DEVNULL)
        for _ in range(200):
            self.out.seek(0)
            ready = [line for line in self.out.read().splitlines() if line.startswith("meshgate ready ")]
            if ready:
                self.port = int(dict(t.split("=", 1) for t in ready[0].split()[2:] if "=" in t)["port"])
                return
            time.sleep(0.05)
        sys.exit(f"replay: {binary} did not start")

    def fill(self, events, size):
        alice = call(self.port, "POST", "/api/v1/peers", {"displayName": "alice"})
        bob = call(self.port, "POST", "/api/v1/peers", {"displayName": "bob"})
        self.token = bob["token"]
        session = call(self.port, "POST", "/api/v1/sessions", {"encryption": "none"}, alice["token"])["session"]
        invitation = call(self.port, "POST", "/api/v1/invitations",
                          {"to": bob["peer"]["id"], "session": session["id"]}, alice["token"])["invitation"]
        call(self.port, "POST", f"/api/v1/invitations/{invitation['id']}/accept", token=bob["token"])
        body = (("x" * (size - 1)) + "\n").encode()
        for _ in range(events):
            call(self.port, "POST", f"/api/v1/sessions/{session['id']}/data?mode=reliable", raw=body,
                 token=alice["token"])
        latest = 0
        while latest < events:  # the log is written in batches; wait until all are there
            page = call(self.port, "GET", f"/api/v1/events?since={latest}&limit=1000", token=self.token)
            latest += sum(1 for e in page["events"] if e["type"] == "session.data")
            if not page["events"]:
                time.sleep(0.05)

    def read_pages(self):
        since, count, started = "0", 0, time.perf_counter()
        while True:
            page = call(self.port, "GET", f"/api/v1/events?since={since}&limit=1000", token=self.token)
            if not page["events"]:
                return time.perf_counter() - started, count
            count += len(page["events"])
            since = page["nextCursor"]

    def read_sse(self, total):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        started = time.perf_counter()
        connection.request("GET", "/api/v1/events/stream?since=0", headers={"Authorization": "Bearer " + self.token})
        answer = connection.getresponse()
        seen = 0
        while seen < total:
            line = answer.fp.readline()
            if not line:
                break
            if line.startswith(b"id: "):
                seen += 1
        took = time.perf_counter() - started
        connection.close()
        return took, seen

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=20)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--baseline-bin", required=True)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--perf", metavar="DIR", help="record each node's reads with perf record -g into DIR")
    options = parser.parse_args()
    work = tempfile.mkdtemp(prefix="meshgate-replay.")
    nodes = {"baseline": Node(options.baseline_bin, work), "new": Node(options.bin, work)}
    try:
        for node in nodes.values():
            node.fill(options.events, options.size)
        times = {name: {"pages": [], "sse": []} for name in nodes}
        recorders = {}
        if options.perf:
            os.makedirs(options.perf, exist_ok=True)
            for name, node in nodes.items():
                recorders[name] = subprocess.Popen(
                    ["perf", "record", "-g", "-q", "-p", str(node.process.pid), "-o",
                     os.path.join(options.perf, f"{name}.data")], stderr=subprocess.DEVNULL)
            time.sleep(1)
        for _ in range(options.rounds):
            for name, node in nodes.items():
                took, count = node.read_pages()
                times[name]["pages"].append(took / count * 1e6)
                took, count = node.read_sse(count)
                times[name]["sse"].append(took / count * 1e6)
        for recorder in recorders.values():
            recorder.send_signal(2)
            recorder.wait(timeout=60)
        print(f"replay: {options.events} events of {options.size} bytes, {options.rounds} rounds, median ms per 1000 events")
        for what in ("pages", "sse"):
            base = statistics.median(times["baseline"][what])
            new = statistics.median(times["new"][what])
            label = "GET /api/v1/events pages" if what == "pages" else "SSE replay from since=0"
            print(f"  {label:28} baseline {base:8.2f}  new {new:8.2f}  new/baseline {new / base:.2f}x")
    finally:
        for node in nodes.values():
            node.stop()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
