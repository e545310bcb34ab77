"""How a task writes its units: producers, Kafka transactions and ledger entries.

One writer per way of delivering (:mod:`kappa_ingest.delivery.guarantees` says why each is safe):

- :class:`UnitTransactions` (exactly-once, rows arriving unit by unit): a transaction per
  unit under the unit's own transactional id. When a unit's first rows arrive, the previous
  unit is committed, the new unit's id initialised (any earlier writer of the unit has
  then committed, or been aborted and fenced), the ledger read on from where it was, and
  the unit sent only if no entry of it is there. Where the task knows its units (it reads
  its own splits), the next units' ids are initialised and the ledger read on, in that
  order, each on a thread (:class:`Opening`) while the units before them are sent, and a
  unit commits on a thread while the next is sent (:class:`Committing`): a unit's round
  trips to the transaction coordinator then cost the task nothing but the last one's commit.
- :class:`TaskTransaction` (exactly-once over shuffled input): one transaction for the task
  under its part's id, initialised before the first row; each unit is checked against
  the ledger as its rows arrive, and all its entries committed with its records.
- :class:`Acknowledged` (at-least-once, and the dry run): one producer; the ledger read on a
  thread as the task starts, before any unit is admitted; entries written once Kafka
  acknowledged the records.

While a unit waits on those round trips (``waits_for``: its id initialising, the ledger
being read), the runner converts its first rows, sent only once it is admitted (:mod:`.early`).

Transactional errors follow librdkafka's rules: a retriable one is retried (an init or a
commit the coordinator did not answer in time), an abortable one aborts (``rolled_back``
says whether the coordinator did: the runner then sends the task's units again), a fatal
one drops the producer without another call (a new producer is made for an init). A fenced
producer means another writer took the unit over: the task sends no more of it, and
counts it delivered once that writer's entry is in the ledger (``taken`` until then).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, TypeVar

from kappa_ingest import failpoints
from kappa_ingest.delivery import guarantees as delivery
from kappa_ingest.delivery.guarantees import ABORT_TIMEOUT_S, TaskDelivery
from kappa_ingest.delivery.ledger import Entry, Tail
from kappa_ingest.sinks.producer import Discard, Fenced, PartitionProducer, RunSuperseded, TransactionFailed
from kappa_ingest.sinks.task_units import DROP, TaskInput
from kappa_ingest.source.records import Encoded
from kappa_ingest.source.splits import Unit

if TYPE_CHECKING:
    from kappa_ingest.sinks.task_stats import TaskStats

MakeProducer = Callable[[str | None], PartitionProducer]
T = TypeVar("T")
OPENED_AHEAD = 4  # units whose producers a task opens side by side ahead of their rows
COMMIT_CALL_S = 10.0  # one commit call's wait at most; a retriable timeout is called again (see commit())
NEW_PRODUCERS = 3  # producers tried for one init whose producer failed fatally
TAKEN_WAIT_S = 60.0  # how long a task waits to see the entry of a unit another writer took over


def writer_for(delivery: TaskDelivery, make_producer: MakeProducer, stats: TaskStats) -> Writer:
    if not delivery.transactional or delivery.ledger_topic is None:
        return Acknowledged(delivery, make_producer, stats)
    if delivery.shuffled:
        return TaskTransaction(delivery, make_producer, stats)
    return UnitTransactions(delivery, make_producer, stats)


class Writer:
    """What the runner asks of a writer: ``start``, ``admit`` each run of rows of a unit
    (TaskInput's question: the entry of a unit already delivered, DROP for a unit taken
    over, else None), ``send`` and ``send_dead_letters``, ``finish``; on failure ``abandon``;
    always ``close``."""

    def __init__(self, d: TaskDelivery, make_producer: MakeProducer, stats: TaskStats) -> None:
        self.d, self.make, self.stats = d, make_producer, stats
        self.tail = Tail(d.ledger_conf, d.ledger_topic, d.topic, d.ledger_start) if d.ledger_topic else None
        self.producer: PartitionProducer | None = None
        self.task_input: TaskInput | None = None
        self.entries: list[Entry] = []  # of the units this task delivered
        self.offsets: list[list] = []  # [[unit, ...], runs]: where each transaction's records landed, where known
        self.began = 0.0  # when the open transaction began (time.monotonic)
        self.first_send: str | None = None  # the id of a transaction that has sent nothing yet
        self.taken: dict[Unit, None] = {}  # units another writer took over, not yet seen in the ledger
        self.rolled_back = False  # a failed transaction was aborted by its coordinator: nothing of it counts
        self._tail_lock = threading.Lock()  # the ledger's reader, shared by the openings' threads

    def start(self) -> None:
        pass

    def upcoming(self, units: list[Unit]) -> None:
        """The units the task's rows will come from, in their order (where it knows them)."""

    def admit(self, unit: Unit) -> Entry | object | None:
        if unit in self.taken:
            return DROP
        return self._delivered(unit)

    def waiting(self) -> bool:
        """Whether round trips to Kafka are under way that admitting a unit may wait for."""
        return False

    def waits_for(self, unit: Unit) -> bool:
        """Whether admitting ``unit`` now would wait for round trips under way (the runner
        converts its rows meanwhile: :mod:`.early`)."""
        return False

    def _delivered(self, unit: Unit) -> Entry | None:
        found = self.tail.entries.get(unit) if self.tail is not None else None
        return found if self.d.delivered(found) else None

    def send(self, enc: Encoded) -> None:
        if self.producer is None:
            return  # the unit was taken over: nothing more of it is sent
        try:
            self.producer.send(enc, self.d.run_id)
        except Fenced:
            self._lose_transaction()
        if self.first_send is not None:
            txid, self.first_send = self.first_send, None
            if failpoints.armed(failpoints.MID_SEND) and self.producer is not None:
                # Held with its records at the broker: a kill then lands on an open transaction
                # the broker knows, not on records still in the producer's buffer.
                self.producer.flush()
            failpoints.hold(failpoints.MID_SEND, txid)

    def send_dead_letters(self, letters: list[tuple[bytes, list[tuple[str, bytes]]]]) -> None:
        if self.producer is not None and self.d.dead_letter_topic:
            try:
                self.producer.send_dead_letters(self.d.dead_letter_topic, letters)
            except Fenced:
                self._lose_transaction()

    def finish(self) -> None:
        raise NotImplementedError

    def abandon(self) -> None:
        """The task failed: abort the open transaction, unless the producer cannot take
        another call (a fatal error; whoever initialises its id next ends it)."""
        producer, self.producer = self.producer, None
        if producer is not None and self.d.transactional:
            self.rolled_back |= _abort(producer, self.stats)
        if producer is not None:
            producer.close()

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close()
            self.producer = None
        if self.tail is not None:
            self.tail.close()

    def _lose_transaction(self) -> None:
        raise NotImplementedError

    def _drop(self, unit: Unit) -> None:
        """Another writer took ``unit`` over: what this task sent of it was aborted."""
        assert self.task_input is not None
        tally = self.task_input.drop(unit)
        s = self.stats
        s.rows_read -= tally.rows_read
        s.lines_skipped -= tally.lines - tally.rows_read  # its headers and blank lines: dropped lines now
        s.rows_sent -= tally.rows_sent
        s.rows_quarantined -= tally.rows_quarantined
        s.bytes_sent -= tally.bytes_sent
        self.taken[unit] = None

    def _await_taken(self) -> None:
        """Units taken over count as delivered once their writer's entry is in the ledger;
        a writer that has not committed within TAKEN_WAIT_S leaves them to the next run
        (the time only bounds the wait: an entry read is delivered, whenever it is read)."""
        deadline = time.monotonic() + TAKEN_WAIT_S
        while self.taken and self.tail is not None:
            self.tail.catch_up()
            for unit in list(self.taken):
                found = self._delivered(unit)
                if found is not None:
                    assert self.task_input is not None
                    self.task_input.inherited[unit] = found
                    del self.taken[unit]
            if not self.taken or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        self.stats.taken = json.dumps([asdict(u) for u in self.taken])

    def _open(self, txid: str, spent: Spent | None = None) -> PartitionProducer:
        """A producer whose transactional id is initialised, the ledger read on after it, and
        the run checked not superseded; ready to begin. ``spent``: where its time and retries
        are counted (else the task's statistics)."""
        assert self.tail is not None
        with self._tail_lock:
            self.tail.warm()
        producer = open_transactional(self.make, txid, self.d, spent or self.stats)
        try:
            with self._tail_lock:  # (one reader: the openings ahead take turns)
                self.tail.catch_up()
            holder = self.d.holder or self.d.run_id
            by = self.tail.superseded.get(holder)
            if by is not None:
                raise RunSuperseded(f"run {holder} was taken over by run {by} (it found this run dead); this run stops")
        except BaseException:
            producer.close()
            raise
        return producer

    def _commit(self, producer: PartitionProducer, txid: str, entries: list[Entry]) -> bool:
        """Commit ``entries``' transaction now (:meth:`_committed`) and count it; False if
        another writer took it over (fenced) meanwhile."""
        spent = Spent()
        try:
            done = self._committed(producer, txid, entries, self.began, spent, entries_first=True)
        finally:
            self._take(spent)
        return self._count(done, entries)

    def _committed(
        self, producer: PartitionProducer, txid: str, entries: list[Entry], began: float, spent: Spent,
        entries_first: bool,
    ) -> Committed:  # fmt: skip
        """Add ``entries`` to the ledger, flush and commit, in the producer's transaction
        (begun at ``began``); its time, retries and abort counted in ``spent``: this may run
        on a thread of its own (:class:`Committing`), and the task counts the result.
        ``entries_first``: the entries behind the records, their round trips overlapping;
        else once the records are in, so that the ledger's readers (the task's openings of
        its next units, which read to its end) wait for one round trip, not a unit's queue."""
        try:
            if not entries_first:
                producer.flush()
            if entries:
                assert self.d.ledger_topic is not None
                send_entries(producer, self.d.ledger_topic, [e.record() for e in entries])
            producer.flush()
            touched = producer.partitions_touched
            failpoints.hold(failpoints.BEFORE_COMMIT, txid)
            t0 = time.monotonic()
            commit(producer, self.d, spent, began, txid)
            spent.transaction_ms += round((time.monotonic() - t0) * 1000)
            failpoints.hold(failpoints.AFTER_COMMIT, txid)
        except Fenced:
            return Committed(fenced=True)
        except TransactionFailed as e:
            if e.fenced:
                return Committed(fenced=True)
            spent.rolled_back |= _abort(producer, spent, e)
            raise
        except BaseException:
            spent.rolled_back |= _abort(producer, spent)
            raise
        return Committed(touched=touched, runs=producer.offset_runs())

    def _take(self, spent: Spent) -> None:
        spent.add_to(self.stats)
        self.rolled_back |= spent.rolled_back

    def _count(self, done: Committed, entries: list[Entry]) -> bool:
        """Count a transaction's commit: False if it was fenced (nothing of it counts)."""
        if done.fenced:
            return False
        s = self.stats
        s.transactions += 1
        s.markers = -1 if done.touched is None or s.markers < 0 else s.markers + done.touched
        self.entries.extend(entries)
        self._note_offsets(done.runs, entries)
        return True

    def _note_offsets(self, runs: list[tuple[int, int, int]] | None, entries: list[Entry]) -> None:
        """Where the records of ``entries``' units landed, as the producer saw them acknowledged
        (the C loop's delivery reports, ``runs``): the driver's read-back finds each unit's rows there."""
        if runs is not None and entries:
            self.offsets.append([[asdict(e.unit) for e in entries], [list(r) for r in runs]])


