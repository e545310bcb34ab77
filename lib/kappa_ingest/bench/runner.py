"""One benchmark run: the same inputs, the same local broker, a fresh topic per contestant
and repeat; medians and min–max; ratios to the ceiling and to the classic script.

Writes ``bench-results/<timestamp>/results.json``, ``results.md`` and ``rows_per_s.png``
and prints the table.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import tempfile
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.csv as pcsv

from kappa_ingest import datagen
from kappa_ingest.bench import store as bench_store
from kappa_ingest.bench.broker_clock import BrokerClock
from kappa_ingest.bench.contestants import (
    AT_BASELINE,
    BASELINE,
    CONTESTANTS,
    PATHS,
    PLAIN_LINE_PATH,
    Contestant,
    Context,
)
from kappa_ingest.bench.monitor import BROKER, cpu_seconds, run_measured
from kappa_ingest.kafka import broker as local_kafka
from kappa_ingest.kafka.topics import Admin
from kappa_ingest.report import plots
from kappa_ingest.source.columns import FILE_COL
from kappa_ingest.source.records import RecordSpec, encode_batch, wall_clock_ms

T = TypeVar("T")

PAYLOAD_SAMPLE_ROWS = 10_000


@dataclass
class RunResult:
    layout: str
    row_set: int  # the input's rows (the slow baselines send at most classic_rows of them)
    contestant: str
    kind: str
    repeat: int
    rows: int
    broker_rows: int
    ingest_s: float
    startup_s: float
    wall_s: float  # command to exit: the process started, ran and ended, on the runner's clock
    rows_per_s: float
    mb_per_s: float
    record_bytes: float
    cpu_s: float
    broker_cpu_s: float
    peak_rss_mb: float
    # The sending window on the broker's clock (the topic's offsets, the same for every
    # contestant), its rate, and the CPU each group of processes spent in it, per row.
    broker_window_s: float | None = None
    broker_rows_per_s: float | None = None
    window_cpu_us_per_row: dict[str, float] | None = None
    # The machine's CPU in the same window that none of those processes spent (the bench's
    # own sampling, the kernel, anything else running), and the hypervisor's steal: a run
    # whose rate is off shows here whether it was disturbed from outside.
    window_outside_us_per_row: float | None = None
    window_steal_us_per_row: float | None = None
    phases: dict[str, float] | None = None  # kappa-ingest's own split of its command's time


def payload_file(input_path: Path, out: Path) -> tuple[Path, float]:
    """Our own JSON records for the first rows of ``input_path``, one per line: what Kafka's
    ProducerPerformance sends as the ceiling. Returns the file and the mean record size."""
    table = pcsv.read_csv(
        input_path,
        read_options=pcsv.ReadOptions(block_size=1 << 24),
        convert_options=pcsv.ConvertOptions(column_types=None, strings_can_be_null=True),
    ).slice(0, PAYLOAD_SAMPLE_ROWS)
    table = table.cast(pa.schema([(n, pa.string()) for n in table.column_names]))
    table = table.append_column(FILE_COL, pa.array([f"file:{input_path}"] * table.num_rows))
    enc = encode_batch(table.combine_chunks().to_batches()[0], RecordSpec(tuple(table.column_names[:-1]), "bench"),
                       wall_clock_ms())  # fmt: skip
    values = enc.values.to_pylist()
    out.write_bytes(b"\n".join(values) + b"\n")
    return out, sum(map(len, values)) / len(values)


def _record_bytes(conf: dict[str, Any], topic: str) -> float:
    """Mean key + value size of a few records, read back from the topic."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**conf, "group.id": "bench-sizes", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        msgs = [m for m in c.consume(200, timeout=10) if m.error() is None]
        return sum(len(m.value() or b"") + len(m.key() or b"") for m in msgs) / max(1, len(msgs))
    finally:
        c.close()


def run_contestant(c: Contestant, ctx: Context, layout: str, repeat: int, admin: Admin, broker_pid: int,
                   keep_topic: bool = False) -> RunResult:  # fmt: skip
    # Kafka takes letters, digits, '.', '_' and '-' in a topic's name.
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", c.name.split(":")[0])
    topic = f"bench-{layout}-{ctx.rows}-{name}-{repeat}-{os.getpid()}"
    if c.secure:  # its own broker: the same settings, but SASL_SSL with an authorizer
        admin, broker_pid = Admin(ctx.secure.bootstrap_servers, _secure_settings(ctx.secure)), ctx.secure.brokers[0].pid
    admin.ensure_topic(topic, 2, 1)
    try:
        return _measured(c, ctx, layout, repeat, admin, broker_pid, topic)
    finally:
        # Measured, a run's records go: a bench of both layouts kept 10+ GB of them, and
        # with that much less disk free a run's records timed out (20261128T000837Z).
        if not keep_topic:
            try:
                admin.delete_topic(topic)
            except Exception as e:  # noqa: BLE001 - the run's measurement (or its own failure) stands
                print(f"  bench: topic {topic} not deleted ({e}); its records stay on the broker's disk", flush=True)
        if c.secure:
            admin.close()


