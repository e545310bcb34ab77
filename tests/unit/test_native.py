"""The C record loops agree byte for byte with the Python code they replace, and their
absence falls back to it."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kappa_ingest import native
from kappa_ingest.columns import FILE_COL
from kappa_ingest.parsing import _count_byte
from kappa_ingest.records import RecordSpec, _encode_polars, encode_batch

TRICKY = [chr(i) for i in range(0x80)] + ["é", "€", "😀", "\u2028", '"', "\\"]


def _batch(n: int, seed: int = 1) -> pa.RecordBatch:
    rnd = random.Random(seed)

    def text() -> str | None:
        r = rnd.random()
        if r < 0.1:
            return None
        return "" if r < 0.15 else "".join(rnd.choice(TRICKY) for _ in range(rnd.randint(1, 20)))

    columns = ["id", 'na"me', "ü\\x", "c\n4"]
    data = [pa.array([text() for _ in range(n)], pa.string()) for _ in columns]
    data[1] = pa.array(["plain"] * n)  # nothing to escape, no nulls: copied without looking
    files = pa.array([rnd.choice(["file:/a b.csv", 'file:/é"x.csv', "hdfs://n/x\t.csv"]) for _ in range(n)])
    return pa.RecordBatch.from_arrays([*data, files], names=[*columns, FILE_COL])


@pytest.mark.parametrize("window", [(0, 3000), (17, 2000), (2999, 1), (0, 0)])
def test_c_values_are_polars_bytes(window):
    try:
        native.load()
    except native.NativeUnavailable as e:  # without cc both sides would be polars
        pytest.skip(str(e))
    batch = _batch(3000).slice(*window)
    spec = RecordSpec(tuple(batch.schema.names[:-1]), "run", key_column="id")
    fast, reference = encode_batch(batch, spec, 1795334121513), _encode_polars(batch, spec, 1795334121513)
    assert fast.values.to_pylist() == reference.values.to_pylist()
    assert fast.keys.to_pylist() == reference.keys.to_pylist()
    assert fast.timestamps_ms.to_pylist() == reference.timestamps_ms.to_pylist()
    assert fast.source_files.to_pylist() == reference.source_files.to_pylist()
    assert fast.nbytes == reference.nbytes


def test_without_a_compiler_the_loops_are_unavailable_and_polars_encodes(tmp_path, monkeypatch):
    monkeypatch.setenv("KAPPA_INGEST_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(native.NativeUnavailable, match="C compiler"):
        native.build()
    monkeypatch.setattr(native, "load", native.build)
    batch = _batch(50)
    columns = batch.schema.names[:-1]
    values = encode_batch(batch, RecordSpec(tuple(columns), "run"), 0).values.to_pylist()
    # Read independently: each value is the row's fields by name, in header order.
    rows = batch.to_pylist()
    assert [json.loads(v) for v in values] == [
        {"ingest_ts": "1970-01-01T00:00:00.000Z", "source_file": r[FILE_COL], "data": {c: r[c] for c in columns}}
        for r in rows
    ]
    assert all(list(json.loads(v)["data"]) == columns for v in values)


@pytest.mark.parametrize("kind", [pa.binary(), pa.large_binary()])
def test_quote_counts_match_arrow(kind):
    lines = pa.array([b'a,"b""c",d', b"", b'"', b"x" * 40, b'""""', b"no quote"] * 7, kind)
    for part in (lines, lines.slice(3, 20), lines.slice(41, 1), lines.slice(5, 0)):
        expected = np.asarray(pc.count_substring(part, '"'))
        assert list(_count_byte(part, b'"')) == list(expected)