@dataclass
class Committed:
    """A transaction's commit as the task counts it: fenced (taken over: nothing of it
    counts), else the partitions it wrote (None: not known) and where its records landed."""

    fenced: bool = False
    touched: int | None = None
    runs: list[tuple[int, int, int]] | None = None


class UnitTransactions(Writer):
    def __init__(self, d: TaskDelivery, make_producer: MakeProducer, stats: TaskStats) -> None:
        super().__init__(d, make_producer, stats)
        self.current: Unit | None = None
        self.ended: set[Unit] = set()
        self._upcoming: list[Unit] = []
        self._at: dict[Unit, int] = {}  # a unit's place among the upcoming
        self._ahead: list[Opening] = []  # the next units' producers, being opened, in the units' order
        self._unopened = 0  # the first of the upcoming not yet considered for opening
        self._committing: Committing | None = None  # the unit before, committing while this one is sent

    def upcoming(self, units: list[Unit]) -> None:
        self._upcoming, self._at = units, {u: i for i, u in enumerate(units)}

    def start(self) -> None:
        self._open_ahead(0)  # while the task reads its first lines

    def admit(self, unit: Unit) -> Entry | object | None:
        if unit == self.current:
            return None
        if unit in self.taken:
            return DROP
        if unit in self.ended:  # rows of one unit must arrive together: its transaction has ended
            raise RuntimeError(f"rows of {unit.label()} arrived after its transaction ended (interleaved units)")
        self._end_unit()
        producer = self._producer_for(unit)
        found = self._delivered(unit)
        if unit in self._at:
            self._open_ahead(self._at[unit] + 1)  # while this one is sent
        if found is not None:
            producer.close()
            self.ended.add(unit)
            return found
        try:
            producer.begin()
        except BaseException:
            producer.close()
            raise
        self.producer, self.current, self.began = producer, unit, time.monotonic()
        self.first_send = delivery.unit_id(self.d.scope, unit)
        return None

    def waiting(self) -> bool:
        return self.current is None and bool(self._ahead) and not self._ahead[0].ready()

    def waits_for(self, unit: Unit) -> bool:
        return self.waiting() and self._ahead[0].unit == unit

    def _open_ahead(self, i: int) -> None:
        """Keep the producers of the next OPENED_AHEAD units from ``upcoming[i]`` on that the
        task may send (not delivered before, nor taken over) being opened: their round trips
        while the task works, side by side (a small unit sends in less time than an id's
        initialisation takes on a long link)."""
        ti = self.task_input
        assert ti is not None
        self._unopened = max(self._unopened, i)
        while len(self._ahead) < OPENED_AHEAD and self._unopened < len(self._upcoming):
            u = self._upcoming[self._unopened]
            self._unopened += 1
            if u.length and u not in ti.skip and u not in ti.inherited and u not in ti.dropped and u not in self.taken:
                self._ahead.append(Opening(self, u, delivery.unit_id(self.d.scope, u)))

    def _producer_for(self, unit: Unit) -> PartitionProducer:
        """``unit``'s producer, initialised and the ledger read on after it: the one opened
        ahead, or one opened now. Units opened ahead of it are dropped (no line begins in them:
        a task's units come in their order)."""
        at = self._at.get(unit)
        while at is not None and self._ahead and self._at[self._ahead[0].unit] <= at:
            ahead = self._ahead.pop(0)
            if ahead.unit == unit:
                return ahead.take(self.stats)
            ahead.drop(self.stats)
        return self._open(delivery.unit_id(self.d.scope, unit))

    def _drop_ahead(self) -> None:
        ahead, self._ahead = self._ahead, []
        for opening in ahead:
            opening.drop(self.stats)

    def send(self, enc: Encoded) -> None:
        super().send(enc)
        if self._committing is not None and self._committing.done():
            self._settle()  # a failed commit fails the task now, not a unit later

    def _end_unit(self, last: bool = False) -> None:
        """End the unit being sent: its transaction committed on a thread while the task
        sends the next (:class:`Committing`), once the one before it has been (one at a
        time, so units commit in their order). ``last``: the task's last, which no opening
        of a unit to send reads the ledger beside."""
        self._settle()  # (first: a failure leaves the current unit for abandon() to abort)
        unit, producer = self.current, self.producer
        if unit is None or producer is None:
            return
        assert self.task_input is not None
        entry = entry_for(self.task_input, self.d, self.stats, unit)
        committing = Committing(self, producer, unit, delivery.unit_id(self.d.scope, unit), [entry], self.began,
                                entries_first=last)  # fmt: skip
        self.current, self.producer, self._committing = None, None, committing  # (its thread holds the producer)
        self.ended.add(unit)

    def _settle(self) -> None:
        """Wait for the unit committing on its thread, and count it: a unit another writer
        took over (fenced) is dropped, a failure is the task's."""
        committing, self._committing = self._committing, None
        if committing is None:
            return
        try:
            done = committing.result()
        finally:
            self._take(committing.spent)
        if not self._count(done, committing.entries):
            self._drop(committing.unit)

    def _lose_transaction(self) -> None:
        unit, producer = self.current, self.producer
        self.current, self.producer = None, None
        if unit is not None:
            self.ended.add(unit)
            self._drop(unit)
        if producer is not None:
            producer.close()

    def finish(self) -> None:
        self._end_unit(last=True)
        self._settle()
        self._drop_ahead()  # before the ledger is read again here
        self._await_taken()

    def abandon(self) -> None:
        super().abandon()
        committing = self._wait_committing()
        if committing is not None:  # its own failure, if any, is not the one reported
            self._take(committing.spent)
        self._drop_ahead()

    def close(self) -> None:
        self._drop_ahead()  # its thread reads the ledger: done before the reader closes
        self._wait_committing()  # (settled or waited for already, unless the task failed ending a unit)
        super().close()

    def _wait_committing(self) -> Committing | None:
        committing, self._committing = self._committing, None
        if committing is not None:
            committing.wait()
        return committing


