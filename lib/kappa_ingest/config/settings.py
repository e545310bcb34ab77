"""One frozen, typed configuration for a run: ``conf/ingest.yaml`` (or ``--config``)
overlaid by the command line, validated once at start-up.

Keys are the long option names of contract §1 (``key-column``; ``key_column`` is accepted
too). Errors name the bad key and what it accepts, and exit with status 2.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kappa_ingest.config import resumed
from kappa_ingest.config.choices import (
    DEFAULT_LEDGER_TOPIC,
    DEFAULT_SINK,
    GATES,
    ON_CHANGED,
    SINKS,
    VERIFY,
    parse_size,
    resolve_mode,
)
from kappa_ingest.errors import UsageError
from kappa_ingest.kafka import credentials
from kappa_ingest.kafka.settings import DEFAULT_PRODUCER_SETTINGS, is_secret, jaas_fields, validate_settings
from kappa_ingest.s3.directory import Directory

MIN_SPLIT_SIZE = 1 << 20


@dataclass(frozen=True)
class IngestConfig:
    """Every setting of one ingest run. Built by :func:`load`; never mutated."""

    inputs: tuple[str, ...]
    topic: str
    bootstrap_servers: str | None = None
    sink: str = DEFAULT_SINK
    partitions: int | None = None
    split_size: int | None = None  # with --partitions, a task's share in splits of at most this (None: UNIT_BYTES)
    topic_partitions: int = 2
    replication_factor: int = 1
    key_column: str | None = None
    event_time_column: str | None = None
    event_time_format: str | None = None
    schema: str | None = None
    null_values: tuple[str, ...] = ()  # fields equal to one of these are null, as empty ones are
    delimiter: str = ","
    quote: str = '"'
    escape: str = '"'
    encoding: str = "utf-8"
    header: bool = True
    multiline: bool = False
    strict_header: bool = False  # files whose headers differ are refused, not ingested each by its own
    strict_size: bool = False  # a record too large for Kafka fails the run (exit 3), not quarantined
    kafka_opts: dict[str, str] = field(default_factory=dict)
    target_rate: float | None = None
    metrics_dir: str = "./metrics"
    run_id: str = ""
    dry_run: bool = False
    quiet: bool = False
    spark_master: str | None = None
    config_file: str | None = None
    delivery: str = ""  # resolved by validate(): at-least-once | exactly-once
    resume: str | None = None  # the run this one resumes
    lineage: str = ""  # the first run of a resumed chain (this run's id if it resumes none)
    ledger_topic: str = DEFAULT_LEDGER_TOPIC
    lock: bool = True  # one run at a time per topic (saves work; delivery does not rest on it)
    verify: str = "auto"  # auto: offsets where they can vouch for the run alone, else a read back | read-back
    lock_lease_s: float = 60.0  # how long a claim unrenewed by the broker's clock stays alive
    incremental: bool = False  # send only units the ledger does not show delivered to the topic
    on_changed: str = "refuse"  # a delivered file that changed since: refuse | resend
    max_files: int | None = None  # bounds of one incremental run, oldest files first
    max_bytes: int | None = None
    dead_letter_topic: str | None = None  # quarantined rows also go there, raw text as value
    expectations: str | None = None  # a Great Expectations suite run on the parsed rows before sending
    quality_gate: str | None = None  # fail | quarantine | warn (fail when a suite is given)
    # kappa-ingest reprocess: history delivered to from_topic, replayed into topic
    from_topic: str | None = None
    runs: tuple[str, ...] = ()  # replay what these runs delivered ...
    since: str | None = None  # ... or what was delivered in [since, until)
    until: str | None = None
    order_by_event_time: bool = False  # each key's records in event-time order in its partition
    replay_speed: float | None = None  # event-time pacing, X times real time; None: unpaced
    topic_config: dict[str, str] = field(default_factory=dict)  # configs of a topic the run creates
    s3_endpoint: str | None = None  # an S3-compatible store's URL (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL)
    watch_id: str | None = None  # a watch's batch: the watch (which holds the topic's lock for its batches)

    @property
    def metrics(self) -> Directory:
        """Where the run's reports go (``metrics_dir``: a local directory or a store's prefix)."""
        return Directory.at(self.metrics_dir, self.s3_endpoint)

    def producer_settings(self) -> dict[str, str]:
        """Kafka (Java-named) producer settings: the defaults overlaid by ``kafka_opts``, with
        ``${NAME}`` and ``@PATH`` values read (credentials); secrets are remembered to be masked."""
        return {**DEFAULT_PRODUCER_SETTINGS, **resolved_settings(self.kafka_opts)}

    def masked(self) -> dict[str, Any]:
        """Every setting, for the run report, with secrets replaced by ``***``; a value given
        as ``${NAME}`` or ``@PATH`` is shown as given (a resumed run reads it again)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        opts = {**DEFAULT_PRODUCER_SETTINGS, **self.kafka_opts}
        out["kafka_opts"] = {k: v if _is_reference(v) else credentials.MASK if is_secret(k) else v
                             for k, v in opts.items()}  # fmt: skip
        if out["bootstrap_servers"]:
            out["bootstrap_servers"] = _mask_url_password(out["bootstrap_servers"])
        return out


