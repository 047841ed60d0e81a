"""Keeping a SandboxPool's warm sandboxes: `replicas` idle, ready pods of its template.

Claimed pods leave the pool (the claim relabels and re-owns them) and the keeper makes
replacements; idle pods from an older template are replaced too. The keeper reacts to the
pod index's pool signal, so a claim is refilled within one API round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any

import pydantic

from sandfleet.api import (
    API_VERSION,
    POOL_PLURAL,
    TOKEN_SECRET_KEY,
    Annotation,
    ConditionType,
    Label,
    PodState,
    Reason,
    SandboxPoolSpec,
)
from sandfleet.fleet.conditions import set_condition
from sandfleet.fleet.naming import label_value, pool_token_secret_name
from sandfleet.fleet.plans import PlanError, pool_pod_template
from sandfleet.fleet.pod_index import Pod, pod_is_ready
from sandfleet.fleet.resources import (
    ObjectRef,
    pool_pod,
    pool_token_secret,
    resolve_pod_template,
    template_hash,
)
from sandfleet.kube import ConflictError, NotFoundError, resource_path
from sandfleet.logs import get_logger
from sandfleet.operator.context import OperatorContext
from sandfleet.operator.network_policies import (
    pool_network_policy,
)
from sandfleet.operator.pod_watch import UNSEEN_GRACE_S, pod_problem
from sandfleet.operator.provisioning import (
    create_ignoring_conflict,
    new_token,
    read_secret_value,
)

log = get_logger(__name__)

MAX_CREATES_PER_ROUND = 50
"""Bounds one round's burst of pod creations (the client's rate limit paces them too)."""
RECHECK_S = 2.0
"""Spec changes arrive through kopf's live body, not a signal: look again this often."""
STATUS_COUNTS_EVERY_S = 1.0
"""A status write that changes only the counts (ready, starting, claims) waits this long
after the previous one: at many claims a second, one write instead of one per claim. The
round after the wait writes what was held back, so the status is never staler than this."""


