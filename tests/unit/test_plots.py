"""The run's figures: lanes without overlap, the run's own clock, rate axes from zero, and
Kafka's one-minute rate called warming up where it is."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

import page_view
from kappa_ingest.report import plots

T0 = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def task(i: int, start: float, seconds: float, executor: str = "0", status: str = "SUCCESS", attempt: int = 0) -> dict:
    return {"task_id": i, "stage_id": 1, "partition": i, "attempt": attempt, "status": status, "executor_id": executor,
            "host": "h", "launched_at": at(start), "duration_s": seconds, "rows": 1000, "rows_per_s": 1000 / seconds}  # fmt: skip


def a_run(tasks: list[dict], samples: int = 12) -> dict:
    """A run of 20 s: start-up 5, set-up 4, sending 8 (stage from 9.2 to 16.9 s), reconcile 1, recording 2."""
    rate = [{"t": at(8 + i), "messages_per_s": 120_000.0 + 5_000 * (i % 3), "one_minute_rate": 1_800.0}
            for i in range(samples)]  # fmt: skip
    return {
        "runs": [{"run_id": "r", "sink": "confluent", "started_at": T0, "wall_s": 20.0, "startup_s": 5.0,
                  "setup_s": 4.0, "sending_s": 8.0, "reconcile_s": 1.0, "recording_s": 2.0}],
        "stages": [{"stage_id": 1, "attempt": 0, "name": "collect at /x/partition_runner.py:402", "sends": True,
                    "submitted_at": at(9.2), "completed_at": at(16.9)}],
        "tasks": tasks,
        "executors": [{"executor_id": "0", "host": "h", "rows": 4000, "rows_per_s": 117_500.0},
                      {"executor_id": "1", "host": "h", "rows": 4000, "rows_per_s": 135_000.0}],
        "broker_rate": rate,
    }  # fmt: skip


def test_tasks_side_by_side_on_one_executor_get_their_own_slots():
    tasks = [task(0, 10, 5), task(1, 10.2, 5), task(2, 15, 2), task(3, 10, 7, executor="1")]
    # Task 2 starts when task 0 ended: slot 0 is free again; executor 1 has lanes of its own.
    assert plots.slots(tasks) == [0, 1, 0, 0]


def test_an_executor_has_no_more_lanes_than_cores():
    """On local[*] with two cores, a task launched as another ended (its end rounded a few
    ms late) takes that task's lane, not a third one."""
    tasks = [task(0, 10, 5), task(1, 10, 3), task(2, 13 - 0.02, 4), task(3, 15 - 0.03, 2)]
    assert plots.slots(tasks) == [0, 1, 2, 1]  # cores unknown: as the times say
    assert plots.slots(tasks, {"0": 2}) == [0, 1, 1, 0]
    run = a_run(tasks)
    run["executors"] = [{"executor_id": "0", "host": "h", "rows": 4000, "rows_per_s": 1.0, "cores": 2}]
    assert len(plots.task_timeline(run).axes[0].get_yticks()) == 2


def test_a_task_launched_before_a_busy_driver_ended_the_last_is_drawn_after_it_in_its_lane():
    """Spark frees a core, and launches the next task on it, before the driver has handled
    the last task's result, which ends its duration: by 0.3 s here (a loaded machine). The
    bar ends where the next task on its core began."""
    tasks = [task(0, 10, 5), task(1, 10, 3), task(2, 13 - 0.3, 4), task(3, 15 - 0.3, 2)]
    run = a_run(tasks)
    run["executors"] = [{"executor_id": "0", "host": "h", "rows": 4000, "rows_per_s": 1.0, "cores": 2}]
    lanes = page_view.drawn_lanes(run)
    assert len(lanes) == 2 and not page_view.overlaps(run)
    assert [round(b - a, 6) for a, b in lanes["executor 0 · slot 1"]] == [4.7, 2.0]  # p0 held it until p3 began
    assert [round(b - a, 6) for a, b in lanes["executor 0 · slot 2"]] == [2.7, 4.0]


