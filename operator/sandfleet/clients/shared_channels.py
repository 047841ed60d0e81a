"""The SDK's channels to gateways, shared by every claim of one caller in one process.

A claim used to open a channel to the gateway for Claim and Release and one more for the
proxied runtime calls, and close both with the sandbox: every claim paid two connection
set-ups (and TLS handshakes) before its first command. Here each (event loop, use, gateway,
TLS, caller) has one channel, leased by each claim and closed LINGER_S after its last
lease ends, so back-to-back claims (an RL step, an eval) reuse it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

LINGER_S = 30.0
"""How long a channel nobody leases stays open for the next claim."""


class Closable(Protocol):
    """A channel as this module uses it (grpc.aio.Channel; grpc stays in the client modules)."""

    async def close(self, grace: float | None) -> None: ...


C = TypeVar("C", bound=Closable)


@dataclasses.dataclass(eq=False)
class _Entry(Generic[C]):
    channel: C
    leases: int = 0
    expiry: asyncio.TimerHandle | None = None


class ChannelLease(Generic[C]):
    """One claim's use of a shared channel; `release()` once (more calls do nothing)."""

    def __init__(
        self, owner: SharedChannels[C], key: tuple[Hashable, ...], entry: _Entry[C]
    ) -> None:
        self.channel = entry.channel
        self._owner = owner
        self._key = key
        self._entry: _Entry[C] | None = entry

    def release(self) -> None:
        entry, self._entry = self._entry, None
        if entry is not None:
            self._owner.returned(self._key, entry)


class SharedChannels(Generic[C]):
    """Open channels by key, for the event loop they were opened on."""

    def __init__(self, *, linger_s: float = LINGER_S) -> None:
        self._linger_s = linger_s
        self._entries: dict[tuple[Hashable, ...], _Entry[C]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def lease(self, key: tuple[Hashable, ...], open_channel: Callable[[], C]) -> ChannelLease[C]:
        """The channel for `key` on this loop, opened with `open_channel` if there is none."""
        loop = asyncio.get_running_loop()
        self._forget_closed_loops()
        full_key = (loop, *key)
        entry = self._entries.get(full_key)
        if entry is None:
            entry = self._entries[full_key] = _Entry(open_channel())
        if entry.expiry is not None:
            entry.expiry.cancel()
            entry.expiry = None
        entry.leases += 1
        return ChannelLease(self, full_key, entry)

    def returned(self, key: tuple[Hashable, ...], entry: _Entry[C]) -> None:
        entry.leases -= 1
        if entry.leases == 0 and self._entries.get(key) is entry:
            loop = asyncio.get_running_loop()
            entry.expiry = loop.call_later(self._linger_s, self._expire, key, entry)

    def _expire(self, key: tuple[Hashable, ...], entry: _Entry[C]) -> None:
        if entry.leases == 0 and self._entries.get(key) is entry:
            del self._entries[key]
            task = asyncio.get_running_loop().create_task(entry.channel.close(grace=None))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Close every channel of the running loop (leases still held stop working)."""
        loop = asyncio.get_running_loop()
        for key in [k for k in self._entries if k[0] is loop]:
            entry = self._entries.pop(key)
            if entry.expiry is not None:
                entry.expiry.cancel()
            await entry.channel.close(grace=None)

    def _forget_closed_loops(self) -> None:
        """Entries of loops that ended (a test's, an asyncio.run's): their channels died
        with the loop and are dropped here (grpc closes a collected channel itself)."""
        ended = [
            key
            for key in self._entries
            if isinstance(key[0], asyncio.AbstractEventLoop) and key[0].is_closed()
        ]
        for key in ended:
            del self._entries[key]
