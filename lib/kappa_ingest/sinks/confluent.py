"""The ``confluent`` sink: one librdkafka producer per partition.

Two front ends to the same librdkafka (the one inside the confluent-kafka wheel):

- :class:`NativePartitionProducer`, the default: the C loop of :mod:`kappa_ingest.native`
  produces a whole Arrow batch per call and counts every delivery report;
- :class:`ConfluentPartitionProducer`: confluent-kafka's Python ``Producer``, one
  ``produce()`` call per record, used where the C loop cannot be built (no C compiler).
  Delivery reports are asked for failures only (``delivery.report.only.error``): a report
  per record would cost a Python call per row. The count stays exact, because librdkafka
  reports every record that fails and ``flush()`` returning 0 means no record is still in
  flight; so acknowledged = produced - failed.

Both send the same records: value, key, timestamp and the ``run_id``/``source_file``
headers; both speak librdkafka's transactions for exactly-once delivery.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer

from kappa_ingest.delivery.ledger import ENTRY, discard_queued, kind_headers
from kappa_ingest.sinks.producer import DeliveryFailed, Fenced, TransactionFailed, headers_by_file, refusal_hint
from kappa_ingest.source.records import Encoded

FLUSH_TIMEOUT_S = 120.0
# librdkafka's fatal errors only: the report says what went wrong, and a broker that dies
# during a run it survives is no reason for lines of connection errors on the user's terminal.
LOG_LEVEL = 0
FATAL_CODES = {
    KafkaError._AUTHENTICATION,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
# A newer producer initialised this one's transactional id: it may write nothing more.
FENCED_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
# librdkafka drops its bootstrap connection once it knows the brokers; a producer that asks
# for its producer id before it has connected again waits for a 500 ms timer (seen here:
# 510 ms for init_transactions, 10 ms once connected). A metadata request connects it, the
# sooner with a short first reconnect backoff (its default, 100 ms, held the new connection
# back ~50 ms). A transaction per unit makes one producer per unit: 70 ms -> 20 ms each.
WARM_UP_MS = 5000
TRANSACTIONAL = {"reconnect.backoff.ms": 5}
ENTRY_KIND, ENTRY_HEADERS = ENTRY.encode(), kind_headers(ENTRY)  # the ledger entries' kind header


def make_producer(
    conf: dict[str, Any], topic: str, transactional_id: str | None = None
) -> NativePartitionProducer | ConfluentPartitionProducer:
    """The C loop where it builds, else confluent-kafka's Python API (the report says which)."""
    from kappa_ingest import native

    if transactional_id is not None:
        conf = {**TRANSACTIONAL, **conf, "transactional.id": transactional_id}
    try:
        return NativePartitionProducer(native.load(), conf, topic)
    except native.NativeUnavailable:
        return ConfluentPartitionProducer(conf, topic)  # task_notes tells the report why


def _consequence(err: Any) -> bool:
    """An error that only follows another's: a purge, or another record's in the batch."""
    return err.code() in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT, KafkaError._INVALID_DIFFERENT_RECORD)


def _not_delivered(failed: int, remaining: int, produced: int, first_error: object) -> DeliveryFailed:
    still = f", {remaining} still in flight after {FLUSH_TIMEOUT_S:.0f} s" if remaining else ""
    return DeliveryFailed(
        f"{failed + remaining} of {produced} records not acknowledged by Kafka ({first_error}{still})"
        + refusal_hint(first_error)
    )


def _conf_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _binary_buffers(arr: pa.Array) -> tuple[int, int]:
    """Addresses of a binary array's int32 offsets (at its first element) and data; the
    array must outlive the C call (Encoded holds plain binary arrays: nothing to cast)."""
    assert pa.types.is_binary(arr.type), arr.type
    _, offsets, data = arr.buffers()
    return offsets.address + 4 * arr.offset, data.address if data is not None else 0