def test_no_two_tasks_overlap_in_a_lane():
    rng = random.Random(7)
    tasks = [task(i, rng.uniform(0, 30), rng.uniform(0.1, 8), executor=str(rng.randrange(12))) for i in range(120)]
    run = a_run(tasks)
    lanes = page_view.drawn_lanes(run)
    assert sum(len(bars) for bars in lanes.values()) == len(tasks) and not page_view.overlaps(run)
    # Never more lanes than tasks that really ran at once on that executor; lanes in executor order (2 before 10).
    order = []
    for e in sorted({t["executor_id"] for t in tasks}, key=int):
        mine = [((t["launched_at"] - T0).total_seconds(), t["duration_s"]) for t in tasks if t["executor_id"] == e]
        most = max(sum(1 for s, d in mine if s <= x < s + d) for x, _ in mine)
        assert len([k for k in lanes if k.startswith(f"executor {e} ·")]) == most
        order += [f"executor {e} · slot {n + 1}" for n in range(most)]
    ax = plots.task_timeline(run).axes[0]
    assert [label.get_text() for label in ax.get_yticklabels()] == order


def test_timeline_is_on_the_run_clock_with_failed_attempts_hatched():
    run = a_run([task(0, 9.3, 4), task(1, 9.4, 3, status="FAILED"), task(2, 12.5, 4, attempt=1)])
    fig = plots.task_timeline(run)
    ax = fig.axes[0]
    bars = [p for p in ax.patches if p.get_width() > 0]
    assert sorted(round(b.get_x(), 1) for b in bars) == [9.3, 9.4, 12.5]  # seconds since the command started
    assert [b.get_hatch() for b in bars if b.get_hatch()] == ["////"]
    assert len(ax.get_yticks()) == 2  # two slots: the retry reused the failed attempt's lane
    legend = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert legend == ["read, convert, send (confluent)", "failed attempt"]


@pytest.mark.parametrize(("samples", "warming"), [(12, True), (400, False)])
def test_one_minute_rate_is_called_warming_up_on_short_runs(samples, warming):
    fig = plots.broker_curve(a_run([task(0, 9.3, 4)], samples=samples))
    labels = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert any("warming up" in label for label in labels) == warming
    assert any(label.startswith("Kafka one-minute rate") for label in labels)


def test_broker_curve_marks_the_sending_stage_and_the_phases():
    fig = plots.broker_curve(a_run([task(0, 9.3, 4)]))
    ax = fig.axes[0]
    assert [round(line.get_xdata()[0], 1) for line in ax.lines if line.get_linestyle() == ":"] == [9.2, 16.9]
    band = sorted((round(p.get_x(), 1), round(p.get_width(), 1)) for p in ax.patches)
    assert band == [(0.0, 5.0), (5.0, 4.0), (9.0, 8.0), (17.0, 1.0), (18.0, 2.0)]
    assert ax.get_xlim() == (0.0, 20.0)


def test_every_rate_axis_starts_at_zero():
    """Rates of 117,500 and 135,000: a line left to autoscale would start near the lower (the
    old scaling figure did); bars start at zero by matplotlib's own rule, held here all the same."""
    run = a_run([task(0, 9.3, 4), task(1, 9.3, 5, executor="1")])
    assert plots.executor_rates(run).axes[0].get_xlim()[0] == 0
    assert plots.broker_curve(run).axes[0].get_ylim()[0] == 0
    runs = [{"run_id": str(i), "sink": "confluent", "rows_per_s": r} for i, r in enumerate([117_500, 135_000])]
    assert plots.runs_compared(runs).axes[0].get_xlim()[0] == 0
    scaling = plots.scaling({
        "by_partitions": [{"partitions": p, "rows": 10**6, "rows_per_s": r} for p, r in [(1, 117_841), (2, 135_172)]],
        "by_size": [{"rows": n, "rows_per_s": r, "steady_rows_per_s": r, "peak_rss_mb": 1400.0 + n / 10**6}
                    for n, r in [(10**5, 117_500), (10**6, 135_000)]],
    })  # fmt: skip
    assert [ax.get_ylim()[0] for ax in scaling.axes] == [0, 0, 0]
    throttle = plots.configured_vs_achieved([{"configured": c, "achieved": c * 0.98} for c in (120_000, 130_000)])
    assert throttle.axes[0].get_ylim()[0] == 0
    bench = plots.bench_results([{"layout": "wide30", "rows": 10, "contestant": c, "kind": "peer", "rows_per_s": r,
                                  "rows_per_s_min": r - 1, "rows_per_s_max": r + 1, "command_to_exit_s": 9.0}
                                 for c, r in [("a", 117_500), ("b", 135_000)]])  # fmt: skip
    assert all(ax.get_xlim()[0] == 0 for ax in bench.axes)
