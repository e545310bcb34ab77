"""A watch's own settings (beside the IngestConfig each of its batches runs with): where
it looks, when a file counts as landed, what happens to a file once it is in the topic
or cannot be sent, and how a batch is bounded."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from kappa_ingest.config import parse_size
from kappa_ingest.errors import UsageError

MIN_FILE_AGE_S = 2.0  # still for this long: a writer that writes in place has finished
LISTING_PERIOD_S = 10.0  # a local landing's full listing beside inotify; an s3:// prefix's only way
OUTAGE_LIMIT_S = 600.0  # Kafka unreachable this long (batches retried meanwhile): exit 4


@dataclass(frozen=True)
class WatchSettings:
    landing: str  # a directory, a glob, or an s3:// prefix
    min_file_age_s: float = MIN_FILE_AGE_S
    listing_period_s: float = LISTING_PERIOD_S
    include_existing: bool = False  # files there at the watch's first start are sent too
    allow_overwrites: bool = False  # a sent file changed since: sent again as a new version (else refused)
    after_send: str = "keep"  # keep | delete | move:DIR
    error_dir: str | None = None  # a file that cannot be sent goes there, its reason beside it
    halt_on_error: bool = False  # such a file stops the watch (exit 3) instead
    max_files: int | None = None  # a batch's bounds (always at least one whole file)
    max_bytes: int | None = None
    outage_limit_s: float = OUTAGE_LIMIT_S
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"

    @property
    def move_to(self) -> str | None:
        return self.after_send.removeprefix("move:") if self.after_send.startswith("move:") else None


def add_watch_arguments(p: argparse.ArgumentParser) -> None:
    """The watch's own options (every ingest option comes from ``add_ingest_arguments``)."""
    a = p.add_argument
    a(
        "--min-file-age",
        type=float,
        metavar="S",
        default=MIN_FILE_AGE_S,
        help=f"a file is sent once its size and time have not changed for S seconds (default {MIN_FILE_AGE_S:g})",
    )
    a(
        "--listing-period",
        type=float,
        metavar="S",
        default=LISTING_PERIOD_S,
        help=f"list the landing in full every S seconds (s3:// prefixes: the only way; default {LISTING_PERIOD_S:g})",
    )
    a(
        "--include-existing",
        action="store_true",
        help="send the files already there when the watch first starts (default: only files that land after)",
    )
    a(
        "--allow-overwrites",
        action="store_true",
        help="a sent file that changed since is sent again as a new version (default: refused, the watch goes on)",
    )
    a(
        "--after-send",
        default="keep",
        metavar="keep|delete|move:DIR",
        help="what happens to a file once its last unit is committed (default keep)",
    )
    a("--error-dir", metavar="DIR", help="a file that cannot be sent is moved there, its reason beside it")
    a("--halt-on-error", action="store_true", help="a file that cannot be sent stops the watch (exit 3)")
    a(
        "--outage-limit",
        type=float,
        metavar="S",
        default=OUTAGE_LIMIT_S,
        help=f"Kafka unreachable for S seconds (batches retried meanwhile) ends the watch, exit 4 (default {OUTAGE_LIMIT_S:g})",
    )
    a("--metrics-port", type=int, metavar="PORT", help="serve Prometheus metrics on this port")
    a("--metrics-host", default="127.0.0.1", metavar="HOST", help="the metrics endpoint's address (default 127.0.0.1)")  # fmt: skip


def watch_settings(args: argparse.Namespace, landing: str, max_files: int | None, max_bytes: Any) -> WatchSettings:
    """The watch's settings from its command line; UsageError (exit 2) names a bad one."""
    after = args.after_send
    if after not in ("keep", "delete") and not (after.startswith("move:") and len(after) > len("move:")):
        raise UsageError(f"--after-send {after!r}: accepted: keep, delete, move:DIR")
    for name in ("min_file_age", "listing_period", "outage_limit"):
        value = getattr(args, name)
        if value < 0 or (name != "min_file_age" and value == 0):
            raise UsageError(f"--{name.replace('_', '-')} {value:g}: expected a positive number of seconds")
    if args.metrics_port is not None and not 0 <= args.metrics_port < 65536:
        raise UsageError(f"--metrics-port {args.metrics_port}: expected a port, 0-65535 (0: any free one)")
    return WatchSettings(
        landing=landing,
        min_file_age_s=args.min_file_age,
        listing_period_s=args.listing_period,
        include_existing=args.include_existing,
        allow_overwrites=args.allow_overwrites,
        after_send=after,
        error_dir=args.error_dir,
        halt_on_error=args.halt_on_error,
        max_files=max_files,
        max_bytes=parse_size(max_bytes) if max_bytes is not None else None,
        outage_limit_s=args.outage_limit,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
    )
