"""The typed values' rules (kappa_ingest.source.typed), one batch at a time."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from kappa_ingest.errors import UsageError
from kappa_ingest.source.columns import EVENT_TS_COL
from kappa_ingest.source.typed import Typing, chrono_format, convert, materialized


def test_a_field_that_does_not_convert_is_named_with_its_column_and_value():
    rows = pa.RecordBatch.from_pydict({"arr_delay": ["1.5", "NA", "x", None], "n": ["1", "2", "3", "NA"]})
    typed, failures = Typing((("arr_delay", "double"), ("n", "int")), null_values=("NA",)).apply(rows)
    typed = materialized(typed)  # "n" is kept as its text: every field is its JSON literal
    assert typed.column("arr_delay").to_pylist() == [1.5, None, None, None]
    assert typed.column("n").to_pylist() == [1, 2, 3, None]
    [(mask, reasons)] = failures
    assert mask.tolist() == [False, False, True, False] and reasons == ["arr_delay: 'x' is not a DOUBLE"]


def test_without_the_token_na_is_a_value_that_does_not_fit():
    _, [(_, reasons)] = Typing((("arr_delay", "double"),)).apply(pa.RecordBatch.from_pydict({"arr_delay": ["NA"]}))
    assert reasons == ["arr_delay: 'NA' is not a DOUBLE"]


def test_null_tokens_apply_to_text_columns_too():
    typed, failures = Typing(null_values=("\\N", "NULL")).apply(pa.RecordBatch.from_pydict({"t": ["\\N", "NULL", "x"]}))
    assert typed.column("t").to_pylist() == [None, None, "x"] and not failures


def test_decimals_round_half_up_and_keep_their_precision():
    got, failed = convert(pa.array(["1.005", "-2.675", "999.995", "1e1", "1_0", None]), "decimal(5,2)")
    assert got.to_pylist() == [Decimal("1.01"), Decimal("-2.68"), None, Decimal("10.00"), None, None]
    assert failed.tolist() == [False, False, True, False, True, False]


def test_event_time_empty_or_unreadable_is_quarantined_and_the_rest_are_utc():
    rows = pa.RecordBatch.from_pydict({"ts": ["06/05/2020 07:08:09", "", "2020-05-06"]})
    rows = rows.set_column(0, "ts", pa.array(["06/05/2020 07:08:09", None, "2020-05-06"]))
    typed, failures = Typing(event_column="ts", event_format="dd/MM/yyyy HH:mm:ss").apply(rows)
    assert typed.column(EVENT_TS_COL)[0].as_py().isoformat() == "2020-05-06T07:08:09+00:00"
    reasons = {r for _, rs in failures for r in rs}
    assert reasons == {"ts: empty, and it is the event time",
                       "ts: '2020-05-06' is not a timestamp in format 'dd/MM/yyyy HH:mm:ss'"}  # fmt: skip


@pytest.mark.parametrize(
    ("pattern", "chrono"),
    [("yyyy-MM-dd HH:mm:ss", "%Y-%m-%d %H:%M:%S"), ("yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "%Y-%m-%dT%H:%M:%S%.f%:z"),
     ("dd/MMM/yyyy:HH:mm:ss Z", "%d/%b/%Y:%H:%M:%S %z"), ("h:mm a, EEE", "%I:%M %p, %a")],
)  # fmt: skip
def test_spark_patterns_as_chrono_formats(pattern, chrono):
    assert chrono_format(pattern)[0] == chrono


def test_a_pattern_letter_it_cannot_read_and_a_type_it_cannot_write_are_usage_errors():
    with pytest.raises(UsageError, match="'QQ' are not supported"):
        Typing(event_column="ts", event_format="yyyy QQ")
    with pytest.raises(UsageError, match="ARRAY<INT>"):
        Typing((("xs", "array<int>"),))
