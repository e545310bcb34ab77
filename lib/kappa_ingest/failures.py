"""What a failed Spark job means, in one line for people, with the exit code of its cause.

A task's error reaches the driver as text (a Python worker's traceback inside a Java
exception); the names of kappa-ingest's own task errors (``DeliveryFailed``,
``TransactionFailed``, ``HeaderMismatch``) and of Kafka's and Spark's are matched there.
"""

from __future__ import annotations

import re

from kappa_ingest.errors import InputError, KafkaUnavailable, KappaError

# What a failed Spark job's message means, for the one line people get.
_CAUSES = [
    (re.compile(r"TransactionFailed: (.*)"), KafkaUnavailable, "{0}"),
    (re.compile(r"DeliveryFailed: (.*)"), KafkaUnavailable, "{0}"),
    (re.compile(r"HeaderMismatch: (.*)"), InputError, "{0}"),
    (re.compile(r"(kafka\.errors\.\w+|KafkaTimeoutError|KafkaException)[:\s]*(.*)"), KafkaUnavailable,
     "Kafka refused or did not answer the producer: {0}: {1}"),
    (re.compile(r"(SaslAuthenticationException|AuthorizationException)[:\s]*(.*)"), KafkaUnavailable,
     "Kafka refused the producer: {0}: {1}"),
    (re.compile(r"(org\.apache\.kafka\.common\.errors\.\w+Exception)[:\s]*(.*)"), KafkaUnavailable,
     "Kafka refused the records: {0}: {1}"),
    (re.compile(r"(FileNotFoundException|PATH_NOT_FOUND)[:\s]*(.*)"), InputError,
     "input disappeared or is unreadable: {1}; check --input"),
    (re.compile(r"CSV header does not conform to the schema.*?(Header: .*)"), InputError,
     "the input files' headers differ ({0}); ingest files with one header per run"),
    (re.compile(r"(MALFORMED_RECORD_IN_PARSING|MalformedInputException|CharacterCodingException)(.*)"), InputError,
     "input cannot be decoded as configured: {0}{1}; check --encoding and the CSV dialect"),
]  # fmt: skip


def classify(e: BaseException) -> KappaError:
    """The error, with its exit code, that names a failed Spark job's cause."""
    if isinstance(e, KappaError):
        return e
    text = str(e)
    for pattern, kind, message in _CAUSES:
        m = pattern.search(text)
        if m:
            return kind(message.format(*(g.strip()[:300] for g in m.groups())))
    return KappaError(f"the Spark job failed: {_cause_line(text)[:400]}")


def spark_action(action):  # type: ignore[no-untyped-def]
    """Run a Spark action; a failed job raises the error that names its cause."""
    try:
        return action()
    except KappaError:
        raise
    except Exception as e:
        raise classify(e) from e


def _cause_line(text: str) -> str:
    """The line that names the cause: a Python traceback's last ``XxxError: ...`` line if
    the failure came from a Python worker, else the message's first line."""
    errors = re.findall(r"^([\w.]+(?:Error|Exception|Failed|Mismatch): .+)$", text, flags=re.MULTILINE)
    python_side = [line for line in errors if not line.startswith(("org.", "java."))]
    if "Python worker" in text and python_side:
        return python_side[0]
    return text.strip().splitlines()[0] if text.strip() else "unknown error"
