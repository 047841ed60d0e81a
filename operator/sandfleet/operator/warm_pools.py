"""What this operator process knows of warm pools between handlers: their tokens, its claims.

The pool keeper records each pool's runtime token; a session's lease reads it to bind a
claimed pod. Claims in flight keep concurrent sessions of this process off the same pod.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator


class PoolTokens:
    """Pool runtime tokens by (namespace, pool), read once from the pools' Secrets."""

    def __init__(self) -> None:
        self._tokens: dict[tuple[str, str], str] = {}

    def get(self, namespace: str, pool: str) -> str | None:
        return self._tokens.get((namespace, pool))

    def remember(self, namespace: str, pool: str, token: str) -> None:
        self._tokens[(namespace, pool)] = token


class ClaimsInFlight:
    """Pool pods this process is claiming right now: concurrent claims in one operator pick
    different pods instead of racing for the same one (the API server's resourceVersion
    check still decides between operators)."""

    def __init__(self) -> None:
        self._pods: set[tuple[str, str]] = set()

    def is_claiming(self, namespace: str, pod: str) -> bool:
        return (namespace, pod) in self._pods

    @contextlib.contextmanager
    def claiming(self, namespace: str, pod: str) -> Iterator[None]:
        """Holds the pod for the block (the claim's patch and its error handling)."""
        key = (namespace, pod)
        self._pods.add(key)
        try:
            yield
        finally:
            self._pods.discard(key)


class PoolsReturning:
    """Released pods being reset and verified on their way back into their pool: the pool
    keeper counts them as its own meanwhile, so it neither makes replacements for pods that
    are coming back nor keeps the ones it made when they do."""

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str], set[str]] = {}
        self.writable_checked: set[tuple[str, str]] = set()
        """(namespace, template hash) of pods whose image was seen to let the sandbox
        user write only what a reset restores: an image's property, looked at once."""
        self._looking: dict[tuple[str, str], asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def template_lock(self, namespace: str, template: str) -> AsyncIterator[None]:
        """Held for a recycle while its template's writable paths are not known to be
        restored; once they are, a no-op (recycles of a checked template run at once)."""
        key = (namespace, template)
        if key in self.writable_checked:
            yield
            return
        async with self._looking.setdefault(key, asyncio.Lock()):
            yield
        if key in self.writable_checked:
            self._looking.pop(key, None)

    def names(self, namespace: str, pool: str) -> frozenset[str]:
        return frozenset(self._pods.get((namespace, pool), ()))

    @contextlib.contextmanager
    def returning(self, namespace: str, pool: str, pod: str) -> Iterator[None]:
        """Counts the pod as the pool's for the block (its reset, check and patch)."""
        pods = self._pods.setdefault((namespace, pool), set())
        pods.add(pod)
        try:
            yield
        finally:
            pods.discard(pod)
            if not pods:
                self._pods.pop((namespace, pool), None)