def on_thread(name: str, call: Callable[..., T], *args: object) -> Future[T]:
    """``call(*args)`` on a thread of its own from now: its round trips while the task works."""
    pool = ThreadPoolExecutor(1, thread_name_prefix=name)
    try:
        return pool.submit(call, *args)
    finally:
        pool.shutdown(wait=False)


@dataclass
class Spent:
    """What opening or committing a producer spent, counted apart from the task's statistics
    while it runs on a thread of its own, and added to them once taken."""

    transaction_ms: int = 0
    init_retries: int = 0
    commit_retries: int = 0
    retry_wait_ms: int = 0
    aborted: int = 0
    rolled_back: bool = False  # its transaction failed and its coordinator aborted it

    def add_to(self, stats: TaskStats) -> None:
        stats.transaction_ms += self.transaction_ms
        stats.init_retries += self.init_retries
        stats.commit_retries += self.commit_retries
        stats.retry_wait_ms += self.retry_wait_ms
        stats.aborted += self.aborted


class Opening:
    """A unit's producer opened on a thread of its own while the task sends the units before
    it (the first: while it reads its first lines), as :meth:`Writer._open` opens one: its
    transactional id initialised, then the ledger read on. Whether the unit is sent is
    decided when its rows arrive, by that reading (any earlier writer of the id had ended
    when it was made): only time depends on opening it ahead. A producer opened for a unit
    whose rows never come (no line begins in it) is closed; a failure to open it is the
    task's only if the unit is sent. Whoever holds an Opening takes or drops it, and waits
    for it either way, so that no initialisation of an id outlives the task."""

    def __init__(self, writer: Writer, unit: Unit, txid: str) -> None:
        self.unit = unit
        self._spent = Spent()
        self._future = on_thread("next-unit", self._open, writer, txid)

    def _open(self, writer: Writer, txid: str) -> PartitionProducer:
        failpoints.hold(failpoints.OPENING, txid)
        return writer._open(txid, self._spent)

    def ready(self) -> bool:
        return self._future.done()

    def take(self, stats: TaskStats) -> PartitionProducer:
        try:
            return self._future.result()
        finally:
            self._spent.add_to(stats)

    def drop(self, stats: TaskStats) -> None:
        try:
            producer = self.take(stats)
        except Exception:  # noqa: BLE001 - its unit is not sent: not the task's failure
            return
        producer.close()


