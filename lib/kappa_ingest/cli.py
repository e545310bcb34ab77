"""``kappa-ingest``: the command line. Errors become exit codes here, and only here.

kappa-ingest ingest --input PATH --topic TOPIC [option ...]   # local Spark
kappa-ingest watch --input DIR --topic TOPIC [option ...]     # each file landing there, into the topic
kappa-ingest reprocess --from-topic T --runs ID --to-topic T2  # replay history into a new topic
kappa-ingest kafka start|stop|status [--dir DIR]              # the embedded local Kafka
kappa-ingest s3 start|stop|status [--dir DIR]                 # a local S3 server (S3Proxy)
kappa-ingest s3 put FILE s3://BUCKET/KEY                       # a file into a store (the bucket made if missing)
kappa-ingest cluster start|stop|status [--dir DIR]            # a Spark standalone cluster on 127.0.0.1
kappa-ingest lab up|down|status|link [--brokers N] [HOST --rtt-ms MS --rate R --cut --restore]  # hosts of their own (root)
kappa-ingest pack --out kappa-venv.tar.gz                      # the venv for executors (--archives)
kappa-ingest gen-data --layout wide30 --rows N --out FILE     # test data
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from kappa_ingest.errors import KappaError, UsageError

LAYOUT_NAMES = ("debs2012", "wide30")  # kappa_ingest.datagen.LAYOUTS, without importing polars to parse a command


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is a UsageError (one line, exit 2) like any other."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    from kappa_ingest.config import add_ingest_arguments, add_reprocess_arguments
    from kappa_ingest.watch.settings import add_watch_arguments

    p = _Parser(prog="kappa-ingest", description="CSV files into a Kafka topic with Spark, measured.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    ing = sub.add_parser("ingest", help="ingest CSV files into a topic (local Spark)")
    add_ingest_arguments(ing)
    w = sub.add_parser(
        "watch", help="stream each file landing in a directory or s3:// prefix into a topic, every row once"
    )
    add_ingest_arguments(w)
    add_watch_arguments(w)
    rep = sub.add_parser("reprocess", help="replay a topic's history (from the ledger) into a new topic version")
    add_reprocess_arguments(rep)
    for local in (ing, w, rep):  # spark-submit.sh takes spark-submit's own --conf
        local.add_argument("--spark-conf", action="append", metavar="KEY=VALUE",
                           help="a Spark setting for the local session, as spark-submit --conf; repeatable")  # fmt: skip
    k = sub.add_parser("kafka", help="the embedded local Kafka broker")
    k.add_argument("action", choices=["start", "stop", "status"])
    k.add_argument("--dir", default=".kafka", help="state directory (default .kafka)")
    k.add_argument("--port", type=int, help="first broker's port (default: a free one)")
    k.add_argument("--brokers", type=int, default=1, help="brokers in the cluster (default 1)")
    k.add_argument("--heap", default="512m", help="broker JVM heap (default 512m)")
    k.add_argument(
        "--security",
        choices=["plaintext", "sasl_ssl"],
        default="plaintext",
        help="plaintext (default), or SASL_SSL with SCRAM-SHA-512 users, a fresh CA and ACLs",
    )
    s3 = sub.add_parser("s3", help="a local S3 server (S3Proxy) to try s3:// inputs with; put a file in a store")
    s3.add_argument("action", choices=["start", "stop", "status", "put"])
    s3.add_argument("files", nargs="*", metavar="FILE URI", help="put: a local file and the s3://BUCKET/KEY it becomes")
    s3.add_argument("--dir", default=".s3", help="state and data directory (default .s3)")
    s3.add_argument("--port", type=int, help="its port (default: a free one)")
    s3.add_argument("--s3-endpoint", metavar="URL", help="put: the store's URL (default AWS_ENDPOINT_URL, else AWS)")
    c = sub.add_parser("cluster", help="a Spark standalone master and workers on 127.0.0.1")
    c.add_argument("action", choices=["start", "stop", "status"])
    c.add_argument("--dir", default=".spark-cluster", help="state and logs directory (default .spark-cluster)")
    c.add_argument("--workers", type=int, default=2, help="workers (default 2)")
    c.add_argument("--worker-cores", type=int, default=1, help="cores each worker offers (default 1)")
    c.add_argument("--worker-memory", default="1g", help="memory each worker offers executors (default 1g)")
    lab = sub.add_parser("lab", help="brokers and a driver on hosts of their own, links to shape and cut (root)")
    lab.add_argument("action", choices=["up", "down", "status", "link"])
    lab.add_argument("host", nargs="?", help="with link: the host whose link to change (b1, b2, ..., drv)")
    lab.add_argument("--dir", default=".lab", help="state and logs directory (default .lab)")
    lab.add_argument("--brokers", type=int, default=1, help="broker hosts (default 1; 3 or more: replication 3)")
    lab.add_argument("--heap", default="512m", help="broker JVM heap (default 512m)")
    lab.add_argument("--workers", type=int, default=0, help="Spark worker hosts, with a master host (default none)")
    lab.add_argument("--worker-cores", type=int, default=1, help="cores each worker offers (default 1)")
    lab.add_argument("--worker-memory", default="1g", help="memory each worker offers executors (default 1g)")
    lab.add_argument("--rtt-ms", type=float, help="round trip the host's proxy adds (a broker host's link)")
    lab.add_argument("--rate", help="the link's rate, as tc writes it (1gbit, 100mbit); 'none' lifts it")
    lab.add_argument("--cut", action="store_true", help="cut the host's link (a partition)")
    lab.add_argument("--restore", action="store_true", help="bring a cut link back")
    pk = sub.add_parser("pack", help="the venv as an archive for executors (spark-submit --archives FILE#venv)")
    pk.add_argument("--out", default="build/kappa-venv.tar.gz", help=".tar, .tar.gz or .tgz")
    pk.add_argument("--venv", default=None, help="the venv to pack (default: the one running kappa-ingest)")
    pk.add_argument("--compress-level", type=int, choices=range(10), default=1, metavar="0-9",
                    help="gzip level (default 1; 0 stores, fastest to pack and unpack)")  # fmt: skip
    r = sub.add_parser("report", help="past runs from the Delta metrics store")
    which = r.add_mutually_exclusive_group()
    which.add_argument("--run-id", help="one run: its totals, phases, rates and executors (a watch's id: its batches)")
    which.add_argument(
        "--last",
        type=int,
        default=10,
        metavar="N",
        help="the last N runs, a line each, a watch's batches as one (default 10)",
    )
    which.add_argument("--compare", nargs=2, metavar=("RUN_A", "RUN_B"),
                       help="two runs side by side: rows, phases, rates, checks and the settings that differ")  # fmt: skip
    r.add_argument(
        "--metrics-dir", default="./metrics", help="the runs' metrics directory (a path or s3://BUCKET/PREFIX)"
    )
    r.add_argument("--s3-endpoint", metavar="URL", help="an S3-compatible store's URL, for an s3:// --metrics-dir")
    r.add_argument("--html", metavar="FILE", help="with --run-id: write a self-contained HTML page with the figures")
    b = sub.add_parser(
        "bench",
        help="benchmarks: the Hesse-style sweep (--sweep), scaling (--scaling), links (--links), S3 listing (--listing),"
        " a watch's latency (--watch)",
    )
    mode = b.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--sweep", action="store_true", help="acks x batch.size x compression x partitions, and --target-rate"
    )
    mode.add_argument("--scaling", action="store_true", help="rows/s against partitions and input size")
    mode.add_argument("--links", action="store_true", help="over delayed, shaped and cut links in a lab (root)")
    mode.add_argument("--listing", action="store_true", help="list a prefix of many objects in a local S3 server")
    mode.add_argument("--watch", action="store_true", help="a watch's latency after a rename, and a backlog's drain")
    mode.add_argument("--watch-start", action="store_true", help="a watch's start over a ledger of many files")
    mode.add_argument(
        "--watch-lab", action="store_true", help="a watch's batch overhead, the broker 100 ms away (root)"
    )
    mode.add_argument(
        "--profile", action="store_true", help="py-spy and perf profiles of a run's sending window (root)"
    )
    b.add_argument("--layout", choices=["wide30", "debs2012"], default="wide30", help="with --profile: the input")
    b.add_argument("--seconds", type=int, default=3, help="with --profile: how long each profiler records")
    b.add_argument(
        "--ingest-args", default="", help="with --profile: the run's own options, one string (an option path's)"
    )
    b.add_argument(
        "--entries", type=int, default=1_000_000, help="with --watch-start: ledger entries (default 1000000)"
    )
    b.add_argument(
        "--objects", type=int, default=10_000, help="with --listing: objects under the prefix (default 10000)"
    )
    b.add_argument("--rtt-ms", type=float, action="append", help="with --links: round trips (default 2, 20, 100)")
    b.add_argument("--repeats", type=int, default=1, help="with --links, --listing: rounds (default 1)")
    b.add_argument("--no-cuts", action="store_true", help="with --links: leave out the runs whose link is cut")
    b.add_argument("--rows", type=int, help="input rows (default: 300000 a sweep cell, 1000000 with --links)")
    b.add_argument("--out", default="bench-results")
    b.add_argument("--data", default="data")
    b.add_argument("--quick", action="store_true", help="a corner of the sweep only (for tests)")
    g = sub.add_parser("gen-data", help="write a deterministic test CSV")
    g.add_argument("--layout", choices=LAYOUT_NAMES, default="wide30")
    g.add_argument("--rows", type=int, required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--gzip", action="store_true", help="gzip the output (.gz appended)")
    g.add_argument("--seed", type=int, default=42)
    return p


def run_reprocess(args: argparse.Namespace) -> int:
    """``kappa-ingest reprocess`` and ``jobs/reprocess.py``: the history chosen from the
    ledger (before Spark starts), then an ingest of it into the new topic version."""
    from kappa_ingest import config, reprocess

    values, replay = reprocess.prepare(config.merged(args), args.topic_partitions is not None)
    return run_ingest(args, config.validate(values), replay)


def run_ingest(args: argparse.Namespace, cfg: Any = None, replay: Any = None) -> int:
    """Shared by ``kappa-ingest ingest`` and ``jobs/ingest_csv.py``: check what can be
    checked before Spark starts (inputs, Kafka, the lock, what is left to send), start an
    embedded broker beside Spark if the run needs one, then run the job; Spark and the
    broker are stopped before recording."""
    import threading
    from concurrent.futures import ThreadPoolExecutor, wait

    from kappa_ingest import config
    from kappa_ingest.pipeline.resources import RunResources
    from kappa_ingest.report.phases import RunClock
    from kappa_ingest.spark.session import quick_jit

    clock = RunClock.from_process_start()
    cfg = cfg or config.load(args)
    importing = threading.Thread(target=_import_pipeline, name="imports", daemon=True)
    with RunResources(cfg) as resources:
        what = "Spark did not start: "
        try:
            input_bytes = _checked(cfg)
            work = None
            if cfg.incremental or cfg.resume:  # what is left decides whether Spark starts at all
                work = _kafka_before_spark(cfg, resources)
                if work is not None and work.nothing_left:  # Spark never starts
                    from kappa_ingest.report.recording import nothing_left

                    servers = resources.servers() if cfg.incremental else cfg.bootstrap_servers
                    resources.close()
                    nothing_left(cfg, work, servers, clock, held=resources.held)
                    return 0
                deciding = None
            else:  # the topic's lock is taken while the JVM starts: at 100 ms, seconds of round trips
                pool = ThreadPoolExecutor(1, thread_name_prefix="lock")
                deciding = pool.submit(_kafka_beside_spark, cfg, resources)
                pool.shutdown(wait=False)
            # The pipeline's imports (Arrow, polars, the Delta writer: ~0.8 s) run while the JVM starts.
            importing.start()
            try:
                resources.start_spark(f"kappa-ingest {cfg.run_id}", {**_sorting_memory(cfg), **_spark_conf(args)},
                                      quick_jit(input_bytes))  # fmt: skip
            except BaseException:
                if deciding is not None:
                    wait([deciding])  # a lock it took is let go with the rest; Spark's failure is the run's
                raise
            if deciding is not None:
                what = ""
                work = deciding.result()
        except BaseException as e:
            # The run writes its report from here on; before it, this does.
            resources.close()
            # Imported here: at the top it would load the pipeline's libraries before the JVM starts.
            from kappa_ingest.report import recording

            recording.failed_report(cfg, clock, e, what=what)
            raise
        importing.join()
        from kappa_ingest.ingest import run  # imported by now

        run(cfg, resources, clock, work, replay=replay, release_early=True)
    return 0


def _checked(cfg: Any) -> int:
    """What is checked before Spark starts, so that a bad run fails in a second: the
    inputs, the metrics directory, a configured Kafka, an expectation suite. The input's
    size."""
    from kappa_ingest.preflight import preflight

    input_bytes = preflight(cfg)
    if cfg.expectations:
        from kappa_ingest import quality

        quality.load(cfg.expectations)
    return input_bytes


def _kafka_beside_spark(cfg: Any, resources: Any) -> Any:
    """:func:`_kafka_before_spark`, the set-up's connection made and the transaction
    coordinator warmed, while the JVM starts."""
    work = _kafka_before_spark(cfg, resources)
    if work is not None and not cfg.dry_run:
        from kappa_ingest.config.choices import EXACTLY_ONCE
        from kappa_ingest.delivery.guarantees import scope_prefix
        from kappa_ingest.kafka.settings import connection_conf

        kept, settings = resources.kept(), cfg.producer_settings()
        kept.admin(settings).check_reachable()
        if cfg.delivery == EXACTLY_ONCE:  # its seven round trips and more while the JVM starts
            kept.warm_coordinator(connection_conf(settings, resources.servers()),
                                  scope_prefix(cfg.topic, cfg.lineage, cfg.incremental))  # fmt: skip
    return work


def _kafka_before_spark(cfg: Any, resources: Any) -> Any:
    """The run's Kafka opened (an embedded broker starts beside Spark) and, where the run
    needs Kafka now, the topic's lock taken (a second run exits 6) and the run's work read
    (``--resume``, ``--incremental``: what the ledger lacks); None where that waits for Spark."""
    from kappa_ingest.spark.session import launched_by_spark_submit

    if not cfg.resume and launched_by_spark_submit():  # the master is known only once the session is up
        return None
    resources.open_kafka(cfg.spark_master or "local[*]")
    # Waited for only where the run needs Kafka now; else the run takes the lock once Spark is up.
    if not (cfg.bootstrap_servers or cfg.incremental):
        return None
    from kappa_ingest.delivery.work import prepare

    resources.hold()
    return prepare(cfg, resources.servers)


def _sorting_memory(cfg: Any) -> dict[str, str]:
    """A local run that sorts its raw lines (an ordered replay) gets a 2 GB driver heap: at
    1 GB the sort spills, and its shuffle took 4.2-5.0 s for 1M rows (432 MB) against
    3.3-3.7 s (measured with a noop write, local[2])."""
    local = (cfg.spark_master or "local[*]").startswith("local")
    return {"spark.driver.memory": "2g"} if local and cfg.order_by_event_time else {}


def _spark_conf(args: argparse.Namespace) -> dict[str, str]:
    out = {}
    for item in getattr(args, "spark_conf", None) or []:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("spark."):
            raise UsageError(
                f"--spark-conf {item!r}: expected spark.KEY=VALUE, e.g. --spark-conf spark.task.maxFailures=8"
            )
        out[key] = value
    return out


def _import_pipeline() -> None:
    import deltalake  # noqa: F401

    import kappa_ingest.ingest  # noqa: F401


def report_usage_error(argv: Sequence[str], error: UsageError) -> None:
    """A run refused for its options still leaves a report (``status: failed``), in the
    metrics directory the command line named, if any."""
    from kappa_ingest.config import new_run_id
    from kappa_ingest.report.run import RunReport

    def option(name: str, default: str) -> str:
        for i, arg in enumerate(argv):
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
        return default

    run_id = option("--run-id", "") or new_run_id()
    report = RunReport(run_id, option("--sink", "?"), option("--topic", "?"), {"argv": list(argv)},
                       status="failed", error=str(error))  # fmt: skip
    try:
        from kappa_ingest.s3.directory import Directory

        report.finish(Directory.at(option("--metrics-dir", "./metrics"), option("--s3-endpoint", "") or None).quick())
    except (OSError, KappaError):
        pass  # the metrics directory itself may be what is wrong


def _kafka(args: argparse.Namespace) -> int:
    from kappa_ingest.kafka import broker as local_kafka

    if args.action == "start":
        cluster = local_kafka.start(
            args.dir, brokers=args.brokers, port=args.port, heap=args.heap, security=args.security
        )
        print(f"local Kafka running at {cluster.bootstrap_servers} (state in {cluster.state_dir})")
        if cluster.secrets_dir is not None:
            print("security: SASL_SSL, SCRAM-SHA-512 users admin (super user) and app, ACLs")
            print(f"CA certificate: {cluster.ca_file}")
            print(f"passwords: {cluster.secrets_dir}/<user>.password")
    elif args.action == "stop":
        print("stopped" if local_kafka.stop(args.dir) else f"no local Kafka running from {args.dir}")
    else:
        cluster = local_kafka.status(args.dir)
        if cluster is None:
            print(f"no local Kafka running from {args.dir}")
            return 1
        alive = cluster.alive()
        print(f"local Kafka ({cluster.security}) running at {cluster.bootstrap_servers}: brokers alive {alive}")
    return 0


def _s3(args: argparse.Namespace) -> int:
    from kappa_ingest.s3 import server

    if args.action == "start":
        s = server.start(args.dir, port=args.port)
        print(f"local S3 running at {s.endpoint} (data and state in {s.state_dir})")
        print(f"use it: export AWS_ENDPOINT_URL={s.endpoint} AWS_ACCESS_KEY_ID={server.ACCESS_KEY}"
              f" AWS_SECRET_ACCESS_KEY=$(cat {s.secret_file}) AWS_REGION={server.REGION}")  # fmt: skip
    elif args.action == "put":
        return _s3_put(args)
    elif args.action == "stop":
        print("stopped" if server.stop(args.dir) else f"no local S3 running from {args.dir}")
    else:
        s = server.status(args.dir)
        if s is None:
            print(f"no local S3 running from {args.dir}")
            return 1
        print(f"local S3 running at {s.endpoint} (pid {s.pid})")
    return 0


def _s3_put(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kappa_ingest.s3.access import S3Access, is_s3
    from kappa_ingest.s3.objects import put

    if len(args.files) != 2 or not is_s3(args.files[1]):
        raise UsageError("s3 put: give a local file and the object it becomes: s3 put FILE s3://BUCKET/KEY")
    local = Path(args.files[0])
    if not local.is_file():
        raise UsageError(f"s3 put: {local}: no such file")
    stored = put(local, args.files[1], S3Access.resolve(args.s3_endpoint))
    print(f"put {local} as {stored.uri} ({stored.size:,} bytes, ETag {stored.etag})")
    return 0


def _lab(args: argparse.Namespace) -> int:
    from kappa_ingest.lab import hosts

    if args.action == "up":
        lab = hosts.up(args.dir, brokers=args.brokers, heap=args.heap, rtt_ms=args.rtt_ms or 0.0,
                       workers=args.workers, worker_cores=args.worker_cores, worker_memory=args.worker_memory)  # fmt: skip
        print(f"lab up: Kafka at {lab.bootstrap_servers}, reached from the hosts' network; state in {lab.state_dir}")
        if lab.spark is not None:
            print(f"Spark master at {lab.spark.master_url}")
        _print_hosts(lab)
        return 0
    if args.action == "down":
        print("lab down" if hosts.down(args.dir) else f"no lab up from {args.dir}")
        return 0
    lab = hosts.status(args.dir)
    if lab is None:
        print(f"no lab up from {args.dir}")
        return 1
    if args.action == "status":
        print(f"lab {lab.net.lab_id}: Kafka at {lab.bootstrap_servers}, brokers alive {lab.kafka.alive()}")
        if lab.spark is not None:
            print(f"Spark master at {lab.spark.master_url}, daemons alive {lab.spark.alive()}")
        _print_hosts(lab)
        return 0
    if args.host not in lab.net.hosts:
        raise UsageError(f"lab link: name a host of the lab ({', '.join(lab.net.hosts)})")
    if args.cut and args.restore:
        raise UsageError("lab link: --cut or --restore, not both")
    if args.rtt_ms is not None:
        if args.host not in lab.proxies:
            raise UsageError(
                f"lab link --rtt-ms: delay is a proxied host's, a broker's or the store's ({', '.join(lab.proxies)})"
            )
        lab.delay(args.host, args.rtt_ms)
    if args.rate is not None:
        lab.net.shape(args.host, None if args.rate == "none" else args.rate)
    if args.cut:
        lab.net.cut(args.host)
    if args.restore:
        lab.net.restore(args.host)
    return 0


def _print_hosts(lab: Any) -> None:
    for host, address in lab.net.hosts.items():
        print(f"  {host:4} {address:11} ip netns exec {lab.net.ns(host)} COMMAND")


def _cluster(args: argparse.Namespace) -> int:
    from kappa_ingest.spark import cluster as spark_cluster

    if args.action == "start":
        cluster = spark_cluster.start(args.dir, args.workers, args.worker_cores, args.worker_memory)
        print(f"Spark master at {cluster.master_url} (UI {cluster.ui_url}), {args.workers} workers;"
              f" logs in {cluster.state_dir}")  # fmt: skip
    elif args.action == "stop":
        print("stopped" if spark_cluster.stop(args.dir) else f"no Spark cluster running from {args.dir}")
    else:
        cluster = spark_cluster.status(args.dir)
        if cluster is None:
            print(f"no Spark cluster running from {args.dir}")
            return 1
        print(f"Spark master at {cluster.master_url}: {cluster.alive()}")
    return 0


def _pack(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from kappa_ingest.spark.pack import pack

    out = pack(args.venv or Path(sys.prefix), args.out, args.compress_level)
    print(f"wrote {out} ({out.stat().st_size / 2**20:,.0f} MiB): spark-submit --archives {out}#venv"
          " --conf spark.pyspark.python=./venv/bin/python")  # fmt: skip
    return 0


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kappa_ingest.report import html as report_html
    from kappa_ingest.report import store as metrics_store
    from kappa_ingest.report import text as report_text
    from kappa_ingest.s3.directory import Directory

    if args.last < 1:
        raise UsageError(f"--last {args.last}: give the number of runs to show, 1 or more")
    if args.html and not args.run_id:
        raise UsageError("--html needs --run-id: the page shows one run")
    where = Directory.at(args.metrics_dir, args.s3_endpoint)
    where.check()
    if not metrics_store.exists(where):
        raise UsageError(f"no metrics store at {args.metrics_dir}/delta; give --metrics-dir of your runs")
    watch = metrics_store.watch(where, args.run_id) if args.run_id else None
    if watch is not None:  # a watch's id: its batches as a timeline
        print(f"watch {watch.watch_id}: {report_text.watch_headline(watch)}")
        print(report_text.watch_timeline(watch))
        if args.html:
            Path(args.html).write_text(report_html.render_watch_html(watch))
            print(f"wrote {args.html}")
    elif args.run_id:
        run = metrics_store.run(where, args.run_id)
        print(report_text.compare(run["runs"]))
        if run["executors"]:
            print()
            print(report_text.executors(run["executors"]))
        if args.html:
            Path(args.html).write_text(report_html.render_html(run))
            print(f"wrote {args.html}")
    elif args.compare:
        runs = [metrics_store.run(where, rid, tables=("runs",))["runs"][0] for rid in args.compare]
        print(report_text.compare(runs))
    else:
        entries = metrics_store.last_entries(where, args.last)
        print(report_text.last_lines(entries) if entries else f"no runs in {args.metrics_dir}/delta")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.sweep:
        from kappa_ingest.bench.sweep import run_sweep

        run_sweep(args.rows or 300_000, Path(args.out), Path(args.data), quick=args.quick)
    elif args.links:
        from kappa_ingest.bench.links import CUTS_S, RTTS_MS, run_links

        run_links(Path(args.out), Path(args.data), args.rows or 1_000_000, tuple(args.rtt_ms or RTTS_MS), repeats=args.repeats,
                  cuts_s=() if args.no_cuts else CUTS_S, command=" ".join(["kappa-ingest bench", *sys.argv[2:]]))  # fmt: skip
    elif args.listing:
        from kappa_ingest.bench.listing import run_listing

        results = run_listing(Path(args.out), Path(args.data), args.objects, args.repeats,
                              " ".join(["kappa-ingest bench", *sys.argv[2:]]))  # fmt: skip
        return 0 if results["met"] else 1
    elif args.profile:
        from kappa_ingest.bench.profile import run_profile

        run_profile(Path(args.out), Path(args.data), args.layout, args.rows or 1_000_000, args.seconds,
                    " ".join(["kappa-ingest bench", *sys.argv[2:]]), shlex.split(args.ingest_args))  # fmt: skip
    elif args.watch_start:
        from kappa_ingest.bench.watch_start import run_watch_start

        run_watch_start(Path(args.out), args.entries, " ".join(["kappa-ingest bench", *sys.argv[2:]]))
    elif args.watch_lab:
        from kappa_ingest.bench.watch_lab import run_watch_lab

        results = run_watch_lab(Path(args.out), command=" ".join(["kappa-ingest bench", *sys.argv[2:]]))
        return 0 if all(results["met"].values()) else 1
    elif args.watch:
        from kappa_ingest.bench.watch_latency import run_watch_bench

        results = run_watch_bench(Path(args.out), command=" ".join(["kappa-ingest bench", *sys.argv[2:]]))
        return 0 if all(results["met"].values()) else 1
    else:
        from kappa_ingest.bench.scaling import run_scaling

        run_scaling(Path(args.out), Path(args.data))
    return 0


def _gen_data(args: argparse.Namespace) -> int:
    from kappa_ingest.datagen import generate

    if args.rows < 0:
        raise UsageError("--rows: expected zero or more")
    path = generate(args.layout, args.rows, args.out, args.gzip, args.seed)
    print(f"wrote {args.rows:,} {args.layout} rows to {path}")
    return 0


def guarded(fn, *args) -> int:  # type: ignore[no-untyped-def]
    """Run ``fn``; map errors to the contract's exit codes with one line on stderr."""
    from kappa_ingest.kafka.credentials import mask

    try:
        return fn(*args)
    except KappaError as e:
        print(mask(f"kappa-ingest: error: {e}"), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("kappa-ingest: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the last resort: one line, never a bare trace
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(mask(f"kappa-ingest: internal error: {type(e).__name__}: {first[:300]} (please report it)"),
              file=sys.stderr)  # fmt: skip
        return 1


def exit_on_sigterm() -> None:
    """A scheduler's SIGTERM unwinds like Ctrl-C, so an embedded broker is stopped and the
    report written (Python's default would exit without running ``finally``). A watch puts
    its own handler in once it runs: it ends its batch and exits 0."""
    import signal

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    exit_on_sigterm()

    def dispatch() -> int:
        try:
            args = build_parser().parse_args(argv)
            if args.command == "ingest":
                from kappa_ingest import config

                config.load(args)  # validated once more in run_ingest; here to report usage errors
        except UsageError as e:
            if argv and argv[0] in ("ingest", "reprocess"):
                report_usage_error(argv[1:], e)
            raise
        if args.command == "ingest":
            return run_ingest(args)
        if args.command == "reprocess":
            return run_reprocess(args)
        if args.command == "watch":
            from kappa_ingest.watch.command import run_watch

            return run_watch(args, _spark_conf(args))
        if args.command == "kafka":
            return _kafka(args)
        if args.command == "lab":
            return _lab(args)
        if args.command == "s3":
            return _s3(args)
        if args.command == "cluster":
            return _cluster(args)
        if args.command == "pack":
            return _pack(args)
        if args.command == "bench":
            return _bench(args)
        if args.command == "report":
            return _report(args)
        return _gen_data(args)

    return guarded(dispatch)


if __name__ == "__main__":
    sys.exit(main())
