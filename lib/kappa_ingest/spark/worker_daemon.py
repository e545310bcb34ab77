"""Spark's Python worker daemon, with the job's libraries imported before it forks workers.

Spark starts one daemon per executor (``python -m pyspark.daemon``) and forks a worker
from it for each Python task slot; every worker then imported pyarrow, polars, the Kafka
clients and this package on its own (0.65 s each, both at once on two busy cores). Started
as ``spark.python.daemon.module`` (local masters only: ``spark_session`` sets it), this
module imports them once in the daemon, and every forked worker starts with them loaded.
None of these imports starts a thread, so forking after them is safe.
"""

import confluent_kafka  # noqa: F401
import kafka  # noqa: F401
import polars  # noqa: F401
import pyarrow  # noqa: F401
from pyspark import daemon

if __name__ == "__main__":
    daemon.manager()
