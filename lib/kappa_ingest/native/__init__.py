"""The per-record loops written in C, built on first use and loaded by ctypes.

- ``c/json.c``: record values for text columns, a whole Arrow batch per call, ~10x
  cheaper than polars' struct JSON encoder (:func:`json_values`), and the check that
  a typed column is already its JSON literals (:func:`already_literal`);
- ``c/produce.c``: the confluent sink's producer loop. confluent-kafka's
  ``Producer.produce()`` with a timestamp and the contract's two headers costs ~2.2 µs of
  Python per record before librdkafka does any work; the loop hands librdkafka a whole
  Arrow batch in one call;
- ``c/consume.c``: a topic read back, its records reduced to partition, offset,
  timestamp and headers in C (:class:`Reader`);
- ``c/gather.c``: lines moved by a shuffle as offsets, read back from their files
  (:func:`gather`), and where a chunk's lines end (:func:`line_ends`);
- ``c/fields.c``: a batch's lines split into text columns, as Arrow's CSV reader splits
  them (:func:`split_fields`);
- ``c/keys.c``: the topic partition librdkafka's murmur2 partitioner gives each key
  (:func:`key_partitions`);
- ``c/transcode.c``: lines of a single-byte encoding in UTF-8 (:func:`single_byte_to_utf8`).

They are compiled once per source and librdkafka version (``cc``, against the librdkafka
inside the confluent-kafka wheel) into the kappa-ingest cache. Executors on a cluster
rarely have a C compiler, so ``spark-submit.sh`` ships the library built on the submitting
machine inside the package zip (``c/built/``): an executor copies it into its cache
instead of compiling. Where neither works, :func:`load` raises NativeUnavailable saying
why, and the callers use polars and confluent-kafka's Python API instead: the same
records, slower. :func:`in_use` tells the run report which path a process took.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa

from kappa_ingest.paths import cache_dir

SOURCES = (
    "json.c",
    "produce.c",
    "gather.c",
    "fields.c",
    "consume.c",
    "keys.c",
    "transcode.c",
    "rdkafka_abi.h",
)  # in c/ beside this file
_c = ctypes
_P = _c.c_void_p
_CHARS, _I64S = _c.POINTER(_c.c_char_p), _c.POINTER(_c.c_int64)


class Batch(ctypes.Structure):
    """One batch of records for ``kp_produce``: mirrors ``kp_batch`` of c/produce.c."""

    _fields_ = [
        ("topic", _c.c_char_p),
        ("n", _c.c_int64),
        ("value_offsets", _P),
        ("value_data", _P),
        ("key_offsets", _P),
        ("key_data", _P),
        ("key_valid", _P),
        ("key_bit0", _c.c_int64),
        ("timestamps", _P),
        ("run_id", _c.c_char_p),
        ("run_id_len", _c.c_int64),
        ("file_index", _P),
        ("files", _c.POINTER(_c.c_char_p)),
        ("file_lens", _c.POINTER(_c.c_int64)),
    ]


_SIGNATURES = {
    "kp_batch_size": (_c.c_size_t, []),
    "kp_new": (_P, [_c.POINTER(_c.c_char_p), _c.POINTER(_c.c_char_p), _c.c_int, _c.c_char_p, _c.c_size_t]),
    "kp_produce": (_c.c_int64, [_P, _c.POINTER(Batch), _c.POINTER(_c.c_int)]),
    "kp_produce_one": (_c.c_int, [_P, _c.c_char_p, _c.c_char_p, _c.c_size_t, _c.c_char_p, _c.c_size_t, _c.c_char_p]),
    "kp_produce_with_headers": (_c.c_int, [_P, _c.c_char_p, _c.c_char_p, _c.c_size_t, _c.c_int, _CHARS, _CHARS, _I64S]),
    "kp_flush": (_c.c_int, [_P, _c.c_int]),
    "kp_warm": (_c.c_int, [_P, _c.c_int]),
    "kp_txn_init": (_c.c_int, [_P, _c.c_int]),
    "kp_txn_begin": (_c.c_int, [_P]),
    "kp_txn_commit": (_c.c_int, [_P, _c.c_int]),
    "kp_txn_abort": (_c.c_int, [_P, _c.c_int]),
    "kp_txn_code": (_c.c_int, [_P]),
    "kp_txn_fatal": (_c.c_int, [_P]),
    "kp_txn_retriable": (_c.c_int, [_P]),
    "kp_txn_abortable": (_c.c_int, [_P]),
    "kp_txn_reason": (_c.c_char_p, [_P]),
    "kp_partitions_touched": (_c.c_int32, [_P]),
    "kp_offset_runs": (_c.c_int64, [_P, _P, _c.c_int64]),
    "kp_failed": (_c.c_int64, [_P]),
    "kp_first_error": (_c.c_int, [_P]),
    "kp_fatal_error": (_c.c_int, [_P]),
    "kp_fatal_reason": (_c.c_char_p, [_P]),
    "kp_err2str": (_c.c_char_p, [_c.c_int]),
    "kp_destroy": (None, [_P]),
    "kj_size": (_c.c_int64, [_c.c_int64, _c.c_int, _P, _P, _P, _P, _P, _P, _c.c_int64]),
    "kc_new": (_P, [_c.POINTER(_c.c_char_p), _c.POINTER(_c.c_char_p), _c.c_int, _c.c_char_p, _c.c_size_t]),
    "kc_assign": (_c.c_int, [_P, _c.c_char_p, _c.c_int, _P, _P]),
    "kc_close": (None, [_P]),
    "kc_poll": (
        _c.c_int64,
        [
            _P,
            _c.c_int,
            _c.c_int64,
            _c.c_int,
            _CHARS,
            _I64S,
            _P,
            _P,
            _P,
            _P,
            _P,
            _P,
            _c.c_int64,
            _c.POINTER(_c.c_int),
            _c.c_char_p,
            _c.c_size_t,
        ],
    ),
    "kg_gather": (None, [_c.c_int64, _P, _P, _P, _P, _P]),
    "kg_line_ends": (_c.c_int64, [_P, _c.c_int64, _c.c_int, _P, _P, _c.c_int64]),
    "kf_split": (
        _c.c_int64,
        [_c.c_int64, _P, _P, _c.c_int64, _c.c_int, _P, _c.c_int, _c.c_uint8, _c.c_uint8, *[_P] * 6],
    ),
    "kf_fill": (_c.c_int, [_c.c_int64, _P, _c.c_int64, _c.c_int, _P, _P, _c.c_uint8, _P, _P, _P]),
    "kk_parts": (None, [_c.c_int64, _P, _P, _P, _c.c_int64, _c.c_int32, _P]),
    "kt_to_utf8": (_c.c_int64, [_P, _P, _c.c_int64, _P, _P, _P, _P, _c.c_int64, _P, _P]),
    "kj_not_literal": (_c.c_int64, [_c.c_int64, _P, _c.c_int, _c.c_int]),
    "kj_write": (_c.c_int64, [_c.c_int64, _c.c_int, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _c.c_char_p, _c.c_int64]),
}

_MAX_SPANS = 1 << 25  # a batch's rows x kept columns split at once (8 bytes each)
_KEPT_SPANS = 1 << 23  # a thread keeps at most 32 MiB of them
_scratch = threading.local()


def _spans(size: int) -> np.ndarray:
    """This thread's scratch int32s for c/fields.c's spans, kept between batches (up to
    _KEPT_SPANS): fresh pages for each batch's spans cost as much as splitting its lines."""
    if size > _KEPT_SPANS:
        return np.empty(size, dtype=np.int32)
    have = getattr(_scratch, "spans", None)
    if have is None or len(have) < size:
        have = _scratch.spans = np.empty(max(size, 1 << 16), dtype=np.int32)
    return have[:size]


