"""The Python workers' warm-up starts the workers the sending tasks then use (a DataFrame
job, as the sending stage is: the worker daemon is keyed by the workers' environment,
which differs between DataFrame and RDD tasks)."""

from __future__ import annotations

import pytest

from kappa_ingest.spark import warmup

pytestmark = pytest.mark.integration


def test_the_warm_up_starts_the_workers_the_sending_tasks_use(spark):
    def daemon_of(batches):
        import os

        import pyarrow as pa

        for _ in batches:
            yield pa.RecordBatch.from_arrays([pa.array([os.getppid()], pa.int64())], names=["daemon"])

    warmed = warmup._warm(spark, "confluent")
    sending = {r.daemon for r in spark.range(0, 2, numPartitions=2).mapInArrow(daemon_of, "daemon long").collect()}
    assert warmed and sending <= warmed, (warmed, sending)