class NativePartitionProducer:
    def __init__(self, lib: ctypes.CDLL, conf: dict[str, Any], topic: str) -> None:
        self.lib = lib
        self.topic = topic.encode()
        self.produced = 0  # records queued, ledger entries and dead letters among them, as failures count them
        settings = {**{k: _conf_text(v) for k, v in conf.items()}, "log_level": str(LOG_LEVEL)}
        names = (ctypes.c_char_p * len(settings))(*(k.encode() for k in settings))
        values = (ctypes.c_char_p * len(settings))(*(v.encode() for v in settings.values()))
        err = ctypes.create_string_buffer(512)
        self.handle = lib.kp_new(names, values, len(settings), err, len(err))
        if not self.handle:
            raise DeliveryFailed(f"Kafka client refused its configuration: {err.value.decode(errors='replace')}")
        if "transactional.id" in conf:
            lib.kp_warm(self.handle, WARM_UP_MS)  # an unreachable cluster is init_transactions' to report

    def send(self, enc: Encoded, run_id: str) -> None:
        from kappa_ingest.native import Batch

        n = enc.rows
        if n == 0:
            return
        batch = Batch(topic=self.topic, n=n)
        batch.value_offsets, batch.value_data = _binary_buffers(enc.values)
        keys = enc.keys
        if keys is not None:
            batch.key_offsets, batch.key_data = _binary_buffers(keys)
            validity = keys.buffers()[0]
            if validity is not None and keys.null_count:
                batch.key_valid, batch.key_bit0 = validity.address, keys.offset
        stamps = enc.timestamps_ms
        batch.timestamps = stamps.buffers()[1].address + 8 * stamps.offset
        files = enc.source_files.dictionary_encode()
        index = files.indices.cast(pa.int32())
        batch.file_index = index.buffers()[1].address + 4 * index.offset
        names = [f.encode() for f in files.dictionary.to_pylist()]
        batch.files = (ctypes.c_char_p * len(names))(*names)
        batch.file_lens = (ctypes.c_int64 * len(names))(*(len(f) for f in names))
        rid = run_id.encode()
        batch.run_id, batch.run_id_len = rid, len(rid)
        err = ctypes.c_int(0)
        done = self.lib.kp_produce(self.handle, ctypes.byref(batch), ctypes.byref(err))
        if done == n:
            self.produced += n
            return
        if -n - 1 < done < 0:  # the records before the refused one were queued
            self.produced += -done - 1
        raise self._refused(err.value, "a record")

    def _refused(self, code: int, what: str) -> DeliveryFailed:
        """Why a record was refused: a fatal error (a fenced producer among them), records
        that failed before it (a transaction in error refuses the next ones: "Erroneous
        state"), else the refusal's own code."""
        self._raise_if_fatal()
        if code == KafkaError._STATE:
            self._raise_if_failed()
        return DeliveryFailed(f"Kafka client refused {what}: {self.lib.kp_err2str(code).decode(errors='replace')}")

    def _raise_if_failed(self, remaining: int = 0) -> None:
        """Records not acknowledged (failed, or ``remaining`` in flight): named, with the first error."""
        failed = self.lib.kp_failed(self.handle)
        if failed or remaining:
            first = self.lib.kp_err2str(self.lib.kp_first_error(self.handle)).decode(errors="replace")
            raise _not_delivered(failed, remaining, self.produced, first)

    def send_ledger(self, topic: str, records: list[tuple[bytes, bytes]]) -> None:
        for key, value in records:
            e = self.lib.kp_produce_one(self.handle, topic.encode(), key, len(key), value, len(value), ENTRY_KIND)
            if e:
                raise self._refused(e, "a ledger record")
            self.produced += 1

    def send_dead_letters(self, topic: str, records: list[tuple[bytes, list[tuple[str, bytes]]]]) -> None:
        for value, headers in records:
            n = len(headers)
            names = (ctypes.c_char_p * n)(*(k.encode() for k, _ in headers))
            values = (ctypes.c_char_p * n)(*(v for _, v in headers))
            lens = (ctypes.c_int64 * n)(*(len(v) for _, v in headers))
            e = self.lib.kp_produce_with_headers(self.handle, topic.encode(), value, len(value), n, names, values, lens)
            if e:
                raise self._refused(e, "a dead letter")
            self.produced += 1

    def _raise_if_fatal(self) -> None:
        code = self.lib.kp_fatal_error(self.handle)
        if code:
            reason = self.lib.kp_fatal_reason(self.handle).decode(errors="replace")
            raise (Fenced if code in FENCED_CODES else DeliveryFailed)(f"Kafka refused the producer: {reason}")

    def flush(self) -> None:
        remaining = self.lib.kp_flush(self.handle, int(FLUSH_TIMEOUT_S * 1000))
        self._raise_if_fatal()
        self._raise_if_failed(remaining)

    def _txn(self, code: int, what: str) -> None:
        if code == 0:
            return
        lib, h = self.lib, self.handle
        raise TransactionFailed(
            what,
            lib.kp_txn_reason(h).decode(errors="replace"),
            fatal=bool(lib.kp_txn_fatal(h)),
            abortable=bool(lib.kp_txn_abortable(h)),
            retriable=bool(lib.kp_txn_retriable(h)),
            fenced=code in FENCED_CODES,
        )

    def init_transactions(self, timeout_s: float) -> None:
        self._txn(self.lib.kp_txn_init(self.handle, int(timeout_s * 1000)), "initialising the transaction")

    def begin(self) -> None:
        self._txn(self.lib.kp_txn_begin(self.handle), "beginning the transaction")

    def commit(self, timeout_s: float) -> None:
        self._txn(self.lib.kp_txn_commit(self.handle, int(timeout_s * 1000)), "committing the transaction")

    def abort(self, timeout_s: float) -> None:
        self._txn(self.lib.kp_txn_abort(self.handle, int(timeout_s * 1000)), "aborting the transaction")

    @property
    def partitions_touched(self) -> int | None:
        return int(self.lib.kp_partitions_touched(self.handle))

    def offset_runs(self) -> list[tuple[int, int, int]] | None:
        n = self.lib.kp_offset_runs(self.handle, None, 0)
        if n < 0:
            return None
        out = (ctypes.c_int64 * (3 * n))()
        self.lib.kp_offset_runs(self.handle, out, n)
        return [(out[3 * i], out[3 * i + 1], out[3 * i + 2]) for i in range(n)]

    def close(self) -> None:
        """Free the producer, dropping whatever it still holds (a failed task's records)."""
        if self.handle:
            handle, self.handle = self.handle, None
            self.lib.kp_destroy(handle)


