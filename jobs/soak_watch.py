"""``make soak-watch``: a watch over a landing directory for 30 minutes, files landing at
random sizes and intervals, a broker restarted and an executor killed on the way; every row
once at the end, memory and latency flat.

    .venv/bin/python jobs/soak_watch.py [--minutes 30] [--out bench-results]
"""

import argparse
import sys
from pathlib import Path

from kappa_ingest.bench.soak_watch import run_soak_watch
from kappa_ingest.cli import exit_on_sigterm


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="jobs/soak_watch.py", description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--out", default="bench-results")
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args(argv)
    exit_on_sigterm()
    run_soak_watch(a.minutes, Path(a.out), a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
