"""A task that knows its units opens the next unit's producer on a thread while it sends the
one before: the next id initialised, then the ledger read on, in that order, and the unit
sent only if that reading lacks it; meanwhile the unit's first rows are converted, and
counted and sent only once it is admitted. A transaction its coordinator aborted, the task sends
its units again, those it committed found in the ledger. Scripted producers and a scripted
ledger here; the real broker, kills, pauses and fences in test_exactly_once_recovery.py,
test_exactly_once_zombies.py and test_faults.py."""

from __future__ import annotations

import threading
from itertools import pairwise

import pyarrow as pa
import pytest

from kappa_ingest.delivery import guarantees
from kappa_ingest.delivery.guarantees import TaskDelivery
from kappa_ingest.delivery.ledger import Entry
from kappa_ingest.sinks import early, partition_runner, writers
from kappa_ingest.sinks.producer import DeliveryFailed, TransactionFailed
from kappa_ingest.sinks.task_stats import TaskStats
from kappa_ingest.sinks.task_units import TaskInput, UnitTally
from kappa_ingest.source import split_reader
from kappa_ingest.source.columns import BLOCK_COL, BLOCK_LEN_COL, FILE_COL
from kappa_ingest.source.splits import Unit

UNITS = [Unit(f"/in/f{i}.csv", 0, 100) for i in range(4)]


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def add(self, what: str, txid: str) -> None:
        with self.lock:
            self.events.append((what, txid))


