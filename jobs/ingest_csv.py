"""spark-submit entry point of the ingest job.

    ./spark-submit.sh --master spark://host:7077 --num-executors 4 \
        jobs/ingest_csv.py --input hdfs:///exports/2026-11/*.csv.gz --topic orders \
        --bootstrap-servers kafka1:9092,kafka2:9092 --partitions 64

The options are those of ``kappa-ingest ingest`` (README, contract §1); the master and
resources come from spark-submit.
"""

import sys

from kappa_ingest.cli import _Parser, guarded, run_ingest
from kappa_ingest.config import add_ingest_arguments


def main(argv: list[str]) -> int:
    parser = _Parser(prog="jobs/ingest_csv.py", description="CSV files into a Kafka topic, measured.")
    add_ingest_arguments(parser)
    return guarded(lambda: run_ingest(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