class Committing:
    """A unit's transaction ended on a thread of its own while the task sends the next unit:
    its last batches flushed and its ledger entry added, the commit's round trip. librdkafka's
    idempotent producer keeps one request per partition in flight, so on a long link a
    unit's queue drains for as long as its rows took to convert; the next unit's producer
    sends beside it meanwhile (two requests per partition in flight). The producer is
    closed on the thread once it is done. Whoever holds a Committing settles it or waits
    for it before the task ends; the task counts its result (``spent``, then the result)."""

    def __init__(self, writer: Writer, producer: PartitionProducer, unit: Unit, txid: str, entries: list[Entry],
                 began: float, entries_first: bool) -> None:  # fmt: skip
        self.unit, self.entries = unit, entries
        self.spent = Spent()
        self._future = on_thread("commit", self._end, writer, producer, txid, began, entries_first)

    def _end(self, writer: Writer, producer: PartitionProducer, txid: str, began: float,
             entries_first: bool) -> Committed:  # fmt: skip
        try:
            return writer._committed(producer, txid, self.entries, began, self.spent, entries_first)
        finally:
            producer.close()

    def done(self) -> bool:
        return self._future.done()

    def result(self) -> Committed:
        return self._future.result()

    def wait(self) -> None:
        futures.wait([self._future])


