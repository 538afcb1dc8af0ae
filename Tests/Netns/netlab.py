"""Test hosts in network namespaces on one bridge, and the faults injected between them.

Every node gets its own namespace (`mgf-<run>-n<i>`) with one veth end (`eth0`) whose other end
(`mgf<run>v<i>`) is a port of the test bridge `mgf<run>br`. The bridge has an address in the same
/24, so this process (in the root namespace) reaches every node directly; faults never touch that
traffic:

- partitions and random loss are nftables rules in a `bridge` family table (`mgf_<run>`) on the
  bridge's forward hook, matching the two nodes' addresses (traffic between a node and this
  process is not forwarded, so it is never dropped);
- a slow link is an HTB class on the receiving node's bridge port, filtered on the sender's address;
- DNS never answers: each namespace's /etc/netns/<ns>/resolv.conf names an address nobody holds.

Everything created is recorded in `/run/meshgate-netns/<run>.pid`; `Lab.destroy` removes it, and a
later run sweeps what a killed run left behind (its pid no longer alive).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
from pathlib import Path

STATE_DIR = Path("/run/meshgate-netns")
# `ip netns exec <ns>` bind-mounts the files of /etc/netns/<ns>/ over /etc/ (here: resolv.conf).
NETNS_ETC = Path("/etc/netns")


class LabError(RuntimeError):
    pass


def run(args: list[str], check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise LabError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def unavailable_reason() -> str | None:
    """Why namespaces cannot be used here, or None when they can."""
    if os.geteuid() != 0:
        return "not running as root (network namespaces, veth pairs, nftables and tc need CAP_NET_ADMIN/CAP_SYS_ADMIN)"
    for tool in ("ip", "nft", "tc"):
        if shutil.which(tool) is None:
            package = "nftables" if tool == "nft" else "iproute2"
            return f"'{tool}' is not installed (Debian package {package}; `make deps` installs it)"
    name = f"mgf-probe-{os.getpid()}"
    probe = run(["ip", "netns", "add", name], check=False)
    if probe.returncode != 0:
        return f"'ip netns add' is not allowed here: {probe.stderr.strip()}"
    run(["ip", "netns", "del", name], check=False)
    return None


def _remove(run_id: str) -> list[str]:
    """Deletes every namespace, link and nft table of run `run_id`; returns what it removed."""
    removed = []
    listing = run(["ip", "netns", "list"], check=False).stdout.split()
    for ns in sorted({word for word in listing if word.startswith(f"mgf-{run_id}-")}):
        # Deleting a namespace kills nothing by itself. The harness stops its nodes first; what is still running
        # in one of its namespaces now is a node of a run that was killed (SIGKILL) before it could stop them.
        for pid in run(["ip", "netns", "pids", ns], check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
                removed.append(f"process {pid} in {ns}")
            except (ProcessLookupError, ValueError):
                pass
        if run(["ip", "netns", "del", ns], check=False).returncode == 0:
            removed.append(f"netns {ns}")
    links = run(["ip", "-o", "link", "show"], check=False).stdout
    for line in links.splitlines():
        parts = line.split(":")
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@")[0]
        if name.startswith(f"mgf{run_id}"):
            if run(["ip", "link", "del", name], check=False).returncode == 0:
                removed.append(f"link {name}")
    if run(["nft", "delete", "table", "bridge", f"mgf_{run_id}"], check=False).returncode == 0:
        removed.append(f"nft table bridge mgf_{run_id}")
    for directory in sorted(NETNS_ETC.glob(f"mgf-{run_id}-*")):
        shutil.rmtree(directory, ignore_errors=True)
        removed.append(f"resolver config {directory}")
    return removed


def sweep_stale() -> list[str]:
    """Removes what earlier runs that are no longer alive left behind."""
    removed = []
    if not STATE_DIR.is_dir():
        return removed
    for path in STATE_DIR.glob("*.pid"):
        try:
            pid = int(path.read_text().strip() or "0")
        except (OSError, ValueError):
            pid = 0
        if pid > 0 and Path(f"/proc/{pid}").exists():
            continue
        removed += _remove(path.stem)
        path.unlink(missing_ok=True)
    return removed


class Lab:
    """`count` namespaces on one bridge. Addresses: `<prefix>.<i+1>` for node i, `<prefix>.254` for us."""

    def __init__(self, count: int, prefix: str | None = None):
        self.run_id = f"{random.randrange(16**4):04x}"
        self.count = count
        self.prefix = prefix or self._free_prefix()
        self.bridge = f"mgf{self.run_id}br"
        self.table = f"mgf_{self.run_id}"
        self.namespaces = [f"mgf-{self.run_id}-n{i}" for i in range(count)]
        self.ports = [f"mgf{self.run_id}v{i}" for i in range(count)]
        self.rules: dict[str, list[str]] = {}
        self.shaped: set[int] = set()
        self.created = False

    @staticmethod
    def _free_prefix() -> str:
        routes = run(["ip", "-4", "route", "show"], check=False).stdout
        candidates = [f"10.231.{octet}" for octet in range(100, 200)]
        random.shuffle(candidates)
        for prefix in candidates:
            if f"{prefix}." not in routes:
                return prefix
        raise LabError("no free 10.231.x.0/24 subnet for the test bridge")

    def ip(self, index: int) -> str:
        return f"{self.prefix}.{index + 1}"

    @property
    def host_ip(self) -> str:
        return f"{self.prefix}.254"

    @property
    def dead_dns_ip(self) -> str:
        """An address on the bridge that nothing holds: the namespaces' DNS server, which never answers."""
        return f"{self.prefix}.253"

    def create(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        (STATE_DIR / f"{self.run_id}.pid").write_text(str(os.getpid()))
        self.created = True
        run(["ip", "link", "add", self.bridge, "type", "bridge"])
        run(["ip", "addr", "add", f"{self.host_ip}/24", "dev", self.bridge])
        run(["ip", "link", "set", self.bridge, "up"])
        for index, (ns, port) in enumerate(zip(self.namespaces, self.ports)):
            run(["ip", "netns", "add", ns])
            run(["ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns])
            run(["ip", "link", "set", port, "master", self.bridge, "up"])
            run(["ip", "-n", ns, "addr", "add", f"{self.ip(index)}/24", "dev", "eth0"])
            run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            # A LAN without a working DNS server: `ip netns exec` puts this file over /etc/resolv.conf, and nobody
            # holds the address it names, so every lookup waits for its timeouts (2 x 1 s) and fails. Nodes are
            # seeded by address; the `dns` case seeds one by name.
            (NETNS_ETC / ns).mkdir(parents=True, exist_ok=True)
            (NETNS_ETC / ns / "resolv.conf").write_text(f"nameserver {self.dead_dns_ip}\noptions timeout:1 attempts:2\n")
        run(["nft", "add", "table", "bridge", self.table])
        run(
            [
                "nft",
                "add",
                "chain",
                "bridge",
                self.table,
                "faults",
                "{ type filter hook forward priority 0 ; policy accept ; }",
            ]
        )

    def destroy(self) -> list[str]:
        if not self.created:
            return []
        removed = _remove(self.run_id)
        (STATE_DIR / f"{self.run_id}.pid").unlink(missing_ok=True)
        self.created = False
        return removed

    def leftovers(self) -> list[str]:
        """Anything of this run still present (for the cleanup check)."""
        left = [
            ns
            for ns in run(["ip", "netns", "list"], check=False).stdout.split()
            if ns.startswith(f"mgf-{self.run_id}-")
        ]
        left += [
            line.split(":")[1].strip().split("@")[0]
            for line in run(["ip", "-o", "link", "show"], check=False).stdout.splitlines()
            if f"mgf{self.run_id}" in line
        ]
        if run(["nft", "list", "table", "bridge", self.table], check=False).returncode == 0:
            left.append(f"nft table {self.table}")
        left += [str(directory) for directory in NETNS_ETC.glob(f"mgf-{self.run_id}-*")]
        return left

    # -- faults --------------------------------------------------------------------------------

    def _apply(self) -> None:
        script = [f"flush chain bridge {self.table} faults"]
        for rules in self.rules.values():
            script += [f"add rule bridge {self.table} faults {rule}" for rule in rules]
        run(["nft", "-f", "-"], stdin="\n".join(script) + "\n")

    def partition(self, name: str, side_a: list[int], side_b: list[int]) -> None:
        """Drops every packet between any node of `side_a` and any node of `side_b`, both ways."""
        a = ", ".join(self.ip(i) for i in side_a)
        b = ", ".join(self.ip(i) for i in side_b)
        self.rules[name] = [
            f"ip saddr {{ {a} }} ip daddr {{ {b} }} drop",
            f"ip saddr {{ {b} }} ip daddr {{ {a} }} drop",
        ]
        self._apply()

    def loss(self, name: str, a: int, b: int, percent: int) -> None:
        """Drops `percent` % of the packets between nodes a and b, at random, each direction on its own."""
        self.rules[name] = [
            f"ip saddr {self.ip(a)} ip daddr {self.ip(b)} numgen random mod 100 < {percent} drop",
            f"ip saddr {self.ip(b)} ip daddr {self.ip(a)} numgen random mod 100 < {percent} drop",
        ]
        self._apply()

    def heal(self, name: str) -> None:
        if self.rules.pop(name, None) is not None:
            self._apply()

    def slow_link(self, a: int, b: int, kbit: int) -> None:
        """Caps the traffic between nodes a and b to `kbit` kbit/s each way (a short queue, like a real slow
        link); their traffic with every other node and with this process is not shaped."""
        for sender, receiver in ((a, b), (b, a)):
            port = self.ports[receiver]
            run(["tc", "qdisc", "replace", "dev", port, "root", "handle", "1:", "htb", "default", "10", "r2q", "1000"])
            run(["tc", "class", "add", "dev", port, "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit"])
            run(
                [
                    "tc",
                    "class",
                    "add",
                    "dev",
                    port,
                    "parent",
                    "1:",
                    "classid",
                    "1:20",
                    "htb",
                    "rate",
                    f"{kbit}kbit",
                    "ceil",
                    f"{kbit}kbit",
                    "burst",
                    "15k",
                    "cburst",
                    "15k",
                ]
            )
            # About 0.5 s of queue at this rate (a slow link's modem queue), not the veth's 1000 packets.
            packets = max(10, kbit * 1000 // 8 // 1500 // 2)
            run(["tc", "qdisc", "add", "dev", port, "parent", "1:20", "handle", "20:", "pfifo", "limit", str(packets)])
            run(
                [
                    "tc",
                    "filter",
                    "add",
                    "dev",
                    port,
                    "parent",
                    "1:",
                    "protocol",
                    "ip",
                    "prio",
                    "1",
                    "u32",
                    "match",
                    "ip",
                    "src",
                    f"{self.ip(sender)}/32",
                    "flowid",
                    "1:20",
                ]
            )
            self.shaped.add(receiver)

    def clear_shaping(self) -> None:
        for receiver in sorted(self.shaped):
            run(["tc", "qdisc", "del", "dev", self.ports[receiver], "root"], check=False)
        self.shaped.clear()
