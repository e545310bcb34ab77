"""``make links``: kappa-ingest and plain Spark over the links a real network has.

One broker on a lab host of its own, reached through its delaying proxy, the job run from
the lab's driver host (:mod:`kappa_ingest.lab`): first unshaped (the proxy adds nothing, no
rate limit), then at each round trip over a link shaped to a rate (``tbf``). Each run is
put beside the same contestant unshaped, and beside the link's capacity in records/s (its
rate over the bytes a record takes on the wire, read from the broker's log). Then, as a
user meets it: the link cut mid-run for less than ``delivery.timeout.ms`` (absorbed), and
for longer (exit 4, completed by ``--resume``), each checked row by row against the input.
And the input read from an object store on a host of its own (S3Proxy behind its delaying
proxy), near and ``STORE_RTTS_MS`` away, the broker's link unshaped.

    .venv/bin/kappa-ingest bench --links [--rows 1000000] [--rtt-ms 2 --rtt-ms 20 --rtt-ms 100]

Needs root (network namespaces). Writes ``bench-results/links-<timestamp>/runs.jsonl`` as
it goes, then ``results.json`` and ``results.md``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from kappa_ingest import datagen
from kappa_ingest.bench import store as bench_store
from kappa_ingest.bench.monitor import BROKER as BROKER_GROUP
from kappa_ingest.bench.monitor import (
    DRIVER_PYTHON,
    EXECUTOR_JVM,
    LIBRDKAFKA,
    OTHER,
    PYTHON_WORKERS,
    SPARK_JVM,
    Usage,
    run_measured,
)
from kappa_ingest.bench.soak import input_hashes, topic_hashes
from kappa_ingest.kafka.topics import Admin
from kappa_ingest.lab import hosts
from kappa_ingest.lab.hosts import DRIVER, Lab
from kappa_ingest.s3.server import LocalS3

RTTS_MS = (2.0, 20.0, 100.0)
RATE = "1gbit"
RATE_BITS = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}
BROKER = "b1"
DEFAULT = "kappa-ingest (default: confluent, exactly-once)"
AT_LEAST_ONCE = "kappa-ingest confluent at-least-once"
TUNED = "kappa-ingest exactly-once, a topic of 8 partitions"
PLAIN_SPARK = "plain Spark"
# librdkafka's idempotent producer sends a partition's next batch once the last is answered,
# so a producer sends about partitions x batch.size per round trip: a long link's 16 MB
# batches (a topic the run creates takes them) and, beside them, more partitions.
TUNED_OPTS = ("--topic-partitions", "8")
# Where a run's CPU goes from its command to its exit, the broker and its proxy beside it (on
# the same two cores in the lab, not on a real link): what a long link costs in CPU, not only
# in waiting. "outside": the machine's busy CPU no process here spent (the kernel's network
# work among it); "idle": the cores' time nobody used (the hypervisor's steal left out).
# A run reading from the object store has the store (S3Proxy) and its host's proxy beside it too.
LAB_PROXY, OBJECT_STORE, STORE_PROXY = "lab proxy", "object store", "store's proxy"
OUTSIDE, IDLE = "outside", "idle"
CPU_GROUPS = (SPARK_JVM, EXECUTOR_JVM, PYTHON_WORKERS, LIBRDKAFKA, DRIVER_PYTHON, BROKER_GROUP, LAB_PROXY, OBJECT_STORE,
              STORE_PROXY, OTHER, OUTSIDE, IDLE)  # fmt: skip
PLAIN_SPARK_ROWS = 100_000  # its Java producer's 16 KB batches crawl over 100 ms: its rate is flat in size
CUTS_S = (15.0, 130.0)  # shorter than the default delivery.timeout.ms (120 s), and longer
FROM_STORE = "kappa-ingest (default) reading from S3"
STORE_RTTS_MS = (20.0,)  # the object store's round trip, its host's proxy; the broker's link unshaped


@dataclass
class LinkRun:
    link: str  # "unshaped", or "100 ms, 1gbit"
    rtt_ms: float
    rate: str | None
    contestant: str
    repeat: int
    rows: int  # rows the run reports sent
    broker_records: int  # records the broker holds of it (control records aside: offsets used)
    sending_s: float  # the sending stage (kappa-ingest's report; plain Spark: its write)
    wall_s: float  # command to exit
    rows_per_s: float  # rows over the sending stage
    rows_per_wall_s: float  # rows over command to exit
    wire_bytes_per_record: float  # the topic's log bytes over its records: what a record takes on the link
    capacity_records_per_s: float | None  # the link's rate over that; None unshaped
    cpu_s: dict[str, float] = field(default_factory=dict)  # command to exit, by process group (CPU_GROUPS)
    sending_cpu_s: dict[str, float] = field(default_factory=dict)  # the sending stage's (kappa-ingest's runs)


@dataclass
class CutRun:
    cut_s: float
    exit_code: int  # the run the cut landed in
    resumed_exit_code: int | None  # its --resume, if it needed one
    rows_at_cut: int  # records in the topic when the link went down: the cut landed mid-send
    rows_in_topic: int  # read back read_committed
    rows_match: bool  # the input's rows, each once (row hashes compared as multisets)
    error: str


def _rate_bits(rate: str) -> float:
    for unit, scale in RATE_BITS.items():
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * scale
    raise ValueError(f"rate {rate!r}: expected a number and gbit, mbit or kbit")


def _kappa(delivery: str, extra: tuple[str, ...] = ()) -> Callable[[Path | str, str, str, Path], list[str]]:
    def cmd(data: Path | str, topic: str, servers: str, work: Path) -> list[str]:
        cli = str(Path(sys.executable).parent / "kappa-ingest")
        return [cli, "ingest", "--input", str(data), "--topic", topic, "--bootstrap-servers", servers,
                "--delivery", delivery, "--master", "local[2]", "--partitions", "2", "--metrics-dir",
                str(work / "metrics"), "--run-id", topic, "--quiet", *extra]  # fmt: skip

    return cmd


def _plain_spark(data: Path, topic: str, servers: str, work: Path) -> list[str]:
    return [sys.executable, "-m", "kappa_ingest.bench.plain_spark", str(data), topic, servers, "local[2]"]


@dataclass(frozen=True)
class Contestant:
    command: Callable[[Path, str, str, Path], list[str]]
    partitions: int | None = None  # of a topic made for its run; None: the run creates its own, as a new user's does
    rows: int | None = None  # at most this many of the input's rows


CONTESTANTS: dict[str, Contestant] = {
    DEFAULT: Contestant(_kappa("exactly-once")),
    AT_LEAST_ONCE: Contestant(_kappa("at-least-once")),
    TUNED: Contestant(_kappa("exactly-once", TUNED_OPTS)),
    PLAIN_SPARK: Contestant(_plain_spark, partitions=2, rows=PLAIN_SPARK_ROWS),
}


def _timing(
    name: str, usage: Usage, work: Path, topic: str, rows: int
) -> tuple[int, float, tuple[float, float] | None]:
    """Rows sent, the sending stage's seconds, and its window where the run reports it."""
    if name == PLAIN_SPARK:
        line = next(x for x in reversed(usage.stdout.splitlines()) if x.startswith("{"))
        return rows, json.loads(line)["ingest_s"], None
    summary = json.loads((work / "metrics" / "runs" / topic / "summary.json").read_text())
    return summary["rows_sent"], summary["ingest_s"], _sending_window(summary)


