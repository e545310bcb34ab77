"""The data-quality gate: a Great Expectations 1.x suite run on the parsed rows of a run
before anything is sent.

- :func:`load` reads ``--expectations``: a suite as GX writes it (``suite.to_json_dict()``)
  or a short YAML/JSON list of ``{expectation, kwargs}``; every entry is built by GX itself,
  and the first bad one is a usage error (exit 2) naming it.
- :func:`validate` runs the suite with GX's Spark data source over every parsed row the
  run will send (one pass: GX persists the frame and computes its metrics from the cache),
  and writes a Data Docs site under the run's directory.
- :class:`RowChecks` is what ``--quality-gate quarantine`` needs on the executors: the
  row-level expectations as Arrow predicates, so that a row failing one is quarantined with
  that expectation as its reason. GX's own unexpected counts are compared with them.

GX is imported only here, and only when a suite is given (it takes ~3 s to import).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kappa_ingest.config import IngestConfig
from kappa_ingest.errors import QualityGateFailed, UsageError
from kappa_ingest.s3.directory import Directory
from kappa_ingest.source.dataframe import Source
from kappa_ingest.source.parsing import Wrapping
from kappa_ingest.source.splits import Unit
from kappa_ingest.source.typed import materialized
from kappa_ingest.spark.job_groups import side_jobs

# Row-level expectations a row can fail on its own, as predicates over one column: what
# ``--quality-gate quarantine`` can take rows out for. Other map expectations (uniqueness
# compares rows with each other) and every table-level one gate the run as a whole.
ROW_LEVEL = {
    "expect_column_values_to_not_be_null",
    "expect_column_values_to_be_null",
    "expect_column_values_to_be_in_set",
    "expect_column_values_to_not_be_in_set",
    "expect_column_values_to_match_regex",
    "expect_column_values_to_not_match_regex",
    "expect_column_values_to_be_between",
    "expect_column_value_lengths_to_be_between",
    "expect_column_value_lengths_to_equal",
}
# No example values: GX fetches them with one more pass per row-level expectation
# (a failure's observed value is its count of unexpected rows instead).
PARTIAL_UNEXPECTED = 0


@dataclass(frozen=True)
class Expectation:
    type: str
    kwargs: dict[str, Any]

    @property
    def row_level(self) -> bool:
        return self.type in ROW_LEVEL

    def label(self) -> str:
        column = self.kwargs.get("column")
        return f"{self.type}({column})" if column else self.type


@dataclass(frozen=True)
class Suite:
    name: str
    expectations: tuple[Expectation, ...]
    path: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "expectations": [{"type": e.type, "kwargs": e.kwargs} for e in self.expectations]}

    def columns(self, every: list[str]) -> list[str]:
        """The columns the suite reads (all of them if one of its expectations is about
        the table's columns): GX is given only those, so the cached rows stay small."""
        named: set[str] = set()
        for e in self.expectations:
            if "table_column" in e.type or e.type == "expect_column_to_exist":
                return every
            for key in ("column", "column_A", "column_B"):
                if isinstance(e.kwargs.get(key), str):
                    named.add(e.kwargs[key])
            for key in ("column_list", "column_set"):
                named.update(c for c in e.kwargs.get(key) or () if isinstance(c, str))
        return [c for c in every if c in named] or every[:1]


def load(path: str) -> Suite:
    """The suite in ``path``, each expectation checked by GX (unknown type, missing or bad
    kwargs: UsageError naming it)."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--expectations {path}: no such file")
    try:
        data = yaml.safe_load(p.read_text())  # JSON is YAML
    except yaml.YAMLError as e:
        raise UsageError(f"--expectations {path}: neither JSON nor YAML ({str(e).splitlines()[0]})") from e
    name = p.stem
    if isinstance(data, dict):
        name = str(data.get("name") or name)
        data = data.get("expectations")
    if not isinstance(data, list) or not data:
        raise UsageError(
            f"--expectations {path}: expected a GX suite (its JSON, with an 'expectations' list)"
            " or a list of {expectation, kwargs}"
        )
    out = tuple(_expectation(entry, i, path) for i, entry in enumerate(data))
    _quiet()
    for i, e in enumerate(out):
        _gx_expectation(e, i, path)  # GX's own check of the type and its kwargs
    return Suite(name, out, str(p))


def _expectation(entry: Any, i: int, path: str) -> Expectation:
    if not isinstance(entry, dict):
        raise UsageError(f"--expectations {path}: expectation #{i + 1} is not a mapping: {entry!r}"[:300])
    kind = entry.get("expectation") or entry.get("type") or entry.get("expectation_type")
    if not isinstance(kind, str) or not kind:
        raise UsageError(f"--expectations {path}: expectation #{i + 1} names no type ('expectation' or 'type')")
    kwargs = entry.get("kwargs", {})
    if not isinstance(kwargs, dict):
        raise UsageError(f"--expectations {path}: expectation #{i + 1} ({kind}): kwargs must be a mapping")
    if kind.endswith("match_regex") and isinstance(kwargs.get("regex"), str):
        import re

        try:
            re.compile(kwargs["regex"])
        except re.error as e:  # GX would find out only in Spark's tasks, three times over
            raise UsageError(f"--expectations {path}: expectation #{i + 1} ({kind}): bad regex ({e})") from e
    return Expectation(kind, dict(kwargs))


def _gx_expectation(e: Expectation, i: int, path: str, idx: int | None = None) -> Any:
    from great_expectations.compatibility import pydantic
    from great_expectations.exceptions import ExpectationNotFoundError, InvalidExpectationConfigurationError
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    where = f"--expectations {path}: expectation #{i + 1} ({e.type})"
    try:
        return ExpectationConfiguration(type=e.type, kwargs=e.kwargs, meta={"idx": i}).to_domain_obj()
    except ExpectationNotFoundError as err:
        raise UsageError(f"{where}: no such expectation in Great Expectations") from err
    except pydantic.ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in err.errors())
        raise UsageError(f"{where}: bad kwargs ({problems})") from err
    except (InvalidExpectationConfigurationError, TypeError, ValueError) as err:
        raise UsageError(f"{where}: {str(err).splitlines()[0][:200]}") from err


def _quiet() -> None:
    """GX logs through the root logger and warns; a CLI's output is its own."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    gx_log = logging.getLogger("great_expectations")
    if not gx_log.handlers:
        gx_log.addHandler(logging.NullHandler())
    gx_log.propagate = False
    warnings.filterwarnings("ignore", module=r"great_expectations(\.|$)")


# -- validation, on the driver ------------------------------------------------------------


@dataclass
class Outcome:
    """The suite's verdict on a run's rows."""

    suite: Suite
    gate: str
    results: list[dict[str, Any]]  # per expectation, in the suite's order
    docs: str | None = None  # the Data Docs page of this validation
    seconds: float = 0.0

    @property
    def success(self) -> bool:
        return all(r["success"] for r in self.results)

    def gating_failures(self) -> list[dict[str, Any]]:
        """The failed expectations that stop the run under this gate."""
        if self.gate == "warn":
            return []
        return [r for r in self.results if not r["success"] and not (self.gate == "quarantine" and r["quarantines"])]

    def to_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite.name,
            "file": self.suite.path,
            "gate": self.gate,
            "success": self.success,
            "seconds": round(self.seconds, 3),
            "data_docs": self.docs,
            "expectations": self.results,
        }


