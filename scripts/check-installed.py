#!/usr/bin/env python3
"""Starts an installed meshgate binary the way its systemd unit does and checks what the unit relies on.

- Started from / (the unit's working directory) with no --public-dir, it serves the dashboard installed beside it
  (PREFIX/share/meshgate/Public), not a 404.
- With NOTIFY_SOCKET set it sends READY=1 once it listens (after its ready line), and STOPPING=1 on SIGTERM, then
  exits with code 0.
- Its log (stderr) is one line per event: every line is a logfmt line starting with ts= and none holds an escape
  character (no colour codes when stderr is not a terminal).

Usage: scripts/check-installed.py /staging/usr/local/bin/meshgate
"""

import os
import select
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def main(binary):
    problems = []
    with tempfile.TemporaryDirectory(prefix="meshgate-installed.") as scratch:
        notify_path = os.path.join(scratch, "notify")
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(notify_path)
        environment = {key: value for key, value in os.environ.items() if not key.startswith("MESHGATE_")}
        environment["NOTIFY_SOCKET"] = notify_path
        stderr_path = os.path.join(scratch, "stderr")
        with open(stderr_path, "wb") as stderr:
            node = subprocess.Popen(
                [binary, "--port", "0", "--bind", "127.0.0.1", "--discovery", "off",
                 "--data-dir", os.path.join(scratch, "data")],
                cwd="/", env=environment, stdout=subprocess.PIPE, stderr=stderr)
        try:
            ready_line = b""
            deadline = time.monotonic() + 30
            while b"meshgate ready" not in ready_line and time.monotonic() < deadline:
                line = node.stdout.readline()
                if not line:
                    break
                ready_line = line
            if b"meshgate ready" not in ready_line:
                problems.append("no ready line on stdout")
                return problems
            port = int(ready_line.split(b"port=")[1].split()[0])
            readable, _, _ = select.select([notify], [], [], 10)
            message = notify.recv(4096).decode() if readable else ""
            if "READY=1" not in message.split("\n"):
                problems.append(f"no READY=1 on NOTIFY_SOCKET after the ready line (got {message!r})")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
                    page = response.read().decode(errors="replace")
            except urllib.error.URLError as error:
                page = f"({error})"
            if "<html" not in page.lower():
                problems.append(f"GET / did not serve the installed dashboard {page[:80]}")
            node.terminate()
            if node.wait(timeout=15) != 0:
                problems.append(f"exit code {node.returncode} after SIGTERM, not 0")
            readable, _, _ = select.select([notify], [], [], 5)
            message = notify.recv(4096).decode() if readable else ""
            if "STOPPING=1" not in message.split("\n"):
                problems.append(f"no STOPPING=1 on NOTIFY_SOCKET after SIGTERM (got {message!r})")
        finally:
            if node.poll() is None:
                node.kill()
                node.wait()
            notify.close()
        with open(stderr_path, "rb") as handle:
            log = handle.read()
        if b"\x1b" in log:
            problems.append("the log holds an escape character (colour codes)")
        for line in log.decode(errors="replace").splitlines():
            if not line.startswith("ts="):
                problems.append(f"a log line is not one logfmt event: {line[:120]!r}")
                break
        if b"No dashboard found" in log:
            problems.append("the node logged that it found no dashboard")
    return problems


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    found = main(sys.argv[1])
    for problem in found:
        print(f"check-installed: {problem}", file=sys.stderr)
    if not found:
        print("check-installed: dashboard found, READY=1 and STOPPING=1 sent, exit 0, one plain line per log event")
    sys.exit(1 if found else 0)
