"""PodIndex: what a watch event does to the held pods, which signals it sets, and slim()."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sandfleet.api import MANAGED_BY_VALUE, Component, Label, PodState
from sandfleet.fleet.naming import label_value
from sandfleet.fleet.pod_index import Pod, PodIndex, pod_ip, pod_is_ready, slim

NS = "team-a"


def sandbox_pod(
    name: str,
    *,
    rv: str = "1",
    ns: str = NS,
    pool: str | None = None,
    state: PodState | None = None,
    ready: bool = False,
    ip: str | None = None,
    deleting: bool = False,
) -> Pod:
    """A pod as the API server sends it (managedFields and a full spec included)."""
    labels = {Label.MANAGED_BY.value: MANAGED_BY_VALUE, Label.COMPONENT.value: Component.SANDBOX}
    if pool is not None:
        labels[Label.POOL.value] = label_value(pool)
    if state is not None:
        labels[Label.STATE.value] = state.value
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "uid": f"uid-{name}",
        "resourceVersion": rv,
        "labels": labels,
        "creationTimestamp": "2026-01-02T03:04:05Z",
        "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-02T03:05:00Z"
    status: dict[str, Any] = {
        "phase": "Running" if ip else "Pending",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if ip:
        status["podIP"] = ip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"nodeName": "node-1", "containers": [{"name": "runtime", "image": "img"}]},
        "status": status,
    }


def idle(name: str, *, rv: str = "1", pool: str = "warm", ready: bool = True) -> Pod:
    return sandbox_pod(name, rv=rv, pool=pool, state=PodState.IDLE, ready=ready, ip="10.0.0.1")


def claimed(name: str, *, rv: str, pool: str = "warm") -> Pod:
    return sandbox_pod(name, rv=rv, pool=pool, state=PodState.CLAIMED, ready=True, ip="10.0.0.1")


def names(pods: list[Pod]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


@pytest.fixture
def index() -> PodIndex:
    return PodIndex()


# --- apply ---------------------------------------------------------------------------------
def test_an_added_pod_is_found_by_namespace_and_name(index: PodIndex) -> None:
    index.apply("ADDED", sandbox_pod("s1", rv="3"))

    held = index.get(NS, "s1")
    assert held is not None
    assert held["metadata"]["resourceVersion"] == "3"
    assert index.get("other-namespace", "s1") is None
    assert len(index) == 1


def test_a_newer_event_replaces_the_pod_and_sets_its_signal(index: PodIndex) -> None:
    index.apply("ADDED", sandbox_pod("s1", rv="3"))
    signal = index.signal(NS, "s1")

    index.apply("MODIFIED", sandbox_pod("s1", rv="4", ip="10.1.2.3"))

    held = index.get(NS, "s1")
    assert held is not None and pod_ip(held) == "10.1.2.3"
    assert signal.is_set()


@pytest.mark.parametrize("older_or_same", ["2", "3"])
def test_an_event_not_newer_than_the_held_pod_is_ignored_without_a_signal(
    index: PodIndex, older_or_same: str
) -> None:
    index.apply("ADDED", sandbox_pod("s1", rv="3", ip="10.1.2.3"))
    signal = index.signal(NS, "s1")

    index.apply("MODIFIED", sandbox_pod("s1", rv=older_or_same))

    held = index.get(NS, "s1")
    assert held is not None
    assert (held["metadata"]["resourceVersion"], pod_ip(held)) == ("3", "10.1.2.3")
    assert not signal.is_set()


def test_resource_versions_that_are_not_integers_never_hide_an_event(index: PodIndex) -> None:
    # resourceVersions are opaque strings: only etcd-backed servers hand out integers.
    index.apply("ADDED", sandbox_pod("s1", rv="b7"))

    index.apply("MODIFIED", sandbox_pod("s1", rv="a1", ip="10.1.2.3"))

    held = index.get(NS, "s1")
    assert held is not None and held["metadata"]["resourceVersion"] == "a1"


def test_a_deleted_pod_leaves_the_index_and_sets_its_signal(index: PodIndex) -> None:
    index.apply("ADDED", sandbox_pod("s1", rv="3"))
    signal = index.signal(NS, "s1")

    index.apply("DELETED", sandbox_pod("s1", rv="5"))

    assert index.get(NS, "s1") is None
    assert len(index) == 0
    assert signal.is_set()


def test_the_deletion_of_a_pod_never_held_still_wakes_whoever_waits_for_it(
    index: PodIndex,
) -> None:
    signal = index.signal(NS, "s1")

    index.apply("DELETED", sandbox_pod("s1", rv="5"))

    assert signal.is_set()
    assert index.get(NS, "s1") is None


def test_signals_are_kept_apart_by_namespace_and_pod(index: PodIndex) -> None:
    mine = index.signal(NS, "s1")
    same_name_elsewhere = index.signal("team-b", "s1")
    other_pod = index.signal(NS, "s2")

    index.apply("ADDED", sandbox_pod("s1"))

    assert mine.is_set()
    assert not same_name_elsewhere.is_set()
    assert not other_pod.is_set()


def test_a_signal_is_shared_until_forgotten_and_then_made_anew(index: PodIndex) -> None:
    first = index.signal(NS, "s1")
    assert index.signal(NS, "s1") is first

    index.forget_signal(NS, "s1")
    index.forget_signal(NS, "never-asked-for")  # forgetting an unknown key is harmless

    assert index.signal(NS, "s1") is not first


# --- pools ---------------------------------------------------------------------------------
def test_a_new_idle_pod_wakes_its_pool(index: PodIndex) -> None:
    pool_signal = index.signal(NS, "pool/warm")
    other_pool = index.signal(NS, "pool/cold")

    index.apply("ADDED", idle("warm-abcde"))

    assert pool_signal.is_set()
    assert not other_pool.is_set()


def test_a_claim_relabel_moves_the_pod_out_of_its_pool_and_wakes_the_pool(
    index: PodIndex,
) -> None:
    index.apply("ADDED", idle("warm-abcde", rv="3"))
    assert names(index.pool_pods(NS, "warm")) == ["warm-abcde"]
    pool_signal = index.signal(NS, "pool/warm")
    pod_signal = index.signal(NS, "warm-abcde")

    index.apply("MODIFIED", claimed("warm-abcde", rv="4"))

    assert index.pool_pods(NS, "warm") == []
    assert index.idle_ready_pods(NS, "warm") == []
    assert index.get(NS, "warm-abcde") is not None  # still indexed: now the session's pod
    assert pool_signal.is_set()
    assert pod_signal.is_set()


def test_an_update_of_a_claimed_pod_leaves_the_pool_alone(index: PodIndex) -> None:
    index.apply("ADDED", claimed("warm-abcde", rv="4"))
    pool_signal = index.signal(NS, "pool/warm")

    index.apply("MODIFIED", claimed("warm-abcde", rv="5"))

    assert not pool_signal.is_set()


def test_deleting_an_idle_pod_wakes_its_pool(index: PodIndex) -> None:
    index.apply("ADDED", idle("warm-abcde", rv="3"))
    pool_signal = index.signal(NS, "pool/warm")

    index.apply("DELETED", idle("warm-abcde", rv="4"))

    assert pool_signal.is_set()
    assert index.pool_pods(NS, "warm") == []


def test_deleting_a_pod_claimed_since_the_index_last_saw_it_wakes_its_former_pool(
    index: PodIndex,
) -> None:
    # The DELETED event carries the claimed labels; the index only ever saw the idle pod.
    index.apply("ADDED", idle("warm-abcde", rv="3"))
    pool_signal = index.signal(NS, "pool/warm")
    pod_signal = index.signal(NS, "warm-abcde")

    index.apply("DELETED", claimed("warm-abcde", rv="6"))

    assert pool_signal.is_set()
    assert pod_signal.is_set()


def test_pool_pods_are_the_idle_pods_of_that_pool_in_that_namespace_not_being_deleted(
    index: PodIndex,
) -> None:
    index.apply("ADDED", idle("warm-ready"))
    index.apply("ADDED", idle("warm-starting", ready=False))
    index.apply("ADDED", claimed("warm-taken", rv="2"))
    index.apply("ADDED", sandbox_pod("warm-going", pool="warm", state=PodState.IDLE, deleting=True))
    index.apply("ADDED", idle("cold-ready", pool="cold"))
    index.apply(
        "ADDED", sandbox_pod("warm-elsewhere", ns="team-b", pool="warm", state=PodState.IDLE)
    )
    index.apply("ADDED", sandbox_pod("session-pod"))

    assert names(index.pool_pods(NS, "warm")) == ["warm-ready", "warm-starting"]
    assert names(index.idle_ready_pods(NS, "warm")) == ["warm-ready"]
    assert names(index.idle_ready_pods(NS, "cold")) == ["cold-ready"]
    assert len(index) == 7


def test_a_pool_with_a_name_too_long_for_a_label_is_found_by_its_hashed_label(
    index: PodIndex,
) -> None:
    long_pool = "p" * 80
    index.apply("ADDED", idle("pod-1", pool=long_pool))

    assert names(index.idle_ready_pods(NS, long_pool)) == ["pod-1"]


# --- replace_scope (a relist) --------------------------------------------------------------
def test_a_relist_drops_the_pods_it_lacks_in_its_own_namespace_only(index: PodIndex) -> None:
    index.apply("ADDED", sandbox_pod("kept", rv="3"))
    index.apply("ADDED", sandbox_pod("gone", rv="3"))
    index.apply("ADDED", sandbox_pod("elsewhere", ns="team-b", rv="3"))
    gone_signal = index.signal(NS, "gone")

    index.replace_scope(NS, [sandbox_pod("kept", rv="4"), sandbox_pod("new", rv="5")])

    assert index.get(NS, "gone") is None
    assert gone_signal.is_set()
    assert index.get("team-b", "elsewhere") is not None
    held = index.get(NS, "kept")
    assert held is not None and held["metadata"]["resourceVersion"] == "4"
    assert index.get(NS, "new") is not None


def test_a_relist_of_every_namespace_drops_every_pod_it_lacks(index: PodIndex) -> None:
    index.apply("ADDED", sandbox_pod("a", rv="3"))
    index.apply("ADDED", sandbox_pod("b", ns="team-b", rv="3"))

    index.replace_scope(None, [sandbox_pod("b", ns="team-b", rv="3")])

    assert index.get(NS, "a") is None
    assert index.get("team-b", "b") is not None
    assert len(index) == 1


def test_a_relist_is_authoritative_even_where_a_pod_looks_older(index: PodIndex) -> None:
    # After a restore or a different API server the versions can go backwards: the list wins.
    index.apply("ADDED", sandbox_pod("s1", rv="90", ip="10.9.9.9"))

    index.replace_scope(NS, [sandbox_pod("s1", rv="12", ip="10.1.1.1")])

    held = index.get(NS, "s1")
    assert held is not None
    assert (held["metadata"]["resourceVersion"], pod_ip(held)) == ("12", "10.1.1.1")


def test_a_relist_that_lacks_an_idle_pod_wakes_its_pool(index: PodIndex) -> None:
    index.apply("ADDED", idle("warm-abcde", rv="3"))
    pool_signal = index.signal(NS, "pool/warm")

    index.replace_scope(NS, [])

    assert pool_signal.is_set()
    assert index.pool_pods(NS, "warm") == []


def test_a_relist_that_finds_an_idle_pod_claimed_wakes_its_former_pool(index: PodIndex) -> None:
    index.apply("ADDED", idle("warm-abcde", rv="3"))
    pool_signal = index.signal(NS, "pool/warm")

    index.replace_scope(NS, [claimed("warm-abcde", rv="7")])

    assert index.pool_pods(NS, "warm") == []
    assert pool_signal.is_set()


def test_an_older_update_arriving_after_the_deletion_does_not_bring_the_pod_back(
    index: PodIndex,
) -> None:
    index.apply("ADDED", idle("warm-abcde", rv="3"))
    index.apply("MODIFIED", claimed("warm-abcde", rv="10"))  # the watch reports the claim
    index.apply("DELETED", claimed("warm-abcde", rv="11"))  # ... then the pod's deletion

    index.apply("MODIFIED", claimed("warm-abcde", rv="10"))  # the claim PATCH's answer, late

    assert index.get(NS, "warm-abcde") is None


# --- slim ----------------------------------------------------------------------------------
def test_slim_keeps_what_the_operator_reads_and_drops_managed_fields_and_the_spec() -> None:
    pod = idle("warm-abcde", rv="8")
    pod["metadata"]["annotations"] = {"sandfleet.dev/template-hash": "abc"}
    pod["metadata"]["ownerReferences"] = [{"uid": "pool-uid", "kind": "SandboxPool"}]
    pod["metadata"]["deletionTimestamp"] = "2026-01-02T03:06:00Z"
    pod["metadata"]["generateName"] = "warm-"
    pod["status"]["containerStatuses"] = [{"name": "runtime", "state": {"running": {}}}]
    pod["status"]["reason"] = "Evicted"
    pod["status"]["message"] = "low on memory"
    pod["status"]["hostIP"] = "192.168.1.5"
    pod["status"]["qosClass"] = "Burstable"

    slimmed = slim(pod)

    assert slimmed == {
        "metadata": {
            "name": "warm-abcde",
            "namespace": NS,
            "uid": "uid-warm-abcde",
            "resourceVersion": "8",
            "labels": pod["metadata"]["labels"],
            "annotations": {"sandfleet.dev/template-hash": "abc"},
            "ownerReferences": [{"uid": "pool-uid", "kind": "SandboxPool"}],
            "deletionTimestamp": "2026-01-02T03:06:00Z",
            "creationTimestamp": "2026-01-02T03:04:05Z",
        },
        "spec": {"nodeName": "node-1"},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "runtime", "state": {"running": {}}}],
            "reason": "Evicted",
            "message": "low on memory",
        },
    }


def test_slim_copes_with_a_pod_that_has_no_spec_or_status_yet() -> None:
    assert slim({"metadata": {"name": "bare"}}) == {
        "metadata": {"name": "bare"},
        "spec": {"nodeName": None},
        "status": {},
    }


def test_the_index_holds_slim_pods_and_never_the_callers_object(index: PodIndex) -> None:
    pod = idle("warm-abcde")
    original = copy.deepcopy(pod)

    index.apply("ADDED", pod)

    held = index.get(NS, "warm-abcde")
    assert held == slim(original)
    assert "managedFields" not in held["metadata"]
    assert pod == original  # the event's object is not modified


# --- small readers -------------------------------------------------------------------------
def test_a_pod_is_ready_only_with_a_true_ready_condition() -> None:
    assert pod_is_ready(idle("a", ready=True))
    assert not pod_is_ready(idle("a", ready=False))
    assert not pod_is_ready({"metadata": {"name": "a"}})


def test_a_pod_without_an_address_has_no_ip() -> None:
    assert pod_ip(sandbox_pod("a")) is None
    assert pod_ip(sandbox_pod("a", ip="fd00::5")) == "fd00::5"


def test_claimed_pods_are_counted_per_pool_until_they_are_deleted(index: PodIndex) -> None:
    index.apply("ADDED", idle("warm-idle", rv="1"))
    index.apply("ADDED", claimed("warm-a", rv="2"))
    index.apply("ADDED", claimed("warm-b", rv="3"))
    index.apply("ADDED", claimed("cold-a", rv="4", pool="cold"))
    assert index.claimed_count(NS, "warm") == 2
    assert index.claimed_count(NS, "cold") == 1
    assert index.claimed_count("elsewhere", "warm") == 0

    going = claimed("warm-b", rv="5")
    going["metadata"]["deletionTimestamp"] = "2026-11-25T00:00:00Z"
    index.apply("MODIFIED", going)
    assert index.claimed_count(NS, "warm") == 1
    index.apply("DELETED", claimed("warm-a", rv="6"))
    assert index.claimed_count(NS, "warm") == 0