def _wire_bytes(lab: Lab, topic: str) -> int:
    """The bytes of ``topic``'s log segments on the broker: its record batches as they came."""
    data = lab.kafka.state_dir / "broker-1" / "data"
    return sum(f.stat().st_size for d in data.glob(f"{topic}-*") for f in d.glob("*.log"))


def _head(data: Path, rows: int) -> Path:
    """The input's header and first ``rows`` rows, beside it."""
    out = data.with_name(f"{data.stem}-head{rows}.csv")
    if not out.exists():
        with open(data, "rb") as src, open(out, "wb") as dst:
            for _ in range(rows + 1):
                dst.write(src.readline())
    return out


def _shape(lab: Lab, rtt_ms: float, rate: str | None) -> None:
    lab.delay(BROKER, rtt_ms)
    for host in (BROKER, DRIVER):
        lab.net.shape(host, rate)
    time.sleep(0.5)  # the proxy reads its control file every 0.1 s


def _measure(lab: Lab, admin: Admin, name: str, data: Path, rows: int, work: Path, link: tuple[str, float, str | None],
             repeat: int) -> LinkRun:  # fmt: skip
    topic = f"links-{link[1]:g}-{list(CONTESTANTS).index(name)}-{repeat}-{os.getpid()}".replace(".", "_")
    c = CONTESTANTS[name]
    if c.partitions is not None:
        admin.ensure_topic(topic, c.partitions, 1)
    if c.rows is not None and c.rows < rows:
        data, rows = _head(data, c.rows), c.rows
    command = c.command(data, topic, lab.bootstrap_servers, work)
    return _measured_run(lab, admin, name, command, {}, topic, rows, work, link, repeat)


