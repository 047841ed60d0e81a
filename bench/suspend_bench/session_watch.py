"""The bench namespace's SandboxSessions as a client watching them sees them, stamped on
arrival (time.monotonic()): the latency of a suspend or resume as `kubectl get -w` shows it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from sandfleet.api import API_VERSION, SESSION_PLURAL
from sandfleet.kube import KubeApiError, KubeClient, KubeConnectionError, resource_path

Body = dict[str, Any]


class SessionWatch:
    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self._kube = kube
        self._path = resource_path(API_VERSION, SESSION_PLURAL, namespace)
        self.history: dict[str, list[tuple[float, Body]]] = {}
        """Each session's bodies in the order they arrived, with when they did."""
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> SessionWatch:
        items, version = await self._kube.list_with_version(self._path)
        for item in items:
            self.history[item["metadata"]["name"]] = [(time.monotonic(), item)]
        self._task = asyncio.create_task(self._follow(version))
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _follow(self, version: str) -> None:
        while True:
            try:
                async for event in self._kube.watch(
                    self._path, resource_version=version, timeout_s=240
                ):
                    version = event.resource_version or version
                    if event.type == "BOOKMARK":
                        continue
                    name = event.object["metadata"]["name"]
                    if event.type == "DELETED":
                        self.history.pop(name, None)
                    else:
                        seen = self.history.setdefault(name, [])
                        seen.append((time.monotonic(), event.object))
                    async with self._changed:
                        self._changed.notify_all()
            except (KubeApiError, KubeConnectionError):
                await asyncio.sleep(0.5)
                _, version = await self._kube.list_with_version(self._path)

    def mark(self, name: str) -> int:
        """Where `name`'s history stands now: `until(..., since=mark)` looks only after it."""
        return len(self.history.get(name, []))

    def latest(self, name: str) -> Body:
        return self.history[name][-1][1]

    async def until(
        self,
        name: str,
        accept: Callable[[Body], bool],
        *,
        since: int = 0,
        timeout_s: float = 300.0,
    ) -> tuple[float, Body]:
        """(arrival stamp, body) of the first body of `name` after `since` that `accept`s;
        TimeoutError with the last status otherwise."""
        deadline = time.monotonic() + timeout_s
        async with self._changed:
            while True:
                seen = self.history.get(name, [])
                for stamp, body in seen[since:]:
                    if accept(body):
                        return stamp, body
                left = deadline - time.monotonic()
                if left <= 0:
                    status = (seen[-1][1].get("status") if seen else None) or {}
                    raise TimeoutError(f"session {name} not there after {timeout_s}s: {status}")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), left)

    def forget(self, name: str) -> None:
        """Drop what was seen of `name` but its latest body (memory, over 1,000 sessions)."""
        seen = self.history.get(name)
        if seen:
            del seen[:-1]


def phase(body: Body) -> str | None:
    return (body.get("status") or {}).get("phase")


def ready(body: Body) -> bool:
    """Ready (or Failed, which the caller reports)."""
    return phase(body) in {"Ready", "Failed", "Expired"}


def suspended(body: Body) -> bool:
    return phase(body) in {"Suspended", "Failed", "Expired"}


def released(body: Body) -> bool:
    """Suspended with its pod given back (the phase is written before the release)."""
    status = body.get("status") or {}
    return phase(body) in {"Failed", "Expired"} or (
        phase(body) == "Suspended" and not status.get("podName")
    )
