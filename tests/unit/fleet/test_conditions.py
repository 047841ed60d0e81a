"""Condition upserts: transition times move only on a status change; inputs stay untouched."""

from __future__ import annotations

import copy
import datetime as dt
import json
from typing import Any

import pytest

from sandfleet.api import ConditionType, Reason
from sandfleet.fleet.conditions import (
    MAX_MESSAGE_LENGTH,
    condition,
    is_true,
    rfc3339,
    set_condition,
)

T0 = dt.datetime(2026, 11, 22, 10, 0, 0, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(minutes=5)


def ready(
    conditions: list[dict[str, Any]], status: Any, *, reason: str = "RuntimeServing", **kw: Any
) -> list[dict[str, Any]]:
    fields: dict[str, Any] = {"message": "", "generation": 1, "now": T0, **kw}
    return set_condition(conditions, type="Ready", status=status, reason=reason, **fields)


def test_a_new_condition_is_stamped_with_now_in_rfc3339_utc() -> None:
    (added,) = ready([], "True", message="serving")

    assert added == {
        "type": "Ready",
        "status": "True",
        "reason": "RuntimeServing",
        "message": "serving",
        "lastTransitionTime": "2026-11-22T10:00:00Z",
        "observedGeneration": 1,
    }


def test_the_same_status_keeps_its_transition_time_but_refreshes_everything_else() -> None:
    first = ready([], "False", reason="PodPending", message="waiting")

    (again,) = ready(
        first, "False", reason="PodPending", message="still waiting", generation=2, now=T1
    )

    assert again["lastTransitionTime"] == "2026-11-22T10:00:00Z"
    assert (again["message"], again["observedGeneration"]) == ("still waiting", 2)


def test_a_status_change_moves_the_transition_time() -> None:
    first = ready([], "False", reason="PodPending")

    (flipped,) = ready(first, "True", now=T1)

    assert flipped["lastTransitionTime"] == "2026-11-22T10:05:00Z"
    assert (flipped["status"], flipped["reason"]) == ("True", "RuntimeServing")


def test_other_conditions_are_kept_in_their_order_and_the_input_is_not_modified() -> None:
    existing = [
        {"type": "Scheduled", "status": "True", "reason": "PodScheduled", "message": "",
         "lastTransitionTime": "2026-11-22T09:00:00Z", "observedGeneration": 1},
        {"type": "Ready", "status": "False", "reason": "PodPending", "message": "",
         "lastTransitionTime": "2026-11-22T09:00:00Z", "observedGeneration": 1},
        {"type": "Completed", "status": "False", "reason": "Cancelled", "message": "",
         "lastTransitionTime": "2026-11-22T09:00:00Z", "observedGeneration": 1},
    ]  # fmt: skip
    before = copy.deepcopy(existing)

    updated = ready(existing, True)

    assert existing == before
    assert [c["type"] for c in updated] == ["Scheduled", "Ready", "Completed"]
    assert updated[0] == existing[0] and updated[2] == existing[2]
    assert updated[1]["status"] == "True"


def test_setting_what_is_already_there_returns_an_equal_list() -> None:
    once = ready([], "True", message="serving")

    assert ready(once, "True", message="serving", now=T1) == once


def test_a_boolean_status_is_written_as_true_or_false() -> None:
    assert ready([], True)[0]["status"] == "True"
    assert ready([], False, reason="PodPending")[0]["status"] == "False"


def test_enum_types_and_reasons_are_written_as_plain_strings() -> None:
    (written,) = set_condition(
        [], type=ConditionType.READY, status="Unknown", reason=Reason.POD_PENDING,
        message="", generation=3, now=T0,
    )  # fmt: skip

    assert type(written["type"]) is str and type(written["reason"]) is str
    assert json.loads(json.dumps(written))["reason"] == "PodPending"


def test_a_condition_without_a_transition_time_gets_one() -> None:
    damaged = [{"type": "Ready", "status": "True", "reason": "RuntimeServing"}]

    assert ready(damaged, "True", now=T1)[0]["lastTransitionTime"] == "2026-11-22T10:05:00Z"


def test_an_overlong_message_is_cut_to_the_api_limit() -> None:
    (written,) = ready([], "False", reason="ContainerCrashed", message="x" * 100_000)

    assert len(written["message"]) == MAX_MESSAGE_LENGTH


def test_bad_statuses_and_reasons_are_refused() -> None:
    with pytest.raises(ValueError, match="True, False or Unknown"):
        ready([], "true")
    with pytest.raises(ValueError, match="CamelCase"):
        ready([], "True", reason="")
    with pytest.raises(ValueError, match="CamelCase"):
        ready([], "True", reason="not a reason")


def test_times_are_utc_with_a_z_and_naive_times_are_refused() -> None:
    plus_two = dt.timezone(dt.timedelta(hours=2))

    assert rfc3339(dt.datetime(2026, 1, 2, 5, 4, 3, 999_999, tzinfo=plus_two)) == (
        "2026-01-02T03:04:03Z"
    )
    with pytest.raises(ValueError, match="naive"):
        rfc3339(dt.datetime(2026, 1, 2))  # noqa: DTZ001 - the point of the test


def test_condition_finds_one_by_type_and_is_true_needs_status_true() -> None:
    conditions = ready(ready([], "True"), "Unknown", reason="PodPending")
    conditions = set_condition(
        conditions, type="Scheduled", status="True", reason="PodScheduled",
        message="", generation=1, now=T0,
    )  # fmt: skip

    found = condition(conditions, "Scheduled")
    assert found is not None and found["reason"] == "PodScheduled"
    assert condition(conditions, "Completed") is None
    assert condition(None, "Ready") is None
    assert is_true(conditions, "Scheduled")
    assert not is_true(conditions, "Ready")  # Unknown is not True
    assert not is_true(conditions, "Completed")
    assert not is_true(None, "Ready")
