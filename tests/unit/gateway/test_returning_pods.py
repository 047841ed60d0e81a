"""Which released pods a claim on an empty recycling pool waits for: only a recycling pool's
pod still held by the released session, and never past the wait's end."""

from __future__ import annotations

from typing import Any

from sandfleet.fleet.pod_index import PodIndex
from sandfleet.fleet.resources import RECYCLED_RESET_PATHS
from sandfleet.gateway.returning_pods import RETURN_WAIT_S, ReturningPods

NS = "team"


def pod(name: str, state: str, session: str | None, version: int, *, recycles: bool = True) -> Any:
    labels = {"sandfleet.dev/pool": "warm", "sandfleet.dev/state": state}
    if session:
        labels["sandfleet.dev/session"] = session
    annotations = {"sandfleet.dev/reset-paths": RECYCLED_RESET_PATHS} if recycles else {}
    return {
        "metadata": {
            "namespace": NS,
            "name": name,
            "resourceVersion": str(version),
            "labels": labels,
            "annotations": annotations,
        }
    }


def released(session: str, pod_name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": session, "annotations": {"sandfleet.dev/claimed-pod": pod_name}},
        "spec": {"poolRef": {"name": "warm"}},
    }


def test_a_released_recycling_pod_is_waited_for_until_it_is_back_or_the_wait_ends() -> None:
    now = [100.0]
    index = PodIndex()
    returning = ReturningPods(index, clock=lambda: now[0])
    index.apply("MODIFIED", pod("warm-a", "claimed", "s1", 1))
    index.apply("MODIFIED", pod("warm-b", "claimed", "s2", 1))
    index.apply("MODIFIED", pod("plain", "claimed", "s3", 1, recycles=False))

    returning.released(NS, released("s3", "plain"))  # its pool does not recycle
    assert returning.wait_left_s(NS, "warm") == 0
    returning.released(NS, released("s1", "warm-a"))
    assert returning.wait_left_s(NS, "warm") == RETURN_WAIT_S
    assert returning.wait_left_s(NS, "other") == 0

    index.apply("MODIFIED", pod("warm-a", "idle", None, 2))  # back: no longer waited for
    assert returning.wait_left_s(NS, "warm") == 0

    returning.released(NS, released("s2", "warm-b"))
    index.apply("MODIFIED", pod("warm-b", "idle", None, 2))
    index.apply("MODIFIED", pod("warm-b", "claimed", "s9", 3))  # back and claimed again
    assert returning.wait_left_s(NS, "warm") == 0

    index.apply("MODIFIED", pod("warm-a", "claimed", "s4", 3))
    returning.released(NS, released("s4", "warm-a"))
    now[0] += RETURN_WAIT_S / 2
    assert returning.wait_left_s(NS, "warm") == RETURN_WAIT_S / 2
    now[0] += RETURN_WAIT_S  # overdue: its recycle failed or the operator is behind
    assert returning.wait_left_s(NS, "warm") == 0
