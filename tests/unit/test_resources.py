"""A run lets go of what it holds once: the topic's lock withdrawn while Spark stops (the
withdrawal's round trips are not waited for after Spark's), the run's own broker only after it."""

from __future__ import annotations

import threading

from kappa_ingest.pipeline import resources as resources_module
from kappa_ingest.pipeline.resources import RunResources


class _Lock:
    def __init__(self, spark_stopping: threading.Event, releasing: threading.Event, said: list[str]) -> None:
        self.spark_stopping, self.releasing, self.said = spark_stopping, releasing, said

    def release(self) -> None:
        self.releasing.set()
        # One after the other (in either order) one of the two would wait here in vain.
        assert self.spark_stopping.wait(5), "the lock was withdrawn before Spark began to stop, not beside it"
        self.said.append("lock withdrawn")


class _Broker:
    def __init__(self, said: list[str]) -> None:
        self.said = said

    def close(self) -> None:
        self.said.append("broker stopped")


def test_the_lock_is_withdrawn_while_spark_stops_and_the_broker_stops_after_it(monkeypatch):
    said: list[str] = []
    spark_stopping, releasing = threading.Event(), threading.Event()

    def stop_session(_session) -> None:
        said.append("spark stopping")
        spark_stopping.set()
        assert releasing.wait(5), "Spark stopped before the lock's withdrawal began, not beside it"

    monkeypatch.setattr(resources_module, "stop_session", stop_session)
    held = RunResources(cfg=None, spark=object())
    held._owns_spark = True
    held.held = _Lock(spark_stopping, releasing, said)
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