class TaskTransaction(Writer):
    def start(self) -> None:
        self.txid = delivery.part_id(self.d.scope, self.stats.partition, self.d.parts)
        producer = self._open(self.txid)
        try:
            producer.begin()
        except BaseException:
            producer.close()
            raise
        self.producer, self.began = producer, time.monotonic()
        self.first_send = self.txid
        self.lost = False

    def admit(self, unit: Unit) -> Entry | object | None:
        if self.lost or unit in self.taken:
            self.taken[unit] = None
            return DROP
        return self._delivered(unit)

    def _lose_transaction(self) -> None:
        producer, self.producer = self.producer, None
        self.lost = True
        assert self.task_input is not None
        for unit in list(self.task_input.tallies):
            self._drop(unit)
        if producer is not None:
            producer.close()

    def finish(self) -> None:
        producer = self.producer
        if producer is not None:
            assert self.task_input is not None
            units = list(self.task_input.tallies)
            try:
                if not self._commit(
                    producer, self.txid, [entry_for(self.task_input, self.d, self.stats, u) for u in units]
                ):
                    self._lose_transaction()
            finally:
                self.producer = None
                producer.close()
        self._await_taken()


class Acknowledged(Writer):
    _reading: Future[None] | None = None  # the ledger's reading, on a thread while the task converts its first rows

    def start(self) -> None:
        self.producer = self.make(None)
        if self.tail is not None:
            self._reading = on_thread("ledger", self.tail.catch_up)

    def _read(self) -> None:
        reading, self._reading = self._reading, None
        if reading is not None:
            reading.result()

    def admit(self, unit: Unit) -> Entry | object | None:
        self._read()
        return super().admit(unit)

    def waiting(self) -> bool:
        return self._reading is not None and not self._reading.done()

    def waits_for(self, unit: Unit) -> bool:
        return self.waiting()

    def close(self) -> None:
        reading, self._reading = self._reading, None
        if reading is not None:  # done before the reader closes
            futures.wait([reading])
        super().close()

    def _lose_transaction(self) -> None:  # no transaction to lose: a fenced idempotent producer is a failure
        raise Fenced("the producer was fenced")

    def finish(self) -> None:
        assert self.producer is not None and self.task_input is not None
        self._read()  # (a task with no rows admitted none)
        self.producer.flush()
        entries = [entry_for(self.task_input, self.d, self.stats, u) for u in self.task_input.tallies]
        if self.d.ledger_topic is not None and entries and not isinstance(self.producer, Discard):
            self.producer.send_ledger(self.d.ledger_topic, [e.record() for e in entries])
            self.producer.flush()
        self.entries = entries
        self._note_offsets(self.producer.offset_runs(), entries)  # the producer's records since it was made: the task's


