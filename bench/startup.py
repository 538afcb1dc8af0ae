#!/usr/bin/env python3
"""Start-up time of meshgate: exec to the 'meshgate ready' line on stdout, cold (fresh data dir) and warm
(existing data dir), against the start-up of `python3 -c pass` (exec to exit) measured in the same run.

    python3 bench/startup.py --runs 20 --work DIR -- /path/to/meshgate
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


def meshgate_once(binary, data_dir):
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [binary, "--port", "0", "--bind", "127.0.0.1", "--data-dir", data_dir, "--discovery", "static",
         "--log-level", "warning"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in p.stdout:
            if line.startswith("meshgate ready"):
                return time.perf_counter() - t0
        sys.exit("meshgate exited before it was ready")
    finally:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def python_once():
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t0


def summary(name, xs):
    xs = sorted(xs)
    return (f"STARTUP label={name} runs={len(xs)} median_ms={statistics.median(xs) * 1000:.1f} "
            f"min_ms={xs[0] * 1000:.1f} max_ms={xs[-1] * 1000:.1f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--work", required=True)
    ap.add_argument("binary", nargs="+")
    a = ap.parse_args()
    binary = a.binary[-1]
    os.makedirs(a.work, exist_ok=True)
    py = [python_once() for _ in range(a.runs)]
    cold = []
    for i in range(a.runs):
        d = os.path.join(a.work, f"cold-{i}")
        cold.append(meshgate_once(binary, d))
        shutil.rmtree(d, ignore_errors=True)
    warm_dir = os.path.join(a.work, "warm")
    meshgate_once(binary, warm_dir)
    warm = [meshgate_once(binary, warm_dir) for _ in range(a.runs)]
    for name, xs in (("python3-c-pass", py), ("meshgate-cold", cold), ("meshgate-warm", warm)):
        print(summary(name, xs))
    base = statistics.median(py)
    print(f"ratios: meshgate cold / python3 -c pass {statistics.median(cold) / base:.2f}x, "
          f"warm {statistics.median(warm) / base:.2f}x (target: start-up < 200 ms; "
          f"cold median {statistics.median(cold) * 1000:.0f} ms, warm {statistics.median(warm) * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
