"""Getting a session its sandbox: claim a warm pool pod, or create a cold one.

Every create is idempotent (409 means a previous attempt, possibly by a previous operator
process, got there first), so a worker can always re-run these after a crash.
"""

from __future__ import annotations

import asyncio
import base64
import random
import secrets
import time
from typing import Any

from sandfleet.api import TOKEN_SECRET_KEY, EgressMode, PodTemplate, Reason
from sandfleet.fleet.claim_patches import claim_patch
from sandfleet.fleet.naming import bounded_name, token_secret_name
from sandfleet.fleet.plans import PlanError
from sandfleet.fleet.pod_index import Pod
from sandfleet.fleet.resources import (
    ObjectRef,
    resolve_pod_template,
    session_pod,
    session_token_secret,
)
from sandfleet.kube import ConflictError, KubeClient, NotFoundError, resource_path
from sandfleet.logs import get_logger
from sandfleet.operator.context import OperatorContext
from sandfleet.operator.network_policies import (
    session_network_policy,
)

log = get_logger(__name__)

TOKEN_BYTES = 32


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


async def create_ignoring_conflict(kube: KubeClient, path: str, body: dict[str, Any]) -> bool:
    """Create `body`; False when it already exists."""
    try:
        await kube.create(path, body)
    except ConflictError:
        return False
    return True


async def read_secret_value(kube: KubeClient, namespace: str, name: str, key: str) -> str:
    """One key of a Secret the operator made itself (runtime tokens), decoded. Raises
    NotFoundError / KeyError. Secrets a session names go through consented_keys instead."""
    secret = await kube.get(resource_path("v1", "secrets", namespace, name))
    data = secret.get("data") or {}
    if key not in data:
        raise KeyError(f"Secret {namespace}/{name} has no key {key!r}")
    return base64.b64decode(data[key]).decode()


async def ensure_session_token(
    ctx: OperatorContext, session: ObjectRef, token: str | None = None
) -> tuple[str, str]:
    """The session's runtime token and its Secret's name: made once (with `token`, the one
    a resumed session kept in its snapshot, or a new one), read back after that."""
    name = token_secret_name(session.name)
    token = token or new_token()
    path = resource_path("v1", "secrets", session.namespace)
    if await create_ignoring_conflict(ctx.kube, path, session_token_secret(session, token)):
        return token, name
    existing = await ctx.kube.get(resource_path("v1", "secrets", session.namespace, name))
    owners = existing["metadata"].get("ownerReferences") or []
    if not any(o.get("uid") == session.uid for o in owners):
        # e.g. session "x-pool" and pool "x" both want "x-pool-token": never share a token.
        raise PlanError(Reason.INVALID_SPEC, f"Secret {name} exists and is not this session's")
    data = existing.get("data") or {}
    return base64.b64decode(data.get(TOKEN_SECRET_KEY, "")).decode(), name


async def ensure_network_policy(
    ctx: OperatorContext, session: ObjectRef, egress: EgressMode
) -> None:
    path = resource_path("networking.k8s.io/v1", "networkpolicies", session.namespace)
    await create_ignoring_conflict(
        ctx.kube, path, session_network_policy(session, egress, ctx.defaults)
    )


async def create_cold_sandbox(
    ctx: OperatorContext,
    session: ObjectRef,
    pod_template: PodTemplate | None,
    secret_name: str,
    *,
    attempt: int = 0,
) -> str:
    """Create the session's own pod; returns its name. An existing pod of another owner
    (a name clash) is an error, never silently adopted.

    A retry after a lost sandbox (`attempt` > 0) gets a pod of its own name: the lost one
    may still be terminating, and a 409 on it must not look like our new pod.
    """
    resolved = resolve_pod_template(pod_template, ctx.defaults)
    body = session_pod(session, resolved, secret_name, ctx.defaults)
    if attempt:
        body["metadata"]["name"] = bounded_name(session.name, f"-retry{attempt}")
    name: str = body["metadata"]["name"]
    path = resource_path("v1", "pods", session.namespace)
    if not await create_ignoring_conflict(ctx.kube, path, body):
        existing = await ctx.kube.get(resource_path("v1", "pods", session.namespace, name))
        owners = existing["metadata"].get("ownerReferences") or []
        if not any(o.get("uid") == session.uid for o in owners):
            raise PlanError(Reason.INVALID_SPEC, f"pod {name} exists and is not this session's")
    return name


async def claim_warm_sandbox(ctx: OperatorContext, session: ObjectRef, pool: str) -> Pod | None:
    """Atomically take one idle, ready pod of `pool` for `session`; None when none is left.

    Two claimers can never both win a pod: the claim is a patch that carries the pod's
    resourceVersion, so the API server applies only the first one and answers 409 to the
    rest. Within this process, `ctx.claims` keeps concurrent claims off the same pod.
    """
    started = time.perf_counter()
    for _ in range(ctx.settings.pool_claim_attempts):
        candidates = [
            pod
            for pod in ctx.pods.idle_ready_pods(session.namespace, pool)
            if not ctx.claims.is_claiming(session.namespace, pod["metadata"]["name"])
        ]
        if not candidates:
            break
        pod = random.choice(candidates)
        key = (session.namespace, pod["metadata"]["name"])
        with ctx.claims.claiming(*key):
            try:
                patched = await ctx.kube.patch(
                    resource_path("v1", "pods", *key),
                    claim_patch(session, pod["metadata"]["resourceVersion"], ctx.clock()),
                )
            except (ConflictError, NotFoundError):
                log.info("pool_claim_lost", pool=pool, pod=key[1], session=session.name)
                await asyncio.sleep(0)
                continue
        ctx.pods.apply("MODIFIED", patched)
        ctx.metrics.claimed(hit=True, seconds=time.perf_counter() - started)
        log.info("pool_sandbox_claimed", pool=pool, pod=key[1], session=session.name)
        return patched
    ctx.metrics.claimed(hit=False, seconds=time.perf_counter() - started)
    return None