class _Column(ctypes.Structure):  # kj_column of c/json.c
    _fields_ = [
        ("offsets", _P),
        ("data", _P),
        ("valid", _P),
        ("bit0", _c.c_int64),
        ("nulls", _c.c_int64),
        ("raw", _c.c_int64),
    ]


class NativeUnavailable(RuntimeError):
    """The C loops cannot be built or loaded here; the message says why."""


def librdkafka() -> Path:
    """The librdkafka shared library inside the confluent-kafka wheel."""
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    if not found:
        raise NativeUnavailable(f"no librdkafka in {libs} (confluent-kafka not installed from its wheel)")
    return found[0]


def _sources() -> dict[str, bytes]:
    """The C sources, read as package resources: under spark-submit the package is a zip."""
    from importlib.resources import files

    try:
        return {name: (files("kappa_ingest.native") / "c" / name).read_bytes() for name in SOURCES}
    except OSError as e:
        raise NativeUnavailable(f"the C sources are not in this installation of kappa_ingest ({e})") from e


def library_path() -> Path:
    """Where the built loops live in the cache, keyed by their sources and librdkafka."""
    rdkafka = librdkafka()
    digest = hashlib.sha256(b"".join(_sources().values()) + rdkafka.name.encode()).hexdigest()[:12]
    return cache_dir() / f"kappa-ingest-native-{digest}.so"


