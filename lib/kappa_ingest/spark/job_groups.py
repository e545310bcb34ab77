"""The run's Spark jobs in job groups: the sending's in the run's own (the report joins its
tasks with the producers' counts), the jobs beside it in groups of their own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark import SparkContext

from kappa_ingest.config import IngestConfig


def job_group(cfg: IngestConfig) -> str:
    """Put the driver's next Spark jobs in the run's job group (the report joins its jobs'
    tasks with the producers' counts); returns its id."""
    group = f"kappa-ingest-{cfg.run_id}"
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