def _measured(c: Contestant, ctx: Context, layout: str, repeat: int, admin: Admin, broker_pid: int,
              topic: str) -> RunResult:  # fmt: skip
    before = sum(admin.end_offsets(topic).values())
    broker_before = cpu_seconds(broker_pid)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    if c.store:  # the store's key pair, as a user's shared credentials file holds it
        env.update(
            AWS_SHARED_CREDENTIALS_FILE=str(ctx.store.state_dir / "credentials"), AWS_EC2_METADATA_DISABLED="true"
        )
    clock = BrokerClock(admin, topic, 2).start()
    try:
        usage = run_measured(c.command(ctx, topic), env=env, beside={broker_pid: BROKER})
    finally:
        clock.stop()
    broker_cpu = cpu_seconds(broker_pid) - broker_before
    if usage.returncode != 0:
        raise RuntimeError(f"{c.name} exited {usage.returncode}: {usage.stderr.strip()[-400:]}")
    timing = c.timing(usage, ctx, topic)
    broker_rows = sum(admin.end_offsets(topic).values()) - before
    expected = c.expected_rows(ctx) + (1 if c.kind == "peer" else 0)
    if broker_rows < expected:
        raise RuntimeError(f"{c.name}: the broker holds {broker_rows} new records, expected {expected}")
    size = _record_bytes(admin.conf, topic)
    rate = timing.rows / timing.ingest_s
    result = RunResult(layout, ctx.rows, c.name, c.kind, repeat, timing.rows, broker_rows, round(timing.ingest_s, 3),
                       round(timing.startup_s, 3), round(usage.wall_s, 3), round(rate, 1),
                       round(rate * size / 1e6, 2), round(size, 1), usage.cpu_s, round(broker_cpu, 2),
                       usage.peak_rss_mb, phases=timing.phases)  # fmt: skip
    window = clock.window(before, before + broker_rows)
    if window is not None:
        t0, t1 = window
        result.broker_window_s = round(t1 - t0, 3)
        result.broker_rows_per_s = round(timing.rows / (t1 - t0), 1)
        spent = usage.timeline.between(t0, t1)
        result.window_cpu_us_per_row = {group: round(s * 1e6 / timing.rows, 2) for group, s in spent.items()}
        busy, steal = usage.timeline.machine_between(t0, t1)
        result.window_outside_us_per_row = round(max(0.0, busy - sum(spent.values())) * 1e6 / timing.rows, 2)
        result.window_steal_us_per_row = round(steal * 1e6 / timing.rows, 2)
    return result


def warm_up_broker(ctx: Context, layout: str, admin: Admin, broker_pid: int, kappa: bool = False) -> None:
    """Kafka's own producer sends the input's records once, uncounted, before any contestant:
    a fresh broker's JVM compiles its write path during its first million records (seen:
    ProducerPerformance at 184,000, 276,000 and 335,000 rows/s in three runs in a row), and
    whichever contestant ran first would pay for it. With ``kappa``, the plain line path
    once too: its transactions and batches take the broker through code ProducerPerformance
    does not, and in a bench of four ways of starting the same code the first round's runs
    cost the broker 2.6-4.2 µs a debs2012 row against 1.5-2.0 in the later rounds."""
    warm_ups = [c for c in CONTESTANTS if c.kind == "ceiling" or (kappa and c.name == PLAIN_LINE_PATH)]
    for c in warm_ups:
        if c.available() is None:
            r = run_contestant(c, ctx, layout, -1, admin, broker_pid)
            print(f"  {layout:9} {ctx.rows:>9,} warm-up (not counted): {c.name} {r.rows_per_s:,.0f} rows/s,"
                  f" command to exit {r.wall_s:.1f} s", flush=True)  # fmt: skip


