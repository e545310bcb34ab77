"""The first rows of a unit converted while its producer opens (sinks/early.py), in a real
run: each task's first unit is held before its transactional id initialises (a failpoint
in the thread that opens it ahead), while the task reads and converts on. Nothing reaches
the topic while it is held; released, every row is in the topic once (read_committed),
and the report counts the rows converted early, so the path is shown taken, not assumed."""

from __future__ import annotations

import time

import pytest

from faults import assert_delivered, cli, sent_so_far, stop_group, summary, wait_for
from helpers import consume_all, expected_rows
from kappa_ingest import datagen, failpoints

pytestmark = pytest.mark.integration

ROWS = 100_000
# How long the openings are held: the tasks read and convert meanwhile. Coverage only: the
# report's count, asserted below, says whether any row was converted early.
HELD_S = 3.0


def test_rows_converted_while_their_units_producer_opens_are_sent_once_admitted(kafka, tmp_path):
    path = datagen.generate("wide30", ROWS, tmp_path / "in.csv", seed=31)
    held, log, metrics = tmp_path / "held", tmp_path / "run.log", tmp_path / "m"
    held.mkdir()
    bs, topic = kafka.bootstrap_servers, "early-rows"
    run = cli("--input", str(path), "--topic", topic, "--bootstrap-servers", bs, "--master", "local[2]",
              "--partitions", "2", "--metrics-dir", str(metrics), "--run-id", "early", "--quiet", log=log,
              env={failpoints.ENV: f"{failpoints.OPENING}:{held}"})  # fmt: skip
    try:
        markers = lambda: list(held.glob(f"*.{failpoints.OPENING}"))  # noqa: E731
        wait_for(lambda: len(markers()) == 2, 180, "both tasks' first units held opening", run, log)
        time.sleep(HELD_S)
        assert sent_so_far(bs, topic) == 0, "records sent before their unit was admitted"
        for m in markers():
            m.unlink()
        assert run.wait(180) == 0, log.read_text()[-3000:]
    finally:
        stop_group(run)
    report = summary(metrics, "early")
    early = report["delivery"]["rows_converted_early"]
    assert 0 < early <= ROWS, early
    assert_delivered(consume_all(bs, topic), expected_rows(path), [report])
