"""Spark's own account of a run, read from the running application's status store.

The job runs its actions under a job group; this module finds that group's jobs and
reads their stages (submission and completion times, executor run and CPU time, input
bytes and records), every task attempt (launch time, duration, executor, host, status)
and the executors. Nothing here is estimated.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession

from kappa_ingest import settling

SETTLE_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class StageInfo:
    stage_id: int
    attempt: int
    name: str
    status: str
    num_tasks: int
    submitted_at: datetime | None
    completed_at: datetime | None
    executor_run_s: float
    executor_cpu_s: float
    input_bytes: int
    input_records: int

    @property
    def duration_s(self) -> float | None:
        if self.submitted_at and self.completed_at:
            return (self.completed_at - self.submitted_at).total_seconds()
        return None


@dataclass(frozen=True)
class TaskInfo:
    task_id: int
    stage_id: int
    stage_attempt: int
    partition: int
    attempt: int
    executor_id: str
    host: str
    status: str
    launched_at: datetime
    duration_s: float
    records_read: int
    error: str | None

    @property
    def ended_at(self) -> datetime:
        from datetime import timedelta

        return self.launched_at + timedelta(seconds=self.duration_s)


@dataclass(frozen=True)
class ExecutorInfo:
    executor_id: str
    host: str
    cores: int


@dataclass(frozen=True)
class SparkRunMetrics:
    stages: list[StageInfo]
    tasks: list[TaskInfo]
    executors: dict[str, ExecutorInfo]
    job_stages: list[frozenset[int]] = field(default_factory=list)  # each job's stages

    def same_jobs(self, stage_ids: set[int]) -> set[int]:
        """The stages of every job that ran one of ``stage_ids`` (a shuffle's map stage with
        the stage reading it)."""
        return set(stage_ids).union(*(job for job in self.job_stages if job & stage_ids))


def parse_time(text: str | None) -> datetime | None:
    """Spark's REST times look like ``2026-11-22T00:50:12.345GMT``."""
    if not text:
        return None
    return datetime.strptime(text.replace("GMT", ""), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC)


class StatusStore:
    """The running application's status store, read in the driver's JVM and written out as
    its REST API writes it (the API's own Jackson writer: the same JSON), without the API's
    server, whose first request initialised it: 0.74 s, and 1.2 s of the JVM's CPU on two
    cores, inside the sending window or beside the set-up (this way: 0.07 s)."""

    def __init__(self, spark: SparkSession) -> None:
        sc = spark.sparkContext
        self._jvm, self._gateway = sc._jvm, sc._gateway
        self._store = sc._jsc.sc().statusStore()  # type: ignore[union-attr]
        self._json = self._jvm.org.apache.spark.status.api.v1.JacksonMessageWriter().mapper()  # type: ignore[union-attr]

    def _read(self, value: Any) -> Any:
        return json.loads(self._json.writeValueAsString(value))

    def job(self, job_id: int) -> dict[str, Any]:
        return self._read(self._store.job(job_id))

    def stage_attempts(self, stage_id: int) -> list[dict[str, Any]]:
        """As ``/stages/{stage_id}?details=false``."""
        no_quantiles = self._gateway.new_array(self._jvm.double, 0)  # type: ignore[union-attr]
        return self._read(self._store.stageData(stage_id, False, self._jvm.java.util.ArrayList(), False, no_quantiles))

    def tasks(self, stage_id: int, attempt: int) -> list[dict[str, Any]]:
        return self._read(self._store.taskList(stage_id, attempt, 2**31 - 1))

    def executors(self) -> list[dict[str, Any]]:
        """Live and lost, as ``/allexecutors``."""
        return self._read(self._store.executorList(False))


# Long: one bounded wait for Spark's listener bus, then its records read in one go.
def collect(spark: SparkSession, job_group: str) -> SparkRunMetrics:
    """Stages, task attempts and executors of the jobs run under ``job_group``.

    The status store is fed asynchronously by Spark's listener bus, so this waits (bounded)
    until every stage of the group's jobs is settled.
    """
    api = StatusStore(spark)
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    waits = settling.pauses()  # the bus is milliseconds behind a job that just ended
    while True:
        # The group's own jobs, not every job the application kept (a watch's batches add up to Spark's 1,000).
        jobs = [api.job(job_id) for job_id in sorted(tracker.getJobIdsForGroup(job_group))]
        stage_ids = sorted({s for j in jobs for s in j["stageIds"]})
        attempts = [a for sid in stage_ids for a in api.stage_attempts(sid)]
        settled = all(j["status"] != "RUNNING" for j in jobs) and all(
            a["status"] in ("COMPLETE", "FAILED", "SKIPPED") for a in attempts
        )
        if settled or time.monotonic() > deadline:
            break
        time.sleep(next(waits))
    stages: list[StageInfo] = []
    tasks: list[TaskInfo] = []
    for a in attempts:
        if a["status"] == "SKIPPED":
            continue
        stages.append(
            StageInfo(
                stage_id=a["stageId"],
                attempt=a["attemptId"],
                name=a["name"],
                status=a["status"],
                num_tasks=a["numTasks"],
                submitted_at=parse_time(a.get("submissionTime")),
                completed_at=parse_time(a.get("completionTime")),
                executor_run_s=a.get("executorRunTime", 0) / 1000,
                executor_cpu_s=a.get("executorCpuTime", 0) / 1e9,
                input_bytes=a.get("inputBytes", 0),
                input_records=a.get("inputRecords", 0),
            )
        )
        for t in api.tasks(a["stageId"], a["attemptId"]):
            metrics = t.get("taskMetrics") or {}
            tasks.append(
                TaskInfo(
                    task_id=t["taskId"],
                    stage_id=a["stageId"],
                    stage_attempt=a["attemptId"],
                    partition=t.get("partitionId", t["index"]),
                    attempt=t["attempt"],
                    executor_id=t["executorId"],
                    host=t["host"],
                    status=t["status"],
                    launched_at=parse_time(t["launchTime"]),  # type: ignore[arg-type]
                    duration_s=t.get("duration", 0) / 1000,
                    records_read=(metrics.get("inputMetrics") or {}).get("recordsRead", 0),
                    error=_error_line(t.get("errorMessage")),
                )
            )
    executors = {
        e["id"]: ExecutorInfo(e["id"], e["hostPort"].rsplit(":", 1)[0], e.get("totalCores", 0)) for e in api.executors()
    }
    return SparkRunMetrics(stages, tasks, executors, [frozenset(j["stageIds"]) for j in jobs])


def _error_line(message: str | None) -> str | None:
    """A failed attempt's error in one line: a Python worker's own (the traceback's last
    ``Name: message`` line) rather than the Java exception wrapping it."""
    if not message:
        return None
    from kappa_ingest.spark.failures import python_error

    return python_error(message) or message.splitlines()[0]