# The ledger's batches: a task's transaction over shuffled input commits an entry per unit at
# once, and batch.size follows the data topic (up to 16 MB), not the ledger, whose limit is
# Kafka's default (1 MB) where a run created it. A batch the broker refuses is not split.
LEDGER_CHUNK_BYTES = 512 * 1024


def send_entries(producer: PartitionProducer, ledger_topic: str, records: list[tuple[bytes, bytes]]) -> None:
    """Ledger records in batches the ledger takes: a flush after each LEDGER_CHUNK_BYTES."""
    chunk: list[tuple[bytes, bytes]] = []
    size = 0
    for key, value in records:
        if chunk and size + len(key) + len(value) > LEDGER_CHUNK_BYTES:
            producer.send_ledger(ledger_topic, chunk)
            producer.flush()
            chunk, size = [], 0
        chunk.append((key, value))
        size += len(key) + len(value)
    producer.send_ledger(ledger_topic, chunk)


def entry_for(task_input: TaskInput, d: TaskDelivery, stats: TaskStats, unit: Unit) -> Entry:
    t = task_input.tallies[unit]
    size, mtime, version = d.files.get(unit.file, (-1, -1, ""))
    return Entry(d.topic, unit, size, mtime, d.run_id, d.lineage, d.mode, t.lines, t.rows_read, t.rows_sent,
                 t.rows_quarantined, t.bytes_sent, stats.task_id, stats.attempt, split_bytes=d.split_bytes,
                 parts_by=d.parts_by, file_version=version)  # fmt: skip


