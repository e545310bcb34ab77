"""``make soak``: 10M wide30 rows (~2.4 GB) through each sink into the embedded broker, read
back and checked row by row, peak memory of the process tree sampled.

    .venv/bin/python jobs/soak.py [--rows 10000000] [--sink confluent --sink spark --sink kafka-python --sink confluent-from-s3]
"""

import argparse
import sys
from pathlib import Path

from kappa_ingest.bench.soak import SINKS, run_soak
from kappa_ingest.cli import exit_on_sigterm


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="jobs/soak.py", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--sink", action="append", choices=SINKS, help="repeatable (default: every sink)")
    p.add_argument("--partitions", type=int, default=2, help="Spark partitions and local[N] cores")
    p.add_argument("--out", default="bench-results")
    p.add_argument("--data", default="data", help="where the generated input is kept between runs")
    a = p.parse_args(argv)
    exit_on_sigterm()
    run_soak(a.rows, Path(a.data), Path(a.out), a.sink or list(SINKS), a.partitions)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
