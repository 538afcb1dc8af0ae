#!/usr/bin/env python3
"""What one per-recipient row of the per-peer event log costs SQLite itself (2026-12-04).

Until 2026-12-05 the node indexed a fan-out's recipients into `event_log(peer_id, seq)` (WITHOUT ROWID) in steps, many
bodies at a time, grouped by peer; since then a body names its audience and no such row is written (bench/RESULTS.md). This replays that write pattern from C-speed `executemany` (no Swift in the way) on a WAL
database with `synchronous=NORMAL`: 50 peers, steps of N bodies each (50 x N rows, peer by peer), and prints the CPU
per row and per 50-recipient body, with ratios against the node's own setting (text ids, 64 bodies per step).

    python3 bench/sqlite_index_cost.py [DIR]      DIR: where the scratch databases go (default: a temp dir)
"""
import os
import sqlite3
import sys
import tempfile
import time
import uuid

PEERS = 50
WARM_BODIES = 1920  # bodies written before measuring, so every peer's log spans several pages
MEASURED_BODIES = 3840


def cost(directory: str, key_type: str, bodies_per_step: int) -> float:
    """CPU seconds per row for one configuration."""
    path = os.path.join(directory, f"index-{key_type}-{bodies_per_step}.sqlite")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(
        f"CREATE TABLE event_log(peer_id {key_type} NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (peer_id, seq))"
        " WITHOUT ROWID")
    peers = [str(uuid.uuid4()) for _ in range(PEERS)] if key_type == "TEXT" else list(range(1, PEERS + 1))
    sequence = 0

    def step() -> None:
        nonlocal sequence
        rows = [(peer, sequence + index + 1) for peer in peers for index in range(bodies_per_step)]
        sequence += bodies_per_step
        db.execute("BEGIN IMMEDIATE")
        db.executemany("INSERT OR IGNORE INTO event_log(peer_id, seq) VALUES (?, ?)", rows)
        db.execute("COMMIT")

    for _ in range(WARM_BODIES // bodies_per_step):
        step()
    start = time.process_time()
    steps = MEASURED_BODIES // bodies_per_step
    for _ in range(steps):
        step()
    elapsed = time.process_time() - start
    db.close()
    return elapsed / (steps * bodies_per_step * PEERS)


def main() -> None:
    with tempfile.TemporaryDirectory(dir=sys.argv[1] if len(sys.argv) > 1 else None) as directory:
        baseline = cost(directory, "TEXT", 64)
        print(f"baseline: text peer ids, 64 bodies per step: {baseline * 1e6:.2f} us per row,"
              f" {baseline * PEERS * 1e6:.0f} us per {PEERS}-recipient body")
        for key_type, bodies in [("TEXT", 8), ("TEXT", 16), ("TEXT", 256), ("INTEGER", 64)]:
            per_row = cost(directory, key_type, bodies)
            print(f"{key_type.lower()} peer ids, {bodies} bodies per step: {per_row * 1e6:.2f} us per row"
                  f" ({per_row / baseline:.2f}x the baseline)")


if __name__ == "__main__":
    main()
