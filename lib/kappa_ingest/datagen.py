"""Test data: deterministic CSV files of any size, written chunk by chunk (constant memory).

- ``wide30``: ``id`` + 30 mixed text/number columns, ~243 bytes a row: the classic
  "10 million rows, 2 GB" export. Some text values hold a comma or a quote, so files
  exercise RFC 4180 quoting.
- ``debs2012``: like the DEBS 2012 Grand Challenge manufacturing records that Hesse et al.
  ingest: a 100 Hz timestamp plus 66 numeric and boolean sensor columns.

Values come from numpy's seeded generator and polars writes the CSV, so the same
``--seed`` gives the same bytes at several hundred thousand rows a second.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

import numpy as np
import polars as pl

CHUNK_ROWS = 50_000
WORDS = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
    "Smith, J", 'say "hi"', "Zürich", "naïve café",
]  # fmt: skip

DEBS_NUMERIC = ["mf01", "mf02", "mf03", "pc13", "pc14", "pc15", "pc25", "pc26", "pc27", "res"]
DEBS_FLOATS = [f"pp{i:02d}" for i in range(1, 37)]
DEBS_BOOLS = (
    [f"bm{i:02d}" for i in range(5, 11)] + [f"pc{i:02d}" for i in range(1, 7)] + [f"sw{i:02d}" for i in range(1, 9)]
)
DEBS_START_US = int(datetime(2012, 2, 22, 0, 0, tzinfo=UTC).timestamp() * 1_000_000)


def wide30_chunk(rng: np.random.Generator, first_id: int, n: int) -> pl.DataFrame:
    words = pl.Series(WORDS)
    cols: dict[str, pl.Series | np.ndarray] = {"id": np.arange(first_id, first_id + n, dtype=np.int64)}
    for i in range(1, 31):
        name = f"c{i:02d}"
        kind = i % 3
        if kind == 1:
            cols[name] = words.gather(rng.integers(0, len(WORDS), n)).alias(name)
        elif kind == 2:
            cols[name] = rng.integers(0, 1_000_000, n)
        else:
            cols[name] = np.round(rng.uniform(-10_000, 10_000, n), 2)
    return pl.DataFrame(cols)


def debs2012_chunk(rng: np.random.Generator, first_id: int, n: int) -> pl.DataFrame:
    idx = np.arange(first_id, first_id + n, dtype=np.int64)
    ts = pl.Series("ts", DEBS_START_US + idx * 10_000).cast(pl.Datetime("us", "UTC"))
    cols: dict[str, pl.Series | np.ndarray] = {"ts": ts.dt.to_string("%Y-%m-%dT%H:%M:%S%.3fZ")}
    for name in DEBS_NUMERIC:
        cols[name] = rng.integers(0, 10_000, n)
    for name in DEBS_FLOATS:
        cols[name] = np.round(rng.normal(50, 15, n), 3)
    for name in DEBS_BOOLS:
        cols[name] = rng.random(n) < 0.5
    return pl.DataFrame(cols)


def schema(layout: str) -> str:
    """A layout's every column with its type, in order, as a Spark DDL schema (text is STRING)."""
    if layout == "wide30":
        kinds = {1: "STRING", 2: "INT", 0: "DOUBLE"}
        return ", ".join(["id BIGINT", *(f"c{i:02d} {kinds[i % 3]}" for i in range(1, 31))])
    return ", ".join(["ts TIMESTAMP", *(f"{c} INT" for c in DEBS_NUMERIC), *(f"{c} DOUBLE" for c in DEBS_FLOATS),
                      *(f"{c} BOOLEAN" for c in DEBS_BOOLS)])  # fmt: skip


LAYOUTS: dict[str, Callable[[np.random.Generator, int, int], pl.DataFrame]] = {
    "wide30": wide30_chunk,
    "debs2012": debs2012_chunk,
}


def generate(layout: str, rows: int, out: str | Path, gzip_output: bool = False, seed: int = 42) -> Path:
    """Write ``rows`` rows of ``layout`` to ``out`` (``.gz`` appended with ``gzip_output``)."""
    make = LAYOUTS[layout]
    path = Path(out)
    if gzip_output and path.suffix != ".gz":
        path = path.with_name(path.name + ".gz")
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    raw: BinaryIO = gzip.open(path, "wb", compresslevel=1) if gzip_output else open(path, "wb")  # type: ignore[assignment]
    with raw:
        done = 0
        while done < rows or done == 0:
            n = min(CHUNK_ROWS, rows - done)
            make(rng, done, n).write_csv(raw, include_header=done == 0)
            done += n
            if rows == 0:
                break
    return path
