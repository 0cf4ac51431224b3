"""Fault suite runner: runs ``tests/faults/`` (real redis-server, real worker processes; left
out of the plain ``pytest`` run, which it would make four minutes longer) and
prints one JSON object — how long each fault case took to converge to an index equal to a
fresh rebuild, the suite's wall time, and whether every case passed. The numbers feed the
table in docs/operations.md.

Usage: ``python bench/faults.py [-k EXPRESSION]`` (``-k`` selects cases, as in pytest).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="select", help="only the cases matching this pytest -k expression")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memoryd-faults-") as tmp:
        report = Path(tmp) / "times.json"
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "faults", "tests/faults"]
        if args.select:
            argv += ["-k", args.select]
        started = time.monotonic()
        done = subprocess.run(argv, cwd=ROOT, env=dict(os.environ, MEMORYD_FAULT_REPORT=str(report)),
                              capture_output=True, text=True)
        seconds = round(time.monotonic() - started, 1)
        times = json.loads(report.read_text()) if report.exists() else {}
    tail = done.stdout.strip().splitlines()[-1:] if done.stdout.strip() else []
    print(json.dumps({"converged_seconds": times, "suite_seconds": seconds, "passed": done.returncode == 0,
                      "pytest": tail[0] if tail else done.stderr.strip()[-500:]}, indent=2, sort_keys=True))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
