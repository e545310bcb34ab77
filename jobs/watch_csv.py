"""spark-submit entry point of the watch: each file landing in a directory or under an
s3:// prefix, sent into a topic seconds after it lands, every row once.

    ./spark-submit.sh --master spark://host:7077 --total-executor-cores 4 \\
        jobs/watch_csv.py --input s3://landing/orders/ --topic orders \\
        --bootstrap-servers kafka1:9092,kafka2:9092 --after-send move:s3://landing/done/

The options are those of ``kappa-ingest watch`` (README, "Streaming a landing directory");
the master and resources come from spark-submit. SIGTERM ends it cleanly.
"""

import sys

from kappa_ingest.cli import main

if __name__ == "__main__":
    sys.exit(main(["watch", *sys.argv[1:]]))
