"""``--resume RUN_ID|last``: the settings a resumed run starts from (the original run's,
from its ``summary.json``, its planned files as input), and what its command line may not
change."""

from __future__ import annotations

import json
from typing import Any

from kappa_ingest.config.choices import parse_size
from kappa_ingest.errors import UsageError
from kappa_ingest.s3.directory import Directory, MetricsDir

# Settings of the original run that a resumed run does not take over.
_OWN = {"run_id", "config_file", "resume", "quiet", "dry_run", "lineage"}  # lineage: config.validate finds it
MASKED = "***"


def summaries(metrics_dir: MetricsDir) -> list[dict[str, Any]]:
    where = Directory.at(metrics_dir)
    out = []
    for run_id in where.children("runs"):
        try:
            text = where.read_text("runs", run_id, "summary.json")
            if text is not None:
                out.append(json.loads(text))
        except (OSError, ValueError):
            continue  # a report being written, or damaged: not a run to resume
    return out


def find(metrics_dir: MetricsDir, ref: str, topic: str | None = None) -> dict[str, Any]:
    """The report of run ``ref`` (or of the last run, for ``last``, on ``topic`` if given)."""
    if ref != "last":
        text = Directory.at(metrics_dir).read_text("runs", ref, "summary.json")
        if text is None:
            raise UsageError(
                f"--resume {ref}: no report of that run in {metrics_dir}/runs; give --metrics-dir of that run"
            )
        return json.loads(text)
    runs = [s for s in summaries(metrics_dir) if not s.get("dry_run") and (topic is None or s.get("topic") == topic)]
    if not runs:
        where = f" on topic {topic}" if topic else ""
        raise UsageError(f"--resume last: no run{where} in {metrics_dir}/runs to resume")
    return max(runs, key=lambda s: s.get("started_at") or "")


def base_values(cli: dict[str, Any]) -> dict[str, Any]:
    """The settings a resumed run starts from: the original run's, its planned files as input."""
    metrics_dir = cli.get("metrics_dir") or "./metrics"
    s = find(Directory.at(metrics_dir, cli.get("s3_endpoint")), cli["resume"], cli.get("topic"))
    rid = s["run_id"]
    if s.get("dry_run"):
        raise UsageError(f"--resume {rid}: a dry run sends nothing to resume")
    if not s.get("plan"):
        raise UsageError(
            f"--resume {rid}: that run stopped before it planned its input, so it sent nothing; run it again"
        )
    config = s.get("config") or {}
    values = {k: v for k, v in config.items() if k not in _OWN and v is not None}
    values["inputs"] = [f["path"] for f in s["plan"]["files"]]
    values["resume"] = rid
    values["metrics_dir"] = metrics_dir
    if not config.get("bootstrap_servers"):
        if (s.get("broker") or {}).get("embedded"):
            raise UsageError(
                f"--resume {rid}: that run used an embedded broker, which stopped with it; nothing to resume into"
            )
        values["bootstrap_servers"] = s.get("bootstrap_servers")
    return values


def check_overrides(base: dict[str, Any], cli: dict[str, Any]) -> None:
    """What a resumed run's command line may not change, and secrets it must give again."""
    rid = base["resume"]
    if cli.get("topic") not in (None, base.get("topic")):
        raise UsageError(f"--resume {rid}: that run sent to topic {base.get('topic')!r}; a resumed run sends there too")
    if cli.get("inputs"):
        from kappa_ingest.source.inputs import resolve_inputs
        from kappa_ingest.source.splits import canonical_file

        given = {canonical_file(p) for p in resolve_inputs(tuple(cli["inputs"]))[0]}
        planned = set(base["inputs"])
        if given != planned:
            diff = sorted(given ^ planned)[:3]
            raise UsageError(f"--resume {rid}: --input names other files than that run read ({', '.join(diff)}, ...)")
    if cli.get("partitions") not in (None, base.get("partitions")):
        raise UsageError(f"--resume {rid}: that run used --partitions {base.get('partitions')}; keep it")
    if cli.get("split_size") is not None and parse_size(cli["split_size"], "--split-size") != base.get("split_size"):
        raise UsageError(f"--resume {rid}: a resumed run keeps the splits that run planned; drop --split-size")
    opts = cli.get("kafka_opts") or base.get("kafka_opts") or {}
    masked = sorted(k for k, v in opts.items() if v == MASKED)
    if masked:
        raise UsageError(
            f"--resume {rid}: that run's {', '.join(masked)} is not kept in its report; give it again with --kafka-opt"
        )
