"""Generated test data: deterministic, the promised shape, readable by the csv module."""

from __future__ import annotations

import csv
import gzip

from kappa_ingest import datagen


def test_wide30_shape_and_determinism(tmp_path):
    a = datagen.generate("wide30", 120_000, tmp_path / "a.csv", seed=3)
    b = datagen.generate("wide30", 120_000, tmp_path / "b.csv", seed=3)
    assert a.read_bytes() == b.read_bytes()
    with open(a, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["id"] + [f"c{i:02d}" for i in range(1, 31)]
    assert len(rows) == 120_001 and all(len(r) == 31 for r in rows)
    assert [r[0] for r in rows[1:4]] == ["0", "1", "2"] and rows[-1][0] == "119999"
    assert any('"' in v for r in rows[1:200] for v in r) or any("," in v for r in rows[1:200] for v in r)
    assert 200 < a.stat().st_size / 120_000 < 260


def test_debs2012_has_a_timestamp_and_66_sensor_columns(tmp_path):
    p = datagen.generate("debs2012", 1000, tmp_path / "d.csv", gzip_output=True)
    assert p.name == "d.csv.gz"
    with gzip.open(p, "rt", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0][0] == "ts" and len(rows[0]) == 67 and len(rows) == 1001
    assert rows[1][0] == "2012-02-22T00:00:00.000Z" and rows[2][0] == "2012-02-22T00:00:00.010Z"
    assert {rows[1][i] for i in range(47, 67)} <= {"true", "false"}


def test_different_seeds_differ(tmp_path):
    a = datagen.generate("wide30", 10, tmp_path / "a.csv", seed=1).read_text()
    b = datagen.generate("wide30", 10, tmp_path / "b.csv", seed=2).read_text()
    assert a != b
