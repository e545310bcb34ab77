"""What a run has to send, chosen from the ledger before anything is read: everything the
command names (a plain run), what a ``--resume`` run's original left undelivered, or what
an ``--incremental`` run (or one batch of a watch) finds the ledger lacks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kappa_ingest.delivery import incremental, resume
from kappa_ingest.delivery.incremental import Selection
from kappa_ingest.delivery.ledger import Entry
from kappa_ingest.delivery.resume import Resumption
from kappa_ingest.kafka.settings import connection_conf
from kappa_ingest.source.splits import Plan, Unit


@dataclass(frozen=True)
class Work:
    """A run's work: at most one of ``resumption`` and ``selection``; neither: all of its inputs."""

    resumption: Resumption | None = None
    selection: Selection | None = None

    @property
    def earlier(self) -> Resumption | Selection | None:
        """What the ledger showed delivered before, and the files still to read."""
        return self.resumption or self.selection

    @property
    def nothing_left(self) -> bool:
        return self.earlier is not None and self.earlier.nothing_left

    @property
    def delivered(self) -> dict[Unit, Entry]:
        return self.earlier.delivered if self.earlier else {}

    @property
    def skip(self) -> frozenset[Unit]:
        return frozenset(self.delivered)

    @property
    def plan(self) -> Plan | None:
        """The plan the ledger's entries pin (a resumed run's, half-delivered files'), if any."""
        return self.earlier.plan if self.earlier else None

    @property
    def paths(self) -> list[str] | None:
        return self.earlier.paths if self.earlier else None

    @property
    def ledger_end(self) -> dict[int, int] | None:
        return self.earlier.ledger_end if self.earlier else None


def prepare(cfg: Any, servers: Callable[[], str]) -> Work:
    """``cfg``'s work (an IngestConfig): the ledger read for ``--resume`` (its Kafka is the
    original run's) and ``--incremental`` (at ``servers()``); a plain run asks Kafka nothing."""
    if cfg.resume:
        assert cfg.bootstrap_servers, "a resumed run's Kafka comes from the run it resumes"
        return Work(resumption=resume.prepare(cfg, connection_conf(cfg.producer_settings(), cfg.bootstrap_servers)))
    if cfg.incremental:
        return Work(selection=incremental.prepare(cfg, connection_conf(cfg.producer_settings(), servers())))
    return Work()
