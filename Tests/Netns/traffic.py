"""Traffic that runs while a fault is on, and the checks that nothing acknowledged was lost or duplicated."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import threading
import time
import urllib.error
from dataclasses import dataclass, field

from mesh import Failure, Peer, parse_at, wait_until

TRANSIENT = (urllib.error.URLError, ConnectionError, TimeoutError, OSError)


class Loop(threading.Thread):
    """Calls `step(i)` every `interval` seconds until stopped; records errors instead of dying."""

    def __init__(self, name: str, interval: float):
        super().__init__(name=name, daemon=True)
        self.interval = interval
        self.halt = threading.Event()
        self.errors: list[str] = []
        self.count = 0

    def step(self, index: int) -> None:
        raise NotImplementedError

    def run(self) -> None:
        while not self.halt.is_set():
            started = time.monotonic()
            try:
                self.step(self.count)
            except Exception as error:  # noqa: BLE001 - recorded and reported by the check
                self.errors.append(f"{type(error).__name__}: {error}")
            self.count += 1
            self.halt.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=60)


# -- reliable session data --------------------------------------------------------------------------


class DataStream(Loop):
    """`sender` posts numbered reliable messages to `receiver` in `session`; `verify` checks that every one
    answered 202 (with the receiver not in `undelivered`) arrived once, in order, or that the sender was told
    with `session.send.failed` naming the receiver."""

    def __init__(self, tag: str, sender: Peer, receiver: Peer, session: str, interval: float = 0.1, size: int = 256):
        super().__init__(f"data-{tag}", interval)
        self.tag, self.sender, self.receiver, self.session, self.size = tag, sender, receiver, session, size
        self.acked: dict[int, float] = {}
        self.refused: dict[int, int] = {}

    def text(self, index: int) -> str:
        head = f"{self.tag}-{index:06d}-"
        return head + "x" * max(0, self.size - len(head))

    def step(self, index: int) -> None:
        try:
            answer = self.sender.send(self.session, self.text(index), to=[self.receiver.id])
        except TRANSIENT:
            self.refused[index] = -1  # no answer: not acknowledged
            return
        if answer.status == 202 and self.receiver.id not in (answer.json().get("undelivered") or []):
            self.acked[index] = time.time()
        else:
            self.refused[index] = answer.status

    def received(self) -> list[int]:
        numbers = []
        for event in self.receiver.events("session.data"):
            data = event["data"]
            text = data.get("text") or ""
            if data.get("sessionId") == self.session and text.startswith(self.tag + "-"):
                numbers.append(int(text.split("-")[1]))
        return numbers

    def verify(self, settle: float = 30) -> dict:
        """Waits (up to `settle` s) until every acknowledged message is delivered or reported failed."""
        figures: dict = {}

        def settled() -> bool:
            got = self.received()
            failures = [
                parse_at(e["at"])
                for e in self.sender.events("session.send.failed")
                if e["data"].get("sessionId") == self.session and self.receiver.id in e["data"].get("undelivered", [])
            ]
            missing = [i for i in self.acked if i not in set(got)]
            unreported = [i for i in missing if not any(at >= self.acked[i] - 0.5 for at in failures)]
            duplicates = len(got) - len(set(got))
            disorder = sum(1 for a, b in zip(got, got[1:]) if b <= a)
            figures.update(
                acked=len(self.acked),
                refused=len(self.refused),
                delivered=len(set(got)),
                reportedFailed=len(missing) - len(unreported),
                lost=len(unreported),
                duplicates=duplicates,
                outOfOrder=disorder,
                failureEvents=len(failures),
            )
            figures["_unreported"] = unreported[:10]
            return not unreported

        try:
            wait_until(f"{self.name}: every acknowledged message delivered or reported failed", settled, settle, 0.5)
        except Failure:
            pass
        return figures

    def problems(self, figures: dict) -> list[str]:
        out = []
        if figures.get("lost"):
            out.append(
                f"{self.name}: {figures['lost']} acknowledged messages neither delivered nor reported failed "
                f"(first: {figures.get('_unreported')})"
            )
        if figures.get("duplicates"):
            out.append(f"{self.name}: {figures['duplicates']} messages delivered twice")
        if figures.get("outOfOrder"):
            out.append(f"{self.name}: {figures['outOfOrder']} messages out of order")
        if self.errors:
            out.append(f"{self.name}: harness errors {self.errors[:3]}")
        return out


# -- chat ---------------------------------------------------------------------------------------------


class ChatPoster(Loop):
    """One member posting numbered messages with client ids (a timed-out post is retried with the same id,
    which docs/api.md makes safe); a message is acknowledged once its POST answered 200/201."""

    def __init__(self, tag: str, member: Peer, room: str, interval: float = 0.4):
        super().__init__(f"chat-{tag}", interval)
        self.tag, self.member, self.room = tag, member, room
        self.acked: list[str] = []

    def step(self, index: int) -> None:
        message_id = f"{self.tag}-{index:05d}-{os.getpid()}"
        for _ in range(3):
            try:
                answer = self.member.call(
                    "POST", f"/api/v1/chats/{self.room}/messages", {"body": message_id, "id": message_id}, timeout=10
                )
            except TRANSIENT:
                continue
            if answer.status in (200, 201):
                self.acked.append(message_id)
            return


def verify_chat(room: str, members: list[Peer], posters: list[ChatPoster], settle: float = 30) -> dict:
    """Every acknowledged message is listed once, ordered (seq set), and in the same order for every member."""
    acked = [m for poster in posters for m in poster.acked]
    figures: dict = {"acked": len(acked)}

    def converged() -> bool:
        views = {}
        for member in members:
            listing = member.chat_messages(room)
            ours = [m for m in listing if m["body"] in set(acked) or m.get("id") in set(acked)]
            views[member.name] = [(m.get("seq"), m["id"]) for m in ours]
        ids = {name: [i for _, i in view] for name, view in views.items()}
        figures["lost"] = max(len(set(acked) - set(v)) for v in ids.values())
        figures["duplicates"] = max(len(v) - len(set(v)) for v in ids.values())
        figures["unordered"] = max(sum(1 for s, _ in view if s is None) for view in views.values())
        orders = {tuple(view) for view in views.values()}
        figures["views"] = len(orders)
        return figures["lost"] == 0 and figures["duplicates"] == 0 and figures["unordered"] == 0 and len(orders) == 1

    try:
        wait_until(f"chat room {room} converged on {len(members)} members", converged, settle, 0.5)
    except Failure:
        pass
    return figures


def chat_problems(figures: dict, posters: list[ChatPoster]) -> list[str]:
    out = []
    if figures.get("lost"):
        out.append(f"chat: {figures['lost']} acknowledged messages missing on some member")
    if figures.get("duplicates"):
        out.append(f"chat: {figures['duplicates']} messages listed twice")
    if figures.get("unordered"):
        out.append(f"chat: {figures['unordered']} messages never ordered by the host (seq null)")
    if figures.get("views", 1) != 1:
        out.append(f"chat: members disagree on the order ({figures['views']} different views)")
    for poster in posters:
        if poster.errors:
            out.append(f"{poster.name}: harness errors {poster.errors[:3]}")
    return out


# -- files -----------------------------------------------------------------------------------------------


@dataclass
class FileCheck:
    sender: Peer
    receiver: Peer
    session: str
    size: int
    transfer_id: str = ""
    digest: str = ""
    figures: dict = field(default_factory=dict)

    def start(self, name: str) -> None:
        payload = os.urandom(self.size)
        self.digest = hashlib.sha256(payload).hexdigest()
        self.transfer_id = self.sender.send_file(self.session, self.receiver, name, payload)["id"]

    def verify(self, settle: float = 60) -> list[str]:
        def done() -> bool:
            theirs = self.receiver.transfer(self.transfer_id)
            ours = self.sender.transfer(self.transfer_id)
            self.figures.update(
                state=theirs.get("state"),
                senderState=ours.get("state"),
                bytes=theirs.get("bytes"),
                resumedFrom=theirs.get("resumedFrom"),
            )
            if ours.get("reason") or theirs.get("reason"):
                self.figures["reason"] = f"sender: {ours.get('reason')}; receiver: {theirs.get('reason')}"
            return theirs.get("state") in ("finished", "failed", "canceled") and ours.get("state") in (
                "finished",
                "failed",
                "canceled",
            )

        try:
            wait_until(f"transfer {self.transfer_id} ended on both sides", done, settle, 0.5)
        except Failure as error:
            return [f"file: {error}"]
        out = []
        if (
            self.figures["state"] == "finished"
            and self.figures["senderState"] == "failed"
            and "is finished here" in str(self.figures.get("reason"))
        ):
            # The receiver finished (and verified) the file, but its transferFinished frame was lost with the link;
            # on relink the sender offers it again and the receiver refuses ("the transfer is finished here").
            out.append(
                f"transfer-finished-refused: {self.transfer_id} finished on the receiver but failed on the sender "
                f"({self.figures.get('reason')})"
            )
            return out
        if self.figures["state"] != "finished" or self.figures["senderState"] != "finished":
            out.append(
                f"file: ended {self.figures['senderState']}/{self.figures['state']} (sender/receiver), "
                "an acknowledged upload must finish"
            )
            return out
        reported = self.receiver.transfer(self.transfer_id).get("sha256")
        downloaded = self.receiver.content_sha256(self.transfer_id)
        self.figures["sha256Matches"] = reported == self.digest == downloaded
        if not self.figures["sha256Matches"]:
            out.append(f"file: SHA-256 differs: sent {self.digest}, reported {reported}, downloaded {downloaded}")
        return out


# -- link flaps: were heartbeats really missing? ----------------------------------------------------------


class SocketWatch:
    """Samples the TCP connections between nodes inside their namespaces (`ss -ti`, every ~100 ms, one sampling
    shell per namespace). `bytes_received` counts the in-order bytes the socket could hand to the node
    (out-of-order segments behind a lost one do not count), the same count as the node's link liveness
    (`tcpi_last_data_recv`): a node that declared a link dead while its own socket's `bytes_received` moved within
    the last 2 s (heartbeats every 500 ms, dead after 2 s) misjudged it; one whose count stood still for 2 s had its
    heartbeats truly missing. The other side's count says nothing about that: it goes on receiving the goodbye."""

    LINE = re.compile(r"(\S+):(\d+)\s+(\S+):(\d+)")
    SCRIPT = 'while :; do echo "@ $(date +%s.%N)"; ss -tinH state established; sleep 0.1; done'

    def __init__(self, namespaces: dict[int, str], ips: dict[int, str]):
        self.namespaces = namespaces
        self.ips = ips
        # (node, local, remote) -> [(time, bytes_received)]
        self.series: dict[tuple[int, str, str], list[tuple[float, int]]] = {}
        self.processes: list[subprocess.Popen] = []
        self.readers: list[threading.Thread] = []
        self.lock = threading.Lock()

    def start(self) -> None:
        for node, ns in self.namespaces.items():
            process = subprocess.Popen(
                ["ip", "netns", "exec", ns, "sh", "-c", self.SCRIPT],
                stdout=subprocess.PIPE,
                text=True,
                stderr=subprocess.DEVNULL,
            )
            self.processes.append(process)
            reader = threading.Thread(target=self._read, args=(node, process), daemon=True)
            reader.start()
            self.readers.append(reader)

    def _read(self, node: int, process: subprocess.Popen) -> None:
        now, key = 0.0, None
        for line in process.stdout:
            if line.startswith("@ "):
                now = float(line.split()[1])
                continue
            match = self.LINE.search(line)
            if match and not line.startswith((" ", "\t")):
                key = (node, f"{match.group(1)}:{match.group(2)}", f"{match.group(3)}:{match.group(4)}")
                continue
            received = re.search(r"bytes_received:(\d+)", line)
            if key:
                with self.lock:
                    self.series.setdefault(key, []).append((now, int(received.group(1)) if received else 0))
                key = None

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        for reader in self.readers:
            reader.join(timeout=10)
        self.processes.clear()

    def receive_silence(self, node: int, other: int, at: float, ports: tuple[int, int] | None = None) -> dict | None:
        """How long `node`'s socket to `other` had received no in-order byte when `node` declared it dead at `at`,
        bounded by the samples around the last time `bytes_received` moved before `at`: `silenceMs` at least,
        `silenceAtMostMs` at most (None: it never moved in the samples); `resumedAfterMs`: when in-order bytes came
        in again on that socket after `at` (None: not before it closed). The connection is the one with these `ports`
        (local, remote; the node logs them); without them, the most silent of those between the two. None when no
        sampled connection covers `at`."""
        with self.lock:
            series = dict(self.series)
        found: dict | None = None
        for (sampled, local, remote), samples in series.items():
            if sampled != node or not remote.startswith(self.ips[other] + ":"):
                continue
            if ports and not (local.endswith(f":{ports[0]}") and remote.endswith(f":{ports[1]}")):
                continue
            before = [(t, count) for t, count in samples if t <= at]
            # The connection was up for more than 2 s (the node's dead-after) and still open around `at`.
            if len(before) < 2 or before[0][0] > at - 1.5 or samples[-1][0] < at - 0.5:
                continue
            moves = [i for i in range(1, len(before)) if before[i][1] != before[i - 1][1]]
            if moves:
                least, most = at - before[moves[-1]][0], at - before[moves[-1] - 1][0]
            else:
                least, most = at - before[0][0], float("inf")
            later = [t for t, count in samples if t > at and count != before[-1][1]]
            if found is None or most * 1000 > found["_most"]:
                found = {
                    "silenceMs": int(least * 1000),
                    "silenceAtMostMs": None if most == float("inf") else int(most * 1000),
                    "resumedAfterMs": int((later[0] - at) * 1000) if later else None,
                    "_most": most * 1000,
                }
        return found