def _shipped(target: Path) -> bool:
    """Copy the library shipped inside the package (``c/built/<name>``) into the cache."""
    from importlib.resources import files

    shipped = files("kappa_ingest.native") / "c" / "built" / target.name
    try:
        data = shipped.read_bytes()
    except OSError:
        return False
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as tmp:
        tmp.write(data)
    Path(tmp.name).replace(target)  # tasks may copy at once: each its own file, renamed into place
    return True


def build() -> Path:
    """The loops in the cache: copied from the package if shipped built, else compiled;
    NativeUnavailable if neither can be."""
    target = library_path()
    if target.exists() or _shipped(target):
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise NativeUnavailable("no C compiler (cc) to build the C record loops")
    rdkafka = librdkafka()
    # Each task may build at once: compile to a private name, then rename into place.
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        sources = []
        for name, text in _sources().items():
            (Path(tmp) / name).write_bytes(text)
            if name.endswith(".c"):
                sources.append(Path(tmp) / name)
        command = [compiler, "-O3", "-shared", "-fPIC", "-o", str(out), *map(str, sources),
                   f"-L{rdkafka.parent}", f"-l:{rdkafka.name}", f"-Wl,-rpath,{rdkafka.parent}"]  # fmt: skip
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False)
        except OSError as e:
            raise NativeUnavailable(f"no C compiler ({compiler}: {e.strerror}) to build the C record loops") from e
        if done.returncode != 0:
            raise NativeUnavailable(f"building the C record loops failed: {done.stderr.strip()[-300:]}")
        out.replace(target)
    return target


def load() -> ctypes.CDLL:
    """The loaded loops (built first if needed); NativeUnavailable says why not. Either
    outcome is kept for the process: without cc, batches do not retry the build."""
    outcome = _load()
    if isinstance(outcome, NativeUnavailable):
        raise outcome
    return outcome


@cache
def _load() -> ctypes.CDLL | NativeUnavailable:
    import confluent_kafka  # noqa: F401 - loads the same librdkafka first

    try:
        lib = ctypes.CDLL(str(build()))
    except NativeUnavailable as e:
        return e
    except OSError as e:
        return NativeUnavailable(f"loading the C record loops failed: {e}")
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    if lib.kp_batch_size() != ctypes.sizeof(Batch):
        return NativeUnavailable(
            f"the C record loop's batch layout ({lib.kp_batch_size()} bytes) differs from its Python mirror"
            f" ({ctypes.sizeof(Batch)} bytes)"
        )
    return lib