def _measure_from_store(lab: Lab, admin: Admin, store: LocalS3, data: Path, rows: int, work: Path, rtt_ms: float,
                        repeat: int) -> LinkRun:  # fmt: skip
    """The default run reading its input from the store on its own host, ``rtt_ms`` away
    (labelled "unshaped" at 0 ms: the row its ratio is taken against)."""
    lab.delay(hosts.STORE, rtt_ms)
    topic = f"links-store-{rtt_ms:g}-{repeat}-{os.getpid()}".replace(".", "_")
    command = _kappa("exactly-once", ("--s3-endpoint", store.endpoint))(bench_store.uri(data), topic,
                                                                        lab.bootstrap_servers, work)  # fmt: skip
    link = (f"store {rtt_ms:g} ms away" if rtt_ms else "unshaped", rtt_ms, None)
    beside = {lab.proxies[hosts.STORE]: STORE_PROXY, store.pid: OBJECT_STORE}
    return _measured_run(lab, admin, FROM_STORE, command, bench_store.environment(store), topic, rows, work, link,
                         repeat, beside)  # fmt: skip


def _measured_run(lab: Lab, admin: Admin, name: str, command: list[str], env: dict[str, str], topic: str, rows: int,
                  work: Path, link: tuple[str, float, str | None], repeat: int,
                  beside_too: dict[int, str] | None = None) -> LinkRun:  # fmt: skip
    """``command`` run on the driver host: its rates, beside the broker's count of its
    records; its CPU by group, with the broker's and its proxy's and ``beside_too``'s (pid:
    group) beside it."""
    label, rtt_ms, rate = link
    beside = {lab.kafka.brokers[0].pid: BROKER_GROUP, lab.proxies[BROKER]: LAB_PROXY, **(beside_too or {})}
    usage = run_measured([*lab.net.exec(DRIVER), *command], env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", **env},
                         beside=beside, threads=True)  # fmt: skip
    if usage.returncode != 0:
        raise RuntimeError(f"{name} over {label} exited {usage.returncode}: {usage.stderr.strip()[-600:]}")
    sent, sending_s, window = _timing(name, usage, work, topic, rows)
    records = sum(admin.end_offsets(topic).values())  # the broker's count, beside the run's own
    if records < sent:
        raise RuntimeError(f"{name} over {label}: the broker holds {records} records of the {sent} rows sent")
    per_record = _wire_bytes(lab, topic) / max(1, records)
    capacity = _rate_bits(rate) / 8 / per_record if rate else None
    return LinkRun(label, rtt_ms, rate, name, repeat, sent, records, round(sending_s, 3), round(usage.wall_s, 3),
                   round(sent / sending_s, 1), round(sent / usage.wall_s, 1), round(per_record, 1),
                   round(capacity) if capacity else None, _cpu_by_group(usage),
                   _cpu_by_group(usage, window) if window is not None else {})  # fmt: skip