class RejoiningStream(DataStream):
    """A data stream whose sender re-invites the receiver whenever the session lost it (docs/api.md: a member whose
    node link was lost leaves the session; a new invitation brings it back), so data, invitations and accepts
    all run while links come and go. Every invitation it made must end the same on both sides."""

    def __init__(self, tag: str, sender: Peer, receiver: Peer, session: str, interval: float = 0.1):
        super().__init__(tag, sender, receiver, session, interval)
        self.invitations: list[str] = []
        self.accepted: dict[str, int] = {}
        self.last_invite = 0.0

    def step(self, index: int) -> None:
        super().step(index)
        if index in self.acked or time.monotonic() - self.last_invite < 1.0:
            return
        self.last_invite = time.monotonic()
        try:
            if self.sender.members(self.session).get(self.receiver.id) == "connected":
                return
            answer = self.sender.call(
                "POST",
                "/api/v1/invitations",
                {"to": self.receiver.id, "session": self.session, "timeoutSeconds": 5},
                timeout=5,
            )
            if answer.status != 201:
                return
            invitation = answer.json()["invitation"]["id"]
            self.invitations.append(invitation)
            deadline = time.monotonic() + 3
            while True:  # 404 until the invitation reaches the receiver's node
                status = self.receiver.call("POST", f"/api/v1/invitations/{invitation}/accept", {}, timeout=5).status
                if status != 404 or time.monotonic() > deadline or self.halt.is_set():
                    break
                time.sleep(0.1)
            self.accepted[invitation] = status
        except TRANSIENT:
            return

    def invitation_problems(self, settle: float = 30) -> tuple[dict, list[str]]:
        terminal = ("accepted", "declined", "expired", "canceled")
        views: dict[str, tuple] = {}

        def consistent() -> bool:
            for invitation in self.invitations:
                pair = (self.sender.invitation_state(invitation), self.receiver.invitation_state(invitation))
                views[invitation] = pair
            return all(a in terminal and a == b for a, b in views.values())

        try:
            wait_until(f"{self.name}: every invitation ended the same on both sides", consistent, settle, 0.5)
        except Failure:
            pass
        figures = {
            "invitations": len(self.invitations),
            "acceptedBoth": sum(1 for a, b in views.values() if a == b == "accepted"),
            "expiredBoth": sum(1 for a, b in views.values() if a == b == "expired"),
        }
        bad = {i: v for i, v in views.items() if not (v[0] in terminal and v[0] == v[1])}
        # An accept answered 200 must not end as anything but accepted.
        broken = [i for i, status in self.accepted.items() if status == 200 and views.get(i, ("?",))[0] != "accepted"]
        out = []
        if bad:
            out.append(
                f"{self.name}: {len(bad)} invitations ended differently on the two sides: {list(bad.items())[:3]}"
            )
        if broken:
            out.append(f"{self.name}: {len(broken)} invitations accepted with 200 but not accepted for the inviter")
        return figures, out
