"""The confluent sink's C record loop (``c/produce.c``), built on first use and loaded by ctypes.

Calling confluent-kafka's ``Producer.produce()`` with a timestamp and the contract's two
headers costs ~2.2 µs of Python per record before librdkafka does any work; the C loop
hands librdkafka a whole Arrow batch in one call. It is compiled once per source and
librdkafka version (``cc``, against the librdkafka inside the confluent-kafka wheel) into
the kappa-ingest cache; where there is no C compiler, :func:`load` says why and the sink
uses confluent-kafka's Python API instead (same records, slower).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from kappa_ingest.paths import cache_dir

SOURCE = Path(__file__).parent / "c" / "produce.c"
_c = ctypes
_P = _c.c_void_p
_SIGNATURES = {
    "kp_new": (_P, [_c.POINTER(_c.c_char_p), _c.POINTER(_c.c_char_p), _c.c_int, _c.c_char_p, _c.c_size_t]),
    # producer, topic, n, value offsets+data, key offsets+data, key validity+first bit,
    # timestamps, run_id+length, file index, file names+lengths, error out
    "kp_produce": (
        _c.c_int64,
        [
            _P,
            _c.c_char_p,
            _c.c_int64,
            _P,
            _P,
            _P,
            _P,
            _P,
            _c.c_int64,
            _P,
            _c.c_char_p,
            _c.c_int64,
            _P,
            _c.POINTER(_c.c_char_p),
            _c.POINTER(_c.c_int64),
            _c.POINTER(_c.c_int),
        ],
    ),
    "kp_poll": (_c.c_int, [_P, _c.c_int]),
    "kp_flush": (_c.c_int, [_P, _c.c_int]),
    "kp_acked": (_c.c_int64, [_P]),
    "kp_failed": (_c.c_int64, [_P]),
    "kp_first_error": (_c.c_int, [_P]),
    "kp_fatal_error": (_c.c_int, [_P]),
    "kp_fatal_reason": (_c.c_char_p, [_P]),
    "kp_err2str": (_c.c_char_p, [_c.c_int]),
    "kp_destroy": (None, [_P]),
}


class NativeUnavailable(RuntimeError):
    """The C loop cannot be built or loaded here; the message says why."""


def librdkafka() -> Path:
    """The librdkafka shared library inside the confluent-kafka wheel."""
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    if not found:
        raise NativeUnavailable(f"no librdkafka in {libs} (confluent-kafka not installed from its wheel)")
    return found[0]


def library_path() -> Path:
    """Where the built loop lives in the cache, keyed by its source and librdkafka."""
    rdkafka = librdkafka()
    digest = hashlib.sha256(SOURCE.read_bytes() + rdkafka.name.encode()).hexdigest()[:12]
    return cache_dir() / f"kappa-ingest-produce-{digest}.so"


def build() -> Path:
    """Compile the loop unless the cache has it; NativeUnavailable if it cannot."""
    target = library_path()
    if target.exists():
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise NativeUnavailable("no C compiler (cc) to build the confluent sink's record loop")
    rdkafka = librdkafka()
    # Each task may build at once: compile to a private name, then rename into place.
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        done = subprocess.run(
            [compiler, "-O2", "-shared", "-fPIC", "-o", str(out), str(SOURCE),
             f"-L{rdkafka.parent}", f"-l:{rdkafka.name}", f"-Wl,-rpath,{rdkafka.parent}"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise NativeUnavailable(f"building the record loop failed: {done.stderr.strip()[-300:]}")
        out.replace(target)
    return target


@cache
def load() -> ctypes.CDLL:
    """The loaded loop (built first if needed); NativeUnavailable says why not."""
    import confluent_kafka  # noqa: F401 - loads the same librdkafka first

    try:
        lib = ctypes.CDLL(str(build()))
    except OSError as e:
        raise NativeUnavailable(f"loading the record loop failed: {e}") from e
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


if __name__ == "__main__":
    print(build())
