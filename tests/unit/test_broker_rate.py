"""The broker-side rate curve, against values worked out by hand."""

from __future__ import annotations

import pytest

from kappa_ingest.report.broker_rate import ALPHA, OneMinuteRate, curve, figures, one_minute_rates


def test_alpha_is_kafkas_one_minute_constant():
    assert ALPHA == pytest.approx(0.0799555853706767)  # 1 - e^(-5/60)


def test_first_tick_sets_the_rate_and_it_holds_between_ticks():
    offsets = [i * 1000 for i in range(11)]  # 1,000 msg/s for 10 s
    rates = one_minute_rates(offsets)
    assert rates[:5] == [0.0] * 5  # no tick yet
    assert rates[5:] == [1000.0] * 6


def test_decay_after_the_sender_stops():
    offsets = [min(i, 5) * 1000 for i in range(21)]  # 1,000 msg/s for 5 s, then nothing
    rates = one_minute_rates(offsets)
    assert rates[5] == 1000.0 and rates[9] == 1000.0
    assert rates[10] == pytest.approx(920.0, abs=0.1)  # 1000 * e^(-1/12) = 920.04
    assert rates[15] == pytest.approx(846.5, abs=0.1)  # 1000 * e^(-2/12) = 846.48
    assert rates[20] == pytest.approx(778.8, abs=0.1)  # 1000 * e^(-3/12) = 778.80


def test_meter_class_matches_by_hand():
    m = OneMinuteRate()
    m.update(10_000)
    m.tick()
    assert m.value == 2000.0
    m.update(0)
    m.tick()
    assert m.value == pytest.approx(2000 * (1 - ALPHA))


def test_curve_and_figures():
    t0 = 1_795_300_000.0
    samples = [(t0 + i, o) for i, o in enumerate([100, 100, 1100, 3100, 5100, 7100, 9100, 10100, 10100])]
    points = curve(samples)
    assert [p["messages_per_s"] for p in points] == [0, 0, 1000, 2000, 2000, 2000, 2000, 1000, 0]
    assert points[0]["t"] == "2026-11-21T22:26:40.000Z" and points[-1]["offsets_total"] == 10100
    f = figures(points)
    assert f["peak_messages_per_s"] == 2000
    assert f["time_to_first_record_s"] == 2.0
    assert f["steady_messages_per_s"] == 2000  # median of the sending seconds 1000, 2000 x4, 1000


def test_seconds_sampled_is_the_span_of_the_samples_not_their_count():
    """A sample missed on a busy broker leaves a gap, not a shorter clock: four samples over 9 s."""
    from kappa_ingest.report.broker_rate import seconds_sampled

    points = [{"t": f"2026-11-23T12:00:{s:02d}.000Z"} for s in (0, 1, 5, 9)]
    assert seconds_sampled(points) == 9.0 and seconds_sampled(points[:1]) == 0.0
