"""A live, in-memory view of every sandbox pod the operator manages, fed by one watch.

Session workers and pool keepers read pods from here instead of asking the API server, and
wait on per-pod and per-pool change signals instead of polling: with thousands of sessions
that is the difference between one watch and thousands of GETs per second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from sandfleet.api import MANAGED_BY_VALUE, POOL_KIND, RUNTIME_PORT, Component, Label, PodState
from sandfleet.fleet.naming import label_value
from sandfleet.kube import KubeClient
from sandfleet.kube.mirror import feed_mirror
from sandfleet.logs import get_logger

log = get_logger(__name__)

Pod = dict[str, Any]
_SELECTOR = f"{Label.MANAGED_BY}={MANAGED_BY_VALUE},{Label.COMPONENT}={Component.SANDBOX}"


def pod_is_ready(pod: Pod) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pod_ip(pod: Pod) -> str | None:
    ip = (pod.get("status") or {}).get("podIP")
    return str(ip) if ip else None


def runtime_address(ip: str) -> str:
    """host:port of the runtime in the pod with address `ip` (IPv6 in brackets)."""
    return f"[{ip}]:{RUNTIME_PORT}" if ":" in ip else f"{ip}:{RUNTIME_PORT}"


def pool_of(pod: Pod) -> str | None:
    """The name of the SandboxPool that owns `pod` (its owner, while it has one: the label
    may be a hashed form, and adoption replaces the owner)."""
    for owner in pod["metadata"].get("ownerReferences") or []:
        if owner.get("kind") == POOL_KIND:
            return str(owner["name"])
    return None


class PodIndex:
    """Pods by (namespace, name), plus change signals keyed by pod and by pool."""

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str], Pod] = {}
        self._signals: dict[tuple[str, str], asyncio.Event] = {}
        self._deleted: dict[tuple[str, str], Pod] = {}
        """The last version of each pod deleted since the last relist (tombstones)."""
        self.synced = asyncio.Event()
        """Set once the first full list has been applied: before that, a missing pod proves
        nothing."""

    def __len__(self) -> int:
        return len(self._pods)

    def get(self, namespace: str, name: str) -> Pod | None:
        return self._pods.get((namespace, name))

    def pool_pods(self, namespace: str, pool: str) -> list[Pod]:
        """Pool pods not yet claimed (starting or ready)."""
        return [
            pod
            for (ns, _), pod in self._pods.items()
            if ns == namespace
            and _labels(pod).get(Label.POOL) == label_value(pool)
            and _labels(pod).get(Label.STATE) == PodState.IDLE
            and not pod["metadata"].get("deletionTimestamp")
        ]

    def claimed_count(self, namespace: str, pool: str) -> int:
        """Pods of the pool that sessions claimed and that are not being deleted."""
        return sum(
            1
            for (ns, _), pod in self._pods.items()
            if ns == namespace
            and _labels(pod).get(Label.POOL) == label_value(pool)
            and _labels(pod).get(Label.STATE) == PodState.CLAIMED
            and not pod["metadata"].get("deletionTimestamp")
        )

    def idle_ready_pods(self, namespace: str, pool: str) -> list[Pod]:
        return [p for p in self.pool_pods(namespace, pool) if pod_is_ready(p)]

    # --- change signals ------------------------------------------------------------------
    def signal(self, namespace: str, key: str) -> asyncio.Event:
        """The event set whenever the pod named `key` (or "pool/<name>") changes.

        Waiters clear it, re-check their condition, then wait: a change that lands between
        the check and the wait is not lost.
        """
        return self._signals.setdefault((namespace, key), asyncio.Event())

    def forget_signal(self, namespace: str, key: str) -> None:
        self._signals.pop((namespace, key), None)

    def _notify(self, pod: Pod) -> None:
        namespace = pod["metadata"].get("namespace", "")
        for key in (pod["metadata"]["name"], _pool_key(pod)):
            if key and (event := self._signals.get((namespace, key))) is not None:
                event.set()

    # --- feeding -------------------------------------------------------------------------
    def apply(self, event_type: str, pod: Pod, *, authoritative: bool = False) -> None:
        """One watch event (or an API answer). Stale versions are ignored, and so is any
        version of a pod no newer than its deletion (a late PATCH answer must not bring a
        deleted pod back); `authoritative` (a relist) overrides both."""
        pod = slim(pod)
        key = (pod["metadata"].get("namespace", ""), pod["metadata"]["name"])
        previous = self._pods.get(key)
        if event_type == "DELETED":
            self._pods.pop(key, None)
            self._deleted[key] = pod
            self._notify(previous or pod)
            if previous is not None and _pool_key(previous) != _pool_key(pod):
                self._notify(pod)
            return
        if not authoritative:
            tombstone = self._deleted.get(key)
            if tombstone is not None and _newer_or_same(tombstone, pod):
                return
            if previous is not None and _newer_or_same(previous, pod):
                return
        self._deleted.pop(key, None)
        self._pods[key] = pod
        if previous is not None and _pool_key(previous) != _pool_key(pod):
            self._notify(previous)  # a claim moves the pod out of its pool: wake the pool
        self._notify(pod)

    def replace_scope(self, namespace: str | None, pods: Iterable[Pod]) -> None:
        """A fresh list of one namespace (None: all): pods it lacks count as deleted, and
        what it says wins over anything held, even when it looks older."""
        fresh = {(p["metadata"].get("namespace", ""), p["metadata"]["name"]): p for p in pods}
        for key, pod in list(self._pods.items()):
            if key not in fresh and namespace in (None, key[0]):
                self.apply("DELETED", pod)
        for key in [k for k in self._deleted if namespace in (None, k[0])]:
            del self._deleted[key]  # the list is newer than every deletion seen before it
        for pod in fresh.values():
            self.apply("ADDED", pod, authoritative=True)


_KEPT_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "annotations",
    "ownerReferences",
    "deletionTimestamp",
    "creationTimestamp",
)


def slim(pod: Pod) -> Pod:
    """The part of a pod the operator reads: with thousands of pods in the index, the rest
    (managedFields above all, then the full spec) is most of the memory."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    return {
        "metadata": {k: meta[k] for k in _KEPT_METADATA if k in meta},
        "spec": {"nodeName": (pod.get("spec") or {}).get("nodeName")},
        "status": {
            k: status[k]
            for k in ("phase", "podIP", "conditions", "containerStatuses", "reason", "message")
            if k in status
        },
    }


