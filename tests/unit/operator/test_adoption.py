"""Adopting gateway-claimed sessions: which pods a session may adopt, and the session key."""

from __future__ import annotations

from typing import Any

import pytest

from sandfleet.fleet.naming import label_value
from sandfleet.fleet.pod_index import pool_of
from sandfleet.operator.adoption import adoption_problem, claimed_pod_of

NS = "team-a"
LONG = "a-session-name-that-is-far-longer-than-any-label-may-be-" * 2


def pod(session: str = "s1", **changes: Any) -> dict[str, Any]:
    labels = {"sandfleet.dev/pool": "warm", "sandfleet.dev/state": "claimed"}
    labels["sandfleet.dev/session"] = label_value(session)
    meta: dict[str, Any] = {
        "name": "warm-abcde",
        "namespace": NS,
        "labels": labels,
        "ownerReferences": [{"kind": "SandboxPool", "name": "warm", "uid": "p"}],
    }
    meta.update(changes)
    return {"metadata": meta}


def test_the_pod_claimed_for_exactly_this_session_may_be_adopted() -> None:
    assert adoption_problem(pod(), NS, "s1", "warm-abcde") is None
    assert adoption_problem(pod(LONG), NS, LONG, "warm-abcde") is None


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (None, "does not exist"),
        (pod("s2"), "another session"),
        (pod(namespace="other"), "not in namespace"),
        (pod(deletionTimestamp="2026-11-25T04:00:00Z"), "being deleted"),
        (
            pod(labels={"sandfleet.dev/state": "idle", "sandfleet.dev/pool": "warm"}),
            "not a claimed",
        ),
        (pod(labels={"sandfleet.dev/state": "claimed", "sandfleet.dev/session": "s1"}), "pool pod"),
    ],
)
def test_any_other_pod_is_refused_with_the_reason(
    body: dict[str, Any] | None, fragment: str
) -> None:
    problem = adoption_problem(body, NS, "s1", "warm-abcde")

    assert problem is not None
    assert fragment in problem


def test_the_claimed_pod_is_read_from_the_sessions_annotation() -> None:
    assert claimed_pod_of({"sandfleet.dev/claimed-pod": "warm-abcde"}) == "warm-abcde"
    assert claimed_pod_of({"sandfleet.dev/claimed-pod": ""}) is None
    assert claimed_pod_of(None) is None


def test_the_pool_is_the_pods_pool_owner() -> None:
    assert pool_of(pod()) == "warm"
    assert (
        pool_of({"metadata": {"ownerReferences": [{"kind": "SandboxSession", "name": "x"}]}})
        is None
    )
