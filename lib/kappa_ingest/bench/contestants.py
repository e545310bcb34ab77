"""The contestants of ``make bench``: how each is started, and where its ingest time comes
from. Every contestant is a separate command, so its CPU and memory can be measured."""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kappa_ingest import datagen
from kappa_ingest.bench import store as bench_store
from kappa_ingest.bench.monitor import Usage

# The best settings found for Kafka's own producer on this broker (docs/performance.md).
CEILING_PROPS = ["acks=all", "batch.size=1048576", "linger.ms=20", "compression.type=lz4", "buffer.memory=134217728"]


@dataclass(frozen=True)
class Context:
    """What every contestant of one layout shares."""

    input: Path
    rows: int
    bootstrap_servers: str
    payload_file: Path  # sample JSON records of this input, one per line, for the ceiling
    workdir: Path
    classic_rows: int
    partitions: int
    kafka_jars: Path
    small_input: Path  # the first classic_rows rows of the layout, for the slow baselines
    secure: Any = None  # the SASL_SSL broker (a LocalKafka) of the contestants that need one
    layout: str = ""
    latin1_input: Path | None = None  # the input in ISO-8859-1, for the encoding's contestants
    baseline_lib: Path | None = None  # lib/ of the commit --baseline names, for the regression check
    store: Any = None  # the local S3 server (a LocalS3) holding a copy of the input, for the contestants that read it


@dataclass(frozen=True)
class Timing:
    rows: int  # rows the contestant sent (the broker's count is checked separately)
    ingest_s: float
    startup_s: float
    phases: dict[str, float] | None = None  # kappa-ingest's summary's split of its command's time


@dataclass(frozen=True)
class Contestant:
    name: str
    kind: str  # "ceiling" | "peer" | "baseline" | "kappa-ingest"
    command: Callable[[Context, str], list[str]]
    timing: Callable[[Usage, Context, str], Timing]
    available: Callable[[], str | None] = lambda: None  # a reason to skip, or None
    layouts: tuple[str, ...] = ()  # only these input layouts (default: every one)
    versus: str | None = None  # the contestant it is the same run as, but for one option: its cost
    same_work: str | None = None  # the plain Spark contestant doing what its option does

    slow: bool = False  # a baseline run on classic_rows rows only (its rate is flat in size)
    secure: bool = False  # sends to the SASL_SSL broker (SCRAM-SHA-512 over TLS) instead of the plaintext one
    store: bool = False  # reads the input's copy in the local S3 server instead of the local file

    def expected_rows(self, ctx: Context) -> int:
        return min(ctx.rows, ctx.classic_rows) if self.slow else ctx.rows


