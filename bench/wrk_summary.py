#!/usr/bin/env python3
"""Turns wrk --latency output into one line: WRK label=L rps=.. p50_ms=.. p90_ms=.. p99_ms=.. non2xx=.. errors=.."""
import re
import sys

label, path = sys.argv[1], sys.argv[2]
text = open(path).read()


def ms(value):
    m = re.match(r"([\d.]+)(us|ms|s|m)", value)
    if not m:
        return float("nan")
    n, unit = float(m.group(1)), m.group(2)
    return {"us": n / 1000, "ms": n, "s": n * 1000, "m": n * 60000}[unit]


pct = {p: ms(v) for p, v in re.findall(r"^\s+(50|75|90|99)\.000%\s+(\S+)", text, re.M)}
if not pct:
    pct = {p: ms(v) for p, v in re.findall(r"^\s+(50|75|90|99)%\s+(\S+)", text, re.M)}
rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
errors = re.search(r"Socket errors: (.*)", text)
total = re.search(r"(\d+) requests in", text)
print(
    f"WRK label={label} rps={float(rps.group(1)) if rps else 0:.0f} requests={total.group(1) if total else 0} "
    f"p50_ms={pct.get('50', float('nan')):.3f} p90_ms={pct.get('90', float('nan')):.3f} "
    f"p99_ms={pct.get('99', float('nan')):.3f} non2xx={non2xx.group(1) if non2xx else 0} "
    f"errors={errors.group(1).replace(' ', '') if errors else 'none'}"
)
