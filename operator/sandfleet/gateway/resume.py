"""Resume through the gateway: a Connect or a proxied runtime call naming a Suspended session
asks the operator to resume it (spec.suspend false) and waits, bounded by the call's deadline.

The request is one merge patch, the same whoever sends it and however often: concurrent
accesses (on this replica, they share one request; across replicas, the patches agree) lead
to one resume, which the operator alone performs. The session keeps its runtime token
across a suspend, so the caller's token works on the resumed sandbox.

A Suspended session holds no pod and does not count against its namespace's session quota
(routes.Route.holds_quota); a resume makes it count again, so it is admitted like a claim:
the namespace's quota is reserved for it before the patch (QuotaExceededError, nothing
asked, when the namespace is full) and held until the session is Ready again, when the
watch counts it. Otherwise suspending and resuming would let a tenant run past its quota.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

from sandfleet.api import API_VERSION, SESSION_PLURAL
from sandfleet.errors import SandfleetError
from sandfleet.gateway.routes import Route
from sandfleet.kube import KubeClient, resource_path
from sandfleet.logs import get_logger

log = get_logger(__name__)

RESUME_WAIT_S = 120.0
"""How long an access waits for a resume when its call has no deadline of its own (also how
long a resume's quota reservation is held at most while the operator restores it)."""


class QuotaReserver(Protocol):
    """What a resume needs of sandfleet.gateway.quotas.Quotas."""

    def reserve(
        self, namespace: str, names: Sequence[str]
    ) -> contextlib.AbstractAsyncContextManager[None]: ...


class ResumeWaiter(Protocol):
    """What a resume needs of sandfleet.gateway.routes.SessionRoutes."""

    async def wait_resumed(self, namespace: str, name: str, timeout_s: float) -> Route | None: ...


class _NoQuota:
    @contextlib.asynccontextmanager
    async def reserve(self, namespace: str, names: Sequence[str]) -> AsyncIterator[None]:
        yield


async def request_resume(kube: KubeClient, namespace: str, name: str) -> None:
    """spec.suspend false on the session: the operator resumes it."""
    path = resource_path(API_VERSION, SESSION_PLURAL, namespace, name)
    await kube.patch(path, {"spec": {"suspend": False}})
    log.info("resume_requested", session=f"{namespace}/{name}")


class Resumer:
    """One resume in flight per session on this replica, each admitted by the quota.

    `request` returns once the resume is asked for; the reservation it made is held in the
    background until the session is Ready (or `hold_s` runs out). Close it to end those.
    """

    def __init__(
        self,
        kube: KubeClient,
        routes: ResumeWaiter | None = None,
        quotas: QuotaReserver | None = None,
        *,
        hold_s: float = RESUME_WAIT_S,
    ) -> None:
        self._kube = kube
        self._routes = routes
        self._quotas: QuotaReserver = quotas or _NoQuota()
        self._hold_s = hold_s
        self._asked: dict[tuple[str, str], asyncio.Future[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def request(self, namespace: str, name: str) -> None:
        """Ask the operator to resume the session (once, however many callers ask at once).
        Raises QuotaExceededError (nothing asked) when the namespace is full, another
        SandfleetError when the request could not be made."""
        key = (namespace, name)
        asked = self._asked.get(key)
        if asked is None:
            asked = asyncio.get_running_loop().create_future()
            asked.add_done_callback(_retrieved)
            self._asked[key] = asked
            task = asyncio.create_task(self._resume(namespace, name, asked))
            self._tasks.add(task)
            task.add_done_callback(self._finished(key, asked))
        await asyncio.shield(asked)

    async def _resume(self, namespace: str, name: str, asked: asyncio.Future[None]) -> None:
        try:
            async with self._quotas.reserve(namespace, (name,)):
                await request_resume(self._kube, namespace, name)
                asked.set_result(None)
                if self._routes is not None:
                    # Until Ready the watch does not count the session: the reservation does.
                    await self._routes.wait_resumed(namespace, name, self._hold_s)
        except asyncio.CancelledError:
            asked.cancel()
            raise
        except SandfleetError as error:
            if not asked.done():
                asked.set_exception(error)
            else:  # asked already: the reservation ended early, the resume goes on
                log.warning("resume_wait_failed", session=f"{namespace}/{name}", error=str(error))
        finally:
            if not asked.done():  # an unexpected error (logged by the task): callers hear too
                asked.set_exception(SandfleetError("the resume failed; see the gateway's log"))

    def _finished(
        self, key: tuple[str, str], asked: asyncio.Future[None]
    ) -> Callable[[asyncio.Task[None]], None]:
        def done(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            if self._asked.get(key) is asked:
                del self._asked[key]

        return done

    async def close(self) -> None:
        """End the reservations still held (the resumes themselves go on in the operator)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _retrieved(future: asyncio.Future[None]) -> None:
    """Mark a failure as seen: a caller that gave up (cancelled) no longer awaits it."""
    if not future.cancelled():
        future.exception()
