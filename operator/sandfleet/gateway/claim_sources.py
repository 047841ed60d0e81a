"""Where a claim's sandbox comes from (a pool, a template, the default image) and its
working directory, each pool's and template's checked to exist at most every few seconds.

A claim never waits for that check while the last answer is less than a minute old: it
uses the last answer and the check runs beside it (a serial client claiming every 300 ms
otherwise paid one API read in every ~15 claims, its p90).
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from sandfleet.api import DEFAULT_WORKDIR, PodTemplate, Reason, SandboxSessionSpec
from sandfleet.fleet.plans import PlanError, pool_pod_template, read_pool, read_template
from sandfleet.gateway.claim_types import ClaimError, ClaimFailure, ClaimSpec
from sandfleet.kube import KubeClient


class SourceKind(enum.Enum):
    """What a session's sandbox is made from."""

    POOL = "pool"
    TEMPLATE = "template"


V = TypeVar("V")

STALE_S = 60.0
"""How old a remembered answer may be and still be used while it is checked again."""


class RefreshingCache(Generic[V]):
    """Answers by key: fresh ones (younger than `fresh_s`) as they are; older ones up to
    `stale_s` as they are too, while one read per key refreshes them in the background;
    older still, or none, read first. A refresh that raises `drop_on` forgets the answer
    (the next get reads, and raises); any other error keeps it until it is too old."""

    def __init__(
        self,
        *,
        fresh_s: float,
        stale_s: float = STALE_S,
        drop_on: type[Exception] = Exception,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fresh_s = fresh_s
        self._stale_s = max(stale_s, fresh_s)
        self._drop_on = drop_on
        self._clock = clock
        self._seen: dict[Hashable, tuple[float, V]] = {}
        self._refreshing: dict[Hashable, asyncio.Task[None]] = {}

    async def get(self, key: Hashable, read: Callable[[], Awaitable[V]]) -> V:
        cached = self._seen.get(key)
        age = self._clock() - cached[0] if cached is not None else None
        if cached is not None and age is not None and age < self._stale_s:
            if age >= self._fresh_s and key not in self._refreshing:
                task = asyncio.get_running_loop().create_task(self._refresh(key, read))
                self._refreshing[key] = task
                task.add_done_callback(lambda done: self._refreshed(key, done))
            return cached[1]
        value = await read()
        self._seen[key] = (self._clock(), value)
        return value

    def _refreshed(self, key: Hashable, task: asyncio.Task[None]) -> None:
        if self._refreshing.get(key) is task:
            del self._refreshing[key]

    async def _refresh(self, key: Hashable, read: Callable[[], Awaitable[V]]) -> None:
        try:
            value = await read()
        except self._drop_on:
            self._seen.pop(key, None)
            return
        except Exception:  # noqa: BLE001 - kept until stale_s; the next read says what is wrong
            return
        self._seen[key] = (self._clock(), value)

    async def close(self) -> None:
        """Cancel refreshes still running."""
        tasks = list(self._refreshing.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Workdirs:
    """Working directories of pools and templates, checked again `cache_s` after the last
    check (RefreshingCache: a claim waits for the check only after a minute without one)."""

    def __init__(self, kube: KubeClient, *, cache_s: float) -> None:
        self._kube = kube
        self._cache: RefreshingCache[str] = RefreshingCache(fresh_s=cache_s, drop_on=ClaimError)

    async def of_claim(self, spec: ClaimSpec) -> str:
        """The working directory of the claim's pool or template; NOT_FOUND if it is missing."""
        if spec.pool:
            return await self.lookup(spec.namespace, SourceKind.POOL, spec.pool)
        if spec.template:
            return await self.lookup(spec.namespace, SourceKind.TEMPLATE, spec.template)
        return DEFAULT_WORKDIR

    async def of_session(self, namespace: str, spec: SandboxSessionSpec) -> str:
        """An existing session's working directory (the default when its source is gone)."""
        for kind, ref in (
            (SourceKind.POOL, spec.pool_ref),
            (SourceKind.TEMPLATE, spec.template_ref),
        ):
            if ref is not None:
                try:
                    return await self.lookup(namespace, kind, ref.name)
                except ClaimError:
                    return DEFAULT_WORKDIR
        return (spec.template or PodTemplate()).workdir

    async def lookup(self, namespace: str, kind: SourceKind, name: str) -> str:
        return await self._cache.get(
            (namespace, kind, name), lambda: self._read(namespace, kind, name)
        )

    async def close(self) -> None:
        await self._cache.close()

    async def _read(self, namespace: str, kind: SourceKind, name: str) -> str:
        try:
            if kind is SourceKind.POOL:
                pool = await read_pool(self._kube, namespace, name)
                pod, _ = await pool_pod_template(self._kube, namespace, pool)
            else:
                pod = (await read_template(self._kube, namespace, name)).pod
        except PlanError as exc:
            missing = exc.reason in {Reason.POOL_NOT_FOUND, Reason.TEMPLATE_NOT_FOUND}
            failure = ClaimFailure.NOT_FOUND if missing else ClaimFailure.INVALID
            raise ClaimError(failure, str(exc)) from exc
        return (pod or PodTemplate()).workdir
