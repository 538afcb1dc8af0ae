#!/usr/bin/env python3
"""The HTTP checks of `make docker-test` (scripts/docker-test.sh) against the three compose nodes.

    docker-checks.py first STATE URL_A URL_B URL_C
        Waits for /healthz on each node and for all three to link to each other over TLS, then a peer on node-a
        (alice) sends a job to a peer on node-c (carol) and a file to a peer on node-b (bob). Writes what the
        second phase needs (node ids, tokens, job and file) to the JSON file STATE.
    docker-checks.py again STATE URL_A URL_B URL_C
        After `compose down` + `up`: the same node identities (their certificates still pinned by the others,
        links over TLS again), and the peers, the job and the received file are still there (the volumes).

Standard library only. Every wait is bounded by DEADLINE_SECONDS; each request by REQUEST_SECONDS.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import urllib.error
import urllib.request

DEADLINE_SECONDS = float(os.environ.get("MESHGATE_DOCKER_CHECK_SECONDS", "120"))
REQUEST_SECONDS = 10
NAMES = ("node-a", "node-b", "node-c")


class CheckFailed(Exception):
    pass


def log(message: str) -> None:
    print(f"docker-checks: {message}", flush=True)


def request(method: str, url: str, token: str | None = None, body: object = None, raw: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    data = raw
    all_headers = dict(headers or {})
    if body is not None:
        data = json.dumps(body).encode()
        all_headers["content-type"] = "application/json"
    if token:
        all_headers["authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=all_headers)
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_SECONDS) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def call(method: str, url: str, token: str | None = None, body: object = None, expect: tuple[int, ...] = (200,),
         **kwargs: object) -> dict:
    status, payload = request(method, url, token, body, **kwargs)  # type: ignore[arg-type]
    if status not in expect:
        raise CheckFailed(f"{method} {url} answered {status}, expected {expect}: {payload[:400]!r}")
    return json.loads(payload) if payload else {}


def wait_for(what: str, probe, deadline_seconds: float = DEADLINE_SECONDS):
    """Calls probe() until it returns something truthy; fails after the deadline with its last answer."""
    deadline = time.monotonic() + deadline_seconds
    last: object = None
    while True:
        try:
            result = probe()
            if result:
                return result
            last = result
        except (OSError, CheckFailed, ValueError, KeyError) as error:
            last = error
        if time.monotonic() >= deadline:
            raise CheckFailed(f"timed out after {deadline_seconds:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(0.5)


def healthy(url: str) -> bool:
    status, payload = request("GET", f"{url}/healthz")
    return status == 200 and json.loads(payload).get("status") == "ok"


def mesh(url: str) -> dict:
    return call("GET", f"{url}/api/v1/mesh/nodes")


def tls_links(url: str) -> dict[str, dict]:
    """The nodes this one is linked to over TLS, by node id."""
    return {n["id"]: n for n in mesh(url)["nodes"] if n.get("state") == "linked" and n.get("encrypted") is True
            and n.get("id")}


def wait_for_tls_mesh(urls: list[str], ids: list[str]) -> None:
    for name, url, own in zip(NAMES, urls, ids):
        others = [i for i in ids if i != own]

        def linked(url: str = url, others: list[str] = others) -> bool:
            links = tls_links(url)
            return all(o in links and links[o].get("pinned") is True for o in others)

        wait_for(f"{name} to link to the other two nodes over TLS (pinned)", linked)
    log("all three nodes are linked to each other over TLS, certificates pinned")


def create_peer(url: str, name: str) -> tuple[str, str]:
    created = call("POST", f"{url}/api/v1/peers", body={"displayName": name}, expect=(201,))
    return created["peer"]["id"], created["token"]


def accept_incoming(url: str, token: str, invitation_id: str, what: str) -> None:
    def pending() -> bool:
        listed = call("GET", f"{url}/api/v1/invitations?direction=incoming", token)["invitations"]
        return any(i["id"] == invitation_id and i["state"] == "pending" for i in listed)

    wait_for(f"{what} to arrive", pending)
    call("POST", f"{url}/api/v1/invitations/{invitation_id}/accept", token)


def first(state_path: str, urls: list[str]) -> None:
    for name, url in zip(NAMES, urls):
        wait_for(f"{name} /healthz", lambda url=url: healthy(url))
    log("/healthz answers on all three nodes")
    ids = [mesh(url)["self"]["id"] for url in urls]
    wait_for_tls_mesh(urls, ids)
    a, b, c = urls

    alice, alice_token = create_peer(a, "alice")
    bob, bob_token = create_peer(b, "bob")
    carol, carol_token = create_peer(c, "carol")

    # A job from alice (node-a) to carol (node-c), who receives jobs.
    call("PUT", f"{c}/api/v1/advertising/jobmanager-jobs", carol_token, body={"discoveryInfo": {"skills": "plumbing"}})
    wait_for("alice to see carol advertising jobmanager-jobs", lambda: any(
        p["peer"]["id"] == carol for p in call("GET", f"{a}/api/v1/services/jobmanager-jobs/peers", alice_token)["peers"]))
    job_name = f"Fix the sink {os.urandom(4).hex()}"
    job = call("POST", f"{a}/api/v1/jobs", alice_token, body={"name": job_name, "dueDate": "2027-03-31",
                                                              "payment": "120.00", "notes": "docker-test"},
               expect=(201,))["job"]
    offer = call("POST", f"{a}/api/v1/jobs/{job['id']}/send", alice_token, body={"to": carol},
                 expect=(200, 201, 202))["invitation"]
    accept_incoming(c, carol_token, offer["id"], "alice's job offer at carol")

    def carol_has_job() -> bool:
        jobs = call("GET", f"{c}/api/v1/jobs", carol_token)["jobs"]
        return any(j["name"] == job_name and (j.get("receivedFrom") or {}).get("id") == alice for j in jobs)

    wait_for("the job in carol's jobs on node-c", carol_has_job)
    wait_for("alice's job to be assigned to carol", lambda: (
        call("GET", f"{a}/api/v1/jobs/{job['id']}", alice_token)["job"].get("assignedTo") or {}).get("id") == carol)
    log("a job went from alice on node-a to carol on node-c")

    # A file from alice (node-a) to bob (node-b), in a session bob accepted.
    session = call("POST", f"{a}/api/v1/sessions", alice_token, body={"strategy": "cluster"}, expect=(201,))["session"]
    invitation = call("POST", f"{a}/api/v1/invitations", alice_token, expect=(201,), body={
        "to": bob, "session": session["id"], "context": "docker-test", "timeoutSeconds": 60})["invitation"]
    accept_incoming(b, bob_token, invitation["id"], "alice's invitation at bob")

    def bob_connected() -> bool:
        members = call("GET", f"{a}/api/v1/sessions/{session['id']}", alice_token)["session"]["members"]
        return any(m["id"] == bob and m["state"] == "connected" for m in members)

    wait_for("bob to be connected to alice's session", bob_connected)
    content = b"hello from alice on node-a\n" + os.urandom(64 * 1024)
    transfer = call("POST", f"{a}/api/v1/sessions/{session['id']}/resources?to={bob}&name=hello.bin", alice_token,
                    raw=content, headers={"content-type": "application/octet-stream"}, expect=(202,))["transfer"]

    def finished() -> bool:
        state = call("GET", f"{b}/api/v1/transfers/{transfer['id']}", bob_token)["transfer"]["state"]
        if state in ("failed", "canceled"):
            raise CheckFailed(f"the transfer to bob ended {state}")
        return state == "finished"

    wait_for("the file to reach bob on node-b", finished)
    status, received = request("GET", f"{b}/api/v1/transfers/{transfer['id']}/content", bob_token)
    if status != 200 or received != content:
        raise CheckFailed(f"bob's copy of the file differs (status {status}, {len(received)} of {len(content)} bytes)")
    log(f"a file ({len(content)} bytes) went from alice on node-a to bob on node-b")

    with open(state_path, "w", encoding="utf-8") as out:
        json.dump({"ids": ids, "alice": [alice, alice_token], "bob": [bob, bob_token], "carol": [carol, carol_token],
                   "job": {"id": job["id"], "name": job_name}, "transfer": transfer["id"],
                   "sha256": hashlib.sha256(content).hexdigest()}, out)


def again(state_path: str, urls: list[str]) -> None:
    with open(state_path, encoding="utf-8") as source:
        state = json.load(source)
    for name, url in zip(NAMES, urls):
        wait_for(f"{name} /healthz after down + up", lambda url=url: healthy(url))
    ids = [mesh(url)["self"]["id"] for url in urls]
    if ids != state["ids"]:
        raise CheckFailed(f"node identities changed across down + up: {state['ids']} -> {ids} (volumes not kept?)")
    log("each node kept its identity across down + up")
    # Pinned certificates from the first run: a node that came back with a new certificate would be refused.
    wait_for_tls_mesh(urls, ids)
    a, b, c = urls
    alice, alice_token = state["alice"]
    bob, bob_token = state["bob"]
    carol, carol_token = state["carol"]
    for url, peer, token in ((a, alice, alice_token), (b, bob, bob_token), (c, carol, carol_token)):
        me = call("GET", f"{url}/api/v1/peers/me", token)
        if me["peer"]["id"] != peer:
            raise CheckFailed(f"{url}: the token now belongs to {me['peer']['id']}, not {peer}")
    jobs = call("GET", f"{c}/api/v1/jobs", carol_token)["jobs"]
    if not any(j["name"] == state["job"]["name"] for j in jobs):
        raise CheckFailed(f"carol's job {state['job']['name']!r} is gone after down + up")
    assigned = call("GET", f"{a}/api/v1/jobs/{state['job']['id']}", alice_token)["job"].get("assignedTo") or {}
    if assigned.get("id") != carol:
        raise CheckFailed(f"alice's job is no longer assigned to carol: {assigned}")
    status, received = request("GET", f"{b}/api/v1/transfers/{state['transfer']}/content", bob_token)
    if status != 200 or hashlib.sha256(received).hexdigest() != state["sha256"]:
        raise CheckFailed(f"bob's file is gone or changed after down + up (status {status})")
    log("peers, the job and the received file survived down + up")


def main() -> int:
    if len(sys.argv) != 6 or sys.argv[1] not in ("first", "again"):
        print(__doc__, file=sys.stderr)
        return 2
    phase, state_path, urls = sys.argv[1], sys.argv[2], [u.rstrip("/") for u in sys.argv[3:]]
    try:
        (first if phase == "first" else again)(state_path, urls)
    except CheckFailed as error:
        log(f"FAILED: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