# Long: one pass builds each contestant's row, column by column as the table shows them.
def summarise(results: list[RunResult]) -> list[dict[str, Any]]:
    """Median and min–max per layout, row set and contestant, with ratios to the ceiling,
    the classic script and plain Spark: of rows/s, and of command-to-exit time."""
    groups: dict[tuple[str, int, str], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.layout, r.row_set, r.contestant), []).append(r)
    rows = []
    for (layout, row_set, name), rs in groups.items():
        rates = [r.rows_per_s for r in rs]
        rows.append(
            {
                "layout": layout,
                "row_set": row_set,
                "contestant": name,
                "kind": rs[0].kind,
                "runs": len(rs),
                "rows": rs[0].rows,
                "rows_per_s": statistics.median(rates),
                "rows_per_s_min": min(rates),
                "rows_per_s_max": max(rates),
                "mb_per_s": statistics.median(r.mb_per_s for r in rs),
                "cpu_s": statistics.median(r.cpu_s for r in rs),
                "cpu_us_per_row": round(statistics.median(r.cpu_s / r.rows for r in rs) * 1e6, 2),
                "broker_cpu_s": statistics.median(r.broker_cpu_s for r in rs),
                "peak_rss_mb": max(r.peak_rss_mb for r in rs),
                "startup_s": statistics.median(r.startup_s for r in rs),
                "ingest_s": statistics.median(r.ingest_s for r in rs),
                "command_to_exit_s": statistics.median(r.wall_s for r in rs),
                "command_to_exit_min_s": min(r.wall_s for r in rs),
                "command_to_exit_max_s": max(r.wall_s for r in rs),
                # What the user waits for beyond the sending window: start-up, set-up, the end.
                "fixed_cost_s": round(statistics.median(r.wall_s - r.ingest_s for r in rs), 2),
                **_on_broker_clock(rs),
            }
        )
    for key in {(r["layout"], r["row_set"]) for r in rows}:
        mine = [r for r in rows if (r["layout"], r["row_set"]) == key]
        ceiling = next((r["rows_per_s"] for r in mine if r["kind"] == "ceiling"), None)
        classic = next((r["rows_per_s"] for r in mine if r["contestant"] == "classic script"), None)
        plain = next((r for r in mine if r["contestant"] == "plain Spark"), None)
        by_name = {r["contestant"]: r["rows_per_s"] for r in mine}
        for r in mine:
            # Exactly-once against the same sink's at-least-once: what the guarantee costs.
            alo = by_name.get(r["contestant"].replace("exactly-once", "at-least-once"))
            r["x_at_least_once"] = (
                round(r["rows_per_s"] / alo, 3) if alo and r["contestant"].endswith("exactly-once") else None
            )
            # A run against the same run without its one option: what the option costs.
            versus = next((m for m in mine if m["contestant"] == VERSUS.get(r["contestant"])), None)
            if versus is not None:
                r["versus"] = versus["contestant"]
                r["x_versus"] = round(r["rows_per_s"] / versus["rows_per_s"], 3)
                r["exit_vs_versus"] = round(r["command_to_exit_s"] / versus["command_to_exit_s"], 2)
            # A path against plain Spark doing the same work: rows/s, and command to exit.
            same = next((m for m in mine if m["contestant"] == SAME_WORK.get(r["contestant"])), None)
            if same is not None:
                r["same_work"] = same["contestant"]
                r["x_same_work"] = round(r["rows_per_s"] / same["rows_per_s"], 2)
                r["exit_vs_same_work"] = round(r["command_to_exit_s"] / same["command_to_exit_s"], 2)
            naive = by_name.get(NAIVE_FORM.get(r["contestant"], ""))
            r["x_naive"] = round(r["rows_per_s"] / naive, 2) if naive else None
            r["x_ceiling"] = round(r["rows_per_s"] / ceiling, 3) if ceiling else None
            _beyond_ceiling(r, next((m for m in mine if m["kind"] == "ceiling"), None), results)
            r["x_classic"] = round(r["rows_per_s"] / classic, 2) if classic else None
            r["x_plain_spark"] = round(r["rows_per_s"] / plain["rows_per_s"], 2) if plain else None
            # Command to exit as a share of plain Spark's on the same input (lower is better).
            same_rows = plain is not None and plain["rows"] == r["rows"]
            r["exit_vs_plain_spark"] = (
                round(r["command_to_exit_s"] / plain["command_to_exit_s"], 2) if same_rows else None
            )
    regression(rows, results)
    return sorted(rows, key=lambda r: (r["layout"], r["row_set"]))


