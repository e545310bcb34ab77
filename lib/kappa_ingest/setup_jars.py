"""Fetch, once, the jars a run needs: ``python -m kappa_ingest.setup_jars`` (``make setup``).

The broker's jars go to the kappa-ingest cache; Spark's packages (Kafka sink, Delta) to
Spark's ivy cache, by starting and stopping one local session.
"""

from __future__ import annotations

from kappa_ingest import local_kafka
from kappa_ingest.spark_session import PACKAGES, build_session


def main() -> None:
    print(f"Kafka broker jars: {local_kafka.jars_dir()}")
    spark = build_session("kappa-ingest setup", "local[1]")
    spark.stop()
    print(f"Spark packages: {', '.join(PACKAGES)}")


if __name__ == "__main__":
    main()