def _labels(pod: Pod) -> dict[str, str]:
    labels: dict[str, str] = pod["metadata"].get("labels") or {}
    return labels


def _pool_key(pod: Pod) -> str | None:
    labels = _labels(pod)
    if labels.get(Label.STATE) == PodState.IDLE and labels.get(Label.POOL):
        return f"pool/{labels[Label.POOL]}"  # the label value (pool names > 63 are hashed)
    return None


def _newer_or_same(current: Pod, incoming: Pod) -> bool:
    """True when `incoming` is not newer than what we hold (our own PATCH answers arrive
    before the watch repeats them)."""
    try:
        held = int(current["metadata"].get("resourceVersion", "0"))
        seen = int(incoming["metadata"].get("resourceVersion", "0"))
    except ValueError:  # resourceVersions are opaque; only etcd-backed servers use integers
        return False
    return seen <= held


async def feed_pod_index(
    kube: KubeClient, index: PodIndex, namespaces: list[str], *, retry_delay_s: float = 1.0
) -> None:
    """List then watch the managed pods forever (one stream per namespace, or one for the
    cluster), relisting when the watch expires. Cancel to stop."""
    scopes: list[str | None] = list(namespaces) or [None]
    await feed_mirror(
        kube, index, "v1", "pods", scopes,
        label_selector=_SELECTOR, what="pod_index", retry_delay_s=retry_delay_s,
    )  # fmt: skip
