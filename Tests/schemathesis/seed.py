"""Creates the objects the run's operations need on a fresh node and prints them as shell assignments.

Random ids only ever find nothing (404), so scripts/schemathesis.sh runs this first and schemathesis.toml hands the
ids to the operations that take them. The run's peer (its token is the first argument) gets a second peer in a
session, and with it invitations, chat rooms, jobs, transfers and transfer groups. An operation that changes or ends
its object gets one of its own, so one operation cannot leave another with only 404s or 409s. No stream is made: its
writer's PUT waits for a reader, which schemathesis cannot be.

    python3 seed.py BASE_URL PEER_TOKEN
"""

import json
import sys
import urllib.error
import urllib.request

base, token = sys.argv[1], sys.argv[2]


def call(method, path, body=None, *, as_token=token, raw=None, content_type="application/json"):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("authorization", f"Bearer {as_token}")
    if data is not None:
        request.add_header("content-type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
    except urllib.error.HTTPError as error:
        sys.exit(f"seed: {method} {path} answered {error.code}: {error.read().decode(errors='replace')}")
    return json.loads(text) if text else {}


me = call("GET", "/api/v1/peers/me")["peer"]["id"]
created = call("POST", "/api/v1/peers", {"displayName": "schemathesis-bob"})
bob, bob_token = created["peer"]["id"], created["token"]


def session_with_bob():
    """A session of the run's peer that bob joined (connected: files and streams can go both ways)."""
    session = call("POST", "/api/v1/sessions", {})["session"]["id"]
    invitation = call("POST", "/api/v1/invitations", {"to": bob, "session": session})["invitation"]["id"]
    call("POST", f"/api/v1/invitations/{invitation}/accept", as_token=bob_token)
    return session


def invitation_from_bob():
    """An invitation bob sent the run's peer, pending for the longest time allowed (the run takes minutes)."""
    session = call("POST", "/api/v1/sessions", {}, as_token=bob_token)["session"]["id"]
    invitation = {"to": me, "session": session, "timeoutSeconds": 300}
    return call("POST", "/api/v1/invitations", invitation, as_token=bob_token)["invitation"]["id"]


def invitation_to_bob():
    """An invitation the run's peer sent bob, pending for the longest time allowed."""
    session = call("POST", "/api/v1/sessions", {})["session"]["id"]
    invitation = {"to": bob, "session": session, "timeoutSeconds": 300}
    return call("POST", "/api/v1/invitations", invitation)["invitation"]["id"]


def file_from_bob(session):
    """A file bob sent the run's peer (on one node a file is accepted at once: consent is asked only across nodes)."""
    sent = call(
        "POST", f"/api/v1/sessions/{session}/resources?to={me}&name=seed.txt", raw=b"seed", as_token=bob_token,
        content_type="application/octet-stream")
    return sent["transfer"]["id"]


def group_to_bob(session):
    """A group send of the run's peer (to=all: bob)."""
    sent = call(
        "POST", f"/api/v1/sessions/{session}/resources?to=all&name=seed.txt", raw=b"seed",
        content_type="application/octet-stream")
    return sent["group"]["id"]


# Bob receives jobs, so a job can be offered to him (sendJob).
call("PUT", "/api/v1/advertising/jobmanager-jobs", {}, as_token=bob_token)
session = session_with_bob()
ids = {
    "PEER_ID": me,
    "BOB_ID": bob,
    "SESSION_ID": session,
    "LEFT_SESSION_ID": session_with_bob(),
    "LONE_SESSION_ID": call("POST", "/api/v1/sessions", {})["session"]["id"],
    "INVITATION_ID": invitation_from_bob(),
    "ACCEPTED_INVITATION_ID": invitation_from_bob(),
    "DECLINED_INVITATION_ID": invitation_from_bob(),
    "CANCELED_INVITATION_ID": invitation_to_bob(),
    "CHAT_ID": call("POST", "/api/v1/chats", {"name": "seed"})["chat"]["id"],
    "LEFT_CHAT_ID": call("POST", "/api/v1/chats", {"name": "seed"})["chat"]["id"],
    "JOB_ID": call("POST", "/api/v1/jobs", {"name": "seed"})["job"]["id"],
    "DELETED_JOB_ID": call("POST", "/api/v1/jobs", {"name": "seed"})["job"]["id"],
    "TRANSFER_ID": file_from_bob(session),
    "GROUP_ID": group_to_bob(session),
    "CANCELED_GROUP_ID": group_to_bob(session),
}
for name, value in ids.items():
    print(f"export MESHGATE_{name}={value}")