def _on_broker_clock(rs: list[RunResult]) -> dict[str, Any]:
    """The runs' median rate and CPU per row by process group in their sending windows, as
    the broker's offsets timed them (runs whose window the readings did not show left out)."""
    timed = [r for r in rs if r.broker_rows_per_s and r.window_cpu_us_per_row is not None]
    if not timed:
        return {"broker_rows_per_s": None, "window_us_per_row": None}
    cpu = [r.window_cpu_us_per_row for r in timed if r.window_cpu_us_per_row is not None]
    per_group = {
        g: round(statistics.median(c.get(g, 0.0) for c in cpu), 2) for g in sorted({g for c in cpu for g in c})
    }
    outside = [r.window_outside_us_per_row for r in timed if r.window_outside_us_per_row is not None]
    steal = [r.window_steal_us_per_row for r in timed if r.window_steal_us_per_row is not None]
    return {"broker_rows_per_s": statistics.median(r.broker_rows_per_s for r in timed if r.broker_rows_per_s),
            "broker_window_s": statistics.median(r.broker_window_s for r in timed if r.broker_window_s),
            "window_us_per_row": {**per_group, "total": round(statistics.median(sum(c.values()) for c in cpu), 2)},
            "window_outside_us_per_row": round(statistics.median(outside), 2) if outside else None,
            "window_steal_us_per_row": round(statistics.median(steal), 2) if steal else None}  # fmt: skip


def _beyond_ceiling(r: dict[str, Any], ceiling: dict[str, Any] | None, results: list[RunResult]) -> None:
    """The contestant's rate over the ceiling's on the broker's clock, and its CPU per row
    beyond the ceiling's, by process group (medians) and in all: the median of each round's
    difference to the ceiling's run of the same round (issue 32's measure). The ceiling's
    own CPU a row moves 4.6-10.5 µs between runs here, and a difference of medians paired
    runs of different rounds: 1.74 µs a wide30 row where each round's gave +0.63
    (bench-results/20261127T213921Z)."""
    mine, theirs = r.get("window_us_per_row"), (ceiling or {}).get("window_us_per_row")
    rate, ceiling_rate = r.get("broker_rows_per_s"), (ceiling or {}).get("broker_rows_per_s")
    r["x_ceiling_broker_clock"] = round(rate / ceiling_rate, 3) if rate and ceiling_rate else None
    if mine is None or theirs is None or r["kind"] == "ceiling":
        r["us_per_row_beyond_ceiling"] = r["us_beyond_ceiling"] = None
        return
    r["us_per_row_beyond_ceiling"] = {g: round(mine.get(g, 0.0) - theirs.get(g, 0.0), 2)
                                      for g in sorted(set(mine) | set(theirs))}  # fmt: skip
    key = (r["layout"], r["row_set"])
    mine_by_round, ceiling_by_round = (
        _per_round(results, key, r["contestant"]),
        _per_round(results, key, ceiling["contestant"]),
    )
    rounds = [
        round(mine_by_round[i] - ceiling_by_round[i], 2) for i in sorted(mine_by_round.keys() & ceiling_by_round.keys())
    ]
    r["us_beyond_ceiling_rounds"] = rounds
    if rounds:
        r["us_per_row_beyond_ceiling"]["total"] = round(statistics.median(rounds), 2)
    r["us_beyond_ceiling"] = r["us_per_row_beyond_ceiling"]["total"]


VERSUS = {c.name: c.versus for c in CONTESTANTS if c.versus}
SAME_WORK = {c.name: c.same_work for c in CONTESTANTS if c.same_work}

# What each non-default sink is measured against (issue: "each at least 2x its naive form").
NAIVE_FORM = {
    "kappa-ingest spark at-least-once": "plain Spark",
    "kappa-ingest kafka-python exactly-once": "naive kafka-python per partition",
    "kappa-ingest kafka-python at-least-once": "naive kafka-python per partition",
}


