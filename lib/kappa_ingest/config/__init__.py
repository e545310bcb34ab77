"""A run's settings as one frozen, typed object: ``conf/ingest.yaml`` (or ``--config``)
overlaid by the command line, validated once at start-up. Errors name the bad key and
what it accepts, and exit with status 2.

- ``settings``      :class:`IngestConfig` and :func:`validate`
- ``command_line``  the options of contract §1, the YAML file, :func:`load`
- ``resumed``       ``--resume``: the resumed run's settings as the base
- ``choices``       sinks, delivery modes (and which a sink allows), quality gates, defaults
"""

from kappa_ingest.config.command_line import (
    add_ingest_arguments,
    add_reprocess_arguments,
    default_config,
    load,
    merged,
)
from kappa_ingest.config.settings import IngestConfig, new_run_id, parse_size, resolved_settings, run_ids, validate

__all__ = [
    "IngestConfig",
    "add_ingest_arguments",
    "add_reprocess_arguments",
    "default_config",
    "load",
    "merged",
    "new_run_id",
    "parse_size",
    "resolved_settings",
    "run_ids",
    "validate",
]