def resolved_settings(opts: dict[str, str]) -> dict[str, str]:
    """``opts`` with references read; the values of secret settings remembered for masking."""
    out = {}
    for name, value in opts.items():
        out[name] = credentials.resolve(f"--kafka-opt {name}", value)
        if is_secret(name):
            credentials.remember(out[name])
            password = jaas_fields(out[name]).get("password")
            if password:  # a JAAS line's, as written in it and unquoted
                credentials.remember(password)
                credentials.remember(password.replace("\\", "\\\\").replace('"', '\\"'))
    return out


def _is_reference(value: str) -> bool:
    return bool(re.fullmatch(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}", value)) or (value.startswith("@") and len(value) > 1)


def _mask_url_password(text: str) -> str:
    return re.sub(r"(//[^:/@]+:)[^@]+@", r"\1***@", text)


def new_run_id(now: datetime | None = None) -> str:
    """A time-sortable run id: ``20261122T003425Z-1a2b3c``."""
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%S}Z-{secrets.token_hex(3)}"


def run_ids(value: str | tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """``--runs A,B`` (or a YAML list) as a tuple of run ids."""
    if isinstance(value, str):
        return tuple(r.strip() for r in value.split(",") if r.strip())
    return tuple(value or ())


def _check_reprocess(v: dict[str, Any]) -> None:
    """``kappa-ingest reprocess``: where the history comes from, and how it is replayed."""
    speed = v.get("replay_speed")
    if speed is not None:
        if str(speed) == "max":
            v["replay_speed"] = None
        else:
            try:
                v["replay_speed"] = float(speed)
            except ValueError as e:
                raise UsageError(f"--replay-speed {speed!r}: a factor of real time (e.g. 60) or max") from e
            if v["replay_speed"] <= 0:
                raise UsageError(f"--replay-speed {speed!r}: a factor of real time above 0, or max")
            if not v.get("event_time_column"):
                raise UsageError("--replay-speed paces by event time: give --event-time-column")
    if v.get("order_by_event_time") and not (v.get("event_time_column") and v.get("key_column")):
        raise UsageError("--order-by-event-time orders each key's records: give --key-column and --event-time-column")
    v["runs"] = run_ids(v.get("runs"))
    if not v.get("from_topic"):
        if v["runs"] or v.get("since") or v.get("until"):
            raise UsageError("--runs, --since and --until choose history to replay: use kappa-ingest reprocess")
        return
    if v.get("from_topic") == v.get("topic"):
        raise UsageError(f"--to-topic {v['topic']}: a new topic version, not --from-topic itself")
    if not v.get("bootstrap_servers"):
        raise UsageError("reprocess reads the delivery ledger of --from-topic's cluster: give --bootstrap-servers")
    if v.get("incremental") or v.get("resume"):
        raise UsageError("reprocess with --incremental or --resume: replay into a new topic version once")


def _check_quality(v: dict[str, Any]) -> None:
    if v.get("quality_gate") is not None and v["quality_gate"] not in GATES:
        raise UsageError(f"--quality-gate {v['quality_gate']!r}: accepted: {', '.join(GATES)}")
    if v.get("expectations") is None:
        if v.get("quality_gate") is not None:
            raise UsageError("--quality-gate needs --expectations FILE (a Great Expectations suite)")
        return
    v["expectations"] = str(v["expectations"])
    if not Path(v["expectations"]).is_file():
        raise UsageError(f"--expectations {v['expectations']}: no such file")
    v["quality_gate"] = v.get("quality_gate") or "fail"


# Spark's CSV reader accepts these charsets only; Python's codec names map onto them.
SPARK_CHARSETS = {
    "utf_8": "utf-8", "iso8859_1": "iso-8859-1", "ascii": "us-ascii", "utf_16": "utf-16",
    "utf_16_be": "utf-16be", "utf_16_le": "utf-16le", "utf_32": "utf-32", "cp1252": "windows-1252",
}  # fmt: skip


def spark_charset(name: str) -> str:
    """The Spark charset name for an encoding name Python knows (``latin-1`` → ``iso-8859-1``)."""
    import codecs

    try:
        canonical = codecs.lookup(name).name.replace("-", "_")
    except LookupError:
        canonical = ""
    if canonical not in SPARK_CHARSETS:
        raise UsageError(
            f"--encoding {name!r}: not supported; accepted: {', '.join(sorted(set(SPARK_CHARSETS.values())))}"
        )
    return SPARK_CHARSETS[canonical]


def _single_char(name: str, value: Any) -> str:
    text = str(value)
    if text in ("\\t", "tab"):
        return "\t"
    if len(text) != 1:
        raise UsageError(f"--{name} {text!r}: expected one character")
    return text


def _check_incremental(v: dict[str, Any]) -> None:
    if v.get("on_changed", "refuse") not in ON_CHANGED:
        raise UsageError(f"--on-changed {v['on_changed']!r}: accepted: {', '.join(ON_CHANGED)}")
    given = {"on_changed": v.get("on_changed") not in (None, "refuse"), "max_files": v.get("max_files") is not None,
             "max_bytes": v.get("max_bytes") is not None}  # fmt: skip
    bounded = [f"--{n.replace('_', '-')}" for n, set_ in given.items() if set_]
    if bounded and not v.get("incremental"):
        raise UsageError(f"{' and '.join(bounded)} without --incremental: they choose what an incremental run sends")
    if v.get("incremental") and v.get("dry_run"):
        raise UsageError("--incremental with --dry-run: a dry run reads no ledger; give one of them")
    if v.get("incremental") and v.get("resume"):
        raise UsageError("--incremental with --resume: a resumed run sends the rest of one run; choose one")


def _check_store(v: dict[str, Any]) -> None:
    """Inputs in an object store: what reaches them, and the options only Spark's own CSV
    reader has (it cannot reach a store here), refused before Spark starts."""
    from urllib.parse import urlparse

    from kappa_ingest.s3.access import S3Access, is_s3
    from kappa_ingest.source.opening import needs_spark_reader

    if v.get("s3_endpoint") is not None:
        v["s3_endpoint"] = S3Access.resolve(str(v["s3_endpoint"])).endpoint
    for i in v["inputs"]:
        if urlparse(i).scheme in ("gs", "gcs", "abfs", "abfss", "wasb", "wasbs", "az"):
            raise UsageError(
                f"input {i}: Google Cloud Storage and Azure are not read here (no emulator to test them against);"
                " copy the files to S3 (or an S3-compatible store) or to a path every executor can read"
            )
    objects = [i for i in v["inputs"] if is_s3(i)]
    if not objects:
        return
    escape, quote = v.get("escape", '"'), v.get("quote", '"')
    if v.get("multiline") or escape != quote:
        raise UsageError(needs_spark_reader(objects[0], bool(v.get("multiline")), escape, quote))


# Long: one check per setting, each with its own message, in the order of IngestConfig's fields.
def validate(values: dict[str, Any]) -> IngestConfig:
    """Check every value and return the frozen configuration; UsageError names the bad one."""
    v = dict(values)
    _check_reprocess(v)
    if not v.get("inputs"):
        raise UsageError("no input: give --input PATH (a file, directory or glob)")
    if not v.get("topic"):
        raise UsageError("no topic: give --topic NAME")
    v["inputs"] = tuple(str(i) for i in v["inputs"])
    topic = str(v["topic"])
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", topic) or topic in (".", ".."):
        raise UsageError(f"--topic {topic!r}: Kafka topic names use only letters, digits, '.', '_' and '-'")
    sink = v.get("sink", DEFAULT_SINK)
    if sink not in SINKS:
        raise UsageError(f"sink {sink!r} is not known; accepted: {', '.join(SINKS)}")
    for name in ("partitions", "topic_partitions", "replication_factor", "max_files"):
        if v.get(name) is not None:
            try:
                v[name] = int(v[name])
            except (TypeError, ValueError) as e:
                raise UsageError(f"--{name.replace('_', '-')} {v[name]!r}: expected a positive whole number") from e
            if v[name] < 1:
                raise UsageError(f"--{name.replace('_', '-')} {v[name]}: expected a positive whole number")
    if v.get("target_rate") is not None:
        try:
            v["target_rate"] = float(v["target_rate"])
        except (TypeError, ValueError) as e:
            raise UsageError(f"--target-rate {v['target_rate']!r}: expected rows per second") from e
        if v["target_rate"] <= 0:
            raise UsageError(f"--target-rate {v['target_rate']}: expected a positive rate in rows per second")
    for name in ("delimiter", "quote", "escape"):
        if name in v:
            v[name] = _single_char(name, v[name])
    if "encoding" in v:
        v["encoding"] = spark_charset(str(v["encoding"]))
    if bool(v.get("event_time_format")) and not v.get("event_time_column"):
        raise UsageError("--event-time-format needs --event-time-column")
    nulls = v.get("null_values") or ()
    nulls = [nulls] if isinstance(nulls, str) else nulls
    if not isinstance(nulls, (list, tuple)) or not all(isinstance(t, str) and t for t in nulls):
        raise UsageError(f"--null-value {nulls!r}: expected tokens of at least one character")
    v["null_values"] = tuple(dict.fromkeys(nulls))
    if v.get("max_bytes") is not None:
        v["max_bytes"] = parse_size(v["max_bytes"])
    if v.get("split_size") is not None:
        v["split_size"] = parse_size(v["split_size"], "--split-size")
        if v["split_size"] < MIN_SPLIT_SIZE:  # a transaction, a producer and a ledger entry each
            raise UsageError(f"--split-size {v['split_size']} bytes: at least 1M")
        if v.get("incremental"):
            raise UsageError("--split-size with --incremental: scheduled runs split every file alike (64M), so that"
                             " two runs cut a new file into the same splits")  # fmt: skip
    if v.get("lock_lease_s") is not None:
        try:
            v["lock_lease_s"] = float(v["lock_lease_s"])
        except (TypeError, ValueError) as e:
            raise UsageError(f"--lock-lease {v['lock_lease_s']!r}: expected seconds") from e
        if v["lock_lease_s"] < 1:
            raise UsageError(f"--lock-lease {v['lock_lease_s']}: at least 1 second")
    _check_incremental(v)
    if v.get("verify", "auto") not in VERIFY:
        raise UsageError(f"--verify {v['verify']!r}: accepted: {', '.join(VERIFY)}")
    for name in ("header", "multiline", "strict_header", "strict_size", "dry_run", "quiet", "incremental",
                 "order_by_event_time", "lock"):  # fmt: skip
        if name in v and not isinstance(v[name], bool):
            raise UsageError(f"'{name.replace('_', '-')}': expected true or false, got {v[name]!r}")
    v["kafka_opts"] = {str(k): str(value) for k, value in (v.get("kafka_opts") or {}).items()}
    settings = {**DEFAULT_PRODUCER_SETTINGS, **resolved_settings(v["kafka_opts"])}
    validate_settings(settings, sink)
    v["delivery"] = resolve_mode(v.get("delivery") or None, sink, settings)
    if v.get("resume") and v.get("dry_run"):
        raise UsageError("--resume with --dry-run: a dry run sends nothing to resume")
    ledger_topic = str(v.get("ledger_topic") or DEFAULT_LEDGER_TOPIC)
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", ledger_topic) or ledger_topic == topic:
        raise UsageError(f"--ledger-topic {ledger_topic!r}: a topic name of its own (letters, digits, '.', '_', '-')")
    v["ledger_topic"] = ledger_topic
    _check_quality(v)
    _check_store(v)
    if v.get("dead_letter_topic") is not None:
        dlq = str(v["dead_letter_topic"])
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", dlq) or dlq in (topic, ledger_topic):
            raise UsageError(
                f"--dead-letter-topic {dlq!r}: a topic name of its own (letters, digits, '.', '_', '-'),"
                " not the run's topic or the ledger's"
            )
        v["dead_letter_topic"] = dlq
    if v.get("bootstrap_servers") is not None:
        v["bootstrap_servers"] = str(v["bootstrap_servers"])
        if not re.fullmatch(r"[^,\s]+:\d+(,[^,\s]+:\d+)*", v["bootstrap_servers"]):
            raise UsageError(f"--bootstrap-servers {v['bootstrap_servers']!r}: expected HOST:PORT[,HOST:PORT...]")
    v["run_id"] = str(v.get("run_id") or new_run_id())
    if not re.fullmatch(r"[A-Za-z0-9._-]+", v["run_id"]):
        raise UsageError(f"--run-id {v['run_id']!r}: use only letters, digits, '.', '_' and '-'")
    v["lineage"] = v["run_id"]
    if v.get("resume"):
        where = Directory.at(str(v.get("metrics_dir") or "./metrics"), v.get("s3_endpoint"))
        original = resumed.find(where, str(v["resume"]), topic)
        v["resume"] = original["run_id"]
        v["lineage"] = (original.get("config") or {}).get("lineage") or original["run_id"]
        if v["run_id"] == v["resume"]:
            raise UsageError(f"--run-id {v['run_id']}: a resumed run needs a name of its own")
    return IngestConfig(**v)
