"""Where a served model's sandboxes come from: local ones, a few kept started (warm).

A request takes a started sandbox at once when one is waiting (a local sandbox takes a few
hundred milliseconds to boot) and the pool is refilled once the request has its answer. A
sandbox serves one request or one conversation, then is closed: it is never handed to
another client.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from typing import Protocol

from sandfleet.backends.local import LocalBackend, LocalSandboxConfig
from sandfleet.errors import SandfleetError
from sandfleet.logs import get_logger
from sandfleet.sandbox.facade import Sandbox

log = get_logger(__name__)

RELEASE_TIMEOUT_S = 30.0
STARTS_AT_ONCE = 2 * (os.cpu_count() or 1)
"""Local sandboxes starting at the same time, at most (per served model): a start is mostly
CPU (namespaces, a Python runtime), so hundreds at once only share the cores until each one
misses its start timeout; the others wait their turn (a wait the start timeout does not
count)."""
ANSWER_WAIT_S = 0.5
"""How long a release or refill waits for its answer to reach the client, at most (a client
that went away mid-send never says so)."""


class SandboxSource(Protocol):
    """Where one served model's sandboxes come from (local, or the cluster's gateway)."""

    open: int
    """Sandboxes started or claimed and not yet closed."""

    @property
    def ready(self) -> int: ...
    def start(self) -> None: ...
    async def take(self, claim_id: str | None = None, *, token: str | None = None) -> Sandbox: ...
    def refill(self) -> None: ...
    def release(self, sandbox: Sandbox) -> None: ...
    async def aclose(self) -> None: ...


class LocalSandboxSource:
    """Local sandboxes for one served model, `warm` of them kept started."""

    def __init__(self, config: LocalSandboxConfig, *, tool_timeout_s: float, warm: int) -> None:
        self._config = config
        self._tool_timeout_s = tool_timeout_s
        self._warm = warm
        self._ready: list[Sandbox] = []
        self._refills: set[asyncio.Task[None]] = set()
        self._releases: set[asyncio.Task[None]] = set()
        self._closed = False
        self._starts = asyncio.Semaphore(STARTS_AT_ONCE)
        self.open = 0
        """Sandboxes started and not yet closed (warm ones included)."""

    @property
    def ready(self) -> int:
        """Started sandboxes waiting for a request."""
        return len(self._ready)

    def start(self) -> None:
        """Begin filling the warm pool (in the background)."""
        self.refill()

    async def take(self, claim_id: str | None = None, *, token: str | None = None) -> Sandbox:
        """A started sandbox; raises SandfleetError (SandboxStartError) when none starts.
        `claim_id` and `token` mean nothing locally (a cluster source claims with them).

        Taking one does not refill the pool: starting a sandbox costs CPU the request needs
        now. The service calls `refill` once the request has its answer."""
        if self._ready:
            return self._ready.pop()
        return await self._open()

    def refill(self) -> None:
        """Start sandboxes in the background until `warm` are started or starting."""
        while not self._closed and len(self._ready) + len(self._refills) < self._warm:
            task = asyncio.get_running_loop().create_task(self._add_one())
            self._refills.add(task)
            task.add_done_callback(self._refills.discard)

    def release(self, sandbox: Sandbox) -> None:
        """Close a sandbox a request or conversation is done with, in the background: the
        answer does not wait for it, and a cancelled request (the client left) cannot
        interrupt it. `aclose` waits for every release still running."""
        task = asyncio.get_running_loop().create_task(self._close(sandbox))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def aclose(self) -> None:
        self._closed = True
        for task in list(self._refills):
            task.cancel()
        await asyncio.gather(*self._refills, return_exceptions=True)
        ready, self._ready = self._ready, []
        await asyncio.gather(*(self._close(sandbox) for sandbox in ready), *self._releases)

    async def _open(self) -> Sandbox:
        async with self._starts:
            sandbox = await Sandbox.open(
                LocalBackend(self._config), tool_timeout_s=self._tool_timeout_s
            )
        self.open += 1
        return sandbox

    async def _close(self, sandbox: Sandbox) -> None:
        try:
            await close_quietly(sandbox)
        finally:
            self.open -= 1

    async def _add_one(self) -> None:
        try:
            sandbox = await self._open()
        except (SandfleetError, OSError) as error:
            log.warning("serve_warm_sandbox_failed", error=str(error))
            return
        if self._closed:
            await self._close(sandbox)
            return
        self._ready.append(sandbox)


async def close_quietly(sandbox: Sandbox) -> None:
    """Close (release) a sandbox, logging rather than raising, and giving up after
    RELEASE_TIMEOUT_S."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(RELEASE_TIMEOUT_S):
            try:
                await sandbox.close()
            except (SandfleetError, OSError) as error:
                log.warning("serve_sandbox_release_failed", error=str(error))


class AfterAnswer:
    """Work held back until a request's answer has reached its client: a sandbox's release
    (a process ended, or a session deleted) and the warm pool's refill (a process started)
    cost CPU that the answer's last bytes need first on a small machine."""

    def __init__(self) -> None:
        self._waiting: dict[asyncio.Task[None], asyncio.Event] = {}

    def run(self, answered: asyncio.Event, work: Callable[[], None]) -> None:
        """Call `work` once `answered` is set, or after ANSWER_WAIT_S."""

        async def later() -> None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(ANSWER_WAIT_S):
                    await answered.wait()
            work()

        task = asyncio.get_running_loop().create_task(later())
        self._waiting[task] = answered
        task.add_done_callback(self._waiting.pop)

    async def aclose(self) -> None:
        """Do all the held-back work now."""
        for answered in self._waiting.values():
            answered.set()
        await asyncio.gather(*self._waiting)
