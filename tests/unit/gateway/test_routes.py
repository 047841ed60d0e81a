"""SessionRoutes fed by hand: watch events, the gateway's own claims, relists, counts per
namespace and the channel evictions they cause (the list/watch feed itself runs in
tests/integration/gateway against a stand-in API server)."""

from __future__ import annotations

import dataclasses
import time

from sandfleet.api import Phase
from sandfleet.gateway.claim_types import Claimed
from sandfleet.gateway.routes import CLAIM_GRACE_S, SessionRoutes
from sandfleet.kube import KubeClient, KubeConfig
from tests.support.gateway_api import session_object


def routes() -> tuple[SessionRoutes, list[str]]:
    index = SessionRoutes(KubeClient(KubeConfig(server="http://127.0.0.1:9")))
    gone: list[str] = []
    index.on_gone = gone.append
    return index, gone


def claimed(name: str, pod: str = "pod-1", address: str = "10.0.0.1:50051") -> Claimed:
    return Claimed(
        namespace="team-a",
        name=name,
        token="token",
        pod=pod,
        address=address,
        warm=True,
        workdir="/workspace",
    )


def test_a_claim_is_routable_at_once_and_keeps_its_address_until_the_status_has_one() -> None:
    index, gone = routes()
    index.record(claimed("s1"))
    route = index.get("team-a", "s1")
    assert route is not None and route.ready and route.address == "10.0.0.1:50051"
    # The watch shows the session before the operator adopted it: no status yet.
    index.apply("ADDED", session_object("team-a", "s1", phase=None, pod="pod-1"))
    route = index.get("team-a", "s1")
    assert route is not None and route.ready and route.address == "10.0.0.1:50051"
    # Adopted: the status's IP wins (the same here), still one active session.
    index.apply("MODIFIED", session_object("team-a", "s1", pod="pod-1", pod_ip="10.0.0.1"))
    assert index.active("team-a") == 1 and gone == []


def test_finishing_and_deleting_evict_the_address_and_stop_counting() -> None:
    index, gone = routes()
    index.apply("ADDED", session_object("team-a", "s1", pod="p", pod_ip="10.0.0.2"))
    index.apply("ADDED", session_object("team-a", "s2", phase="Starting"))
    assert index.active("team-a") == 2
    index.apply("MODIFIED", session_object("team-a", "s1", phase="Expired", pod_ip="10.0.0.2"))
    route = index.get("team-a", "s1")
    assert route is not None and route.finished and route.phase == Phase.EXPIRED
    assert gone == ["10.0.0.2:50051"] and index.active("team-a") == 1
    index.apply("DELETED", session_object("team-a", "s2", phase="Starting"))
    assert index.get("team-a", "s2") is None and index.active("team-a") == 0
    assert index.active_by_namespace() == {}


def test_a_relist_drops_what_it_lacks_but_not_a_claim_younger_than_the_grace() -> None:
    index, gone = routes()
    index.apply("ADDED", session_object("team-a", "old", pod_ip="10.0.0.3"))
    index.apply("ADDED", session_object("team-b", "other", pod_ip="10.0.0.4"))
    index.record(claimed("fresh"))
    index.replace_scope("team-a", [session_object("team-a", "new", phase="Pending")])
    assert index.get("team-a", "old") is None and gone == ["10.0.0.3:50051"]
    assert index.get("team-a", "fresh") is not None  # claimed a moment ago
    assert index.get("team-b", "other") is not None  # another namespace's list
    assert index.active("team-a") == 2  # fresh + new
    route = index.get("team-a", "fresh")
    assert route is not None and route.claimed_at is not None
    aged = dataclasses.replace(route, claimed_at=time.monotonic() - CLAIM_GRACE_S - 1)
    index._routes[("team-a", "fresh")] = aged
    index.replace_scope("team-a", [])
    assert index.get("team-a", "fresh") is None and index.active("team-a") == 0


def test_a_starting_session_is_not_ready() -> None:
    index, _ = routes()
    index.apply("ADDED", session_object("team-a", "s", phase="Starting", pod_ip="10.0.0.5"))
    route = index.get("team-a", "s")
    assert route is not None and not route.ready and not route.finished


def test_a_released_session_stays_routable_but_stops_counting() -> None:
    index, gone = routes()
    index.apply("ADDED", session_object("team-a", "s", pod_ip="10.0.0.6"))
    released = session_object("team-a", "s", pod_ip="10.0.0.6")
    released["metadata"]["deletionTimestamp"] = "2026-11-25T03:00:00Z"
    index.apply("MODIFIED", released)
    route = index.get("team-a", "s")
    assert route is not None and route.ready and route.deleting
    assert index.active("team-a") == 0 and gone == []


def test_a_recycled_pods_address_stays_open_while_its_next_session_uses_it() -> None:
    """The pod of a released session serves the next claim at the same address, often
    before the released session's route goes: its channel must not be closed under it."""
    index, gone = routes()
    index.apply("ADDED", session_object("team-a", "s1", pod="p", pod_ip="10.0.0.3"))
    index.record(claimed("s2", pod="p", address="10.0.0.3:50051"))
    index.apply("DELETED", session_object("team-a", "s1", pod="p", pod_ip="10.0.0.3"))
    assert gone == []
    index.apply("DELETED", session_object("team-a", "s2", pod="p", pod_ip="10.0.0.3"))
    assert gone == ["10.0.0.3:50051"]