def in_use() -> tuple[bool, str]:
    """Whether this process runs the C loops, and if not, why (for the run report)."""
    outcome = _load()
    return (False, str(outcome)) if isinstance(outcome, NativeUnavailable) else (True, "")


def _column(c: _Column, arr: pa.Array, keep: list[pa.Array], raw: bool = False) -> None:
    """Point ``c`` at a string array's buffers (kept alive in ``keep``)."""
    view = arr.view(pa.binary() if pa.types.is_string(arr.type) else pa.large_binary())
    if not pa.types.is_binary(view.type):
        view = view.cast(pa.binary())
    keep.append(view)
    validity, offsets, data = view.buffers()
    c.offsets, c.data = offsets.address + 4 * view.offset, data.address if data is not None else None
    if validity is not None and view.null_count:
        c.valid, c.bit0, c.nulls = validity.address, view.offset, view.null_count
    c.raw = int(raw)


LITERAL_KINDS = {"boolean": (1, 0), "tinyint": (2, 2), "smallint": (2, 4), "int": (2, 9), "bigint": (2, 18),
                 "double": (3, 0), "date": (4, 0), "timestamp": (5, 0)}  # fmt: skip


def already_literal(text: pa.Array, simple: str) -> bool:
    """Whether every field of a text column of Spark type ``simple`` (one of LITERAL_KINDS)
    is already its value's JSON literal (c/json.c's ``kj_not_literal`` says which are)."""
    lib = load()
    col = _Column()
    keep: list[pa.Array] = []
    _column(col, text, keep)
    kind, digits = LITERAL_KINDS[simple]
    return lib.kj_not_literal(len(text), ctypes.byref(col), kind, digits) == 0


def gather(sources: list[pa.Buffer], file, at, length, size: int) -> pa.Buffer:  # type: ignore[no-untyped-def]
    """c/gather.c: line ``i`` is ``length[i]`` bytes of ``sources[file[i]]`` from ``at[i]``
    (numpy arrays of int32, int64, int32; bounds checked by the caller)."""
    lib = load()
    out = pa.allocate_buffer(max(size, 1))
    bases = (ctypes.c_void_p * max(len(sources), 1))(*(b.address for b in sources))
    lib.kg_gather(len(at), bases, file.ctypes.data, at.ctypes.data, length.ctypes.data, out.address)
    return out.slice(0, size)


def line_ends(buf: bytes, eof: bool) -> tuple[np.ndarray, np.ndarray]:
    """c/gather.c: where the next line begins after each line end of ``buf`` (int64), and
    each end's bytes (uint8: 2 for CRLF); a CR last in ``buf`` ends a line only at ``eof``."""
    lib = load()
    view = np.frombuffer(buf, dtype=np.uint8)
    cap = len(buf) // 64 + 16  # lines are rarely shorter; if they are, once more with room for all
    while True:
        ends, term = np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.uint8)
        k = lib.kg_line_ends(view.ctypes.data, len(buf), int(eof), ends.ctypes.data, term.ctypes.data, cap)
        if k >= 0:
            return ends[:k], term[:k]
        cap = len(buf)


def key_partitions(keys: pa.Array, partitions: int) -> np.ndarray:
    """The partition Kafka's own partitioner (and librdkafka's murmur2_random) gives each
    key among ``partitions``: Java's murmur2 of its bytes (a string's: its UTF-8); -1 for a
    null key (the partitioner's random one). c/keys.c asks librdkafka's own partitioner;
    without the C loops, kafka-python's murmur2."""
    out = np.empty(len(keys), dtype=np.int32)
    view = keys.view(pa.binary()) if pa.types.is_string(keys.type) else keys.cast(pa.binary())
    try:
        lib = load()
    except NativeUnavailable:
        from kafka.partitioner.default import murmur2

        for i, key in enumerate(view.to_pylist()):
            out[i] = -1 if key is None else (murmur2(key) & 0x7FFFFFFF) % partitions
        return out
    validity, offsets, data = view.buffers()
    valid = validity.address if validity is not None and view.null_count else None
    lib.kk_parts(len(view), offsets.address + 4 * view.offset, data.address if data is not None else None, valid,
                 view.offset, partitions, out.ctypes.data)  # fmt: skip
    return out