def _sending_window(summary: dict[str, Any]) -> tuple[float, float] | None:
    """The sending stage's start and end (epoch seconds), as the run's report has them."""
    sends = [s for s in summary.get("stages", []) if s.get("sends") and s.get("submitted_at") and s.get("completed_at")]
    if not sends:
        return None
    at = [(datetime.fromisoformat(s["submitted_at"]), datetime.fromisoformat(s["completed_at"])) for s in sends]
    return min(a for a, _ in at).timestamp(), max(b for _, b in at).timestamp()


def _cpu_by_group(usage: Usage, window: tuple[float, float] | None = None) -> dict[str, float]:
    """CPU seconds by group from ``window``'s start to its end (None: the command's first
    sample to its last), with the machine's busy CPU no group spent (OUTSIDE) and the
    cores' idle time (IDLE)."""
    times = usage.timeline.times
    if len(times) < 2:
        return {}
    t0, t1 = window or (times[0], times[-1])
    spent = usage.timeline.between(t0, t1)
    busy, steal = usage.timeline.machine_between(t0, t1)
    spent[OUTSIDE] = round(max(0.0, busy - sum(spent.values())), 3)
    spent[IDLE] = round(max(0.0, (os.cpu_count() or 1) * (t1 - t0) - busy - steal), 3)
    return spent


def _cut(lab: Lab, admin: Admin, data: Path, rows: int, expected: tuple[list[str], np.ndarray], work: Path,
         cut_s: float) -> CutRun:  # fmt: skip
    """The default run, its broker's link cut for ``cut_s`` once a tenth of the rows are in
    the topic; ``--resume`` if it failed; the topic read back and compared with the input."""
    topic = f"links-cut-{cut_s:g}-{os.getpid()}".replace(".", "_")
    command = [*lab.net.exec(DRIVER), *CONTESTANTS[DEFAULT].command(data, topic, lab.bootstrap_servers, work)]
    at_cut: list[int] = []
    done = threading.Event()  # the run has ended: a cut not made by then is not made

    def cut_when_sending() -> None:
        while not done.wait(0.2):
            try:
                offsets = sum(admin.end_offsets(topic).values())
            except Exception:  # noqa: BLE001 - the topic's leader not known yet: ask again
                continue
            if offsets >= rows // 10:
                at_cut.append(offsets)
                lab.net.cut(BROKER)
                done.wait(cut_s)  # the link comes back early only if the run has ended
                lab.net.restore(BROKER)
                return

    cutter = threading.Thread(target=cut_when_sending, daemon=True)
    cutter.start()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    try:
        usage = run_measured(command, env=env)
    finally:
        done.set()
        cutter.join(30)
        lab.net.restore(BROKER)
    if not at_cut:
        raise RuntimeError(
            f"links: the {cut_s:g} s cut never landed: the run ended before a tenth of its rows were sent"
        )
    resumed = None
    error = ""
    if usage.returncode != 0:
        error = next(
            (x for x in usage.stderr.splitlines() if x.startswith("kappa-ingest: error:")), usage.stderr[-300:]
        )
        again = run_measured([*lab.net.exec(DRIVER), sys.executable, "-m", "kappa_ingest.cli", "ingest", "--resume",
                              topic, "--run-id", f"{topic}-resumed", "--metrics-dir", str(work / "metrics"), "--quiet"],
                             env=env)  # fmt: skip
        resumed = again.returncode
    with lab.net.inside(DRIVER):
        got = topic_hashes(lab.bootstrap_servers, topic, expected[0])
    match = bool(len(got) == len(expected[1]) and np.array_equal(got, expected[1]))
    return CutRun(cut_s, usage.returncode, resumed, at_cut[0], len(got), match, error)


