"""spark-submit entry point of the Kappa replay: a topic's history, from the delivery
ledger, into a new topic version.

    ./spark-submit.sh --master spark://host:7077 jobs/reprocess.py \\
        --from-topic orders --since 2026-10-01 --until 2026-11-01 --to-topic orders.v2 \\
        --bootstrap-servers kafka1:9092 --key-column order_id --event-time-column ts \\
        --order-by-event-time

The options are those of ``kappa-ingest reprocess`` (docs/scheduling.md); the
master and resources come from spark-submit.
"""

import sys

from kappa_ingest.cli import main

if __name__ == "__main__":
    sys.exit(main(["reprocess", *sys.argv[1:]]))
