#!/usr/bin/env python3
"""Sets up meshgate nodes for bench/run.sh ws-broadcast / ws-fanout / ws-idle (stdlib only).

Creates N subscriber peers (round-robin over the nodes given with --base, comma-separated) and one
publisher peer on the first node, a session created by the publisher with every subscriber invited and
accepted (across nodes when there are several), then writes:
  OUT/subs.txt   one ws://.../api/v1/ws?token=... URL per subscriber
  OUT/pub.txt    the publisher's ws:// URL
  OUT/session    the session id
With --no-session it only creates the peers (idle-client memory test).

    python3 bench/mg_setup.py --base http://127.0.0.1:PORT[,http://127.0.0.1:PORT2...] -n 50 --out DIR [--no-session]
"""
import argparse
import json
import os
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def call(base, method, path, body=None, token=None, retry_404=False):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    for attempt in range(100):
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                text = r.read()
                return json.loads(text) if text else None
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            # A peer on another node is known to this one a moment after it was created.
            if retry_404 and e.code == 404 and attempt < 99:
                time.sleep(0.1)
                continue
            sys.exit(f"mg_setup: {method} {path} -> {e.code} {detail}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("-n", type=int, default=50)
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-session", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    bases = a.base.split(",")
    a.base = bases[0]
    ws_base = "ws://" + a.base.split("://", 1)[1]

    def make_sub(i):
        base = bases[i % len(bases)]
        sub = call(base, "POST", "/api/v1/peers", {"displayName": f"sub-{i}"})
        sub["base"] = base
        return sub

    with ThreadPoolExecutor(8) as pool:
        subs = list(pool.map(make_sub, range(a.n)))
    with open(os.path.join(a.out, "subs.txt"), "w") as f:
        for s in subs:
            f.write(f"ws://{s['base'].split('://', 1)[1]}/api/v1/ws?token={s['token']}\n")
    if a.no_session:
        print(f"mg_setup: {a.n} peers")
        return
    pub = call(a.base, "POST", "/api/v1/peers", {"displayName": "publisher"})
    session = call(a.base, "POST", "/api/v1/sessions",
                   {"encryption": "none", "strategy": "cluster", "maxPeers": min(1024, a.n + 1)}, pub["token"])
    sid = (session.get("session") or session)["id"]

    def join(s):
        inv = call(a.base, "POST", "/api/v1/invitations", {"to": s["peer"]["id"], "session": sid}, pub["token"],
                   retry_404=True)
        iid = (inv.get("invitation") or inv)["id"]
        call(s["base"], "POST", f"/api/v1/invitations/{iid}/accept", {}, s["token"], retry_404=True)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(join, subs))
    for _ in range(100):
        got = call(a.base, "GET", f"/api/v1/sessions/{sid}", token=pub["token"])
        members = (got.get("session") or got)["members"]
        connected = sum(1 for m in members if m["state"] == "connected")
        if connected == a.n + 1:
            break
        time.sleep(0.1)
    if connected != a.n + 1:
        sys.exit(f"mg_setup: only {connected} of {a.n + 1} members connected")
    with open(os.path.join(a.out, "pub.txt"), "w") as f:
        f.write(f"{ws_base}/api/v1/ws?token={pub['token']}\n")
    with open(os.path.join(a.out, "session"), "w") as f:
        f.write(sid + "\n")
    print(f"mg_setup: session {sid} with {connected} connected members")


if __name__ == "__main__":
    main()
