"""A run lets go of what it holds once: the topic's lock withdrawn while Spark stops (the
withdrawal's round trips are not waited for after Spark's), the run's own broker only after it."""

from __future__ import annotations

import threading

from kappa_ingest.pipeline import resources as resources_module
from kappa_ingest.pipeline.resources import RunResources


class _Lock:
    def __init__(self, spark_stopping: threading.Event, said: list[str]) -> None:
        self.spark_stopping, self.said = spark_stopping, said

    def release(self) -> None:
        # Sequential (the lock, then Spark) this would wait in vain: Spark stops only after.
        assert self.spark_stopping.wait(5), "the lock was withdrawn before Spark began to stop, not beside it"
        self.said.append("lock withdrawn")


class _Broker:
    def __init__(self, said: list[str]) -> None:
        self.said = said

    def close(self) -> None:
        self.said.append("broker stopped")


def test_the_lock_is_withdrawn_while_spark_stops_and_the_broker_stops_after_it(monkeypatch):
    said: list[str] = []
    spark_stopping = threading.Event()

    def stop_session(_session) -> None:
        spark_stopping.set()
        said.append("spark stopping")

    monkeypatch.setattr(resources_module, "stop_session", stop_session)
    held = RunResources(cfg=None, spark=object())
    held._owns_spark = True
    held.held = _Lock(spark_stopping, said)
    held.kafka = _Broker(said)
    held.close()
    held.close()  # once
    assert said == ["spark stopping", "lock withdrawn", "broker stopped"]


def test_a_lock_that_cannot_be_withdrawn_still_lets_the_broker_stop(monkeypatch, capsys):
    said: list[str] = []

    class Failing:
        def release(self) -> None:
            raise OSError("broker gone")

    monkeypatch.setattr(resources_module, "stop_session", lambda _s: said.append("spark stopped"))
    held = RunResources(cfg=None, spark=object())
    held._owns_spark = True
    held.held = Failing()
    held.kafka = _Broker(said)
    held.close()
    assert sorted(said) == ["broker stopped", "spark stopped"]
    assert "withdrawing the topic's lock: broker gone" in capsys.readouterr().err
