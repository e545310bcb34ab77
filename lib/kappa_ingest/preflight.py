"""Checks made before Spark starts, so a bad run fails in a second, not after the JVM's start-up."""

from __future__ import annotations

from kappa_ingest.config import IngestConfig
from kappa_ingest.kafka.topics import Admin
from kappa_ingest.source import opening
from kappa_ingest.source.inputs import resolve_inputs


def preflight(cfg: IngestConfig) -> int:
    """The inputs exist and are readable, a metrics directory in a store can be reached,
    and a configured Kafka answers; returns the inputs' local bytes."""
    opening.for_run(cfg.s3_endpoint)
    _, input_bytes = resolve_inputs(cfg.inputs)
    cfg.metrics.check()
    if cfg.bootstrap_servers and not cfg.dry_run:
        with Admin(cfg.bootstrap_servers, cfg.producer_settings()) as admin:
            admin.check_reachable()
    return input_bytes