def _keep(out: Path, result: LinkRun | CutRun) -> None:
    """Each run's result as it comes (``runs.jsonl``): a failure later loses none of them."""
    line = json.dumps(asdict(result))
    print(line, flush=True)
    with open(out / "runs.jsonl", "a") as f:
        f.write(line + "\n")


def _ratios(runs: list[LinkRun]) -> list[dict[str, Any]]:
    """Median rates per link and contestant, beside the same contestant unshaped."""
    groups: dict[tuple[str, str], list[LinkRun]] = {}
    for r in runs:
        groups.setdefault((r.link, r.contestant), []).append(r)
    medians = {k: (statistics.median(x.rows_per_s for x in rs), statistics.median(x.rows_per_wall_s for x in rs))
               for k, rs in groups.items()}  # fmt: skip
    out = []
    for (link, c), rs in groups.items():
        (rate, wall), base = medians[(link, c)], medians.get(("unshaped", c))
        capacity = rs[0].capacity_records_per_s
        out.append({"link": link, "contestant": c, "runs": len(rs), "rows_per_s": round(rate),
                    "x_unshaped": round(rate / base[0], 2) if base else None, "rows_per_wall_s": round(wall),
                    "wall_x_unshaped": round(wall / base[1], 2) if base else None,
                    "wire_bytes_per_record": statistics.median(x.wire_bytes_per_record for x in rs),
                    "capacity_records_per_s": capacity,
                    "x_capacity": round(rate / capacity, 3) if capacity else None,
                    "cpu_s": _median_cpu([x.cpu_s for x in rs]),
                    "sending_cpu_s": _median_cpu([x.sending_cpu_s for x in rs])})  # fmt: skip
    return out


def _median_cpu(runs: list[dict[str, float]]) -> dict[str, float]:
    return {
        g: round(statistics.median(r.get(g, 0.0) for r in runs), 2) for g in CPU_GROUPS if any(g in r for r in runs)
    }


