"""The gateway's Suspend: which operator answer belongs to which request (the refused
generation), what counts as done (Suspended and the pod given back), and that a Suspended
session holds no place in its namespace's quota. The wait against the real operator runs in
tests/cluster/gateway/test_sdk_suspend.py."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from sandfleet.api import Phase
from sandfleet.fleet.status import SessionState
from sandfleet.gateway.routes import SessionRoutes
from sandfleet.gateway.suspends import REFUSALS, refusal, suspended
from sandfleet.kube import KubeClient, KubeConfig
from tests.support.gateway_api import session_object

SHA = "ab" * 32


def state(
    phase: str = "Ready",
    *,
    generation: int = 3,
    condition: tuple[str, str, int] | None = None,
    snapshot: bool = False,
    pod: str | None = "pod-1",
) -> SessionState:
    body: dict[str, Any] = session_object("team-a", "s1", phase=phase, pod=pod)
    body["metadata"]["generation"] = generation
    body["spec"] = {"suspend": True}
    if condition is not None:
        status, reason, observed = condition
        body["status"]["conditions"] = [
            {"type": "Suspended", "status": status, "reason": reason,
             "message": f"{reason} said", "observedGeneration": observed},
        ]  # fmt: skip
    if snapshot:
        body["status"]["snapshot"] = {
            "sizeBytes": 10240, "sha256": SHA, "suspendedTime": "2026-11-28T08:00:00Z",
            "processesKept": False,
        }  # fmt: skip
    return SessionState.from_object(body)


def test_a_refusal_counts_only_for_the_generation_that_asked() -> None:
    refused = state(condition=("False", "SnapshotTooLarge", 3))
    assert refusal(refused, 3) == (refused.conditions[0].reason, "SnapshotTooLarge said")
    assert refusal(refused, 2) is not None
    # An earlier request's refusal, same reason and message: not this request's answer.
    assert refusal(refused, 5) is None


@pytest.mark.parametrize(
    "condition",
    [None, ("True", "Suspended", 3), ("False", "Resumed", 3), ("False", "SomethingNew", 3)],
)
def test_only_failure_reasons_refuse(condition: tuple[str, str, int] | None) -> None:
    assert refusal(state(condition=condition), 3) is None


def test_store_trouble_is_unavailable_and_a_refusal_by_rule_a_failed_precondition() -> None:
    codes = {reason.value: code for reason, code in REFUSALS.items()}
    assert codes == {
        "SnapshotTooLarge": grpc.StatusCode.FAILED_PRECONDITION,
        "SuspendNotSupported": grpc.StatusCode.FAILED_PRECONDITION,
        "SnapshotStoreUnavailable": grpc.StatusCode.UNAVAILABLE,
        "SuspendFailed": grpc.StatusCode.UNAVAILABLE,
    }


def test_the_answer_is_the_snapshot_record_and_the_conditions_message() -> None:
    done = suspended(state("Suspended", condition=("True", "Suspended", 3), snapshot=True))
    assert (done.namespace, done.name, done.message) == ("team-a", "s1", "Suspended said")
    assert (done.snapshot.size_bytes, done.snapshot.sha256) == (10240, SHA)
    assert done.snapshot.suspended_time is not None
    assert done.snapshot.suspended_time.timestamp() == 1_795_852_800.0
    assert state().generation == 3 and state().suspend_asked


def test_a_suspended_session_holds_no_quota() -> None:
    index = SessionRoutes(KubeClient(KubeConfig(server="http://127.0.0.1:9")))
    index.apply("ADDED", session_object("team-a", "s1", pod="pod-1", pod_ip="10.0.0.1"))
    index.apply("ADDED", session_object("team-a", "s2", pod="pod-2", pod_ip="10.0.0.2"))
    assert index.active("team-a") == 2
    index.apply("MODIFIED", session_object("team-a", "s1", phase=Phase.SUSPENDED.value))
    route = index.get("team-a", "s1")
    assert route is not None and not route.holds_quota and not route.counted
    assert index.active("team-a") == 1
    index.apply("MODIFIED", session_object("team-a", "s1", pod="pod-3", pod_ip="10.0.0.3"))
    assert index.active("team-a") == 2  # resumed: counted again
    index.apply("MODIFIED", session_object("team-a", "s2", phase="Expired"))
    route = index.get("team-a", "s2")
    assert route is not None and not route.holds_quota and route.counted