def failure_line(r: dict[str, Any]) -> str:
    """One line per failed expectation, with what GX observed."""
    return f"expectation {r['label']} failed: observed {r['observed']}"


def validate(df: Any, suite: Suite, gate: str, docs_dir: str) -> Outcome:
    """Run ``suite`` on ``df`` (every row) with GX's Spark data source; a Data Docs site
    is written to ``docs_dir``."""
    import time

    _quiet()
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    t0 = time.monotonic()
    site = {
        "class_name": "SiteBuilder",
        "show_how_to_buttons": False,
        "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": os.path.abspath(docs_dir)},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
    }
    context = gx.get_context(
        mode="ephemeral",
        project_config=DataContextConfig(
            store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
            data_docs_sites={"run": site},
            progress_bars=ProgressBarsConfig(globally=False),
            analytics_enabled=False,
        ),
    )
    # persist: GX caches the rows once and computes every metric from the cache.
    batch = (
        context.data_sources.add_spark("rows", persist=True)
        .add_dataframe_asset("parsed_rows")
        .add_batch_definition_whole_dataframe("all")
    )
    gx_suite = context.suites.add(
        gx.ExpectationSuite(
            name=suite.name, expectations=[_gx_expectation(e, i, suite.path) for i, e in enumerate(suite.expectations)]
        )
    )
    definition = context.validation_definitions.add(gx.ValidationDefinition(name="run", data=batch, suite=gx_suite))
    checkpoint = context.checkpoints.add(
        gx.Checkpoint(
            name="gate",
            validation_definitions=[definition],
            actions=[gx.checkpoint.UpdateDataDocsAction(name="docs", site_names=["run"])],
            result_format={"result_format": "BASIC", "partial_unexpected_count": PARTIAL_UNEXPECTED},
        )
    )
    try:
        result = checkpoint.run(batch_parameters={"dataframe": df})
    finally:
        df.unpersist()
    [validation] = result.run_results.values()
    by_index = {r.expectation_config.meta.get("idx"): r for r in validation.results}
    results = [_result(i, e, by_index.get(i), gate) for i, e in enumerate(suite.expectations)]
    pages = sorted(Path(docs_dir).glob("validations/**/*.html"))
    docs = str(pages[-1]) if pages else None
    return Outcome(suite, gate, results, docs, time.monotonic() - t0)


