"""What a failed Spark job means, in one line for people, with the exit code of its cause.

Spark names its own errors with error conditions (``PATH_NOT_FOUND``,
``FAILED_READ_FILE.NO_HINT``, ...): where the exception or one of its causes carries one,
that decides. A task's own error reaches the driver as text (a Python worker's traceback
inside a Java exception); the names of kappa-ingest's task errors (``DeliveryFailed``,
``TransactionFailed``, ``Fenced``, ``RunSuperseded``, ``HeaderMismatch``, ``RecordTooLarge``,
the object store's ``StoreUnavailable`` and ``ObjectChanged``, and the
:mod:`kappa_ingest.errors` a task raises itself) and of Kafka's and the store's are matched there.
"""

from __future__ import annotations

import re

from kappa_ingest.errors import InputError, KafkaUnavailable, KappaError, LockLost
from kappa_ingest.s3.access import StoreUnavailable
from kappa_ingest.source.splits import canonical_file

# What a failed Spark job's message means, for the one line people get.
_CAUSES = [
    # kappa-ingest's own errors, raised in a task (reading the ledger, say), keep their kind.
    (re.compile(r"(?:kappa_ingest\.errors\.)?KafkaUnavailable: (.*)"), KafkaUnavailable, "{0}"),
    (re.compile(r"(?:kappa_ingest\.errors\.)?InputError: (.*)"), InputError, "{0}"),
    (re.compile(r"(?:kappa_ingest\.errors\.)?LockLost: (.*)"), LockLost, "{0}"),
    (re.compile(r"(?:kappa_ingest\.s3\.access\.)?StoreUnavailable: (.*)"), StoreUnavailable, "{0}"),
    (re.compile(r"(?:kappa_ingest\.s3\.objects\.)?ObjectChanged: (.*)"), InputError, "{0}"),
    # pyarrow's S3 client failing a read after its retries (the object opened, then the store went away).
    (re.compile(r"(?:OSError|ArrowIOError): (.*AWS Error .*)"), StoreUnavailable,
     "the object store failed while a task read its split: {0}; check the store (and --s3-endpoint)"),
    (re.compile(r"RunSuperseded: (.*)"), LockLost, "{0}"),
    (re.compile(r"TransactionFailed: (.*)"), KafkaUnavailable, "{0}"),
    (re.compile(r"Fenced: (.*)"), KafkaUnavailable, "{0}"),
    (re.compile(r"DeliveryFailed: (.*)"), KafkaUnavailable, "{0}"),
    (re.compile(r"HeaderMismatch: (.*)"), InputError, "{0}"),
    (re.compile(r"RecordTooLarge: (.*)"), InputError, "{0}"),
    # The name followed by its message, or alone on its line: not a quoted ``except KafkaException as e:``.
    (re.compile(r"(?m)(kafka\.errors\.\w+|KafkaTimeoutError|KafkaException)(?::[ \t]*(.*)|[ \t]*$)"), KafkaUnavailable,
     "Kafka refused or did not answer the producer: {0}: {1}"),
    (re.compile(r"(SaslAuthenticationException|AuthorizationException)[:\s]*(.*)"), KafkaUnavailable,
     "Kafka refused the producer: {0}: {1}"),
    (re.compile(r"(org\.apache\.kafka\.common\.(?:errors\.)?\w+Exception)[:\s]*(.*)"), KafkaUnavailable,
     "Kafka refused the records: {0}: {1}"),
    (re.compile(r"(FileNotFoundException|PATH_NOT_FOUND)[:\s]*(.*)"), InputError,
     "input disappeared or is unreadable: {1}; check --input"),
    (re.compile(r"CSV header does not conform to the schema.*?(Header: .*)"), InputError,
     "the input files' headers differ ({0}); ingest files with one header per run"),
    (re.compile(r"(MALFORMED_RECORD_IN_PARSING|MalformedInputException|CharacterCodingException)(.*)"), InputError,
     "input cannot be decoded as configured: {0}{1}; check --encoding and the CSV dialect"),
]  # fmt: skip


def conditions(e: BaseException) -> list[tuple[str, str]]:
    """``(condition, message)`` of the exception and its Java causes that carry a Spark error
    condition, outermost first."""
    out = []
    condition = getattr(e, "getCondition", None)
    if callable(condition) and condition():
        out.append((condition(), str(e)))
    cause = getattr(e, "java_exception", None)  # a Py4JJavaError: walk the Java cause chain
    seen = 0
    while cause is not None and seen < 20:
        seen += 1
        try:
            name = cause.getCondition() if hasattr(cause, "getCondition") else None
        except Exception:  # noqa: BLE001 - not a SparkThrowable
            name = None
        if name:
            out.append((str(name), str(cause.getMessage())))
        cause = cause.getCause()
    return out