class ConfluentPartitionProducer:
    def __init__(self, conf: dict[str, Any], topic: str) -> None:
        self.topic = topic
        self.produced = 0  # records queued, ledger entries and dead letters among them, as failures count them
        self.failed = 0
        self.first_error: object | None = None
        self.fatal: object | None = None
        self.producer: Producer | None = Producer(
            {
                **conf,
                "log_level": LOG_LEVEL,
                "delivery.report.only.error": True,
                "on_delivery": self._on_delivery,
                "error_cb": self._on_error,
            }
        )
        if "transactional.id" in conf:
            try:
                self.producer.list_topics(topic, timeout=WARM_UP_MS / 1000)  # see WARM_UP_MS
            except KafkaException:
                pass  # an unreachable cluster is init_transactions' to report

    def _on_delivery(self, err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            self.failed += 1
            if self.first_error is None or (_consequence(self.first_error) and not _consequence(err)):
                self.first_error = err  # a cause where one is reported (c/produce.c's consequence)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal() or err.code() in FATAL_CODES:
            self.fatal = self.fatal or err

    def _live(self) -> Producer:
        assert self.producer is not None, "the producer is closed"
        return self.producer

    def _produce(self, topic: str, value: bytes, key: bytes | None, **kwargs: Any) -> None:
        produce, poll = self._live().produce, self._live().poll
        while True:
            try:
                produce(topic, value, key, **kwargs)
                self.produced += 1  # queued: counted before any poll can report it failed
                return
            except BufferError:
                # The local queue is full: serve delivery reports until it drains.
                poll(0.05)
                self._raise_if_fatal()
            except KafkaException as e:  # refused before sending, e.g. a record too large
                if e.args[0].code() == KafkaError._FATAL:  # its cause reaches error_cb at the next poll
                    poll(0)
                    self._raise_if_fatal()
                if e.args[0].code() == KafkaError._STATE:  # as in the C front end: serve the reports of
                    poll(0.1)  # the records that put the transaction in error; they are the cause
                    if self.failed:
                        raise _not_delivered(self.failed, 0, self.produced, self.first_error) from e
                raise DeliveryFailed(f"Kafka client refused a record: {e.args[0].str()}") from e

    def send(self, enc: Encoded, run_id: str) -> None:
        headers, header_index = headers_by_file(enc, run_id)
        values = enc.values.to_pylist()
        keys = enc.keys.to_pylist() if enc.keys is not None else [None] * len(values)
        stamps = enc.timestamps_ms.to_pylist()
        for value, key, ts, h in zip(values, keys, stamps, header_index, strict=False):
            self._produce(self.topic, value, key, timestamp=ts, headers=headers[h])
        self._live().poll(0)
        self._raise_if_fatal()

    def send_ledger(self, topic: str, records: list[tuple[bytes, bytes]]) -> None:
        for key, value in records:
            self._produce(topic, value, key, headers=ENTRY_HEADERS)

    def send_dead_letters(self, topic: str, records: list[tuple[bytes, list[tuple[str, bytes]]]]) -> None:
        for value, headers in records:
            self._produce(topic, value, None, headers=headers)

    def _raise_if_fatal(self) -> None:
        if self.fatal is not None:
            fenced = isinstance(self.fatal, KafkaError) and self.fatal.code() in FENCED_CODES
            raise (Fenced if fenced else DeliveryFailed)(f"Kafka refused the producer: {self.fatal}")

    def flush(self) -> None:
        remaining = self._live().flush(FLUSH_TIMEOUT_S)
        self._raise_if_fatal()
        if remaining or self.failed:
            raise _not_delivered(self.failed, remaining, self.produced, self.first_error)

    def _txn(self, call: Any, what: str) -> None:
        try:
            call()
        except KafkaException as e:
            err = e.args[0]
            raise TransactionFailed(
                what,
                err.str(),
                fatal=err.fatal(),
                abortable=err.txn_requires_abort(),
                retriable=err.retriable(),
                fenced=err.code() in FENCED_CODES,
            ) from e

    def init_transactions(self, timeout_s: float) -> None:
        self._txn(lambda: self._live().init_transactions(timeout_s), "initialising the transaction")

    def begin(self) -> None:
        self._txn(self._live().begin_transaction, "beginning the transaction")

    def commit(self, timeout_s: float) -> None:
        self._txn(lambda: self._live().commit_transaction(timeout_s), "committing the transaction")

    def abort(self, timeout_s: float) -> None:
        self._txn(lambda: self._live().abort_transaction(timeout_s), "aborting the transaction")

    @property
    def partitions_touched(self) -> int | None:
        return None  # delivery reports come for failures only: the partitions written are not seen

    def offset_runs(self) -> list[tuple[int, int, int]] | None:
        return None

    def close(self) -> None:
        """Drop whatever the producer still holds (a failed task's records) and let it go."""
        if self.producer is not None:
            producer, self.producer = self.producer, None
            discard_queued(producer)
