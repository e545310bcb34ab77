"""The command line and the YAML file into the settings :func:`validate` checks: the
options of contract §1 (shared by ``jobs/ingest_csv.py`` and ``kappa-ingest``), and with
``--resume`` the resumed run's own settings as the base."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from kappa_ingest.config import resumed
from kappa_ingest.config.choices import (
    DEFAULT_LEDGER_TOPIC,
    DEFAULT_MODE,
    DEFAULT_SINK,
    MODES,
    ON_CHANGED,
    SINKS,
    VERIFY,
)
from kappa_ingest.config.settings import IngestConfig, validate
from kappa_ingest.errors import UsageError
from kappa_ingest.kafka import credentials


# Long: one call per option, in the order --help lists them.
def add_ingest_arguments(p: argparse.ArgumentParser, target: str = "--topic") -> None:
    """The options of contract §1, shared by ``jobs/ingest_csv.py`` and ``kappa-ingest ingest``.

    Every default is ``None`` so that the YAML file can fill what the command line leaves out.
    """
    a = p.add_argument
    a(
        "--input",
        dest="inputs",
        action="append",
        metavar="PATH",
        help="file, directory or glob (.csv, .csv.gz), or s3://BUCKET/KEY, PREFIX/ or glob; repeatable",
    )
    a(target, dest="topic", help="target topic (created if absent)")
    a("--bootstrap-servers", metavar="H:P[,H:P]", help="Kafka cluster; default: start the embedded local broker")
    a("--sink", choices=SINKS, help=f"who produces (default {DEFAULT_SINK}, the fastest in `make bench`)")
    a("--partitions", type=int, metavar="N", help="Spark partitions = concurrent producers")
    a("--split-size", metavar="SIZE", help="with --partitions: each task sends its share in splits of at most SIZE"
      " (default 64M), each its own transaction, one committing while the next is sent")  # fmt: skip
    a("--topic-partitions", type=int, metavar="N", help="partitions of a topic this run creates (default 2)")
    a("--replication-factor", type=int, metavar="N", help="replication of a topic this run creates (default 1)")
    a("--key-column", metavar="COL", help="Kafka key = that column's text")
    a("--event-time-column", metavar="COL", help="record timestamp and event_ts from that column")
    a("--event-time-format", metavar="FMT", help="Spark datetime pattern of --event-time-column")
    a("--schema", metavar="DDL_OR_FILE", help="typed columns, e.g. 'id INT, price DOUBLE'")
    a("--null-value", dest="null_values", action="append", metavar="TOKEN",
      help="a field equal to TOKEN is null (JSON null), as an empty one is; repeatable, e.g. NA, NULL, \\N")  # fmt: skip
    a("--delimiter", help="field delimiter (default ,)")
    a("--quote", help='quote character (default ")')
    a("--escape", help='escape character for quotes inside quoted fields (default ", RFC 4180)')
    a("--encoding", help="input encoding (default utf-8)")
    a("--no-header", dest="header", action="store_const", const=False, help="first line is data")
    a("--multiline", action="store_const", const=True, help="quoted fields may contain newlines")
    a("--strict-header", action="store_const", const=True,
      help="refuse (exit 3) files whose header differs from the first file's; default: each row keyed by its own file's header")  # fmt: skip
    a("--strict-size", action="store_const", const=True,
      help="a row whose record is larger than Kafka takes fails the run (exit 3); default: it is quarantined")  # fmt: skip
    a(
        "--kafka-opt",
        dest="kafka_opts",
        action="append",
        metavar="KEY=VALUE",
        help="producer setting (Java name); repeatable",
    )
    a("--target-rate", type=float, metavar="ROWS_PER_S", help="throttle the whole job to this input rate")
    a("--config", dest="config_file", metavar="FILE", help="YAML file of these options (default conf/ingest.yaml)")
    a("--metrics-dir", metavar="DIR", help="where run reports go (default ./metrics)")
    a("--run-id", metavar="ID", help="name of this run (default: generated, time-sortable)")
    a("--dry-run", action="store_const", const=True, help="read, convert and validate; send nothing")
    a(
        "--delivery",
        choices=MODES,
        help="exactly-once (confluent, kafka-python: one transaction per task) or at-least-once"
        f" (default {DEFAULT_MODE} where the sink can)",
    )
    a("--resume", metavar="RUN_ID|last", help="send only the splits of that run the ledger does not show as delivered")
    a("--incremental", action="store_const", const=True,
      help="send only the splits the ledger does not show delivered to this topic")  # fmt: skip
    a("--on-changed", choices=ON_CHANGED, help="with --incremental: a delivered file that changed since"
      " is refused (default, exit 3) or re-sent whole")  # fmt: skip
    a("--max-files", type=int, metavar="N", help="with --incremental: at most N files this run, oldest first")
    a("--max-bytes", metavar="SIZE", help="with --incremental: at most SIZE of input (e.g. 2G) this run, oldest first")
    a("--expectations", metavar="FILE", help="Great Expectations 1.x suite (its JSON, or a YAML list of"
      " {expectation, kwargs}) run on every parsed row before anything is sent")  # fmt: skip
    a("--quality-gate", choices=("fail", "quarantine", "warn"), help="a failed expectation: fail (default; exit 5,"
      " nothing sent), quarantine (rows failing row-level ones; the others still fail) or warn")  # fmt: skip
    a("--order-by-event-time", action="store_const", const=True,
      help="each key's records reach its partition in event-time order (a shuffle by key, sorted by event time)")  # fmt: skip
    a("--replay-speed", metavar="X|max", help="event-time pacing: X times real time (e.g. 60), or max (unpaced)")
    a("--dead-letter-topic", metavar="NAME", help="quarantined rows also go to this topic (raw text, context headers)")
    a("--ledger-topic", metavar="NAME", help=f"the delivery ledger's compacted topic (default {DEFAULT_LEDGER_TOPIC})")
    a("--verify", choices=VERIFY, help="auto (default): the topic's offsets where only this run wrote to it, else"
      " a read_committed read back of its records; read-back: always read them back")  # fmt: skip
    a("--no-lock", dest="lock", action="store_const", const=False,
      help="do not take the topic's lock (a scheduler already runs one at a time); delivery stays exactly once")  # fmt: skip
    a("--lock-lease", dest="lock_lease_s", type=float, metavar="SECONDS",
      help="a run on another host whose lock the broker has not seen renewed for this long is dead (default 60)")  # fmt: skip
    a("--s3-endpoint", metavar="URL", help="an S3-compatible store's URL for s3:// inputs and --metrics-dir"
      " (default AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS S3; keys from the standard AWS chain)")  # fmt: skip
    a("--quiet", action="store_const", const=True, help="no progress display")
    a("--master", dest="spark_master", metavar="URL", help="Spark master for `kappa-ingest ingest` (default local[*])")


def add_reprocess_arguments(p: argparse.ArgumentParser) -> None:
    """``kappa-ingest reprocess`` and ``jobs/reprocess.py``: the ingest options, with
    ``--to-topic`` for ``--topic``, and where the history comes from."""
    add_ingest_arguments(p, target="--to-topic")
    a = p.add_argument
    a("--from-topic", required=True, metavar="NAME", help="the topic whose history is replayed")
    a("--runs", metavar="ID,...", help="replay what these runs (or runs resuming them) delivered")
    a("--since", metavar="DATE", help="replay what was delivered from this date or ISO time (UTC) ...")
    a("--until", metavar="DATE", help="... until this one (excluded)")


def load(args: argparse.Namespace) -> IngestConfig:
    """Build the run's configuration: YAML file first, then the command line on top.

    With ``--resume``, the run resumed gives the base instead of the default YAML file:
    its settings, and its input files as it planned them (a glob may match more now)."""
    return validate(merged(args))


def merged(args: argparse.Namespace) -> dict[str, Any]:
    """The settings of :func:`load`, not yet validated."""
    explicit = args.config_file is not None
    path: Any = Path(args.config_file) if explicit else default_config()
    values: dict[str, Any] = {}
    cli = {k: v for k, v in vars(args).items() if v is not None and k in _FIELD_NAMES}
    if cli.get("resume"):
        values.update(resumed.base_values(cli))
    elif path.is_file():
        values.update(_read_yaml(path))
    if explicit and not path.is_file():
        raise UsageError(f"--config {path}: no such file")
    if explicit and cli.get("resume"):
        values.update(_read_yaml(path))
    if "kafka_opts" in cli:
        cli["kafka_opts"] = {**values.get("kafka_opts", {}), **_parse_kv(cli["kafka_opts"])}
    if cli.get("resume"):
        resumed.check_overrides(values, cli)
    values.update(cli)
    if path.is_file() and (explicit or not cli.get("resume")):
        values["config_file"] = str(path)
    return values


def default_config() -> Any:
    """``conf/ingest.yaml`` of the installation (its checkout, or KAPPA_INGEST_HOME's), found
    whatever the working directory; else the copy inside the zip spark-submit.sh ships (a
    driver in cluster deploy mode has no checkout). The report names the file read, or says
    that none was (then the producer runs on Kafka's defaults plus acks=all, idempotence)."""
    from importlib.resources import files

    from kappa_ingest.paths import conf_dir

    installed = conf_dir() / "ingest.yaml"
    if installed.is_file():
        return installed
    shipped = files("kappa_ingest") / "conf" / "ingest.yaml"
    return shipped if shipped.is_file() else installed


_FIELD_NAMES = {f.name for f in fields(IngestConfig)}
_YAML_ALIASES = {
    "input": "inputs",
    "null_value": "null_values",
    "kafka_opt": "kafka_opts",
    "master": "spark_master",
    "lock_lease": "lock_lease_s",
}
_NOT_IN_YAML = {"config_file", "lineage", "topic_config", "from_topic", "runs", "since", "until", "watch_id"}


def _read_yaml(path: Any) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise UsageError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from e
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: expected a mapping of option names to values")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = str(key).replace("-", "_")
        name = _YAML_ALIASES.get(name, name)
        if name == "no_header":
            raise UsageError(f"{path}: use 'header: false' instead of 'no-header'")
        if name not in _FIELD_NAMES or name in _NOT_IN_YAML:
            accepted = ", ".join(sorted(n.replace("_", "-") for n in _FIELD_NAMES - {*_NOT_IN_YAML, "inputs"}))
            raise UsageError(f"{path}: unknown key '{key}'; accepted: input, {accepted}")
        if name == "inputs" and isinstance(value, str):
            value = [value]
        if name == "kafka_opts":
            if not isinstance(value, dict):
                raise UsageError(f"{path}: 'kafka-opt' must be a mapping of Kafka setting names to values")
            value = {str(k): _setting_text(v) for k, v in value.items()}  # references read when used
        elif isinstance(value, str):
            value = credentials.resolve(f"{path}: {key}", value)
        out[name] = value
    return out


def _setting_text(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _parse_kv(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--kafka-opt {item!r}: expected KEY=VALUE, e.g. --kafka-opt linger.ms=20")
        out[key.strip()] = value
    return out