def open_transactional(make: MakeProducer, txid: str, d: TaskDelivery, stats: TaskStats | Spent) -> PartitionProducer:
    """A producer of ``txid`` with its transactions initialised: a retriable error is
    retried, a fatal one gets a new producer, within the delivery timeout, after a backoff."""
    t0 = time.monotonic()
    deadline = t0 + d.kafka_timeout_s
    retries = 0
    for attempt in range(NEW_PRODUCERS):
        producer = make(txid)
        try:
            while True:
                try:
                    producer.init_transactions(max(1.0, deadline - time.monotonic()))
                    stats.transaction_ms += round((time.monotonic() - t0) * 1000)
                    return producer
                except TransactionFailed as e:
                    if not (e.retriable and not e.fatal and time.monotonic() < deadline):
                        raise
                    retries += 1
                    stats.init_retries += 1
                    _back_off(retries, deadline, stats)
        except TransactionFailed as e:
            producer.close()
            if e.fatal and attempt + 1 < NEW_PRODUCERS and time.monotonic() < deadline:
                retries += 1
                stats.init_retries += 1
                _back_off(retries, deadline, stats)
                continue
            raise _explained(e, t0, d) from e
        except BaseException:
            producer.close()
            raise
    raise AssertionError("unreachable")


# A call retried after a retriable error waits first: doubling from the first wait up to the
# longest, each drawn between half and all of it (jitter: the tasks that met one broker's
# hiccup together do not call it again together), and never past the caller's deadline.
RETRY_FIRST_S, RETRY_LONGEST_S = 0.1, 2.0


def back_off_s(retry: int) -> float:
    """The wait before retry number ``retry`` (1, 2, ...)."""
    cap = min(RETRY_LONGEST_S, RETRY_FIRST_S * 2 ** min(retry - 1, 16))
    return random.uniform(cap / 2, cap)


def _back_off(retry: int, deadline: float, stats: TaskStats | Spent) -> None:
    wait = max(0.0, min(back_off_s(retry), deadline - time.monotonic()))
    stats.retry_wait_ms += round(wait * 1000)
    time.sleep(wait)


def commit(
    producer: PartitionProducer, d: TaskDelivery, stats: TaskStats | Spent, began: float, txid: str = ""
) -> None:
    """Commit, calling again while the error is retriable (the coordinator did not answer in
    time, say) and the transaction is young enough for the broker to keep it (it aborts one
    older than transaction.timeout.ms): its records are not sent again for a slow answer.
    Each call waits at most the delivery timeout, as the task's other calls do; a retry
    waits its backoff first."""
    t0 = time.monotonic()
    deadline = began + d.transaction_timeout_s
    retries = 0
    while True:
        try:
            producer.commit(max(1.0, min(COMMIT_CALL_S, d.kafka_timeout_s, deadline - time.monotonic())))
            return
        except TransactionFailed as e:
            if e.retriable and not e.fatal and not e.abortable and time.monotonic() < deadline:
                retries += 1
                stats.commit_retries += 1
                failpoints.hold(failpoints.COMMIT_RETRY, txid)
                _back_off(retries, deadline, stats)
                continue
            raise _explained(e, t0, d) from e


def _explained(e: TransactionFailed, t0: float, d: TaskDelivery) -> TransactionFailed:
    """The error, saying so when Kafka did not answer within the delivery timeout."""
    if time.monotonic() - t0 < 0.9 * d.kafka_timeout_s:
        return e
    return TransactionFailed(
        e.what,
        f"{e.reason}; Kafka did not answer within delivery.timeout.ms ({d.kafka_timeout_s:.0f} s): check that the"
        " brokers run, and that no task runs longer than transaction.timeout.ms"
        f" ({d.transaction_timeout_s:.0f} s; more --partitions, or --kafka-opt transaction.timeout.ms)",
        fatal=e.fatal,
        abortable=e.abortable,
        retriable=e.retriable,
        fenced=e.fenced,
    )


def _abort(producer: PartitionProducer, stats: TaskStats | Spent, error: BaseException | None = None) -> bool:
    """Abort the open transaction, unless ``error`` left the producer unusable (fatal);
    whether its coordinator aborted it."""
    if isinstance(error, TransactionFailed) and error.fatal:
        return False
    try:
        producer.abort(ABORT_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - the task's own error is the one to report
        return False  # an unreachable coordinator: whoever initialises the id next (or the next run) ends it
    stats.aborted += 1
    return True
