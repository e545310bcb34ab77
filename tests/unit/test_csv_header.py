"""The header read by Python, without a Spark job, names columns as Spark's CSV reader does."""

from __future__ import annotations

import gzip

import pytest

from kappa_ingest import config
from kappa_ingest.errors import InputError
from kappa_ingest.source.dataframe import first_line, header_columns

HEADERS = [
    "id,name,amount",
    'id,"a, quoted",name',
    "a,A,b,a",  # case-insensitive duplicates get their index
    "x,,y,",  # empty names become _c<index>
    'p,"q""r",s ',
]


@pytest.mark.parametrize("line", HEADERS)
@pytest.mark.parametrize("header", [True, False])
def test_columns_are_sparks(spark, tmp_path, line, header):
    path = tmp_path / "h.csv"
    path.write_text(line + "\n1,2,3,4\n")
    cfg = config.validate({"inputs": [str(path)], "topic": "t", "header": header})
    spark_names = spark.read.options(header=str(header).lower(), escape='"').csv(str(path)).columns
    assert header_columns(first_line(str(path)), cfg) == spark_names


def test_first_line_strips_bom_and_line_ends(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"\xef\xbb\xbfid,name\r\n1,x\r\n")
    assert first_line(str(tmp_path / "a.csv")) == "id,name"
    with gzip.open(tmp_path / "b.csv.gz", "wb") as f:
        f.write(b"id,name\n1,x\n")
    assert first_line(str(tmp_path / "b.csv.gz")) == "id,name"
    (tmp_path / "c.csv").write_bytes(b"id,name")  # no line end at all
    assert first_line(str(tmp_path / "c.csv")) == "id,name"
    assert first_line("hdfs://nn/x.csv") is None  # Spark reads remote headers


def test_an_empty_file_is_an_input_error(tmp_path):
    (tmp_path / "e.csv").write_bytes(b"")
    with pytest.raises(InputError, match="empty file"):
        first_line(str(tmp_path / "e.csv"))
