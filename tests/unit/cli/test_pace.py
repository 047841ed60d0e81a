"""The batch ETA: from the mean task time, what the running tasks have left and the queue."""

from __future__ import annotations

import pytest

from sandfleet.cli.batch_display import eta_text
from sandfleet.cli.pace import remaining_s


def test_no_estimate_before_a_task_has_finished() -> None:
    assert remaining_s(mean_task_s=None, running_for_s=[3.0], queued=5, concurrency=4) is None
    assert eta_text(None) == "ETA -:--:--"


def test_right_after_a_burst_of_finishes_the_next_wave_still_counts() -> None:
    # The case of the report: 8 tasks of ~24 s, 4 at a time. The first wave has just
    # finished together, the second has only started: ~24 s remain, not ~1 s as a
    # completions-per-second rate over the burst says.
    eta = remaining_s(mean_task_s=24.0, running_for_s=[0.5, 0.4, 0.3, 0.2], queued=0, concurrency=4)
    assert eta == pytest.approx(23.8)
    assert eta_text(eta) == "ETA 0:00:24"


def test_queued_tasks_are_spread_over_the_workers() -> None:
    eta = remaining_s(mean_task_s=10.0, running_for_s=[5.0, 5.0], queued=6, concurrency=2)
    assert eta == pytest.approx((5 + 5 + 6 * 10) / 2)


def test_the_estimate_is_never_less_than_the_longest_running_task_needs() -> None:
    eta = remaining_s(mean_task_s=60.0, running_for_s=[0.0, 59.0, 59.0], queued=0, concurrency=8)
    assert eta == pytest.approx(60.0)


def test_a_task_running_past_the_mean_is_expected_any_moment_not_negative() -> None:
    assert remaining_s(mean_task_s=5.0, running_for_s=[9.0], queued=0, concurrency=1) == 0.0