class PoolKeeper:
    def __init__(self, ctx: OperatorContext, body: Mapping[str, Any]) -> None:
        self._ctx = ctx
        self._body = body
        self.ref = ObjectRef.of(body)
        self._creating: dict[str, float] = {}
        """Pods created but not yet seen in the index, by name: counted as live meanwhile."""
        self._last_status: dict[str, Any] = {}
        self._last_status_write = 0.0
        self._held_back = False
        """A counts-only status write was skipped: the next round comes when it may be made."""
        self._log = log.bind(pool=f"{self.ref.namespace}/{self.ref.name}")
        self._signal_key = f"pool/{label_value(self.ref.name)}"

    async def run(self) -> None:
        """Keep the pool filled until cancelled (pool deleted or operator stopping)."""
        await self._ensure_shared_objects()
        await self._ctx.pods.synced.wait()
        signal = self._ctx.pods.signal(self.ref.namespace, self._signal_key)
        try:
            while True:
                signal.clear()
                await self._reconcile_once()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(signal.wait(), self._next_round_in())
        finally:
            self._ctx.pods.forget_signal(self.ref.namespace, self._signal_key)
            self._ctx.metrics.pool_gone(self.ref.namespace, self.ref.name)

    def _next_round_in(self) -> float:
        """Seconds until the next round when nothing changes: RECHECK_S, or sooner when a
        held-back status write becomes due (a claim must not leave a stale count for long:
        `kubectl wait` and autoscalers read it)."""
        if not self._held_back:
            return RECHECK_S
        due = self._last_status_write + STATUS_COUNTS_EVERY_S - time.monotonic()
        return min(RECHECK_S, max(due, 0.0))

    async def _ensure_shared_objects(self) -> None:
        """The pool's runtime token Secret and its NetworkPolicy (idle pods: operator only)."""
        ns = self.ref.namespace
        secret = pool_token_secret(self.ref, new_token())
        await create_ignoring_conflict(self._ctx.kube, resource_path("v1", "secrets", ns), secret)
        token = await read_secret_value(
            self._ctx.kube, ns, pool_token_secret_name(self.ref.name), TOKEN_SECRET_KEY
        )
        self._ctx.pool_tokens.remember(ns, self.ref.name, token)
        await create_ignoring_conflict(
            self._ctx.kube,
            resource_path("networking.k8s.io/v1", "networkpolicies", ns),
            pool_network_policy(self.ref, self._ctx.defaults),
        )

    async def _reconcile_once(self) -> None:
        try:
            spec = SandboxPoolSpec.model_validate(dict(self._body.get("spec") or {}))
            template, _ = await pool_pod_template(self._ctx.kube, self.ref.namespace, spec)
        except (PlanError, pydantic.ValidationError) as exc:
            reason = exc.reason if isinstance(exc, PlanError) else Reason.INVALID_SPEC
            await self._write_status(0, 0, (reason, str(exc)))
            return
        resolved = resolve_pod_template(template, self._ctx.defaults)
        wanted_hash = template_hash(resolved)
        pods = self._ctx.pods.pool_pods(self.ref.namespace, self.ref.name)
        seen = {p["metadata"]["name"] for p in pods}
        now = time.monotonic()
        self._creating = {
            n: t for n, t in self._creating.items() if n not in seen and now - t < UNSEEN_GRACE_S
        }
        doomed = [p for p in pods if _stale(p, wanted_hash) or _broken(p)]
        live = [p for p in pods if p not in doomed]
        # Released pods on their way back (recycling) are the pool's already: no
        # replacement for them, and the replacements made while they were claimed go.
        returning = len(self._ctx.pools_returning.names(self.ref.namespace, self.ref.name) - seen)
        missing = spec.replicas - len(live) - len(self._creating) - returning
        if missing < 0:  # scaled down: drop the not-ready ones first, then the newest
            excess = -missing
            live.sort(key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True)
            live.sort(key=pod_is_ready)  # stable: newest first among not ready, then ready
            doomed += live[:excess]
            live = live[excess:]
        await asyncio.gather(*(self._delete(p) for p in doomed))
        if missing > 0:
            # The batch: what claims took since the last round (so it follows the claim
            # rate), capped per round and by the fleet-wide creation rate; the rest waits
            # for a later round (RECHECK_S at the latest).
            wanted = min(missing, MAX_CREATES_PER_ROUND)
            allowed = self._ctx.pool_pod_creates.take_available(wanted)
            if allowed < wanted:
                self._log.info("pool_refill_throttled", wanted=wanted, allowed=allowed)
            if allowed:
                await self._create(allowed, resolved, recycle=spec.recycle)
        ready = sum(map(pod_is_ready, live))
        self._ctx.metrics.pool_idle(self.ref.namespace, self.ref.name, ready)
        claims = self._ctx.pods.claimed_count(self.ref.namespace, self.ref.name)
        await self._write_status(
            ready, len(live) + len(self._creating) - ready, None, claims=claims
        )

    async def _create(self, count: int, resolved: Any, *, recycle: bool) -> None:
        body = pool_pod(
            self.ref,
            resolved,
            pool_token_secret_name(self.ref.name),
            self._ctx.defaults,
            recycle=recycle,
        )
        path = resource_path("v1", "pods", self.ref.namespace)

        async def create_one() -> None:
            try:
                created = await self._ctx.kube.create(path, body)
            except Exception as exc:  # noqa: BLE001 - one failed create must not stop the rest
                self._log.warning("pool_pod_create_failed", error=str(exc))
                return
            self._creating[created["metadata"]["name"]] = time.monotonic()

        await asyncio.gather(*(create_one() for _ in range(count)))
        self._log.info("pool_pods_created", count=count)

    async def _delete(self, pod: Pod) -> None:
        """Delete an idle pod, but only as we saw it: a claim that relabelled it since has
        changed its resourceVersion, and the precondition turns our delete into a 409."""
        name = pod["metadata"]["name"]
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"resourceVersion": pod["metadata"]["resourceVersion"]},
        }
        try:
            await self._ctx.kube.request(
                "DELETE", resource_path("v1", "pods", self.ref.namespace, name), options
            )
        except (ConflictError, NotFoundError):
            return
        self._log.info("pool_pod_deleted", pod=name)

    async def _write_status(
        self, ready: int, starting: int, problem: tuple[str, str] | None, *, claims: int = 0
    ) -> None:
        generation = int(self._body["metadata"].get("generation", 1))
        conditions = (self._body.get("status") or {}).get("conditions") or []
        reason, message = problem or (Reason.RUNTIME_SERVING, f"{ready} warm sandboxes ready")
        conditions = set_condition(
            conditions,
            type=ConditionType.READY,
            status="False" if problem else "True",
            reason=reason,
            message=message,
            generation=generation,
            now=self._ctx.clock(),
        )
        status = {
            "replicas": ready,
            "startingReplicas": starting,
            "claims": claims,
            "selector": f"{Label.POOL}={label_value(self.ref.name)},{Label.STATE}={PodState.IDLE}",
            "observedGeneration": generation,
        }
        comparable = {**status, "problem": problem}
        if comparable == self._last_status:
            return
        counts_only = {**comparable, "replicas": 0, "startingReplicas": 0, "claims": 0} == {
            **self._last_status,
            "replicas": 0,
            "startingReplicas": 0,
            "claims": 0,
        }
        if counts_only and time.monotonic() - self._last_status_write < STATUS_COUNTS_EVERY_S:
            self._held_back = True  # a busy pool's counts change with every claim
            return
        self._held_back = False
        self._last_status = comparable
        self._last_status_write = time.monotonic()
        await self._ctx.kube.patch(
            resource_path(API_VERSION, POOL_PLURAL, self.ref.namespace, self.ref.name, "status"),
            {"status": {**status, "conditions": conditions}},
        )


def _stale(pod: Pod, wanted_hash: str) -> bool:
    """An idle pod made from older pod settings: replace it (claimed pods are not ours)."""
    return (pod["metadata"].get("annotations") or {}).get(Annotation.TEMPLATE_HASH) != wanted_hash


def _broken(pod: Pod) -> bool:
    """A pool pod whose runtime ended: replace it. (Image problems are not replaced in a
    loop: every new pod would fail the same way; the pool's status reports them.)"""
    problem = pod_problem(pod)
    return problem is not None and problem.reason in {
        Reason.SANDBOX_LOST,
        Reason.CONTAINER_CRASHED,
    }