def _result(i: int, e: Expectation, r: Any, gate: str) -> dict[str, Any]:
    out: dict[str, Any] = r.result if r is not None and r.result else {}
    errors = _errors(r)
    success = bool(r is not None and r.success and not errors)
    if errors:
        observed: Any = f"error: {errors[0]}"
    elif "unexpected_count" in out:
        examples = out.get("partial_unexpected_list") or []
        observed = f"{out['unexpected_count']:,} of {out.get('element_count', 0):,} rows unexpected" + (
            f", e.g. {', '.join(repr(v) for v in examples)}" if examples else ""
        )
    else:
        observed = out.get("observed_value")
    return {
        "index": i,
        "type": e.type,
        "kwargs": e.kwargs,
        "label": e.label(),
        "success": success,
        "observed": observed if isinstance(observed, (str, int, float, bool, type(None))) else str(observed),
        "unexpected_count": out.get("unexpected_count"),
        "element_count": out.get("element_count"),
        "row_level": e.row_level,
        "quarantines": gate == "quarantine" and e.row_level and not errors,
    }


def _errors(r: Any) -> list[str]:
    info = (r.exception_info or {}) if r is not None else {}
    if "raised_exception" in info:
        return [str(info.get("exception_message"))] if info.get("raised_exception") else []
    return [
        str(v.get("exception_message")).splitlines()[0][:200]
        for v in info.values()
        if isinstance(v, dict) and v.get("raised_exception")
    ]


# -- row checks, on the executors ---------------------------------------------------------


@dataclass(frozen=True)
class RowChecks:
    """The row-level expectations ``--quality-gate quarantine`` takes rows out for."""

    expectations: tuple[tuple[int, Expectation], ...] = ()  # (index in the suite, expectation)

    @classmethod
    def of(cls, suite: Suite) -> RowChecks:
        return cls(tuple((i, e) for i, e in enumerate(suite.expectations) if e.row_level))

    def failing(self, rows: pa.RecordBatch) -> Iterator[tuple[str, str, np.ndarray]]:
        """``(index in the suite, reason, mask)`` per expectation: the rows that fail it."""
        for i, e in self.expectations:
            yield str(i), f"failed expectation {e.label()}", fails(e, rows)


def fails(e: Expectation, rows: pa.RecordBatch) -> np.ndarray:
    """Which rows fail ``e``, as GX counts them: a null fails only the null expectations
    (GX leaves nulls out of the others); a column the row's file lacks is null."""
    k = e.kwargs
    name = k["column"]
    n = rows.num_rows
    col = rows.column(name) if name in rows.schema.names else pa.nulls(n, pa.string())
    valid = np.asarray(pc.is_valid(col))
    if e.type == "expect_column_values_to_not_be_null":
        return ~valid
    if e.type == "expect_column_values_to_be_null":
        return valid
    if e.type in ("expect_column_values_to_be_in_set", "expect_column_values_to_not_be_in_set"):
        inside = _bools(pc.is_in(col, value_set=_value_set(k["value_set"], col.type)))
        return valid & (inside if e.type == "expect_column_values_to_not_be_in_set" else ~inside)
    if e.type in ("expect_column_values_to_match_regex", "expect_column_values_to_not_match_regex"):
        text = col if pa.types.is_string(col.type) else col.cast(pa.string())
        found = _bools(pc.match_substring_regex(text, k["regex"]))
        return valid & (found if "not_match" in e.type else ~found)
    if e.type == "expect_column_values_to_be_between":
        return valid & ~_between(col, k.get("min_value"), k.get("max_value"), k.get("strict_min"), k.get("strict_max"))
    if e.type in ("expect_column_value_lengths_to_be_between", "expect_column_value_lengths_to_equal"):
        text = col if pa.types.is_string(col.type) else col.cast(pa.string())
        lengths = pc.utf8_length(text)
        if e.type.endswith("to_equal"):
            return valid & ~_bools(pc.equal(lengths, k["value"]))
        return valid & ~_between(
            lengths, k.get("min_value"), k.get("max_value"), k.get("strict_min"), k.get("strict_max")
        )
    raise ValueError(f"{e.type} is not a row-level expectation")


def _bools(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.fill_null(False), dtype=bool)


