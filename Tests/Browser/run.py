#!/usr/bin/env python3
"""Runs the browser test suite and prints a closing line 'browser: N passed, N failed'.

    MESHGATE_BINARY=.build/debug/meshgate python Tests/Browser/run.py [-k PATTERN]...

`make test-browser` sets up the virtual environment and calls this. Screenshots, the node logs
and chromedriver logs go to $MESHGATE_BROWSER_ARTIFACTS (default .build/test-artifacts/browser).
"""

import os
import sys
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main() -> int:
    # Never let Selenium Manager look for (or download) a driver or a browser: Debian's are used.
    os.environ.setdefault("SE_OFFLINE", "true")
    loader = unittest.TestLoader()
    # -k PATTERN, repeatable: the steps whose names contain any of them (each step starts from a known state).
    patterns = [sys.argv[i + 1] for i in range(1, len(sys.argv) - 1) if sys.argv[i] == "-k"]
    if patterns:
        loader.testNamePatterns = [f"*{pattern}*" for pattern in patterns]
    suite = loader.discover(str(HERE), pattern="test_*.py", top_level_dir=str(HERE))
    started = time.monotonic()
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    elapsed = time.monotonic() - started
    # A test whose body and tearDown both fail is listed twice: count tests, not reports.
    failed_ids = {test.id() for test, _ in result.failures + result.errors} | {
        test.id() for test in result.unexpectedSuccesses}
    failed = len(failed_ids)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped
    artifacts = os.environ.get("MESHGATE_BROWSER_ARTIFACTS", ".build/test-artifacts/browser")
    print(f"browser tests took {elapsed:.1f} s; screenshots in {artifacts}")
    print(f"browser: {passed} passed, {failed} failed, {skipped} skipped")
    if result.testsRun == 0 or (skipped and passed == 0):
        print("browser: no test ran", file=sys.stderr)
        return 1
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
