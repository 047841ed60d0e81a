"""The orphan sweep: which objects orphans() dooms, and why sweep_once lists in its order."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable
from typing import Any, cast

from sandfleet.api import MANAGED_BY_VALUE, Label, Phase, ReclaimReason
from sandfleet.kube import KubeClient
from sandfleet.operator.metrics import OperatorMetrics
from sandfleet.operator.sweeper import orphan_claims, orphans, sweep_once

NS = "team-a"
PODS = f"/api/v1/namespaces/{NS}/pods"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"
POLICIES = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"
SESSIONS = f"/apis/sandfleet.dev/v1alpha1/namespaces/{NS}/sandboxsessions"
POOLS = f"/apis/sandfleet.dev/v1alpha1/namespaces/{NS}/sandboxpools"
Obj = dict[str, Any]


def made(kind: str, name: str, *owner_uids: str) -> Obj:
    """An object the operator made, owned by `owner_uids` (none: no ownerReferences)."""
    metadata: Obj = {"name": name, "namespace": NS, "labels": {Label.MANAGED_BY: MANAGED_BY_VALUE}}
    if owner_uids:
        metadata["ownerReferences"] = [{"uid": uid, "controller": True} for uid in owner_uids]
    return {"kind": kind, "metadata": metadata}


def owner(name: str, uid: str, phase: Phase | None = None) -> Obj:
    body: Obj = {"metadata": {"name": name, "namespace": NS, "uid": uid}}
    if phase is not None:
        body["status"] = {"phase": phase.value}
    return body


def doomed_names(objects: list[Obj], live: set[str], finished: set[str] | None = None) -> set[str]:
    return {o["metadata"]["name"] for o in orphans(objects, live, finished or set())}


# --- orphans (pure) ------------------------------------------------------------------------
def test_an_object_without_an_owner_is_an_orphan() -> None:
    assert doomed_names([made("Secret", "stray-token")], live={"s-uid"}) == {"stray-token"}


def test_an_object_whose_owner_is_gone_is_an_orphan() -> None:
    objects = [
        made(kind, f"gone-{kind}", "gone-uid") for kind in ("Pod", "Secret", "NetworkPolicy")
    ]

    assert len(orphans(objects, {"other-uid"}, set())) == 3


def test_an_object_with_a_live_owner_is_kept() -> None:
    objects = [made("Pod", "s1", "s-uid"), made("Secret", "s1-token", "s-uid")]

    assert orphans(objects, {"s-uid"}, set()) == []


def test_one_live_owner_among_several_is_enough_to_keep_an_object() -> None:
    assert doomed_names([made("Pod", "shared", "gone-uid", "s-uid")], live={"s-uid"}) == set()


def test_the_pod_of_a_finished_session_goes_but_its_secret_and_policy_stay() -> None:
    # The Secret and NetworkPolicy go with the session (TTL or delete); the pod holds memory.
    objects = [
        made("Pod", "done", "done-uid"),
        made("Secret", "done-token", "done-uid"),
        made("NetworkPolicy", "done-sandbox", "done-uid"),
    ]

    assert doomed_names(objects, live={"done-uid"}, finished={"done-uid"}) == {"done"}


def test_a_pool_pod_is_kept_while_its_pool_lives() -> None:
    objects = [made("Pod", "warm-abcde", "pool-uid"), made("Secret", "warm-pool-token", "pool-uid")]

    assert doomed_names(objects, live={"pool-uid"}, finished={"done-uid"}) == set()


def test_owners_listed_after_the_objects_cannot_make_a_new_object_look_orphaned() -> None:
    """The docstring's ordering argument, in two halves.

    An owner list taken BEFORE an object was created lacks that object's owner: with that
    order the newest sandboxes would be deleted. With objects listed first, every object in
    the list had its owner created earlier, so the later owner list holds it (or it is gone).
    """
    new_pod = made("Pod", "fresh", "fresh-uid")
    owners_listed_first: set[str] = set()  # the session did not exist yet
    assert doomed_names([new_pod], live=owners_listed_first) == {"fresh"}

    objects_listed_first: list[Obj] = []  # the pod did not exist yet
    owners_listed_after = {"fresh-uid"}
    assert orphans(objects_listed_first, owners_listed_after, set()) == []


# --- sweep_once over a recorded API --------------------------------------------------------
class RecordingKube:
    """Answers lists from `world` and records every list and delete, in order.

    `on_list` runs before each list answer: it can change the world mid-sweep.
    """

    def __init__(self, world: dict[str, list[Obj]]) -> None:
        self.world = world
        self.calls: list[tuple[str, str, str | None]] = []
        self.deletes: list[tuple[str, int | None]] = []
        self.on_list: Callable[[str], None] = lambda path: None

    async def list(
        self, path: str, *, label_selector: str | None = None, field_selector: str | None = None
    ) -> list[Obj]:
        self.on_list(path)
        self.calls.append(("list", path, label_selector))
        # The client's list adds the kind; the sweep must cope with items that lack it.
        return [
            {k: v for k, v in copy.deepcopy(o).items() if k != "kind"}
            for o in self.world.get(path, [])
        ]

    async def delete(
        self,
        path: str,
        *,
        propagation: str = "Background",
        missing_ok: bool = True,
        grace_period_s: int | None = None,
        preconditions: dict[str, str] | None = None,
    ) -> None:
        self.calls.append(("delete", path, None))
        self.deletes.append((path, grace_period_s))


def reclaims(metrics: OperatorMetrics, reason: ReclaimReason) -> float | None:
    return metrics.registry.get_sample_value("sandfleet_reclaims_total", {"reason": reason.value})


async def test_a_sweep_deletes_exactly_the_orphans_and_counts_the_pods() -> None:
    kube = RecordingKube(
        {
            PODS: [
                made("Pod", "live", "live-uid"),
                made("Pod", "done", "done-uid"),
                made("Pod", "stray"),
                made("Pod", "warm-abcde", "pool-uid"),
            ],
            SECRETS: [made("Secret", "live-token", "live-uid"), made("Secret", "old-token", "x")],
            POLICIES: [made("NetworkPolicy", "old-sandbox", "x")],
            SESSIONS: [
                owner("live", "live-uid", Phase.RUNNING),
                owner("done", "done-uid", Phase.SUCCEEDED),
            ],
            POOLS: [owner("warm", "pool-uid")],
        }
    )
    metrics = OperatorMetrics()

    deleted = await sweep_once(cast(KubeClient, kube), metrics, [NS])

    assert deleted == 4
    assert sorted(kube.deletes) == sorted(
        [
            (f"{PODS}/done", 0),
            (f"{PODS}/stray", 0),
            (f"{SECRETS}/old-token", None),
            (f"{POLICIES}/old-sandbox", None),
        ]
    )
    assert reclaims(metrics, ReclaimReason.ORPHAN) == 2  # pods only: sandboxes taken back


async def test_a_sweep_lists_only_what_the_operator_made_and_every_object_before_any_owner() -> (
    None
):
    kube = RecordingKube({})

    await sweep_once(cast(KubeClient, kube), OperatorMetrics(), [NS, "team-b"])

    lists = [(path, selector) for call, path, selector in kube.calls if call == "list"]
    object_lists = [i for i, (path, _) in enumerate(lists) if "sandfleet.dev" not in path]
    owner_lists = [i for i, (path, _) in enumerate(lists) if "sandfleet.dev" in path]
    assert len(object_lists) == 6 and len(owner_lists) == 4  # 3 kinds, 2 owner kinds, x2 ns
    assert max(object_lists) < min(owner_lists)
    assert {selector for i, (_, selector) in enumerate(lists) if i in object_lists} == {
        f"{Label.MANAGED_BY}={MANAGED_BY_VALUE}"
    }


async def test_a_session_created_right_after_the_sweeps_first_list_keeps_its_new_pod() -> None:
    # Whichever list comes first misses the new session and its pod; had the owners been
    # listed first, the pod would show up in the object lists with no live owner.
    kube = RecordingKube({PODS: [], SECRETS: [], POLICIES: [], SESSIONS: [], POOLS: []})

    def create_session_after_the_first_list(path: str) -> None:
        if len(kube.calls) == 1:
            kube.world[SESSIONS] = [owner("fresh", "fresh-uid", Phase.PENDING)]
            kube.world[PODS] = [made("Pod", "fresh", "fresh-uid")]
            kube.world[SECRETS] = [made("Secret", "fresh-token", "fresh-uid")]

    kube.on_list = create_session_after_the_first_list

    assert await sweep_once(cast(KubeClient, kube), OperatorMetrics(), [NS]) == 0
    assert kube.deletes == []


async def test_a_sweep_of_all_namespaces_lists_cluster_wide() -> None:
    kube = RecordingKube({"/api/v1/pods": [made("Pod", "stray")]})

    assert await sweep_once(cast(KubeClient, kube), OperatorMetrics(), []) == 1

    listed = {path for call, path, _ in kube.calls if call == "list"}
    assert listed == {
        "/api/v1/pods",
        "/api/v1/secrets",
        "/apis/networking.k8s.io/v1/networkpolicies",
        "/apis/sandfleet.dev/v1alpha1/sandboxsessions",
        "/apis/sandfleet.dev/v1alpha1/sandboxpools",
    }
    assert kube.deletes == [(f"{PODS}/stray", 0)]


# --- orphan claims (pure) ------------------------------------------------------------------
NOW = dt.datetime(2026, 11, 25, 4, 0, 0, tzinfo=dt.UTC)


def claimed(name: str, session: str, age_s: float | None, *owners: Obj) -> Obj:
    """A pool pod claimed for `session` (by the gateway when `owners` holds no session)."""
    pod = made("Pod", name)
    pod["metadata"]["labels"].update({Label.STATE: "claimed", Label.SESSION: session})
    pod["metadata"]["ownerReferences"] = list(owners) or [{"kind": "SandboxPool", "uid": "p"}]
    if age_s is not None:
        at = (NOW - dt.timedelta(seconds=age_s)).isoformat().replace("+00:00", "Z")
        pod["metadata"]["annotations"] = {"sandfleet.dev/claimed-at": at}
    return pod


def doomed_claims(pods: list[Obj], sessions: set[tuple[str, str]]) -> set[str]:
    return {p["metadata"]["name"] for p in orphan_claims(pods, sessions, NOW, 60.0)}


def test_a_claim_whose_session_never_appeared_is_swept_after_the_grace_period() -> None:
    assert doomed_claims([claimed("p1", "s1", 61)], set()) == {"p1"}


def test_a_fresh_claim_is_kept_while_the_gateway_may_still_create_its_session() -> None:
    assert doomed_claims([claimed("p1", "s1", 5)], set()) == set()


def test_a_claim_whose_session_exists_is_kept_however_old() -> None:
    assert doomed_claims([claimed("p1", "s1", 3600)], {(NS, "s1")}) == set()


def test_a_session_of_that_name_in_another_namespace_does_not_keep_a_claim() -> None:
    assert doomed_claims([claimed("p1", "s1", 3600)], {("other", "s1")}) == {"p1"}


def test_adopted_and_idle_pods_are_not_the_claim_sweeps_business() -> None:
    adopted = claimed("p1", "s1", 3600, {"kind": "SandboxSession", "uid": "gone"})
    idle = made("Pod", "p2", "pool-uid")
    idle["metadata"]["labels"][Label.STATE] = "idle"

    assert doomed_claims([adopted, idle], set()) == set()


def test_a_claim_without_a_readable_claim_time_counts_as_old() -> None:
    assert doomed_claims([claimed("p1", "s1", None)], set()) == {"p1"}


async def test_a_sweep_deletes_a_stale_gateway_claim_but_keeps_a_fresh_one() -> None:
    kube = RecordingKube(
        {
            PODS: [claimed("old", "gone", 120), claimed("new", "coming", 1)],
            POOLS: [owner("warm", "p")],
        }
    )

    deleted = await sweep_once(cast(KubeClient, kube), OperatorMetrics(), [NS], now=NOW)

    assert deleted == 1
    assert kube.deletes == [(f"{PODS}/old", 0)]
