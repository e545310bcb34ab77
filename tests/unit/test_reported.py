"""The run report is built from the steps' typed results in one place
(``pipeline.reported``): each section says what the step found, and a check a step
failed fails the run's report."""

from __future__ import annotations

from kappa_ingest.delivery.reconcile import Verdict
from kappa_ingest.pipeline import reported
from kappa_ingest.pipeline.accounting import Accounted, Elsewhere, FailureEnded
from kappa_ingest.pipeline.reconciling import DeadLetters, Reconciled, dead_letters_check
from kappa_ingest.pipeline.sending import Sent
from kappa_ingest.report.run import RunReport
from kappa_ingest.sinks.partition_runner import SendOutcome
from kappa_ingest.source.splits import Unit


def _report() -> RunReport:
    return RunReport("r1", "confluent", "t", {})


def test_a_failed_job_ended_says_how_and_an_at_least_once_run_says_nothing_of_fencing():
    report = _report()
    reported.add_failure_ended(report, FailureEnded(1.25, True, 3, ["t-u:x: timed out"]))
    assert report.delivery == {"tasks_still_running_after_failure": True, "tasks_end_wait_s": 1.25,
                               "fenced_after_failure": 3, "not_fenced": ["t-u:x: timed out"]}  # fmt: skip
    report = _report()
    reported.add_failure_ended(report, FailureEnded(0.5, False))
    assert report.delivery == {"tasks_end_wait_s": 0.5}


def test_the_ledger_section_labels_units_and_an_unplanned_split_fails_a_check():
    a, b = Unit("/in/a.csv", 0, 10), Unit("/in/b.csv", 0, 10)
    report = _report()
    accounted = Accounted("ledger-t", [], units=2, delivered_before=0, committed=[a], missing=[b], unplanned=1, without_rows=0,
                          not_written=None)  # fmt: skip
    reported.add_accounted(report, accounted)
    assert report.ledger == {"units_without_rows": 0, "topic": "ledger-t", "units": 2, "delivered_before": 0,
                             "committed": [a.label()], "missing": [b.label()]}  # fmt: skip
    assert not report.consistent and report.checks[0]["actual"] == 1
    reported.add_elsewhere(report, Elsewhere.of([]))
    assert "delivered_by_other_runs" not in report.delivery


def test_the_reconciliation_writes_offsets_verdict_dead_letters_and_its_checks_in_order():
    report = _report()
    report.rows_sent = report.rows_quarantined = 5
    sent = Sent(SendOutcome([], None), None, {}, {0: 10, 1: 0}, {0: 13, 1: 4})  # type: ignore[arg-type]
    dead = DeadLetters("t-dlq", rows=5, found=4)
    reconciled = Reconciled(Verdict([("topic grew by rows_sent", True, 7, 7)], "offsets"),
                            [dead_letters_check("exactly-once", dead, 0)], other_producers=2, dead_letters=dead)  # fmt: skip
    reported.add_offsets(report, sent)
    reported.add_reconciled(report, reconciled)
    assert report.broker["offset_delta"] == 7 and report.broker["other_producers"] == 2
    assert report.dead_letter == {"topic": "t-dlq", "rows": 5, "found": 4}
    assert [c["ok"] for c in report.checks] == [True, False]  # the dead letter missing: the run fails its check
    assert report.delivery["verified_by"] == "offsets"
