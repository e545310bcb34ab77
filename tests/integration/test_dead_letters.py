"""--dead-letter-topic: every quarantined row also reaches a topic, raw text as value and
its context as headers, through each sink and delivery mode, counted and read back."""

from __future__ import annotations

import pytest

from helpers import consume_all, run

pytestmark = pytest.mark.integration

BAD = b"id,name,amount\n1,ok,3\n2,too,many,fields\n3,\xff\xfebad,4\n4,fine,5\n5,short\n"


@pytest.mark.parametrize(("sink", "mode"), [("confluent", "exactly-once"), ("kafka-python", "exactly-once"),
                                            ("confluent", "at-least-once"), ("spark", "at-least-once")])  # fmt: skip
def test_quarantined_rows_reach_the_dead_letter_topic_with_their_context(spark, kafka, tmp_path, sink, mode):
    path = tmp_path / "in.csv"
    path.write_bytes(BAD)
    dlq = f"dead-{sink}-{mode}"
    cfg, summary, records = run(spark, kafka, tmp_path, inputs=[str(path)], sink=sink, delivery=mode,
                                dead_letter_topic=dlq)  # fmt: skip
    assert sorted(r.value["data"]["id"] for r in records) == ["1", "4"]
    assert summary["status"] == "succeeded" and all(c["ok"] for c in summary["checks"]), summary["checks"]
    assert summary["dead_letter"] == {"topic": dlq, "rows": 3, "found": 3}
    letters = sorted(
        consume_all(kafka.bootstrap_servers, dlq, json_values=False), key=lambda r: r.headers["line_number"]
    )
    assert [r.raw_value for r in letters] == [b"2,too,many,fields", b"3,\xff\xfebad,4", b"5,short"]
    assert [r.headers["line_number"] for r in letters] == [b"3", b"4", b"6"]  # the header is line 1
    assert {r.headers["run_id"] for r in letters} == {cfg.run_id.encode()}
    assert all(r.headers["source_file"].endswith(b"in.csv") and r.headers["split_start"] == b"0" for r in letters)
    assert [r.headers["reason"] for r in letters] == [b"4 fields where the header has 3", b"bytes not valid in utf-8",
                                                      b"2 fields where the header has 3"]  # fmt: skip


def test_the_dead_letter_topic_must_be_a_topic_of_its_own(spark, kafka, tmp_path):
    from kappa_ingest.errors import UsageError

    with pytest.raises(UsageError, match="--dead-letter-topic 'same'"):
        run(spark, kafka, tmp_path, inputs=["x.csv"], topic="same", dead_letter_topic="same")