def markdown(table: list[dict[str, Any]], cuts: list[CutRun], meta: dict[str, Any]) -> str:
    lines = [
        f"Links: {meta['rows']:,} wide30 rows, one broker behind its delaying proxy, the job on the driver host"
        f" (`{meta['command']}`, {meta['started']}); plain Spark sends the first {PLAIN_SPARK_ROWS:,} rows.",
        "",
        "| link | contestant | rows/s (sending) | × unshaped | rows/s (command to exit) | × unshaped |"
        " bytes/record on the wire | link capacity, records/s | × capacity |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in table:
        cap = f"{r['capacity_records_per_s']:,.0f}" if r["capacity_records_per_s"] else "-"
        xcap = f"{r['x_capacity']:.3f}" if r["x_capacity"] else "-"
        lines.append(f"| {r['link']} | {r['contestant']} | {r['rows_per_s']:,} | {r['x_unshaped']} |"
                     f" {r['rows_per_wall_s']:,} | {r['wall_x_unshaped']} | {r['wire_bytes_per_record']:.0f} |"
                     f" {cap} | {xcap} |")  # fmt: skip
    lines += _cpu_table(table, "cpu_s", "command to exit")
    lines += _cpu_table(table, "sending_cpu_s", "the sending stage")
    if cuts:
        lines += ["", "| link cut mid-run | exit | --resume | rows in topic at the cut | rows read back | every row once |",
                  "|---|--:|--:|--:|--:|---|"]  # fmt: skip
        for c in cuts:
            resumed = "-" if c.resumed_exit_code is None else str(c.resumed_exit_code)
            lines.append(f"| {c.cut_s:.0f} s | {c.exit_code} | {resumed} | {c.rows_at_cut:,} | {c.rows_in_topic:,} |"
                         f" {'yes' if c.rows_match else 'NO'} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _cpu_table(table: list[dict[str, Any]], key: str, what: str) -> list[str]:
    """CPU seconds by process group over ``what`` (medians), each beside the same
    contestant unshaped."""
    rows = [r for r in table if r.get(key)]
    if not rows:
        return []
    groups = [g for g in CPU_GROUPS if any(g in r[key] for r in rows)]
    unshaped = {r["contestant"]: r[key] for r in rows if r["link"] == "unshaped"}
    lines = ["", f"CPU seconds by process, {what} (medians; in brackets: more than unshaped)", "",
             "| link | contestant | " + " | ".join(groups) + " |", "|---|---|" + "--:|" * len(groups)]  # fmt: skip
    for r in rows:
        base = unshaped.get(r["contestant"]) if r["link"] != "unshaped" else None
        cells = []
        for g in groups:
            v = r[key].get(g, 0.0)
            cells.append(f"{v:.2f}" if base is None else f"{v:.2f} ({v - base.get(g, 0.0):+.2f})")
        lines.append(f"| {r['link']} | {r['contestant']} | " + " | ".join(cells) + " |")
    return lines


# Long: the lab's life, each link in turn, each contestant in it, then the cuts.
def run_links(
    out_root: Path,
    data_dir: Path,
    rows: int = 1_000_000,
    rtts_ms: tuple[float, ...] = RTTS_MS,
    rate: str = RATE,
    repeats: int = 1,
    contestants: tuple[str, ...] = tuple(CONTESTANTS),
    cuts_s: tuple[float, ...] = CUTS_S,
    command: str = "kappa-ingest bench --links",
    store_rtts_ms: tuple[float, ...] = STORE_RTTS_MS,
) -> Path:
    if os.geteuid() != 0:
        raise SystemExit("links: the lab's network namespaces need root")
    data = data_dir / f"wide30-{rows}.csv"
    if not data.exists():
        datagen.generate("wide30", rows, data)
    started = datetime.now(UTC)
    out = out_root / f"links-{started.strftime('%Y%m%dT%H%M%SZ')}"
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    links = [("unshaped", 0.0, None), *((f"{r:g} ms, {rate}", r, rate) for r in rtts_ms)]
    runs: list[LinkRun] = []
    cut_runs: list[CutRun] = []
    lab = hosts.up(work / "lab", brokers=1, heap="1g")
    try:
        # On the driver host's network throughout: Kafka clients start threads as they go.
        with lab.net.inside(DRIVER), Admin(lab.bootstrap_servers) as admin:
            for link in links:
                _shape(lab, link[1], link[2])
                for repeat in range(repeats):
                    for name in contestants:
                        r = _measure(lab, admin, name, data, rows, work, link, repeat)
                        _keep(out, r)
                        runs.append(r)
            if store_rtts_ms:  # the input in a store on a host of its own, the broker's link unshaped
                _shape(lab, 0.0, None)
                store = bench_store.with_credentials(hosts.add_store(lab))
                bench_store.put(store, data, on=lab.net.exec(DRIVER))
                for repeat in range(repeats):
                    for rtt_ms in (0.0, *store_rtts_ms):
                        r = _measure_from_store(lab, admin, store, data, rows, work, rtt_ms, repeat)
                        _keep(out, r)
                        runs.append(r)
            if cuts_s:
                _shape(lab, 0.0, None)
                expected = input_hashes(data)
                for cut_s in cuts_s:
                    c = _cut(lab, admin, data, rows, expected, work, cut_s)
                    _keep(out, c)
                    cut_runs.append(c)
    finally:
        hosts.down(work / "lab")
        hosts.discard_data(work / "lab")
    table = _ratios(runs)
    meta = {"rows": rows, "command": command, "started": started.isoformat(timespec="seconds"), "rate": rate}
    (out / "results.json").write_text(json.dumps({"meta": meta, "runs": [asdict(r) for r in runs], "table": table,
                                                  "cuts": [asdict(c) for c in cut_runs]}, indent=2) + "\n")  # fmt: skip
    (out / "results.md").write_text(markdown(table, cut_runs, meta))
    print(markdown(table, cut_runs, meta))
    print(f"results: {out}")
    return out