def single_byte_to_utf8(
    data: np.ndarray, offsets: np.ndarray, utf8: np.ndarray, lengths: np.ndarray, undefined: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """c/transcode.c: lines ``offsets`` (int64, from 0) of ``data`` (uint8) in UTF-8, each
    byte through its table entry (``utf8``: uint8[256 * 4], ``lengths`` bytes of each);
    their bytes, their offsets (int64, n + 1) and which hold a byte ``undefined`` marks."""
    lib = load()
    n = len(offsets) - 1
    out_offsets, bad = np.empty(n + 1, dtype=np.int64), np.empty(n, dtype=np.uint8)
    # Room for text of a few accented letters; if that is outgrown, for the most it can take.
    for cap in (len(data) + len(data) // 8 + 64, int(lengths.max()) * len(data) + 64):
        out = np.empty(cap, dtype=np.uint8)
        k = lib.kt_to_utf8(data.ctypes.data, offsets.ctypes.data, n, utf8.ctypes.data, lengths.ctypes.data,
                           undefined.ctypes.data, out.ctypes.data, cap, out_offsets.ctypes.data, bad.ctypes.data)  # fmt: skip
        if k >= 0:
            return out[:k], out_offsets, bad.view(bool)
    raise AssertionError("kt_to_utf8 outgrew room for every byte's longest UTF-8")


@dataclass
class Polled:
    """What one :meth:`Reader.poll` saw: records, and partition ends (``rid == -2``)."""

    partition: np.ndarray  # int32
    offset: np.ndarray  # int64
    timestamp: np.ndarray  # int64, ms
    rid: np.ndarray  # int32: index into the wanted run ids; -1 another's; -2 a partition's end
    files: pa.Array  # binary: the source_file header of the wanted run ids' records


class Reader:
    """A consumer of c/consume.c: records are counted from arrays, not Message objects.
    ``conf`` holds librdkafka settings as text (the callers drop Python callbacks)."""

    def __init__(self, conf: dict[str, str], wanted: list[bytes], max_records: int = 20_000) -> None:
        self._lib = load()
        names = [k.encode() for k in conf]
        values = [(str(v).lower() if isinstance(v, bool) else str(v)).encode() for v in conf.values()]
        err = ctypes.create_string_buffer(512)
        self._rk = self._lib.kc_new((ctypes.c_char_p * len(names))(*names), (ctypes.c_char_p * len(values))(*values),
                                    len(names), err, len(err))  # fmt: skip
        if not self._rk:
            raise ValueError(err.value.decode(errors="replace"))
        self._wanted = (ctypes.c_char_p * max(len(wanted), 1))(*wanted)
        self._wanted_lens = (ctypes.c_int64 * max(len(wanted), 1))(*map(len, wanted))
        self._n_wanted = len(wanted)
        self._max = max_records
        self._part = np.empty(max_records, np.int32)
        self._off = np.empty(max_records, np.int64)
        self._ts = np.empty(max_records, np.int64)
        self._rid = np.empty(max_records, np.int32)
        self._file_at = np.empty(max_records + 1, np.int64)
        self._files = np.empty(max_records * 256 + (64 << 10), np.uint8)

    def assign(self, topic: str, start: dict[int, int]) -> None:
        parts = np.array(list(start), np.int32)
        offsets = np.array(list(start.values()), np.int64)
        code = self._lib.kc_assign(self._rk, topic.encode(), len(parts), parts.ctypes.data, offsets.ctypes.data)
        if code:
            raise RuntimeError(f"assigning {topic!r}: {self._lib.kp_err2str(code).decode()}")

    def poll(self, timeout_ms: int) -> Polled:
        """What arrives within ``timeout_ms``; RuntimeError(code, text) on a consumer error."""
        code, text = ctypes.c_int(0), ctypes.create_string_buffer(512)
        k = self._lib.kc_poll(self._rk, timeout_ms, self._max, self._n_wanted, self._wanted, self._wanted_lens,
                              self._part.ctypes.data, self._off.ctypes.data, self._ts.ctypes.data,
                              self._rid.ctypes.data, self._file_at.ctypes.data, self._files.ctypes.data,
                              len(self._files), ctypes.byref(code), text, len(text))  # fmt: skip
        if k < 0:
            raise RuntimeError(code.value, text.value.decode(errors="replace"))
        at = self._file_at[: k + 1]
        files = pa.Array.from_buffers(pa.binary(), k, [None, pa.py_buffer((at - at[0]).astype(np.int32)),
                                                       pa.py_buffer(self._files[: at[-1]].tobytes())])  # fmt: skip
        return Polled(self._part[:k].copy(), self._off[:k].copy(), self._ts[:k].copy(), self._rid[:k].copy(), files)

    def close(self) -> None:
        if self._rk:
            self._lib.kc_close(self._rk)
            self._rk = None


def json_values(
    columns: list[pa.Array],
    names: list[str],
    files: pa.Array,
    ingest_ts: str,
    raw: list[bool] | None = None,
    event_ts: pa.Array | None = None,
) -> pa.Array:
    """Record values (``{"ingest_ts", ["event_ts",] "source_file", "data": {...}}``) from
    string columns: text, or a typed column's JSON literals where ``raw`` says so;
    ``event_ts`` the rows' event times as ISO text. The same bytes as
    :func:`kappa_ingest.source.records.encode_batch`'s polars encoder."""
    lib = load()
    n = len(files)
    cols = (_Column * len(columns))()
    keep: list[pa.Array] = []  # the binary views whose buffers the C code reads
    for i, (c, arr) in enumerate(zip(cols, columns, strict=True)):
        _column(c, arr, keep, bool(raw and raw[i]))
    event = None
    if event_ts is not None:
        event = _Column()
        _column(event, event_ts, keep)
    rendered = [("," * (i > 0) + json.dumps(name, ensure_ascii=False) + ":").encode() for i, name in enumerate(names)]
    # One buffer, ROOM (16) bytes after the last name: the C loop moves 16 bytes of a short one.
    name_text = ctypes.create_string_buffer(b"".join(rendered), sum(map(len, rendered)) + 16)
    starts = np.cumsum([0, *map(len, rendered)])[:-1]
    name_ptrs = (ctypes.c_void_p * len(rendered))(*(ctypes.addressof(name_text) + int(s) for s in starts))
    name_lens = (ctypes.c_int64 * len(rendered))(*map(len, rendered))
    encoded = files.dictionary_encode()
    lead = '{"ingest_ts":' + json.dumps(ingest_ts)
    head = "" if event is not None else lead
    lead = lead + ',"event_ts":'
    prefixes = [
        (head + ',"source_file":' + json.dumps(f, ensure_ascii=False) + ',"data":{').encode()
        for f in encoded.dictionary.to_pylist()
    ]
    prefix_ptrs = (ctypes.c_char_p * len(prefixes))(*prefixes)
    prefix_lens = (ctypes.c_int64 * len(prefixes))(*map(len, prefixes))
    index = encoded.indices.cast(pa.int32())
    index_ptr = index.buffers()[1].address + 4 * index.offset
    extra = (ctypes.c_int64 * len(cols))()
    event_ptr = ctypes.byref(event) if event is not None else None
    lead_bytes = lead.encode()
    size = lib.kj_size(n, len(cols), cols, name_lens, index_ptr, prefix_lens, extra, event_ptr, len(lead_bytes))
    if size >= 2**31:
        raise NativeUnavailable(f"a batch of {size:,} bytes of values exceeds Arrow's 2 GiB binary array")
    # Arrow's memory pool keeps freed pages: fresh ones per batch cost ~2 ms of page faults.
    offsets = pa.allocate_buffer(4 * (n + 1))
    data = pa.allocate_buffer(size + 16)  # the C loop's ROOM
    written = lib.kj_write(n, len(cols), cols, name_ptrs, name_lens, index_ptr, prefix_ptrs, prefix_lens, extra,
                           offsets.address, data.address, event_ptr, lead_bytes, len(lead_bytes))  # fmt: skip
    return pa.Array.from_buffers(pa.binary(), n, [None, offsets, data.slice(0, written)])


def split_fields(
    lines: pa.Array, ncols: int, slots: list[int], delimiter: bytes, quote: bytes
) -> tuple[list[pa.Array], list[tuple[int, int]]] | None:
    """c/fields.c: ``lines`` (string or binary) split into ``ncols`` fields each, field
    ``j`` kept as string column ``slots[j]`` (-1: not kept; each column kept once): the
    columns, and the lines of another field count as (1-based line, count), as Arrow's CSV
    reader gives them with every value text, an empty one null. None where a line is of a
    form left to Arrow's reader (c/fields.c says which; an empty line; a BOM first, which
    Arrow's reader drops at the start of its input), or the batch is too large to split at
    once."""
    lib = load()
    n, nslots = len(lines), max(slots) + 1
    if nslots == 0 or n * nslots > _MAX_SPANS or len(delimiter) != 1 or len(quote) != 1:
        return None
    if sorted(s for s in slots if s >= 0) != list(range(nslots)):
        raise ValueError(f"each kept column needs one field: {slots}")
    if not (pa.types.is_string(lines.type) or pa.types.is_binary(lines.type)):
        return None  # (large offsets)
    view = lines.view(pa.binary())
    _, offsets_buf, data_buf = view.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1, offset=4 * view.offset)
    if data_buf is None or np.any(offsets[1:] == offsets[:-1]):
        return None
    if data_buf.size - offsets[0] >= 3 and data_buf.slice(int(offsets[0]), 3).to_pybytes() == b"\xef\xbb\xbf":
        return None
    slot = np.full(ncols, -1, dtype=np.int32)
    slot[: len(slots)] = slots
    start, length = _spans(2 * n * nslots).reshape(2, -1)
    total, nulls = np.empty(nslots, dtype=np.int64), np.empty(nslots, dtype=np.int64)
    bad_line, bad_count = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    bad = lib.kf_split(n, offsets.ctypes.data, data_buf.address, data_buf.size, ncols, slot.ctypes.data, nslots,
                       delimiter[0], quote[0], start.ctypes.data, length.ctypes.data, total.ctypes.data,
                       nulls.ctypes.data, bad_line.ctypes.data, bad_count.ctypes.data)  # fmt: skip
    if bad < 0:
        return None
    rows = n - bad
    out_offsets = [pa.allocate_buffer(4 * (rows + 1)) for _ in range(nslots)]
    out_data = [pa.allocate_buffer(int(total[s]) + 16) for s in range(nslots)]
    valid = [pa.py_buffer(bytearray((rows + 7) // 8)) if nulls[s] else None for s in range(nslots)]
    pointers = ctypes.c_void_p * nslots
    filled = lib.kf_fill(rows, data_buf.address, data_buf.size, nslots, start.ctypes.data, length.ctypes.data,
                         quote[0], pointers(*(b.address for b in out_offsets)),
                         pointers(*(b.address for b in out_data)),
                         pointers(*(v.address if v is not None else None for v in valid)))  # fmt: skip
    if filled != 0:
        return None
    columns = [pa.Array.from_buffers(pa.string(), rows, [valid[s], out_offsets[s], out_data[s].slice(0, int(total[s]))],
                                     null_count=int(nulls[s])) for s in range(nslots)]  # fmt: skip
    return columns, [(int(i) + 1, int(c)) for i, c in zip(bad_line[:bad], bad_count[:bad], strict=True)]


if __name__ == "__main__":
    print(build())
