"""The driver's and the broker's JVMs map the class archives `make setup` wrote for them.

The JVM checks an archive against every jar on its class path (place, size, time) and,
if one differs, starts without it and says nothing: the start-up it saves (~2 s of a
run's command to exit on two cores) is lost unseen. Keyed by the jars' names and sizes
alone, an archive built by another checkout's venv was taken for this one's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def _mapped(pid: int) -> set[str]:
    return {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines() if line.endswith(".jsa")}


def test_the_driver_jvm_maps_its_class_archive(spark):
    from kappa_ingest.spark import class_archive

    archive = class_archive.path()
    assert archive is not None and archive.exists(), "make setup writes the driver's class archive"
    assert str(archive) in _mapped(spark._jvm.ProcessHandle.current().pid())


def test_the_broker_jvm_maps_its_class_archive(kafka):
    from kappa_ingest.kafka import broker as local_kafka

    archive = local_kafka.class_archive()
    assert archive is not None and archive.exists(), "make setup writes the broker's class archive"
    assert str(archive) in _mapped(kafka.brokers[0].pid)
