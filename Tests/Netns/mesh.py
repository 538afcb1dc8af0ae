"""Real meshgate nodes in namespaces, and the REST calls the fault suite drives (docs/api.md)."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

POLL = 0.1
LOGFMT = re.compile(r'([\w.]+)=("(?:[^"\\]|\\.)*"|\S*)')


class Failure(AssertionError):
    pass


def wait_until(what: str, condition: Callable[[], Any], timeout: float, poll: float = POLL) -> Any:
    """Polls `condition` until it returns something truthy; fails naming `what` (and the last value) after
    `timeout` seconds. A bound only stops a hung run: every wait ends as soon as the event happens."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = condition()
            if last:
                return last
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as error:
            last = error
        if time.monotonic() > deadline:
            raise Failure(f"timed out after {timeout:.0f} s waiting for {what} (last: {str(last)[:600]})")
        time.sleep(poll)


def parse_at(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Response:
    def __init__(self, status: int, body: bytes):
        self.status = status
        self.body = body

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    def __repr__(self) -> str:
        return f"{self.status} {self.body[:300]!r}"


class Node:
    """A meshgate process in namespace `ns`, listening on <ip>:8080, seeded with every other node."""

    PORT = 8080

    def __init__(self, index: int, ns: str, ip: str, binary: str, public_dir: str, work: Path, extra: list[str]):
        self.index = index
        self.name = f"n{index}"
        self.ns = ns
        self.ip = ip
        self.binary = binary
        self.public_dir = public_dir
        self.data_dir = work / f"{self.name}-data"
        self.stdout_path = work / f"{self.name}.stdout"
        self.stderr_path = work / f"{self.name}.stderr"
        self.extra = extra
        self.seeds: list[str] = []
        self.process: subprocess.Popen | None = None
        self.node_id = ""
        # Printed once, on the node's first start (it guards POST /api/v1/mesh/nodes among others).
        self.admin_token = ""
        self.exit_codes: list[int] = []

    @property
    def base(self) -> str:
        return f"http://{self.ip}:{self.PORT}"

    def start(self, timeout: float = 60) -> None:
        args = [
            "ip",
            "netns",
            "exec",
            self.ns,
            self.binary,
            "--port",
            str(self.PORT),
            "--bind",
            "0.0.0.0",
            "--data-dir",
            str(self.data_dir),
            "--name",
            self.name,
            "--public-dir",
            self.public_dir,
            "--discovery",
            "static",
            "--mesh-tls",
            "on",
            "--log-level",
            "debug",
        ] + self.extra
        for seed in self.seeds:
            args += ["--peer", seed]
        offset = self.stdout_path.stat().st_size if self.stdout_path.exists() else 0
        with open(self.stdout_path, "a") as out, open(self.stderr_path, "a") as err:
            err.write(f"=== netns-faults: launching {' '.join(args)}\n")
            err.flush()
            self.process = subprocess.Popen(args, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            text = self.stdout_path.read_text(errors="replace")[offset:]
            ready = [line for line in text.splitlines() if line.startswith("meshgate ready ")]
            for line in text.splitlines():
                if line.startswith("meshgate admin-token="):
                    self.admin_token = line.split()[1].split("=", 1)[1]
            if ready and text.endswith("\n"):
                fields = dict(tok.split("=", 1) for tok in ready[0].split()[2:] if "=" in tok)
                self.node_id = fields.get("node.id", "")
                return
            if self.process.poll() is not None:
                raise Failure(f"{self.name} exited with {self.process.returncode} before ready:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise Failure(f"{self.name} printed no ready line within {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(POLL)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 20) -> int | None:
        """SIGTERM, then SIGKILL if it hangs; returns the exit code (None if it was never started)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
                return -9
        return self.process.returncode

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def log_count(self, needle: str) -> int:
        try:
            return self.stderr_path.read_text(errors="replace").count(needle)
        except FileNotFoundError:
            return 0

    def log_lines(self, message: str) -> list[dict[str, str]]:
        """The fields of every log line (logfmt, stderr) whose `msg` is `message`."""
        try:
            text = self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return []
        needle = f"msg={json.dumps(message)}" if " " in message else f"msg={message}"
        unquote = lambda value: value[1:-1].replace('\\"', '"') if value.startswith('"') else value  # noqa: E731
        lines = [line for line in text.splitlines() if needle in line]
        return [{key: unquote(value) for key, value in LOGFMT.findall(line)} for line in lines]

    # -- HTTP -------------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = None,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 20,
    ) -> Response:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if body is not None:
            req.add_header("Content-Type", "application/json")
        elif raw is not None:
            req.add_header("Content-Type", "application/octet-stream")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        for key, value in (headers or {}).items():
            req.add_header(key, value)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as answer:
                return Response(answer.status, answer.read())
        except urllib.error.HTTPError as error:
            return Response(error.code, error.read())
        except urllib.error.URLError as error:
            # An upload the node refuses before reading its body (an error status, then the connection closes):
            # urllib is still writing the body and sees the close, not the answer (curl would show the answer).
            if raw is not None and isinstance(error.reason, (BrokenPipeError, ConnectionResetError)):
                return Response(0, b"the node closed the connection before taking the body (an early refusal)")
            raise

    def mesh_nodes(self) -> list[dict]:
        return self.request("GET", "/api/v1/mesh/nodes").json().get("nodes", [])

    def linked_ids(self) -> set[str]:
        return {entry.get("id") for entry in self.mesh_nodes() if entry.get("state") == "linked"}

    def peer(self, name: str) -> "Peer":
        answer = self.request("POST", "/api/v1/peers", {"displayName": name})
        if answer.status != 201:
            raise Failure(f"creating peer {name} on {self.name}: {answer}")
        data = answer.json()
        return Peer(self, data["peer"]["id"], data["token"], name)


class Peer:
    def __init__(self, node: Node, peer_id: str, token: str, name: str):
        self.node = node
        self.id = peer_id
        self.token = token
        self.name = name
        self._events: list[dict] = []
        self._cursor = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{self.name}@{self.node.name}"

    def call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Response:
        return self.node.request(method, path, body, token=self.token, **kwargs)

    def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        answer = self.call(method, path, body, **kwargs)
        if not answer.ok:
            raise Failure(f"{method} {path} as {self}: {answer}")
        return answer.json()

    # -- event log (read incrementally; every event once, in log order) -----------------------------

    def events(self, kind: str | None = None) -> list[dict]:
        with self._lock:
            while True:
                page = self.ok("GET", f"/api/v1/events?since={self._cursor}&limit=500")
                entries = page.get("events", [])
                if not entries:
                    break
                self._events += entries
                self._cursor = int(page.get("nextCursor") or entries[-1]["id"])
            return [e for e in self._events if kind is None or e["type"] == kind]

    # -- sessions and invitations ---------------------------------------------------------------------

    def create_session(self, **fields: Any) -> str:
        return self.ok("POST", "/api/v1/sessions", fields)["session"]["id"]

    def members(self, session_id: str) -> dict[str, str]:
        answer = self.call("GET", f"/api/v1/sessions/{session_id}")
        if answer.status == 404:
            return {}
        session = answer.json()["session"]
        return {m["id"]: m.get("state", "?") for m in session.get("members", [])}

    def invite(self, invitee: "Peer", session_id: str, timeout_seconds: int = 30) -> str:
        def attempt() -> Any:
            answer = self.call(
                "POST",
                "/api/v1/invitations",
                {"to": invitee.id, "session": session_id, "timeoutSeconds": timeout_seconds},
            )
            if answer.status == 404:
                return None  # the invitee's node has not announced the peer yet
            if answer.status != 201:
                raise Failure(f"invitation from {self} to {invitee}: {answer}")
            return answer.json()["invitation"]["id"]

        return wait_until(f"{invitee} known to {self.node.name}", attempt, 30)

    def invitation_state(self, invitation_id: str) -> str | None:
        answer = self.call("GET", f"/api/v1/invitations/{invitation_id}")
        return answer.json()["invitation"]["state"] if answer.status == 200 else None

    def join_session(self, inviter: "Peer", session_id: str) -> None:
        """Invited by `inviter`, accepts, and waits until both sides show it connected."""
        invitation = inviter.invite(self, session_id)
        wait_until(
            f"{self} accepting {invitation}",
            lambda: self.call("POST", f"/api/v1/invitations/{invitation}/accept", {}).status == 200,
            30,
        )
        wait_until(
            f"{self} connected in {session_id} on both sides",
            lambda: inviter.members(session_id).get(self.id) == "connected"
            and self.members(session_id).get(inviter.id) == "connected",
            30,
        )

    def send(self, session_id: str, text: str, to: list[str] | None = None) -> Response:
        query = "mode=reliable" + (f"&to={','.join(to)}" if to else "")
        return self.call("POST", f"/api/v1/sessions/{session_id}/data?{query}", raw=text.encode())

    # -- chat ---------------------------------------------------------------------------------------

    def host_chat(self, name: str) -> str:
        return self.ok("POST", "/api/v1/chats", {"name": name})["chat"]["id"]

    def join_chat(self, room: str) -> None:
        wait_until(
            f"room {room} nearby for {self}",
            lambda: any(c.get("id") == room for c in self.ok("GET", "/api/v1/chats/nearby").get("chats", [])),
            30,
        )
        wait_until(
            f"{self} joining {room}", lambda: self.call("POST", f"/api/v1/chats/{room}/join").status in (200, 202), 30
        )
        wait_until(
            f"{self} a member of {room}",
            lambda: any(
                c.get("id") == room and c.get("joined") for c in self.ok("GET", "/api/v1/chats").get("chats", [])
            ),
            30,
        )

    def chat_messages(self, room: str) -> list[dict]:
        messages, after = [], 0
        while True:
            page = self.ok("GET", f"/api/v1/chats/{room}/messages?after={after}&limit=1000")
            messages += page["messages"]
            if not page.get("nextCursor"):
                return messages
            after = int(page["nextCursor"])

    # -- files --------------------------------------------------------------------------------------

    def send_file(self, session_id: str, to: "Peer", name: str, payload: bytes, retry_for: float = 30) -> dict:
        """Uploads a file. Like any client, it tries again (for up to `retry_for` s) while the API says to: `503`
        when the receiver's node is not linked at this moment (a lossy link can flap), `409` while the receiver is
        not a connected member and `404` while the sender is not a member (a link drop ends the membership across
        it; a RejoiningStream re-invites), and an early refusal seen as a closed connection (status 0)."""
        path = f"/api/v1/sessions/{session_id}/resources?to={to.id}&name={urllib.parse.quote(name)}"
        deadline = time.time() + retry_for
        while True:
            answer = self.call("POST", path, raw=payload, timeout=120)
            if answer.ok:
                return answer.json()["transfer"]
            if answer.status not in (0, 404, 409, 503) or time.time() > deadline:
                raise Failure(f"POST {path} as {self}: {answer}")
            time.sleep(0.5)

    def transfer(self, transfer_id: str) -> dict:
        return self.ok("GET", f"/api/v1/transfers/{transfer_id}")["transfer"]

    def content_sha256(self, transfer_id: str) -> str:
        answer = self.call("GET", f"/api/v1/transfers/{transfer_id}/content", timeout=120)
        if answer.status != 200:
            raise Failure(f"downloading transfer {transfer_id} as {self}: {answer}")
        return hashlib.sha256(answer.body).hexdigest()