def markdown(summary: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    head = ("| layout | input rows | contestant | rows sent | rows/s (median) | min–max | MB/s | × ceiling | × classic "
            "| × plain Spark | × naive form | × at-least-once | command to exit s (median, min–max) | sending s "
            "| exit − sending s | exit ÷ plain Spark's | CPU µs/row | broker CPU s | peak RSS MB |")  # fmt: skip
    lines = [f"`{meta['command']}` — {meta['started_at']}, {meta['machine']}", "", head, "|" + " --- |" * 19]
    for r in summary:
        lines.append(
            f"| {r['layout']} | {r['row_set']:,} | {r['contestant']} | {r['rows']:,} | {r['rows_per_s']:,.0f} | "
            f"{r['rows_per_s_min']:,.0f}–{r['rows_per_s_max']:,.0f} | {r['mb_per_s']:.1f} | {_x(r['x_ceiling'])} | "
            f"{_x(r['x_classic'])} | {_x(r['x_plain_spark'])} | {_x(r.get('x_naive'))} | {_x(r.get('x_at_least_once'))} | "
            f"{r['command_to_exit_s']:.1f} ({r['command_to_exit_min_s']:.1f}–{r['command_to_exit_max_s']:.1f}) | "
            f"{r['ingest_s']:.2f} | {r['fixed_cost_s']:.1f} | {_x(r.get('exit_vs_plain_spark'))} | "
            f"{r['cpu_us_per_row']} | {r['broker_cpu_s']:.1f} | {r['peak_rss_mb']:,.0f} |"
        )
    lines += _cpu_markdown(summary)
    skipped = meta.get("skipped") or {}
    lines += [""] + [f"- skipped {name}: {why}" for name, why in skipped.items()]
    exits = {(r["layout"], r["row_set"], r["contestant"]): r["command_to_exit_s"] for r in summary}
    lines += [
        f"- {r['layout']} {r['row_set']:,}: {r['contestant']}: {r['x_versus']:.2f}x the rows/s of {r['versus']};"
        f" command to exit {r['command_to_exit_s']:.1f} s against {exits[(r['layout'], r['row_set'], r['versus'])]:.1f} s"
        for r in summary
        if r.get("x_versus") is not None
    ]
    lines += [
        f"- {r['layout']} {r['row_set']:,}: {r['contestant']}: {r['x_same_work']:.2f}x the rows/s of"
        f" {r['same_work']}; command to exit {r['exit_vs_same_work']:.2f}x its"
        for r in summary
        if r.get("x_same_work") is not None
    ]
    lines += targets_markdown(checks(summary))
    return "\n".join(lines) + "\n"


def _cpu_markdown(summary: list[dict[str, Any]]) -> list[str]:
    """CPU per row in the sending window on the broker's clock, by process group, and what
    each contestant spends beyond the ceiling in each."""
    timed = [r for r in summary if r.get("window_us_per_row")]
    if not timed:
        return []
    groups = sorted({g for r in timed for g in r["window_us_per_row"] if g != "total"})
    lines = ["", "CPU µs per row in the sending window (the broker's clock: the topic's offsets read every 50 ms;"
             " medians; [beyond the ceiling's: by process, of the medians; in total, the median of each round's"
             " difference to the ceiling's run of the same round]; outside the run: the machine's busy CPU that none of the run's"
             " processes spent, the bench's own sampling included; steal: the hypervisor's)", "",
             "| layout | input rows | contestant | rows/s, broker's clock | × ceiling | " + " | ".join(groups)
             + " | total | outside the run | steal |", "|" + " --- |" * (len(groups) + 8)]  # fmt: skip
    for r in timed:
        beyond = r.get("us_per_row_beyond_ceiling") or {}
        cells = [
            f"{r['window_us_per_row'].get(g, 0.0):.2f}" + (f" [{beyond[g]:+.2f}]" if r["kind"] != "ceiling" and g in beyond else "")
            for g in [*groups, "total"]
        ]  # fmt: skip
        lines.append(f"| {r['layout']} | {r['row_set']:,} | {r['contestant']} | {r['broker_rows_per_s']:,.0f} | "
                     f"{_x(r.get('x_ceiling_broker_clock'))} | " + " | ".join(cells) +
                     f" | {_x(r.get('window_outside_us_per_row'))} | {_x(r.get('window_steal_us_per_row'))} |")  # fmt: skip
    return lines


@dataclass(frozen=True)
class Target:
    """One bar a contestant's measured ratio must clear (issue 19's targets)."""

    contestant: str  # a whole name, or a suffix naming every path contestant ("* typed")
    measure: str  # a key of the summary row
    bound: float
    at_most: bool = False  # a time: lower is better
    layout: str | None = None  # this input layout only

    def check(self, row: dict[str, Any]) -> dict[str, Any] | None:
        value = row.get(self.measure)
        if value is None or (self.layout is not None and row["layout"] != self.layout):
            return None
        met = value <= self.bound if self.at_most else value >= self.bound
        return {"layout": row["layout"], "row_set": row["row_set"], "contestant": row["contestant"],
                "measure": self.measure, "bound": ("≤ " if self.at_most else "≥ ") + f"{self.bound:g}",
                "value": value, "met": met}  # fmt: skip


def _path_targets() -> list[Target]:
    out = []
    for path in PATHS:
        if path.label == "multiline":  # Spark's reader, by design: its cost is shown, not held to a bar
            continue
        name = f"{PLAIN_LINE_PATH} {path.label}"
        out += [Target(name, "x_versus", 0.6 if path.label == "ordered by event time" else 0.8),
                Target(name, "x_same_work", 3.0),
                # Against the same path at the --baseline commit: reported, not a regression that fails the bench.
                Target(name + AT_BASELINE, "x_baseline_cpu", 1.1, at_most=True)]  # fmt: skip
    return out


TARGETS = [
    # The default sink on the plain line path against Kafka's own producer fed the same records.
    Target(PLAIN_LINE_PATH, "x_ceiling", 1.0),
    # Every option's path against the plain line path, and against plain Spark doing the same.
    *_path_targets(),
    # What a user waits for: a typed run against the plain Spark script (all text).
    Target(f"{PLAIN_LINE_PATH} typed", "exit_vs_plain_spark", 1.0, at_most=True),
    # The input read from an object store, against the same file read from local disk.
    Target(f"{PLAIN_LINE_PATH} from S3", "x_versus", 0.9),
    Target(f"{PLAIN_LINE_PATH} from S3", "exit_vs_versus", 1.1, at_most=True),
    # An ordered replay's command to exit against the same files sent unordered.
    Target(f"{PLAIN_LINE_PATH} ordered by event time", "exit_vs_versus", 1.3, at_most=True),
    # No regression: the plain line path against the same path at the baseline commit (--baseline).
    Target(BASELINE, "x_baseline_rate", 1.0),
    Target(BASELINE, "x_baseline_exit", 1.0, at_most=True),
    # Its CPU a row grown by no more than 10% (issue 32): a regression fails the bench.
    Target(BASELINE, "x_baseline_cpu", 1.1, at_most=True),
    # CPU a row beyond the ceiling's, on the broker's clock (issue 32).
    Target(PLAIN_LINE_PATH, "us_beyond_ceiling", 1.2, at_most=True, layout="wide30"),
    Target(PLAIN_LINE_PATH, "us_beyond_ceiling", 1.7, at_most=True, layout="debs2012"),
]
REGRESSIONS = ("x_baseline_cpu",)  # targets whose miss fails the bench, not only reports it


def regressed(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The regression checks this run failed (the plain line path's)."""
    return [c for c in found if c["contestant"] == BASELINE and c["measure"] in REGRESSIONS and not c["met"]]


def regression(summary: list[dict[str, Any]], results: list[RunResult]) -> None:
    """Mark each baseline's row (the plain line path's, or a path's, at the --baseline
    commit) with today's same path against it: today's median rows/s over the baseline's
    slowest run's, and command to exit over its longest (a change inside the spread of the
    baseline's own runs is noise, not a regression); and CPU a row in the sending window,
    all processes, as the median of each round's ratio: the pair ran back to back in every
    round, in turns first (see ``run_bench``), so what drifts between rounds on a shared
    machine falls on both halves of a ratio alike."""
    for base in (r for r in summary if r["contestant"].endswith(AT_BASELINE)):
        key = (base["layout"], base["row_set"])
        today = base["contestant"].removesuffix(AT_BASELINE)
        now = next((r for r in summary if r["contestant"] == today and (r["layout"], r["row_set"]) == key), None)
        if now is None:
            continue
        base["x_baseline_rate"] = round(now["rows_per_s"] / base["rows_per_s_min"], 3)
        base["x_baseline_exit"] = round(now["command_to_exit_s"] / base["command_to_exit_max_s"], 3)
        rounds = _paired_cpu(results, key, today)
        if rounds:
            base["x_baseline_cpu_rounds"] = rounds
            base["x_baseline_cpu"] = round(statistics.median(rounds), 3)


def _paired_cpu(results: list[RunResult], key: tuple[str, int], today: str) -> list[float]:
    """Each round's CPU a row in its window of ``today``'s contestant over its baseline's."""
    mine, theirs = _per_round(results, key, today), _per_round(results, key, today + AT_BASELINE)
    return [round(mine[i] / theirs[i], 3) for i in sorted(mine.keys() & theirs.keys())]


def _per_round(results: list[RunResult], key: tuple[str, int], name: str) -> dict[int, float]:
    """A contestant's CPU a row in its window, all processes, by round."""
    return {r.repeat: sum(r.window_cpu_us_per_row.values()) for r in results
            if (r.layout, r.row_set, r.contestant) == (*key, name) and r.window_cpu_us_per_row}  # fmt: skip


def checks(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every target that this run measured, with its value and whether it holds."""
    out = []
    for t in TARGETS:
        for row in summary:
            if row["contestant"] == t.contestant and (found := t.check(row)) is not None:
                out.append(found)
    return out


def targets_markdown(found: list[dict[str, Any]]) -> list[str]:
    if not found:
        return []
    lines = ["", "| layout | contestant | measure | target | measured | |", "|" + " --- |" * 6]
    lines += [f"| {c['layout']} | {c['contestant']} | {c['measure']} | {c['bound']} | {c['value']:.2f} | "
              f"{'met' if c['met'] else '**not met**'} |" for c in found]  # fmt: skip
    return lines


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _record(metrics_dir: Path, bench_id: str, results: list[RunResult]) -> None:
    """Append the runs to the ``bench`` table of the Delta metrics store."""
    from kappa_ingest.report.store import record_bench

    record_bench(metrics_dir, f"bench-{bench_id}", [asdict(r) for r in results])
    print(f"recorded in {metrics_dir}/delta/bench as run_id bench-{bench_id}")


def _context(
    layout: str,
    rows: int,
    data_dir: Path,
    classic_rows: int,
    partitions: int,
    cluster: local_kafka.LocalKafka,
    tmp: Path,
) -> Context:
    """Inputs of one layout and row set (generated once, kept in ``data_dir``) and what every contestant shares."""
    data = data_dir / f"{layout}-{rows}.csv"
    if not data.exists():
        datagen.generate(layout, rows, data)
    small = data_dir / f"{layout}-{min(rows, classic_rows)}.csv"
    if not small.exists():
        datagen.generate(layout, min(rows, classic_rows), small)
    payload, _ = payload_file(data, tmp / f"{layout}-{rows}-payload.json")
    latin1 = data_dir / f"{layout}-{rows}-latin1.csv"
    if not latin1.exists():
        _transcoded(data, latin1, "iso-8859-1")
    return Context(data, rows, cluster.bootstrap_servers, payload, tmp, min(rows, classic_rows), partitions,
                   local_kafka.jars_dir(), small, layout=layout, latin1_input=latin1)  # fmt: skip


def _transcoded(source: Path, out: Path, encoding: str) -> None:
    """``source`` (UTF-8) written in ``encoding``, a chunk of lines at a time."""
    part = out.with_suffix(".part")
    with open(source, encoding="utf-8", newline="") as f, open(part, "w", encoding=encoding, newline="") as g:
        while chunk := f.readlines(1 << 24):
            g.writelines(chunk)
    part.rename(out)


def round_order(contestants: list[T], repeat: int) -> list[T]:
    """Each round in turn forwards and backwards: no contestant always follows the same one
    (the regression check's pair above all, whose baseline used to run last in every round)."""
    return contestants if repeat % 2 == 0 else contestants[::-1]


def checkout(commit: str, into: Path) -> Path:
    """The package of ``commit`` (its ``lib/``) with the settings it runs with (its
    ``conf/``: the producer's lz4 and linger, Spark's defaults), unpacked from this
    repository with git archive. Without its conf/ the baseline ran on Kafka's defaults, and
    the check compared uncompressed sending with today's lz4: ~1.2 µs a debs2012 row less
    in the Python workers, as much more in the broker (bench-results/20261127T210143Z)."""
    repo = Path(__file__).resolve().parents[3]
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", commit, "lib", "conf"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "lib"


def _secure_settings(cluster: local_kafka.LocalKafka) -> dict[str, str]:
    from kappa_ingest.kafka.security import client_settings

    return {k: v for k, v in client_settings(cluster, "admin").items() if k != "bootstrap.servers"}


def _path_baseline(name: str) -> bool:
    """An option path's run at the --baseline commit (run only where ``--only`` names it whole)."""
    return name != BASELINE and name.endswith(AT_BASELINE)


def _selected(name: str, only: list[str]) -> bool:
    """``--only`` names a contestant exactly, or else by a part of its name (a path's
    baseline only by its whole name: ``--only kappa`` would otherwise run each path twice)."""
    names = {c.name.lower() for c in CONTESTANTS}
    by_part = not _path_baseline(name)
    return any(o.lower() == name.lower() or (by_part and o.lower() not in names and o.lower() in name.lower())
               for o in only)  # fmt: skip


# Long: the bench's order (data, broker, warm-up, rounds, files) is its method; read top to bottom.
def run_bench(
    layouts: list[str],
    row_sets: list[int],
    only: list[str] | None,
    repeats: int,
    out_root: Path,
    data_dir: Path,
    classic_rows: int,
    partitions: int,
    command: str,
    metrics_dir: Path | None = None,
    baseline: str | None = None,
    cluster: local_kafka.LocalKafka | None = None,
    warm_up: bool = True,
    keep_topics: bool = False,
) -> Path:
    """Run every selected contestant ``repeats`` times per layout and row set; returns the
    results directory. ``baseline`` (a git commit) adds that commit's plain line path;
    ``cluster`` is a broker to use (default: one of its own, started and stopped here),
    ``warm_up`` False skips the broker's warm-up, and ``keep_topics`` keeps each run's
    records (the suite's run of the machinery reads them back)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = out_root / stamp
    out.mkdir(parents=True, exist_ok=True)
    # A path's baseline runs where --only names it: with --baseline alone, the plain line path's.
    chosen = [c for c in CONTESTANTS if (_selected(c.name, only) if only else not _path_baseline(c.name))]
    skipped = {c.name: why for c in chosen if (why := c.available())}
    if baseline is None:
        skipped |= {c.name: "no --baseline COMMIT given" for c in chosen if c.name.endswith(AT_BASELINE)}
    chosen = [c for c in chosen if c.name not in skipped]
    results: list[RunResult] = []
    with tempfile.TemporaryDirectory(prefix="kappa-bench-") as tmp:
        own = cluster is None
        if cluster is None:
            cluster = local_kafka.start(Path(tmp) / "kafka", heap="1g")
        secure = store = None
        try:
            if any(c.secure for c in chosen):
                secure = local_kafka.start(Path(tmp) / "kafka-sasl", heap="1g", security="sasl_ssl")
            if any(c.store for c in chosen):
                store = bench_store.start(Path(tmp) / "s3")
            baseline_lib = checkout(baseline, Path(tmp) / "baseline") if baseline else None
            admin = Admin(cluster.bootstrap_servers)
            for layout in layouts:
                for rows in row_sets:
                    ctx = replace(_context(layout, rows, data_dir, classic_rows, partitions, cluster, Path(tmp)),
                                  secure=secure, baseline_lib=baseline_lib, store=store)  # fmt: skip
                    if store is not None:
                        bench_store.put(store, ctx.input)
                    here = [c for c in chosen if not c.layouts or layout in c.layouts]
                    if warm_up:
                        warm_up_broker(
                            ctx,
                            layout,
                            admin,
                            cluster.brokers[0].pid,
                            kappa=any(c.kind == "kappa-ingest" for c in here),
                        )
                    # Round by round, every contestant once per round: what drifts during a
                    # bench (the broker's JIT, the page cache) falls on all of them alike.
                    for repeat in range(repeats):
                        for c in round_order(here, repeat):
                            r = run_contestant(c, ctx, layout, repeat, admin, cluster.brokers[0].pid, keep_topics)
                            print(f"  {layout:9} {rows:>9,} {c.name:33} run {repeat + 1}: {r.rows_per_s:>10,.0f} rows/s,"
                                  f" command to exit {r.wall_s:6.1f} s", flush=True)  # fmt: skip
                            results.append(r)
            admin.close()
        finally:
            if own:
                cluster.stop()
            if secure is not None:
                secure.stop()
            if store is not None:
                store.stop()
    summary = summarise(results)
    meta = {"command": command, "started_at": stamp, "machine": f"{os.cpu_count()} cores", "skipped": skipped,
            "row_sets": row_sets, "classic_rows": classic_rows, "partitions": partitions, "repeats": repeats,
            "baseline": baseline}  # fmt: skip
    found = checks(summary)
    (out / "results.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "targets": found, "runs": [asdict(r) for r in results]}, indent=2)
        + "\n"
    )
    (out / "results.md").write_text(markdown(summary, meta))
    (out / "rows_per_s.png").write_bytes(plots.png(plots.bench_results(summary)))
    if metrics_dir is not None:
        _record(metrics_dir, stamp, results)
    print()
    print(markdown(summary, meta))
    print(f"results: {out}")
    return out
