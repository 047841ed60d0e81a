"""The batch ETA: from the finished tasks' times, what the running tasks have left (given
how long they have run) and the queue; "unknown" when nothing supports a number."""

from __future__ import annotations

import pytest

from sandfleet.cli.batch_display import eta_text
from sandfleet.cli.pace import remaining_s


def test_no_estimate_before_a_task_has_finished() -> None:
    assert remaining_s(durations_s=[], running_for_s=[3.0], queued=5, concurrency=4) is None
    assert eta_text(None) == "ETA unknown"


def test_right_after_a_burst_of_finishes_the_next_wave_still_counts() -> None:
    # 8 tasks of ~24 s, 4 at a time. The first wave has just finished together, the second
    # has only started: ~24 s remain, not ~1 s as a completions-per-second rate says.
    eta = remaining_s(
        durations_s=[24.0] * 4, running_for_s=[0.5, 0.4, 0.3, 0.2], queued=0, concurrency=4
    )
    assert eta == pytest.approx(23.8)
    assert eta_text(eta) == "ETA 0:00:24"


def test_queued_tasks_are_spread_over_the_workers() -> None:
    eta = remaining_s(durations_s=[10.0], running_for_s=[5.0, 5.0], queued=6, concurrency=2)
    assert eta == pytest.approx((5 + 5 + 6 * 10) / 2)


def test_the_estimate_is_never_less_than_the_longest_running_task_needs() -> None:
    eta = remaining_s(durations_s=[60.0], running_for_s=[0.0, 59.0, 59.0], queued=0, concurrency=8)
    assert eta == pytest.approx(60.0)


def test_a_task_running_long_is_expected_to_take_as_long_as_the_long_ones_did() -> None:
    # Finished: three quick tasks and one slow one. A task that has run past the quick
    # ones is expected to be a slow one, not "done any moment" as a mean says.
    eta = remaining_s(durations_s=[10.0, 10.0, 10.0, 300.0], running_for_s=[100.0], queued=0,
                      concurrency=1)  # fmt: skip
    assert eta == pytest.approx(200.0)


def test_a_task_running_longer_than_any_finished_one_makes_the_eta_unknown() -> None:
    # The case of the report: tasks of ~40 s finished, two have run 994 s and 788 s. Any
    # number would be made up (the old estimate said 0:00:52, then 0:00:00 for ten minutes).
    eta = remaining_s(durations_s=[40.0, 45.0, 38.0], running_for_s=[994.0, 788.0], queued=3,
                      concurrency=2)  # fmt: skip
    assert eta is None
    assert eta_text(eta) == "ETA unknown"
