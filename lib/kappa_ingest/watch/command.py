"""``kappa-ingest watch`` and ``jobs/watch_csv.py``: the watch's settings from the command
line, what can be refused before Spark starts refused, the topic's lock taken (a second
watch, or an ``ingest --incremental``, exits 6 at once), Spark started once, and the watch
run until SIGTERM or Ctrl-C, which end it cleanly (exit 0)."""

from __future__ import annotations

import argparse
import os
import signal
from typing import Any

from kappa_ingest import config
from kappa_ingest.errors import InputError, UsageError
from kappa_ingest.kafka.topics import Admin
from kappa_ingest.pipeline.resources import RunResources
from kappa_ingest.s3.access import is_s3
from kappa_ingest.source import opening
from kappa_ingest.spark.session import launched_by_spark_submit
from kappa_ingest.watch.loop import Watch, WatchSummary
from kappa_ingest.watch.settings import WatchSettings, watch_settings

NOT_FOR_A_WATCH = {"incremental": "--incremental", "resume": "--resume", "dry_run": "--dry-run",
                   "on_changed": "--on-changed (see --allow-overwrites)"}  # fmt: skip


def load(args: argparse.Namespace) -> tuple[Any, WatchSettings]:
    """The batches' IngestConfig and the watch's own settings; UsageError names a bad option."""
    for name, flag in NOT_FOR_A_WATCH.items():
        if getattr(args, name, None):
            raise UsageError(f"watch: {flag} is not a watch option (every batch of a watch sends only what the"
                             " ledger lacks)")  # fmt: skip
    if not args.inputs or len(args.inputs) != 1:
        raise UsageError("watch: give one --input: a directory, a glob, or an s3://BUCKET/PREFIX/")
    landing = args.inputs[0] if is_s3(args.inputs[0]) else os.path.abspath(args.inputs[0].removeprefix("file://"))
    bounds = (args.max_files, args.max_bytes)
    args.max_files = args.max_bytes = None  # a batch's bounds, not an incremental run's
    cfg = config.load(args)
    settings = watch_settings(args, landing, *bounds)
    if settings.max_files is not None and settings.max_files < 1:
        raise UsageError(f"--max-files {settings.max_files}: expected a positive whole number")
    return cfg, settings


def _check(cfg: Any, settings: WatchSettings) -> None:
    """Refused before Spark starts: a landing that is not there, a metrics directory or Kafka unreachable."""
    opening.for_run(cfg.s3_endpoint)
    if not is_s3(settings.landing):
        import glob

        where = settings.landing
        if not glob.has_magic(where) and not os.path.isdir(where):
            raise InputError(f"input {where}: no such directory; the watch needs the landing directory to exist")
    cfg.metrics.check()
    if cfg.bootstrap_servers:
        with Admin(cfg.bootstrap_servers, cfg.producer_settings()) as admin:
            admin.check_reachable()


def run_watch(args: argparse.Namespace, spark_conf: dict[str, str]) -> int:
    cfg, settings = load(args)
    _check(cfg, settings)
    with RunResources(cfg) as resources:
        if not launched_by_spark_submit():
            resources.open_kafka(cfg.spark_master or "local[*]")
            resources.hold()  # before Spark starts: a second watch exits 6 in a second
        resources.start_spark(f"kappa-ingest watch {cfg.run_id}", spark_conf, quick_jit=False)
        watch = Watch(cfg, settings, resources)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda _signum, _frame: watch.stop())
        summary = watch.run()
        _print_end(summary)
    return 0


def _print_end(summary: WatchSummary) -> None:
    failed = sum(1 for b in summary.batches if b.status != "succeeded")
    print(f"watch {summary.watch_id} stopped: {summary.files_sent:,} file(s), {summary.rows_sent:,} rows sent in"
          f" {len(summary.batches)} batch(es) ({failed} failed or stopped); {len(summary.refused)} file(s) refused",
          flush=True)  # fmt: skip