def _root_cause(e: BaseException) -> str:
    """The innermost Java cause's ``Class: message`` (what went wrong below Spark's wrapper)."""
    cause, last = getattr(e, "java_exception", None), None
    while cause is not None:
        last, cause = cause, cause.getCause()
    return "" if last is None else f"{last.getClass().getSimpleName()}: {last.getMessage()}"


def _by_condition(e: BaseException) -> KappaError | None:
    for name, message in conditions(e):
        if name == "PATH_NOT_FOUND":
            return InputError(f"input disappeared or is unreadable: {_first_line(message)[:300]}; check --input")
        if name.startswith("FAILED_READ_FILE"):
            m = re.search(r"reading file (\S+?)\.?(\s|$)", message)
            where = canonical_file(m.group(1)) if m else "an input file"
            cause = _root_cause(e)
            return InputError(f"could not read {where}: {cause[:300] or _first_line(message)[:300]}"
                              "; the file is damaged (truncated, or not what its name says) or changed while"
                              " the run read it")  # fmt: skip
        if name.startswith("MALFORMED_RECORD_IN_PARSING"):
            return InputError(f"input cannot be parsed as configured: {_first_line(message)[:300]};"
                              " check --encoding and the CSV dialect")  # fmt: skip
    return None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def classify(e: BaseException) -> KappaError:
    """The error, with its exit code, that names a failed Spark job's cause."""
    if isinstance(e, KappaError):
        return e
    text = str(e)
    ours = re.search(r"(RunSuperseded|TransactionFailed|DeliveryFailed|Fenced|HeaderMismatch|RecordTooLarge|"
                     r"KafkaUnavailable|InputError|LockLost|StoreUnavailable|ObjectChanged): ", text)  # fmt: skip
    if not ours:  # a Python task's own error wins over the job failure Spark wraps it in
        named = _by_condition(e)
        if named is not None:
            return named
    # The traceback's error line first: the source lines quoted above it can name an
    # exception too (``except KafkaException as e:``).
    for where in filter(None, (python_error(text), text)):
        for pattern, kind, message in _CAUSES:
            m = pattern.search(where)
            if m:
                return kind(message.format(*((g or "").strip()[:300] for g in m.groups())))
    return KappaError(f"the Spark job failed: {_cause_line(text)[:400]}")


def spark_action(action):  # type: ignore[no-untyped-def]
    """Run a Spark action; a failed job raises the error that names its cause."""
    try:
        return action()
    except KappaError:
        raise
    except Exception as e:
        raise classify(e) from e


# Where a chained traceback (``raise X from e``) goes on to the error raised: Python prints the
# cause first (pyspark drops it only from the tracebacks it simplifies, the default; a user
# may turn that off).
_CHAINED = ("The above exception was the direct cause of the following exception:",
            "During handling of the above exception, another exception occurred:")  # fmt: skip


def python_error(text: str) -> str | None:
    """A Python worker's error in a Spark failure's text: its traceback's ``Name: message``
    line (of a chained traceback, the error raised, not its cause), or the name alone where
    the error had no message (``TimeoutError``), or None."""
    raised = max((text.rfind(m) + len(m) for m in _CHAINED if m in text), default=0)
    return _python_error_line(text[raised:]) or _python_error_line(text)


def _python_error_line(text: str) -> str | None:
    errors = re.findall(
        r"^([\w.]+(?:Error|Exception|Failed|Mismatch|Fenced|Superseded|Unavailable|Lost|Interrupt|Exit)(?:: .*)?)\s*$",
        text,
        flags=re.MULTILINE,
    )
    python_side = [line for line in errors if not line.startswith(("org.", "java.", "py4j."))]
    return python_side[0] if python_side else None


def _cause_line(text: str) -> str:
    """The line that names the cause: a Python traceback's error line if the failure came
    from a Python worker, with the frame that raised it, else the message's first line."""
    python_side = python_error(text)
    # "Python worker" is pyspark's wording for a DataFrame task's failure; an RDD task's
    # reaches the driver as the JVM's PythonException with the traceback alone.
    if ("Python worker" in text or "Traceback (most recent call last)" in text) and python_side:
        where = _raised_at(text, python_side)
        return f"{python_side} (raised at {where})" if where else python_side
    return text.strip().splitlines()[0] if text.strip() else "unknown error"


_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)', re.MULTILINE)


def _raised_at(text: str, error: str) -> str | None:
    """``package/module.py:LINE in function`` of the innermost frame above ``error`` in its
    traceback: an error unknown to kappa-ingest (an ``OSError`` without a file name, say) is
    found only by where it came from."""
    end = text.find(f"\n{error}")
    frames = _FRAME.findall(text, 0, end if end >= 0 else len(text))
    if not frames:
        return None
    path, line, function = frames[-1]
    parts = path.replace("\\", "/").split("/")
    return f"{'/'.join(parts[-2:])}:{line} in {function}"
