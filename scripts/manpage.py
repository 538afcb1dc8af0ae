#!/usr/bin/env python3
"""Writes the meshgate(1) man page from `meshgate --help`, so the two cannot disagree.

Usage: scripts/manpage.py BINARY > meshgate.1      (runs BINARY --help and BINARY --version)
       scripts/manpage.py --help-text FILE VERSION  (from a saved help text)

The OPTIONS section is the help text's option list, one entry per flag; ENVIRONMENT lists the MESHGATE_* variable
each option names; the rest (files, exit status, signals, see also) is written here and matches docs/configuration.md
and docs/operations.md.
"""

import re
import subprocess
import sys

OPTION = re.compile(r"^  (-[-\w]+(?:, --[-\w]+)?(?: [A-Z|a-z:]+)?)(?:\s{2,}(.*))?$")
CONTINUATION = re.compile(r"^\s{20,}(\S.*)$")
VARIABLE = re.compile(r"\b(MESHGATE_[A-Z_]+)\b")


def roff(text):
    """Escapes text for a roff line."""
    text = text.replace("\\", "\\e").replace("-", "\\-").replace("–", "\\(en").replace("—", "\\(em")
    text = "".join(char if ord(char) < 128 else f"\\[u{ord(char):04X}]" for char in text)
    if text.startswith((".", "'")):
        text = "\\&" + text
    return text


def options(help_text):
    """[(synopsis, description)] in the order of the help text."""
    found = []
    inside = False
    for line in help_text.splitlines():
        if line.startswith("Options"):
            inside = True
            continue
        if not inside:
            continue
        if not line.strip():
            if found:
                break
            continue
        match = OPTION.match(line)
        if match:
            found.append([match.group(1), match.group(2) or ""])
            continue
        continuation = CONTINUATION.match(line)
        if continuation and found:
            found[-1][1] = (found[-1][1] + " " + continuation.group(1)).strip()
    return found


def page(help_text, version):
    lines = help_text.splitlines()
    summary = lines[0].split("—", 1)[-1].strip() if lines else "a LAN peer gateway"
    out = [
        f'.TH MESHGATE 1 "" "meshgate {roff(version)}" "User Commands"',
        ".SH NAME",
        f"meshgate \\- {roff(summary)}",
        ".SH SYNOPSIS",
        ".B meshgate",
        "[\\fIoptions\\fR]",
        ".SH DESCRIPTION",
        "meshgate is one node of a LAN mesh. Nodes find each other on the local network (DNS\\-SD through",
        "avahi\\-daemon, a UDP multicast beacon, or static seeds) and link up; each node hosts peers (browser tabs,",
        "scripts, services) that discover, invite and talk to peers on every node over HTTP/JSON, WebSocket and",
        "Server\\-Sent Events, all on one TCP port. The node serves its dashboard at /, its API under /api/v1",
        "(described by /api/v1/openapi.json), /healthz and /metrics.",
        ".SH OPTIONS",
        "Each option can also be set with the environment variable it names; a given flag wins over its variable,",
        "whose value is then not read. A flag takes its value as the next argument or after =.",
    ]
    variables = []
    for synopsis, description in options(help_text):
        out.append(".TP")
        out.append(f".B {roff(synopsis)}")
        out.append(roff(description))
        variables.extend(v for v in VARIABLE.findall(description) if v not in variables)
    out += [".SH ENVIRONMENT", "The variables of the options above:"]
    for variable in variables:
        out += [".TP", f".B {roff(variable)}"]
        flag = next((s for s, d in options(help_text) if variable in d), "")
        out.append(f"as {roff(flag.split(' ')[0])}")
    out += [
        ".TP",
        ".B NOTIFY_SOCKET",
        "set by systemd for Type=notify units: the node sends READY=1 once it listens and handles signals.",
        ".SH OUTPUT",
        "When ready, the node prints one line on standard output:",
        ".PP",
        ".nf",
        "meshgate ready url=http://127.0.0.1:8080/ port=8080 node.id=<uuid> data.dir=<path>",
        ".fi",
        ".PP",
        "On its first successful start it prints the node's admin token once, just before that line",
        "(meshgate admin\\-token=mga_...). Logs go to standard error, one logfmt line per event, without colour.",
        ".SH FILES",
        ".TP",
        ".I DATA_DIR/meshgate.sqlite",
        "the node's database (with its \\-wal and \\-shm files): identity, peers, tokens as SHA\\-256, event logs,",
        "jobs, chat, transfers, pins.",
        ".TP",
        ".I DATA_DIR/events.ring",
        "events delivered before the database has them (4 MiB); belongs with the database.",
        ".TP",
        ".I DATA_DIR/node-cert.pem, DATA_DIR/node-key.pem",
        "the node's TLS identity for mesh links.",
        ".TP",
        ".I DATA_DIR/files/, DATA_DIR/transfers/",
        "received files and the spools of transfers in progress.",
        ".TP",
        ".I /etc/default/meshgate",
        "MESHGATE_* settings read by the systemd unit.",
        ".SH EXIT STATUS",
        "0 after SIGINT or SIGTERM (a graceful stop); 2 for a bad flag or variable, a port in use, an unusable data",
        "directory or TLS file, or a data directory another node is using; 1 for other failures.",
        ".SH SEE ALSO",
        "docs/configuration.md, docs/operations.md and docs/api.md in the meshgate sources;",
        ".BR systemctl (1),",
        ".BR journalctl (1),",
        ".BR avahi\\-browse (1).",
    ]
    return "\n".join(out) + "\n"


def main(arguments):
    if len(arguments) == 3 and arguments[0] == "--help-text":
        with open(arguments[1], encoding="utf-8") as handle:
            help_text = handle.read()
        version = arguments[2]
    elif len(arguments) == 1:
        help_text = subprocess.run([arguments[0], "--help"], check=True, capture_output=True, text=True).stdout
        version = subprocess.run([arguments[0], "--version"], check=True, capture_output=True, text=True).stdout
        version = version.split()[-1] if version.split() else "unknown"
    else:
        print(__doc__, file=sys.stderr)
        return 2
    found = options(help_text)
    if len(found) < 10:
        print(f"manpage: found only {len(found)} options in the help text; has its layout changed?", file=sys.stderr)
        return 1
    sys.stdout.write(page(help_text, version))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
