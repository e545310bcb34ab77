"""Secrets in settings: given by reference, never shown.

A ``--kafka-opt`` or YAML value written ``${NAME}`` is taken from the environment variable
NAME, one written ``@PATH`` from the file PATH (its trailing line end dropped): a password
then never appears on a command line, where ``ps`` shows it to every user of the machine.

Whatever its source, the value of a secret setting (a name with password, secret, jaas,
token in it; the password inside a JAAS line too) is remembered here for the process, and
:func:`mask` replaces it with ``***`` in whatever the run prints or writes: its report
(summary.json, and so the Delta tables and the HTML page made from it) and its error lines.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from kappa_ingest.errors import UsageError

MASK = "***"
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_known: set[str] = set()


def resolve(name: str, value: str) -> str:
    """The value of setting ``name``: ``${VAR}`` from the environment, ``@PATH`` from a file."""
    m = _REFERENCE.fullmatch(value)
    if m:
        if m[1] not in os.environ:
            raise UsageError(f"{name}: environment variable {m[1]} is not set (the value was given as ${{{m[1]}}})")
        return os.environ[m[1]]
    if value.startswith("@") and len(value) > 1:
        path = Path(value[1:]).expanduser()
        try:
            return path.read_text().rstrip("\r\n")
        except OSError as e:
            raise UsageError(f"{name}: cannot read {path} ({e.strerror or e}); the value was given as @{path}") from e
    return value


def remember(value: str) -> None:
    """Mask ``value`` from now on (values of a few characters would mask ordinary text: a
    password that short is refused by any broker worth the name anyway)."""
    if len(value) >= 4:
        _known.add(value)


def mask(text: str) -> str:
    """``text`` with every remembered secret, raw or as JSON writes it, replaced by ``***``."""
    for secret in sorted(_known, key=len, reverse=True):
        text = text.replace(secret, MASK)
        escaped = json.dumps(secret)[1:-1]
        if escaped != secret:
            text = text.replace(escaped, MASK)
    return text


def mask_tree(value: Any) -> Any:
    """A JSON-like structure with every string masked."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, dict):
        return {k: mask_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_tree(v) for v in value]
    return value
