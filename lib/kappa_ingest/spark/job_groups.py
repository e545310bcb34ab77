"""The run's Spark jobs in job groups: the sending's in the run's own (the report joins its
tasks with the producers' counts), the jobs beside it in groups of their own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark import SparkContext

from kappa_ingest.config import IngestConfig


def group_of(run_id: str) -> str:
    """The job group a run's Spark jobs run in (cancelling it stops the run's sending)."""
    return f"kappa-ingest-{run_id}"


def job_group(cfg: IngestConfig) -> str:
    """Put the driver's next Spark jobs in the run's job group (the report joins its jobs'
    tasks with the producers' counts); returns its id."""
    group = group_of(cfg.run_id)
    SparkContext.getOrCreate().setJobGroup(group, f"kappa-ingest {cfg.run_id}: {cfg.sink} -> {cfg.topic}")
    return group


@contextmanager
def side_jobs(cfg: IngestConfig, name: str, what: str) -> Iterator[None]:
    """Jobs beside the sending (the quality gate, the pacing's span) in a group of their
    own, so that the report's counts of the run's tasks stay the sending's."""
    SparkContext.getOrCreate().setJobGroup(f"kappa-ingest-{cfg.run_id}-{name}", f"kappa-ingest {cfg.run_id}: {what}")
    try:
        yield
    finally:
        job_group(cfg)


# A bound on the wait: Spark kills a Python worker 2 s after its task (spark.python.task.killTimeout).
TASKS_END_S = 60.0


def await_tasks_ended(sc: SparkContext, group: str, timeout_s: float = TASKS_END_S) -> bool:
    """After a failed job: wait until no task of ``group``'s jobs runs. Spark fails the job
    while it still kills the others, and a Python worker goes on sending and committing until
    it is killed; once Spark counts its task ended, it commits nothing more (a commit already
    asked of Kafka is the fencing's to complete). False if tasks still ran after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    try:
        tracker = sc.statusTracker()
        while True:
            stages = [
                s for j in tracker.getJobIdsForGroup(group) if (info := tracker.getJobInfo(j)) for s in info.stageIds
            ]
            if not sum(s.numActiveTasks for i in stages if (s := tracker.getStageInfo(i))):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
    except Exception:  # noqa: BLE001 - Spark itself gone with the job: the job's error is the one to report
        return False