def _json_line(usage: Usage) -> dict:
    for line in reversed(usage.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no timing line in output: {usage.stdout[-300:]} {usage.stderr[-300:]}")


# -- Kafka's own producer, fed our records -------------------------------------------------


def _ceiling_cmd(ctx: Context, topic: str) -> list[str]:
    java = shutil.which("java") or "java"
    return [
        java, "-Xmx1g", "-cp", f"{ctx.kafka_jars}/*",
        "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(ctx.rows),
        "--payload-file", str(ctx.payload_file), "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={ctx.bootstrap_servers}", *CEILING_PROPS,
    ]  # fmt: skip


_PP_SUMMARY = re.compile(r"(\d+) records sent, ([\d.]+) records/sec")


def _ceiling_timing(usage: Usage, ctx: Context, topic: str) -> Timing:
    found = list(_PP_SUMMARY.finditer(usage.stdout))
    if not found:
        raise RuntimeError(f"ProducerPerformance printed no summary: {usage.stdout[-300:]} {usage.stderr[-300:]}")
    rows, rate = int(found[-1].group(1)), float(found[-1].group(2))
    ingest = rows / rate
    return Timing(rows, ingest, max(0.0, usage.wall_s - ingest))


# -- kcat, raw lines -----------------------------------------------------------------------


def _kcat_cmd(ctx: Context, topic: str) -> list[str]:
    return ["kcat", "-P", "-b", ctx.bootstrap_servers, "-t", topic, "-l", "-z", "lz4",
            "-X", "linger.ms=20", "-X", "batch.size=1048576", "-X", "acks=all", str(ctx.input)]  # fmt: skip


def _kcat_timing(usage: Usage, ctx: Context, topic: str) -> Timing:
    return Timing(ctx.rows + 1, usage.wall_s, 0.0)  # every line, the header too


# -- the classic script and plain Spark ------------------------------------------------------


def _classic_cmd(ctx: Context, topic: str) -> list[str]:
    return [sys.executable, "-m", "kappa_ingest.bench.classic_script", str(ctx.input), topic, ctx.bootstrap_servers,
            str(ctx.classic_rows)]  # fmt: skip


def _plain_spark_cmd(ctx: Context, topic: str) -> list[str]:
    return [sys.executable, "-m", "kappa_ingest.bench.plain_spark", str(ctx.input), topic, ctx.bootstrap_servers,
            f"local[{ctx.partitions}]"]  # fmt: skip


def _plain_spark_doing(path: ReadPath) -> Callable[[Context, str], list[str]]:
    def cmd(ctx: Context, topic: str) -> list[str]:
        base = _plain_spark_cmd(replace(ctx, input=_input(ctx, path)), topic)
        return [*base, *path.plain(ctx)]

    return cmd


def _naive_partitions_cmd(ctx: Context, topic: str) -> list[str]:
    return [sys.executable, "-m", "kappa_ingest.bench.naive_partitions", str(ctx.small_input), topic, ctx.bootstrap_servers,
            f"local[{ctx.partitions}]", str(ctx.partitions)]  # fmt: skip


def _script_timing(usage: Usage, ctx: Context, topic: str) -> Timing:
    t = _json_line(usage)
    return Timing(t["rows"] if t["rows"] is not None else ctx.rows, t["ingest_s"], t["startup_s"])


# -- kappa-ingest, through its normal entry point -------------------------------------------


def _kappa_cmd(
    sink: str,
    delivery: str,
    gate: bool = False,
    extra: tuple[str, ...] = (),
    secure: bool = False,
    path: ReadPath | None = None,
    from_store: bool = False,
) -> Callable[[Context, str], list[str]]:
    def cmd(ctx: Context, topic: str) -> list[str]:
        cli = str(Path(sys.executable).parent / "kappa-ingest")
        quality = ["--expectations", str(_quality_suite(ctx))] if gate else []
        quality += list(extra) + (path.kappa(ctx) if path else [])
        source = str(_input(ctx, path))
        if from_store:
            source = bench_store.uri(ctx.input)
            quality += ["--s3-endpoint", ctx.store.endpoint]
        servers = ctx.secure.bootstrap_servers if secure else ctx.bootstrap_servers
        if secure:  # the admin (super user): the bench measures TLS and SASL, not ACL set-up
            quality += [f"--kafka-opt={k}={v}" for k, v in {
                "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
                "sasl.password": f"@{ctx.secure.secrets_dir / 'admin.password'}", "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(ctx.secure.ca_file)}.items()]  # fmt: skip
        return [cli, "ingest", "--input", source, "--topic", topic, "--sink", sink, "--delivery", delivery,
                "--bootstrap-servers", servers, "--master", f"local[{ctx.partitions}]",
                "--partitions", str(ctx.partitions), "--metrics-dir", str(ctx.workdir / "metrics"),
                "--run-id", f"bench-{topic}", *quality]  # fmt: skip

    return cmd


def _quality_suite(ctx: Context) -> Path:
    """Five expectations on the input's first columns (four row-level, one on the table),
    all of which hold: the gate's cost, not a failure's."""
    import yaml

    with open(ctx.input) as f:
        first, second, third = f.readline().strip().split(",")[:3]
    suite = [
        {"expectation": "expect_column_values_to_not_be_null", "kwargs": {"column": first}},
        {"expectation": "expect_column_values_to_match_regex", "kwargs": {"column": first, "regex": "^\\S+$"}},
        {"expectation": "expect_column_value_lengths_to_be_between",
         "kwargs": {"column": second, "min_value": 1, "max_value": 64}},
        {"expectation": "expect_column_values_to_not_be_null", "kwargs": {"column": third}},
        {"expectation": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1}},
    ]  # fmt: skip
    path = ctx.workdir / "quality-suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    return path


def _kappa(sink: str, delivery: str, gate: bool = False, secure: bool = False, store: bool = False) -> Contestant:
    base = f"kappa-ingest {sink} {delivery}"
    name = (
        base
        + (" with quality gate" if gate else "")
        + (" over SASL_SSL" if secure else "")
        + (" from S3" if store else "")
    )
    return Contestant(name, "kappa-ingest", _kappa_cmd(sink, delivery, gate, secure=secure, from_store=store),
                      _kappa_timing, versus=base if gate or secure or store else None, secure=secure, store=store)  # fmt: skip


@dataclass(frozen=True)
class ReadPath:
    """One way through the job an option sends rows on, and plain Spark doing the same."""

    label: str
    kappa: Callable[[Context], list[str]]
    plain: Callable[[Context], list[str]]
    layouts: tuple[str, ...] = ()
    latin1: bool = False  # reads the ISO-8859-1 copy of the input


def _input(ctx: Context, path: ReadPath | None) -> Path:
    if path is not None and path.latin1:
        assert ctx.latin1_input is not None
        return ctx.latin1_input
    return ctx.input


# The DEBS 2012 layout's event time, and a key (a sensor reading with 10,000 values);
# wide30 has no time column.
EVENT_TIME = ["--event-time-column", "ts", "--key-column", "mf01"]
PATHS = [
    ReadPath("typed", lambda ctx: ["--schema", datagen.schema(ctx.layout)],
          lambda ctx: ["--schema", datagen.schema(ctx.layout)]),
    ReadPath("event time and key", lambda ctx: EVENT_TIME, lambda ctx: ["--event-time", "ts", "--key", "mf01"],
          layouts=("debs2012",)),
    ReadPath("ordered by event time", lambda ctx: [*EVENT_TIME, "--order-by-event-time"],
          lambda ctx: ["--event-time", "ts", "--key", "mf01", "--ordered"], layouts=("debs2012",)),
    ReadPath("Latin-1", lambda ctx: ["--encoding", "latin-1"], lambda ctx: ["--encoding", "iso-8859-1"], latin1=True),
    # Records that may span lines: Spark's CSV reader, each file read from its start.
    ReadPath("multiline", lambda ctx: ["--multiline"], lambda ctx: ["--multiline"]),
]  # fmt: skip
PLAIN_LINE_PATH = "kappa-ingest confluent exactly-once"
AT_BASELINE = " at baseline"
BASELINE = f"{PLAIN_LINE_PATH}{AT_BASELINE}"


def _paths() -> list[Contestant]:
    """Each path's kappa-ingest run (against the plain line path: the option's cost) and
    plain Spark doing the same work, on the same input; and the path as the --baseline
    commit has it (a change to one path measured against that path, in the same run)."""
    out = []
    for path in PATHS:
        plain = f"plain Spark {path.label}"
        name = f"{PLAIN_LINE_PATH} {path.label}"
        out.append(Contestant(plain, "baseline", _plain_spark_doing(path), _script_timing, layouts=path.layouts))
        out.append(Contestant(name, "kappa-ingest", _kappa_cmd("confluent", "exactly-once", path=path), _kappa_timing,
                              layouts=path.layouts, versus=PLAIN_LINE_PATH, same_work=plain))  # fmt: skip
        out.append(Contestant(name + AT_BASELINE, "kappa-ingest", _baseline_cmd(path), _kappa_timing,
                              layouts=path.layouts))  # fmt: skip
    return out


def _full_jit_cmd(ctx: Context, topic: str) -> list[str]:
    """The plain line path with the driver JVM's optimising compiler (C2) allowed."""
    return ["env", "KAPPA_INGEST_QUICK_JIT=0", *_kappa_cmd("confluent", "exactly-once")(ctx, topic)]


def _baseline_cmd(path: ReadPath | None = None) -> Callable[[Context, str], list[str]]:
    """The plain line path (or ``path``) as the baseline commit runs it: its package first
    on the path (driver and Python workers alike: Spark hands PYTHONPATH on to its workers)."""

    def cmd(ctx: Context, topic: str) -> list[str]:
        assert ctx.baseline_lib is not None
        today = _kappa_cmd("confluent", "exactly-once", path=path)(ctx, topic)
        boot = (f"import sys; sys.path.insert(0, {str(ctx.baseline_lib)!r}); from kappa_ingest.cli import main;"
                " sys.exit(main())")  # fmt: skip
        return ["env", f"PYTHONPATH={ctx.baseline_lib}", sys.executable, "-c", boot, *today[1:]]

    return cmd


def _kappa_timing(usage: Usage, ctx: Context, topic: str) -> Timing:
    summary = json.loads((ctx.workdir / "metrics" / "runs" / f"bench-{topic}" / "summary.json").read_text())
    if summary["status"] != "succeeded":
        raise RuntimeError(f"kappa-ingest run failed: {summary['error']}")
    return Timing(summary["rows_sent"], summary["ingest_s"], summary["wall_s"] - summary["ingest_s"],
                  summary.get("phases"))  # fmt: skip


def _needs_kcat() -> str | None:
    return None if shutil.which("kcat") else "kcat is not installed (Debian package kcat)"


CONTESTANTS = [
    Contestant("ceiling: ProducerPerformance", "ceiling", _ceiling_cmd, _ceiling_timing),
    Contestant("kcat raw lines", "peer", _kcat_cmd, _kcat_timing, _needs_kcat),
    Contestant("classic script", "baseline", _classic_cmd, _script_timing, slow=True),
    Contestant("plain Spark", "baseline", _plain_spark_cmd, _script_timing),
    Contestant("naive kafka-python per partition", "baseline", _naive_partitions_cmd, _script_timing, slow=True),
    # Each sink in each delivery mode it keeps: what exactly-once costs is the pair's ratio.
    _kappa("confluent", "exactly-once"),
    # The data-quality gate (5 expectations) beside the same run without it: its cost.
    _kappa("confluent", "exactly-once", gate=True),
    # SCRAM-SHA-512 over TLS to a broker with an authorizer, beside PLAINTEXT: what security costs.
    _kappa("confluent", "exactly-once", secure=True),
    # The same input read from a local S3 server (S3Proxy) by ranged GETs, beside the local file.
    _kappa("confluent", "exactly-once", store=True),
    # Each option's path (typed, event time and key, ordered, Latin-1) beside plain Spark doing the same.
    *_paths(),
    # The driver JVM with C2 allowed, beside the quick compiler chosen for inputs under 1 GiB.
    Contestant(f"{PLAIN_LINE_PATH} full JIT", "kappa-ingest", _full_jit_cmd, _kappa_timing, versus=PLAIN_LINE_PATH),
    # The same plain line path at an earlier commit (jobs/benchmark.py --baseline REF): a regression check.
    Contestant(BASELINE, "kappa-ingest", _baseline_cmd(), _kappa_timing),
    _kappa("confluent", "at-least-once"),
    _kappa("spark", "at-least-once"),
    _kappa("kafka-python", "exactly-once"),
    _kappa("kafka-python", "at-least-once"),
]
