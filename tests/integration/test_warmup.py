"""The Python workers' warm-up starts the workers the sending tasks then use: as an RDD job
where DataFrame and RDD tasks share one worker daemon (simplified tracebacks off, as
conf/spark-defaults.conf has it), else as a DataFrame job (a user's own settings)."""

from __future__ import annotations

import pytest

from kappa_ingest.sinks.partition_runner import rdd_shares_workers
from kappa_ingest.spark import warmup

pytestmark = pytest.mark.integration
TRACEBACKS = "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled"


@pytest.mark.parametrize("simplified", ["false", "true"])
def test_the_warm_up_starts_the_workers_the_sending_tasks_use(spark, simplified):
    def daemon_of(batches):
        import os

        import pyarrow as pa

        for _ in batches:
            yield pa.RecordBatch.from_arrays([pa.array([os.getppid()], pa.int64())], names=["daemon"])

    def rdd_daemon_of(items):
        import os

        for _ in items:
            yield os.getppid()

    before = spark.conf.get(TRACEBACKS)
    spark.conf.set(TRACEBACKS, simplified)
    try:
        warmed = warmup._warm(spark, "confluent")
        rows = spark.range(0, 2, numPartitions=2).mapInArrow(daemon_of, "daemon long").collect()
        # Tasks handed their splits send as an RDD's tasks where that shares the workers.
        by_rdd = rdd_shares_workers(spark)
        rdd = set(spark.sparkContext.parallelize([0, 1], 2).mapPartitions(rdd_daemon_of).collect()) if by_rdd else set()
    finally:
        spark.conf.set(TRACEBACKS, before)
    sending = {r.daemon for r in rows} | rdd
    assert by_rdd == (simplified == "false")
    assert warmed and sending <= warmed, (warmed, sending)
