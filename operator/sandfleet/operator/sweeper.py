"""The orphan sweep: whatever the operator made whose owner is gone (or finished) goes.

Owner references let the garbage collector do this eventually; the sweep makes it certain
and prompt after an operator restart, and covers sessions that finished while no operator
was running. It runs at start-up and then periodically.

A pod the gateway claimed is still owned by its pool until the operator adopts it; when the
session it was claimed for never appears (the gateway died between claim and create), the
sweep deletes it once the claim is older than a grace period.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

from sandfleet.api import (
    API_VERSION,
    MANAGED_BY_VALUE,
    POOL_PLURAL,
    SESSION_KIND,
    SESSION_PLURAL,
    Annotation,
    Label,
    Phase,
    PodState,
    ReclaimReason,
)
from sandfleet.fleet.naming import label_value
from sandfleet.kube import ConflictError, KubeClient, resource_path
from sandfleet.logs import get_logger
from sandfleet.operator.metrics import OperatorMetrics

log = get_logger(__name__)

_KINDS = (("v1", "pods"), ("v1", "secrets"), ("networking.k8s.io/v1", "networkpolicies"))
_SELECTOR = f"{Label.MANAGED_BY}={MANAGED_BY_VALUE}"
_FINISHED = {Phase.SUCCEEDED.value, Phase.FAILED.value, Phase.EXPIRED.value}


def orphans(
    objects: list[dict[str, Any]], live_owners: set[str], finished_sessions: set[str]
) -> list[dict[str, Any]]:
    """The objects to delete: no owner, an owner that is gone, or (pods only) a session
    that has finished. Pure; `objects` must have been listed BEFORE the owners, so that
    an owner created after the owner list cannot be mistaken for a missing one."""
    doomed = []
    for obj in objects:
        owners = [o.get("uid") for o in obj["metadata"].get("ownerReferences") or []]
        if (
            not owners
            or not any(uid in live_owners for uid in owners)
            or (obj.get("kind") == "Pod" and any(uid in finished_sessions for uid in owners))
        ):
            doomed.append(obj)
    return doomed


def orphan_claims(
    pods: list[dict[str, Any]],
    sessions: set[tuple[str, str]],
    now: dt.datetime,
    grace_s: float,
) -> list[dict[str, Any]]:
    """Claimed pods no session owns, whose session (by name) does not exist, claimed more
    than `grace_s` ago: the gateway claimed them and never created the session. Pure;
    `sessions` holds (namespace, session label value) and must be listed AFTER the pods.

    The grace keeps the seconds between the gateway's claim and its session create safe;
    an adopted pod is owned by its session and left to `orphans`.
    """
    doomed = []
    for pod in pods:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        if labels.get(Label.STATE) != PodState.CLAIMED:
            continue
        if any(o.get("kind") == SESSION_KIND for o in meta.get("ownerReferences") or []):
            continue
        if (meta.get("namespace"), labels.get(Label.SESSION)) in sessions:
            continue
        claimed_at = (meta.get("annotations") or {}).get(Annotation.CLAIMED_AT)
        try:
            age = (now - dt.datetime.fromisoformat(str(claimed_at))).total_seconds()
        except (TypeError, ValueError):
            age = grace_s + 1  # no (readable) claim time: not the gateway's fresh claim
        if age > grace_s:
            doomed.append(pod)
    return doomed


async def _list(kube: KubeClient, api: str, plural: str, ns: str | None, **kw: Any) -> list[Any]:
    items: list[dict[str, Any]] = await kube.list(resource_path(api, plural, ns), **kw)
    kind = {"pods": "Pod", "secrets": "Secret", "networkpolicies": "NetworkPolicy"}.get(plural)
    for item in items:
        item.setdefault("kind", kind)
    return items


async def sweep_once(
    kube: KubeClient,
    metrics: OperatorMetrics,
    namespaces: list[str],
    *,
    claim_grace_s: float = 60.0,
    now: dt.datetime | None = None,
) -> int:
    scopes: list[str | None] = list(namespaces) or [None]
    objects: list[dict[str, Any]] = []
    for scope in scopes:
        for api, plural in _KINDS:
            objects += await _list(kube, api, plural, scope, label_selector=_SELECTOR)
    live: set[str] = set()
    finished: set[str] = set()
    names: set[tuple[str, str]] = set()
    for scope in scopes:
        for session in await _list(kube, API_VERSION, SESSION_PLURAL, scope):
            meta = session["metadata"]
            live.add(meta["uid"])
            names.add((meta["namespace"], label_value(meta["name"])))
            if (session.get("status") or {}).get("phase") in _FINISHED:
                finished.add(session["metadata"]["uid"])
        for pool in await _list(kube, API_VERSION, POOL_PLURAL, scope):
            live.add(pool["metadata"]["uid"])
    doomed = orphans(objects, live, finished)
    gone = {id(o) for o in doomed}
    pods = [o for o in objects if o.get("kind") == "Pod" and id(o) not in gone]
    doomed += orphan_claims(pods, names, now or dt.datetime.now(dt.UTC), claim_grace_s)
    for obj in doomed:
        meta = obj["metadata"]
        api, plural = next((a, p) for a, p in _KINDS if _kind_of(p) == obj["kind"])
        try:
            # Only as listed: a pod recycled into its pool since (its session gone by the
            # time the sessions were listed) and claimed again is not an orphan any more.
            await kube.delete(
                resource_path(api, plural, meta["namespace"], meta["name"]),
                grace_period_s=0 if plural == "pods" else None,
                preconditions={k: meta[k] for k in ("uid", "resourceVersion") if k in meta},
            )
        except ConflictError:
            log.info("orphan_changed_since_listed", kind=obj["kind"], name=meta["name"])
            continue
        if plural == "pods":
            metrics.reclaimed(ReclaimReason.ORPHAN)
        log.info("orphan_deleted", kind=obj["kind"], namespace=meta["namespace"], name=meta["name"])
    return len(doomed)


def _kind_of(plural: str) -> str:
    return {"pods": "Pod", "secrets": "Secret", "networkpolicies": "NetworkPolicy"}[plural]


async def sweep_forever(
    kube: KubeClient,
    metrics: OperatorMetrics,
    namespaces: list[str],
    interval_s: float,
    *,
    claim_grace_s: float = 60.0,
) -> None:
    while True:
        try:
            count = await sweep_once(kube, metrics, namespaces, claim_grace_s=claim_grace_s)
            log.info("orphan_sweep_finished", deleted=count)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the next sweep may well succeed
            log.warning("orphan_sweep_failed", error=str(exc))
        await asyncio.sleep(interval_s)