def _value_set(values: list[Any], kind: pa.DataType) -> pa.Array:
    try:
        return pa.array(values).cast(kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return pa.array([str(v) for v in values], pa.string()).cast(kind, safe=False)


def _between(col: pa.Array, low: Any, high: Any, strict_low: Any, strict_high: Any) -> np.ndarray:
    ok = np.ones(len(col), dtype=bool)
    if low is not None:
        ok &= _bools((pc.greater if strict_low else pc.greater_equal)(col, pa.scalar(low).cast(col.type)))
    if high is not None:
        ok &= _bools((pc.less if strict_high else pc.less_equal)(col, pa.scalar(high).cast(col.type)))
    return ok


@dataclass
class Checked(Wrapping):
    """A parser whose clean rows also pass the row checks: a row failing one is moved to
    the rejects, its reason the first expectation it fails; each expectation's failures
    are counted (``Parsed.failed``) to be compared with GX's unexpected counts."""

    inner: Any  # a kappa_ingest.source.parsing.BatchParser
    checks: RowChecks

    def fresh(self) -> Checked:
        return Checked(self.inner.fresh(), self.checks)

    def __call__(self, batch: pa.RecordBatch) -> Any:
        from kappa_ingest.source.parsing import move_to_rejects

        parsed = self.inner(batch)
        rows = materialized(parsed.rows)
        first = np.full(rows.num_rows, -1)
        failed, why = {}, []
        for j, (index, reason, mask) in enumerate(self.checks.failing(rows)):
            failed[index] = int(mask.sum())
            why.append(reason)
            first[(first < 0) & mask] = j
        parsed.failed = failed
        bad = first >= 0
        if not bad.any():
            return parsed
        return move_to_rejects(parsed, batch, bad, [why[j] for j in first[bad]])


def parsed_frame(source: Any, suite: Suite, skip: frozenset = frozenset()) -> Any:
    """Every row the run will parse clean (units in ``skip`` left out), parsed by the run's
    own parser, as a DataFrame of the columns the suite reads (a column a file lacks is
    null in its rows): what GX validates."""
    from pyspark.sql.types import StringType, StructField, StructType

    from kappa_ingest.source.task_input import parsed_units

    every: list[str] = []
    for h in source.headers:
        every += [c for c in h.columns if c not in every]
    columns = suite.columns(every)
    from pyspark.sql.pandas.types import to_arrow_type

    schema = StructType([StructField(c, source.types.get(c, StringType())) for c in columns])
    arrow_types = {f.name: to_arrow_type(f.dataType) for f in schema.fields}
    parser, parts, ordered = source.parser, source.plan.parts, source.ordered

    def rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for parsed in parsed_units(batches, parser, parts, skip, ordered):
            out = materialized(parsed.rows)
            n = out.num_rows
            if n:
                names = out.schema.names
                yield pa.RecordBatch.from_arrays(
                    [out.column(c) if c in names else pa.nulls(n, arrow_types[c]) for c in columns], names=columns
                )

    return source.df.mapInArrow(rows, schema)


def _validate_into(docs: Directory, frame: Any, suite: Suite, gate: str) -> Outcome:
    """``validate``, its Data Docs in ``docs``: GX writes local files, so a store's are built
    in a temporary directory and copied in."""
    if not docs.in_store:
        return validate(frame, suite, gate, docs.root)
    with tempfile.TemporaryDirectory(prefix="kappa-data-docs-") as tmp:
        outcome = validate(frame, suite, gate, tmp)
        docs.put_tree(Path(tmp))
    page = docs.join(*Path(outcome.docs).relative_to(tmp).parts) if outcome.docs else None
    return replace(outcome, docs=page)


@dataclass(frozen=True)
class Gated:
    """The gate's verdict on a run's rows: the source to send (in quarantine mode its parser
    taking out the rows failing row-level expectations), the suite's outcome, and the
    failure that stops the run, if one does."""

    source: Source
    outcome: Outcome
    failure: QualityGateFailed | None = None


def gate(cfg: IngestConfig, source: Source, skip: frozenset[Unit], run_dir: Directory, echo: bool) -> Gated:
    """Validate every row the run will send with the suite, before anything is sent: a
    failure that gates stops the run (exit 5)."""
    suite = load(str(cfg.expectations))
    with side_jobs(cfg, "quality", "data-quality gate"):
        frame = parsed_frame(source, suite, skip)
        outcome = _validate_into(run_dir.sub("data_docs"), frame, suite, str(cfg.quality_gate))
    if echo:
        for r in outcome.results:
            if not r["success"]:
                print(f"  {failure_line(r)}", file=sys.stderr)
    failures = outcome.gating_failures()
    if failures:
        labels = ", ".join(r["label"] for r in failures)
        return Gated(source, outcome, QualityGateFailed(
            f"data-quality gate failed: {len(failures)} of {len(suite.expectations)} expectations of suite"
            f" {suite.name!r} ({labels}); nothing sent"
        ))  # fmt: skip
    if cfg.quality_gate == "quarantine":
        return Gated(replace(source, parser=Checked(source.parser, RowChecks.of(suite))), outcome)
    return Gated(source, outcome)
