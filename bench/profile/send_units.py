"""Reads `perf script -F comm,tid,period,ip,sym` (with call chains) on stdin; prints the samples per sample in `send`,
then the rest by where it went (the first matching frame of each call chain), in the same units."""

import collections
import sys

# (name, a piece of a frame's symbol), tried in order: a sample counts for the first that any of its frames matches.
PLACES = [
    ("send", "__libc_send"), ("send", "__send"), ("sqlite", "sqlite3_"),
    ("publisher's frame", "NodeC19eventSocketReceived"), ("fan-out beside send", "NodeC8pushLive"),
    ("publish queue", "NodeC17drainPublishQueue"), ("poll", "__poll"), ("loop timers", "LoopTimer"),
    ("service inbox", "ServerC10drainInbox"), ("lws", "lws_"), ("dispatch", "_dispatch"),
]


def main():
    counts = collections.Counter()
    samples = 0
    chain = []

    def finish():
        nonlocal samples
        if not chain:
            return
        samples += 1
        for name, piece in PLACES:
            if any(piece in frame for frame in chain):
                counts[name] += 1
                return
        counts["other"] += 1

    for line in sys.stdin:
        if not line.strip():
            finish()
            chain = []
        elif line[0] in " \t":
            chain.append(line.split(None, 1)[-1].strip())
        else:
            chain = []
    finish()
    sends = counts["send"]
    if not sends:
        sys.exit(f"{sys.argv[1]}: no samples in send")
    places = ", ".join(f"{name} {count / sends:.3f}" for name, count in counts.most_common() if name != "send")
    print(f"{sys.argv[1]}: {samples} samples, {sends} in send: {samples / sends:.3f} send units per message")
    print(f"  beside send: {places}")


main()
