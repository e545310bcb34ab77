"""Spark's Python worker daemon, with the job's libraries imported before it forks workers.

Spark starts one daemon per executor (``python -m pyspark.daemon``) and forks a worker
from it for each Python task slot; every worker then imported pyarrow, polars, the Kafka
client and this package on its own (0.65 s for the libraries and 0.18 s more for the
package's task-side modules, each, both at once on two busy cores). Started as
``spark.python.daemon.module`` (local masters only: ``spark_session`` sets it), this module
imports them once in the daemon, and loads the C record loops (or learns why they cannot
be), and every forked worker starts with them loaded. None of this starts a thread, so
forking after it is safe.

kafka-python is not among them: its import (0.3 s of the daemon's 1.2 s on a busy core)
would hold up every run's workers for the one sink that needs it, whose workers import it
in their warm-up (:mod:`kappa_ingest.spark.warmup`), side by side.
"""

import confluent_kafka  # noqa: F401
import polars  # noqa: F401
import pyarrow  # noqa: F401
from pyspark import daemon

import kappa_ingest.sinks.partition_runner
import kappa_ingest.sinks.spark_kafka
import kappa_ingest.source.line_shuffle
import kappa_ingest.source.quarantine
import kappa_ingest.spark.warmup  # noqa: F401
from kappa_ingest import native

if __name__ == "__main__":
    native.in_use()  # the outcome is kept for the process, so each worker inherits it
    daemon.manager()
