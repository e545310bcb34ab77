"""spark-submit entry point of the ingest job.

    ./spark-submit.sh --master spark://host:7077 --total-executor-cores 16 \\
        jobs/ingest_csv.py --input hdfs:///exports/2026-11/*.csv.gz --topic orders \\
        --bootstrap-servers kafka1:9092,kafka2:9092 --partitions 64

The options are those of ``kappa-ingest ingest`` (README, contract §1); the master and
resources come from spark-submit.
"""

import sys

from kappa_ingest.cli import main

if __name__ == "__main__":
    sys.exit(main(["ingest", *sys.argv[1:]]))
