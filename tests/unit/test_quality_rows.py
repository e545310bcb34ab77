"""The row-level expectations as Arrow predicates: which rows fail each, as GX counts them
(a null fails only the null expectations; a column a file lacks is null)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kappa_ingest.quality import Expectation, fails

ROWS = pa.RecordBatch.from_pydict({"s": ["new", "lost", None, "paid"], "n": [1.0, 5.0, None, 12.5]})


@pytest.mark.parametrize(
    ("kind", "kwargs", "failing"),
    [
        ("expect_column_values_to_not_be_null", {"column": "s"}, [2]),
        ("expect_column_values_to_be_null", {"column": "s"}, [0, 1, 3]),
        ("expect_column_values_to_be_in_set", {"column": "s", "value_set": ["new", "paid"]}, [1]),
        ("expect_column_values_to_not_be_in_set", {"column": "s", "value_set": ["lost"]}, [1]),
        ("expect_column_values_to_match_regex", {"column": "s", "regex": "^[np]"}, [1]),
        ("expect_column_values_to_not_match_regex", {"column": "s", "regex": "a"}, [3]),
        ("expect_column_values_to_be_between", {"column": "n", "min_value": 1, "max_value": 10}, [3]),
        ("expect_column_values_to_be_between", {"column": "n", "min_value": 1, "strict_min": True}, [0]),
        ("expect_column_value_lengths_to_be_between", {"column": "s", "min_value": 4}, [0]),
        ("expect_column_value_lengths_to_equal", {"column": "s", "value": 4}, [0]),
        ("expect_column_values_to_not_be_null", {"column": "missing"}, [0, 1, 2, 3]),
    ],
)
def test_rows_failing_each_row_level_expectation(kind, kwargs, failing):
    assert list(fails(Expectation(kind, kwargs), ROWS).nonzero()[0]) == failing
