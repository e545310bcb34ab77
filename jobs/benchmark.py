"""``make bench``: kappa-ingest side by side with Kafka's own producer, kcat, the classic
Python script and plain Spark, on the same input and the same local broker.

    .venv/bin/python jobs/benchmark.py [--rows 10 --rows 100000 --rows 1000000] [--layout wide30 --layout debs2012]
                                       [--only kappa --only ceiling] [--repeats 3]
"""

import argparse
import json
import sys
from pathlib import Path

from kappa_ingest.bench.runner import regressed, run_bench
from kappa_ingest.cli import exit_on_sigterm


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="jobs/benchmark.py", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, action="append", help="input rows; repeatable (default 10, 100000, 1000000)")
    p.add_argument("--layout", action="append", choices=["wide30", "debs2012"], help="repeatable (default both)")
    p.add_argument(
        "--only", action="append", help="a contestant's whole name, or a part of the names of several; repeatable"
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--classic-rows",
        type=int,
        default=100_000,
        help="the classic script and the naive per-partition job send this many rows",
    )
    p.add_argument("--partitions", type=int, default=2, help="Spark partitions and local[N] cores")
    p.add_argument("--out", default="bench-results")
    p.add_argument("--data", default="data", help="where generated inputs are kept between runs")
    p.add_argument(
        "--baseline",
        metavar="COMMIT",
        help="also run the plain line path as this commit has it (and any '<path> at baseline' --only names)",
    )
    p.add_argument("--metrics-dir", default="metrics", help="the Delta metrics store the runs are appended to")
    args = p.parse_args(argv)
    exit_on_sigterm()  # stop the benchmark's broker on SIGTERM too
    out = run_bench(args.layout or ["wide30", "debs2012"], args.rows or [10, 100_000, 1_000_000], args.only, args.repeats,
                    Path(args.out), Path(args.data), args.classic_rows, args.partitions,
                    " ".join(["jobs/benchmark.py", *argv]), Path(args.metrics_dir), args.baseline)  # fmt: skip
    failed = regressed(json.loads((out / "results.json").read_text())["targets"])
    for c in failed:
        print(f"jobs/benchmark.py: regression: {c['layout']} {c['contestant']}: {c['measure']} {c['value']}"
              f" (bound {c['bound']})", file=sys.stderr)  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
