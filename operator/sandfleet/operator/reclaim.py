"""Taking sandboxes back: a session's pod, token Secret and NetworkPolicy, and the session
itself when its TTL runs out. Every delete tolerates "already gone"."""

from __future__ import annotations

import asyncio

from sandfleet.api import API_VERSION, SESSION_PLURAL, ReclaimReason
from sandfleet.fleet.naming import network_policy_name, token_secret_name
from sandfleet.kube import KubeClient, resource_path
from sandfleet.logs import get_logger
from sandfleet.operator.metrics import OperatorMetrics

log = get_logger(__name__)


async def delete_session_children(
    kube: KubeClient,
    metrics: OperatorMetrics,
    namespace: str,
    session: str,
    *,
    pod: str | None,
    reason: ReclaimReason,
    token_secret: bool = True,
) -> None:
    """Delete what the operator made for `session` now, without waiting for the garbage
    collector (which would also get there through the ownerReferences, only later).
    `token_secret` False: the session has none (a gateway claim's token is derived), and
    deleting it anyway would be one API write for a 404."""
    paths = [
        resource_path(
            "networking.k8s.io/v1", "networkpolicies", namespace, network_policy_name(session)
        ),
    ]
    if token_secret:
        paths.append(resource_path("v1", "secrets", namespace, token_secret_name(session)))
    if pod:
        paths.insert(0, resource_path("v1", "pods", namespace, pod))
    # Grace 0 for the pod: a sandbox holds nothing worth a graceful stop, and its memory
    # is what the next session is waiting for.
    await asyncio.gather(
        *(kube.delete(p, grace_period_s=0 if "/pods/" in p else None) for p in paths)
    )
    if pod:
        metrics.reclaimed(reason)
    log.info("sandbox_reclaimed", namespace=namespace, session=session, pod=pod, reason=reason)


async def delete_session(kube: KubeClient, namespace: str, name: str, uid: str) -> None:
    """Delete the SandboxSession (its TTL ran out); only this incarnation of the name."""
    path = resource_path(API_VERSION, SESSION_PLURAL, namespace, name)
    await kube.request(
        "DELETE",
        path,
        {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": "Background",
            "preconditions": {"uid": uid},
        },
    )
