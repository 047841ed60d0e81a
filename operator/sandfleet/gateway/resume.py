"""Resume on access: a Connect or a proxied runtime call naming a Suspended session asks the
operator to resume it (spec.suspend false) and waits, bounded by the call's deadline.

The request is one merge patch, the same whoever sends it and however often: concurrent
accesses (on this replica, they share one patch; across replicas, the patches agree) lead
to one resume, which the operator alone performs. The session keeps its runtime token
across a suspend, so the caller's token works on the resumed sandbox.
"""

from __future__ import annotations

import asyncio

from sandfleet.api import API_VERSION, SESSION_PLURAL
from sandfleet.kube import KubeClient, resource_path
from sandfleet.logs import get_logger

log = get_logger(__name__)

RESUME_WAIT_S = 120.0
"""How long an access waits for a resume when its call has no deadline of its own."""


async def request_resume(kube: KubeClient, namespace: str, name: str) -> None:
    """spec.suspend false on the session: the operator resumes it."""
    path = resource_path(API_VERSION, SESSION_PLURAL, namespace, name)
    await kube.patch(path, {"spec": {"suspend": False}})
    log.info("resume_requested", session=f"{namespace}/{name}")


class Resumer:
    """One resume request in flight per session on this replica."""

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube
        self._inflight: dict[tuple[str, str], asyncio.Future[None]] = {}

    async def request(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        pending = self._inflight.get(key)
        if pending is None:
            pending = asyncio.ensure_future(request_resume(self._kube, namespace, name))
            self._inflight[key] = pending
            pending.add_done_callback(lambda _: self._inflight.pop(key, None))
        await asyncio.shield(pending)