class Producer:
    def __init__(self, log: Log, txid: str, fail_init: bool = False, fail_flush: bool = False,
                 abort_ok: bool = True, gate: threading.Event | None = None,
                 commit_gate: threading.Event | None = None) -> None:  # fmt: skip
        self.log, self.txid, self.fail_init, self.closed = log, txid, fail_init, False
        self.fail_flush, self.abort_ok, self.gate, self.commit_gate = fail_flush, abort_ok, gate, commit_gate

    def init_transactions(self, timeout_s: float) -> None:
        if self.gate is not None:  # the coordinator's round trips, as long as the test holds them
            assert self.gate.wait(10)
        self.log.add("init", self.txid)
        if self.fail_init:
            raise TransactionFailed("initialising", "scripted", fatal=False, abortable=False, retriable=False)

    def begin(self) -> None:
        self.log.add("begin", self.txid)

    def send_ledger(self, topic: str, records: list) -> None:
        pass

    def flush(self) -> None:
        if self.fail_flush:  # as librdkafka fails a transaction's queue once it is abortable
            raise DeliveryFailed("1 of 1 records not acknowledged by Kafka (Local: Purged in queue)")

    def commit(self, timeout_s: float) -> None:
        if self.commit_gate is not None:  # the commit's round trip, as long as the test holds it
            assert self.commit_gate.wait(10)
        self.log.add("commit", self.txid)

    def abort(self, timeout_s: float) -> None:
        self.log.add("abort", self.txid)
        if not self.abort_ok:
            raise TransactionFailed("aborting", "scripted: no coordinator", fatal=False, abortable=False,
                                    retriable=True)  # fmt: skip

    partitions_touched = 1

    def offset_runs(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True


class Tail:
    """The ledger as a task reads it on. Another writer's entry of a unit is committed when
    that unit's id is initialised here (the init ends the other writer's transaction, as the
    coordinator does): a reading before the init does not see it, one after does."""

    def __init__(self, log: Log, other_writers: dict[Unit, Entry]) -> None:
        self.log, self.other_writers, self.entries, self.superseded = log, other_writers, {}, {}

    def warm(self) -> None:
        pass

    def catch_up(self) -> None:
        with self.log.lock:
            initialised = {txid for what, txid in self.log.events if what == "init"}
            committed = {txid for what, txid in self.log.events if what == "commit"}
        self.entries.update((u, e) for u, e in self.other_writers.items() if _id(u) in initialised)
        self.entries.update((u, _entry(u, "r")) for u in UNITS if _id(u) in committed)  # the task's own, earlier

    def close(self) -> None:
        pass


def _entry(u: Unit, run: str) -> Entry:
    return Entry("t", u, 100, 1, run, "r", "exactly-once", 5, 4, 4, 0, 40, 0, 0)


def _writer(log: Log, other_writers: dict[Unit, Entry] | None = None, failing: str | None = None,
            stats: TaskStats | None = None, failing_flush: set[str] | None = None, abort_ok: bool = True,
            gate: threading.Event | None = None, commit_gates: dict[str, threading.Event] | None = None):  # fmt: skip
    """A writer of UNITS; ``failing_flush``: ids whose next producer's flush fails (once each)."""
    d = TaskDelivery("exactly-once", "r", "r", "t", "_l", {}, {u.file: (100, 1, "") for u in UNITS}, scope="s",
                     ledger_start={0: 0})  # fmt: skip
    made: list[Producer] = []
    flaky = failing_flush if failing_flush is not None else set()

    def make(txid: str | None) -> Producer:
        fail_flush = txid in flaky
        flaky.discard(txid)
        made.append(Producer(log, txid or "", fail_init=txid == failing, fail_flush=fail_flush, abort_ok=abort_ok,
                             gate=gate, commit_gate=(commit_gates or {}).get(txid or "")))  # fmt: skip
        return made[-1]

    w = writers.UnitTransactions(d, make, stats or TaskStats(0, 0, 0, 0, "h"))
    w.tail = Tail(log, other_writers or {})
    w.task_input = TaskInput(0, admit=w.admit)
    return w, made


def _admit(w: writers.UnitTransactions, u: Unit) -> Entry | object | None:
    """``u``'s first rows arrive: admitted, and (if sent) tallied, as TaskInput does."""
    found = w.admit(u)
    if found is None:
        w.task_input.tallies.setdefault(u, UnitTally(lines=1, rows_read=1, rows_sent=1))
    return found


def _id(u: Unit) -> str:
    return guarantees.unit_id("s", u)


def test_the_next_units_id_is_initialised_before_the_unit_before_it_commits():
    log = Log()
    w, made = _writer(log)
    w.upcoming(UNITS)
    w.start()
    for u in UNITS:
        assert _admit(w, u) is None
    w.finish()
    w.close()
    ev = log.events
    for a, b in pairwise(UNITS):
        assert ev.index(("init", _id(b))) < ev.index(("commit", _id(a)))  # opened ahead, while a was sent
        assert ev.index(("init", _id(b))) < ev.index(("begin", _id(b)))
    assert [e for e in ev if e[0] == "commit"] == [("commit", _id(u)) for u in UNITS]
    assert len(made) == len(UNITS) and all(p.closed for p in made)


def test_a_units_commit_runs_while_the_next_unit_is_sent_and_units_commit_in_their_order():
    log, gate = Log(), threading.Event()
    stats = TaskStats(0, 0, 0, 0, "h")
    w, made = _writer(log, stats=stats, commit_gates={_id(UNITS[0]): gate})
    w.upcoming(UNITS[:3])
    w.start()
    assert _admit(w, UNITS[0]) is None
    assert _admit(w, UNITS[1]) is None  # UNITS[0]'s commit held on its thread: UNITS[1] begun beside it
    assert ("begin", _id(UNITS[1])) in log.events and ("commit", _id(UNITS[0])) not in log.events
    assert not made[0].closed
    threading.Timer(0.2, gate.set).start()
    assert _admit(w, UNITS[2]) is None  # waits for UNITS[0]'s commit before UNITS[1]'s
    w.finish()
    w.close()
    assert [e for e in log.events if e[0] == "commit"] == [("commit", _id(u)) for u in UNITS[:3]]
    assert stats.transactions == 3 and [e.unit for e in w.entries] == UNITS[:3]
    assert all(p.closed for p in made)


def test_the_next_units_are_opened_side_by_side_ahead_of_their_rows():
    log, gate = Log(), threading.Event()
    w, made = _writer(log, gate=gate)
    w.upcoming(UNITS)
    w.start()
    for _ in range(1000):  # (bounded) every opening's producer made, each held in its id's init
        if len(made) == writers.OPENED_AHEAD:
            break
        threading.Event().wait(0.005)
    assert len(made) == writers.OPENED_AHEAD == len(UNITS) and not log.events
    gate.set()
    for u in UNITS:
        assert _admit(w, u) is None
    w.finish()
    w.close()
    assert [e for e in log.events if e[0] == "commit"] == [("commit", _id(u)) for u in UNITS]
    assert len(made) == len(UNITS) and all(p.closed for p in made)


def test_a_unit_the_ledger_shows_delivered_after_its_id_was_initialised_is_not_sent():
    log = Log()
    e = _entry(UNITS[2], "other")
    w, made = _writer(log, {UNITS[2]: e})
    w.upcoming(UNITS)
    w.start()
    assert _admit(w, UNITS[0]) is None and _admit(w, UNITS[1]) is None
    assert _admit(w, UNITS[2]) is e  # read on after its init: sent by another writer
    assert _admit(w, UNITS[3]) is None
    w.finish()
    w.close()
    assert ("begin", _id(UNITS[2])) not in log.events and ("commit", _id(UNITS[2])) not in log.events
    assert all(p.closed for p in made)


def test_a_unit_opened_ahead_whose_rows_never_come_is_closed_and_its_failure_is_not_the_tasks():
    log = Log()
    w, made = _writer(log, failing=_id(UNITS[1]))
    w.upcoming(UNITS)
    w.start()
    assert _admit(w, UNITS[0]) is None
    assert _admit(w, UNITS[2]) is None  # no line began in UNITS[1]: its opening failed, unused
    w.finish()
    w.close()
    assert [e for e in log.events if e[0] == "commit"] == [("commit", _id(UNITS[0])), ("commit", _id(UNITS[2]))]
    assert all(p.closed for p in made if not p.fail_init)


def test_a_tasks_handed_splits_name_its_units_as_its_rows_do():
    handed = [pa.RecordBatch.from_pydict({FILE_COL: ["file:/in/a%20b.csv", "file:/in/c.csv"], BLOCK_COL: [0, 5],
                                          BLOCK_LEN_COL: [5, 9]})]  # fmt: skip
    assert [Unit(*s) for s in split_reader.handed_splits(handed)] == [
        Unit("/in/a b.csv", 0, 5),
        Unit("/in/c.csv", 5, 9),
    ]


def _send_all(w: writers.UnitTransactions, stats: TaskStats) -> None:
    """The task's send, as the runner makes it: every unit's first rows, then finish."""
    try:
        w.upcoming(UNITS)
        w.start()
        for u in UNITS:
            _admit(w, u)
        w.finish()
    except BaseException:
        w.abandon()
        raise
    finally:
        w.close()


def _sent_with_reruns(log: Log, failing_flush: set[str], abort_ok: bool = True, replayable: bool = True) -> TaskStats:
    def new_writer(stats: TaskStats) -> writers.UnitTransactions:
        return _writer(log, stats=stats, failing_flush=failing_flush, abort_ok=abort_ok)[0]

    return partition_runner.sent_with_reruns(_send_all, new_writer, TaskStats(0, 0, 0, 0, "h"), replayable)


def test_a_transaction_its_coordinator_aborted_is_sent_again_and_the_units_committed_before_it_are_not():
    log = Log()
    stats = _sent_with_reruns(log, {_id(UNITS[1])}, abort_ok=True)
    ev = log.events
    assert [e for e in ev if e[0] == "commit"] == [("commit", _id(u)) for u in UNITS]  # each once, in order
    assert ev.count(("abort", _id(UNITS[1]))) == 1 and ev.count(("begin", _id(UNITS[1]))) == 2
    assert ev.count(("begin", _id(UNITS[0]))) == 1  # committed before the abort: found in the ledger, not sent
    assert ev.index(("abort", _id(UNITS[1]))) < ev.index(("commit", _id(UNITS[1])))
    # UNITS[2], begun while UNITS[1] committed, was aborted with the task and sent again too.
    assert ev.count(("abort", _id(UNITS[2]))) == 1 and ev.count(("begin", _id(UNITS[2]))) == 2
    assert stats.aborted == 2 and stats.transactions == 3  # the send that succeeded: UNITS[1:]


def test_a_transaction_not_aborted_by_its_coordinator_or_a_task_that_cannot_read_its_splits_again_fails():
    for abort_ok, replayable in ((False, True), (True, False)):
        log = Log()
        with pytest.raises(DeliveryFailed, match="Purged in queue"):
            _sent_with_reruns(log, {_id(UNITS[1])}, abort_ok=abort_ok, replayable=replayable)
        assert log.events.count(("begin", _id(UNITS[0]))) == 1  # not run again
        assert ("commit", _id(UNITS[1])) not in log.events


def test_a_task_sends_again_at_most_reruns_times():
    log = Log()
    ids = [_id(UNITS[1])]
    failing: set[str] = set(ids)

    def new_writer(stats: TaskStats) -> writers.UnitTransactions:
        failing.update(ids)  # every send's transaction of UNITS[1] is aborted
        return _writer(log, stats=stats, failing_flush=failing)[0]

    with pytest.raises(DeliveryFailed):
        partition_runner.sent_with_reruns(_send_all, new_writer, TaskStats(0, 0, 0, 0, "h"), True)
    assert log.events.count(("abort", ids[0])) == partition_runner.RERUNS + 1


def _rows(u: Unit, n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({FILE_COL: [f"file:{u.file}"] * n, BLOCK_COL: [u.start] * n,
                                       BLOCK_LEN_COL: [u.length] * n})  # fmt: skip


class Enc:
    nbytes = 10


def _held_while_opening(other_writers: dict[Unit, Entry]) -> tuple[list, writers.UnitTransactions, Log]:
    """A task's four batches of UNITS[0], its id's init held until two are converted."""
    log, gate = Log(), threading.Event()
    w, _ = _writer(log, other_writers, gate=gate)
    w.upcoming(UNITS[:1])
    w.start()
    held_lines: list[int] = []

    def convert(u: Unit, rows: pa.RecordBatch, held: int) -> tuple:
        held_lines.append(held)
        assert ("begin", _id(u)) not in log.events
        if len(held_lines) == 2:
            gate.set()
            for _ in range(1000):  # until its opening is done (bounded)
                if not w.waiting():
                    break
                threading.Event().wait(0.005)
        return ("parsed", u, held), Enc()

    got = list(early.converted_early(iter([_rows(UNITS[0], 3) for _ in range(4)]), w.task_input, w.waiting,
                                     w.waits_for, convert))  # fmt: skip
    assert held_lines == [0, 3]  # converted while the id initialised, then no more
    assert [e is not None for _, e in got] == [True, True, False, False]
    return got, w, log


def test_a_units_first_rows_are_converted_while_its_id_initialises_and_sent_once_it_is_admitted():
    got, w, log = _held_while_opening({})
    counted = []

    def convert(u: Unit, rows: pa.RecordBatch, e: early.Early | None) -> tuple:
        counted.append(e.taken()[0] if e is not None else ("now", u))
        w.task_input.tallies.setdefault(u, UnitTally(lines=3, rows_read=3, rows_sent=3))
        return None, Enc()

    assert len(list(partition_runner.converted(iter(got), w.task_input, convert))) == 4
    assert counted == [("parsed", UNITS[0], 0), ("parsed", UNITS[0], 3), ("now", UNITS[0]), ("now", UNITS[0])]
    assert log.events.index(("init", _id(UNITS[0]))) < log.events.index(("begin", _id(UNITS[0])))
    w.finish()
    w.close()


def test_rows_converted_while_their_unit_waited_are_dropped_unseen_when_the_ledger_then_shows_it_delivered():
    e = _entry(UNITS[0], "other")
    got, w, log = _held_while_opening({UNITS[0]: e})
    counted = []
    enc = partition_runner.converted(iter(got), w.task_input, lambda *a: counted.append(a))
    assert list(enc) == [] and counted == []
    assert w.task_input.inherited == {UNITS[0]: e} and w.task_input.lines_dropped == 12
    assert ("begin", _id(UNITS[0])) not in log.events
    w.finish()
    w.close()


def _scripted(waits: list[bool], units: list[Unit], fail_at: int = -1, held_bytes: int = early.HELD_BYTES):
    """converted_early over one batch of each of ``units``, the writer waiting as ``waits``
    says at each question."""
    answers = iter(waits)
    ti = TaskInput(0)
    done: list[tuple[Unit, int]] = []

    def convert(u: Unit, rows: pa.RecordBatch, held: int) -> tuple:
        if len(done) == fail_at:
            raise ValueError("scripted")
        done.append((u, held))
        return None, Enc()

    batches = [_rows(u, 2) for u in units]
    got = list(early.converted_early(iter(batches), ti, lambda: True, lambda u: next(answers, False), convert,
                                     held_bytes))  # fmt: skip
    return got, done


def test_early_conversion_stops_at_its_bound_at_another_units_rows_and_at_an_error_kept_for_its_taking():
    a, b = UNITS[0], UNITS[1]
    # (the held are admitted before the next batch is asked for: the unit no longer waits then)
    bound = 2 * (_rows(a, 2).nbytes + Enc.nbytes)  # two batches' lines and records
    got, done = _scripted([True, True, False], [a, a, a], held_bytes=bound)
    assert done == [(a, 0), (a, 2)] and [e is not None for _, e in got] == [True, True, False]
    got, done = _scripted([True, True, True, False, False], [a, b, b])
    assert done == [(a, 0), (b, 0)] and [e is not None for _, e in got] == [True, True, False]
    got, done = _scripted([True, True, False], [a, a, a], fail_at=1)
    assert done == [(a, 0)] and [e is not None for _, e in got] == [True, True, False]
    with pytest.raises(ValueError, match="scripted"):
        got[1][1].taken()
