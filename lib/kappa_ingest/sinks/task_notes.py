"""Warnings raised where tasks run, carried to the driver's report.

An executor's stderr is a file on a worker that nobody reads: a fallback taken there (the
C record loops unavailable, say) would slow a run without a word. Code running in a task
calls :func:`note`; each task's statistics carry the process's notes and which record
loops it ran, and the report lists them per executor.
"""

from __future__ import annotations

_notes: list[str] = []


def note(message: str) -> None:
    """Record a warning once until a task takes it (a Python worker serves many tasks)."""
    if message not in _notes:
        _notes.append(message)


def taken() -> list[str]:
    """The notes of this process since a task last took them (a worker outlives runs: a
    watch's batches, a notebook's runs), the C loops' absence among them where it applies."""
    from kappa_ingest import native

    global _notes
    mine, _notes = _notes, []
    ok, why = native.in_use()
    return (
        mine
        if ok
        else [f"C record loops unavailable ({why}): JSON by polars, the confluent sink by its Python API", *mine]
    )


def record_loops() -> str:
    """``C`` or ``Python``: which record loops this process runs."""
    from kappa_ingest import native

    return "C" if native.in_use()[0] else "Python"
