"""The gateway's claimable pods: idle, ready pool pods, each with a runtime channel open and warm.

One watch of the managed pods (the operator's PodIndex and its feed) tells which pool pods
are idle and ready. For each, a RuntimeClient is opened with its pool's token and warmed
with one GetStats call as soon as the pod is ready, so a claim's BindSession runs over a
connected channel; the client is closed when the pod leaves the idle set. A claim `take`s
a pod's client out of the set: no two claims of this process ever pick the same pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable

from sandfleet.api import Label, PodState
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.fleet.naming import pool_token_secret_name
from sandfleet.fleet.pod_index import (
    Pod,
    PodIndex,
    feed_pod_index,
    pod_ip,
    pod_is_ready,
    pool_of,
    runtime_address,
)
from sandfleet.fleet.sessions import SessionClient
from sandfleet.kube import KubeClient
from sandfleet.logs import get_logger

log = get_logger(__name__)

_WARM_RETRY_MAX_S = 5.0
Key = tuple[str, str]


def claimable(pod: Pod | None) -> bool:
    """An idle, ready pool pod with an address that is not being deleted."""
    if pod is None:
        return False
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    return (
        labels.get(Label.STATE) == PodState.IDLE
        and bool(labels.get(Label.POOL))
        and not meta.get("deletionTimestamp")
        and pod_is_ready(pod)
        and pod_ip(pod) is not None
    )


class _NotifyingIndex(PodIndex):
    """A PodIndex that reports every pod it applies (watch events, relists)."""

    def __init__(self, on_change: Callable[[str, str], None]) -> None:
        super().__init__()
        self._on_change = on_change

    def apply(self, event_type: str, pod: Pod, *, authoritative: bool = False) -> None:
        super().apply(event_type, pod, authoritative=authoritative)
        meta = pod["metadata"]
        self._on_change(meta.get("namespace", ""), meta["name"])


@dataclasses.dataclass(eq=False)
class _Channel:
    client: RuntimeClient | None = None
    warm: bool = False
    task: asyncio.Task[None] | None = None


class IdlePods:
    """Idle, ready pool pods of the served namespaces and their warmed runtime clients."""

    def __init__(
        self, kube: KubeClient, namespaces: tuple[str, ...], *, rpc_timeout_s: float = 10.0
    ) -> None:
        self._kube = kube
        self._namespaces = namespaces
        self._rpc_timeout_s = rpc_timeout_s
        self.index = _NotifyingIndex(self._changed)
        self._channels: dict[Key, _Channel] = {}
        self._tokens: dict[Key, str] = {}
        self._feed: asyncio.Task[None] | None = None
        self._warm_waiters: set[asyncio.Future[None]] = set()

    async def start(self, timeout_s: float = 60.0) -> None:
        """Start the watch; returns once every namespace has been listed."""
        self._feed = asyncio.create_task(
            feed_pod_index(self._kube, self.index, list(self._namespaces))
        )
        await asyncio.wait_for(self.index.synced.wait(), timeout_s)

    async def stop(self) -> None:
        if self._feed is not None:
            self._feed.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._feed
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            if channel.task is not None:
                channel.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await channel.task
            if channel.client is not None:
                await channel.client.close()

    # --- for claims ------------------------------------------------------------------------
    def candidates(self, namespace: str, pool: str) -> list[Pod]:
        """Idle, ready pods of `pool` whose channel is warm (the only ones a claim takes)."""
        pods = []
        for pod in self.index.idle_ready_pods(namespace, pool):
            channel = self._channels.get((namespace, pod["metadata"]["name"]))
            if channel is not None and channel.warm and pool_of(pod) == pool:
                pods.append(pod)
        return pods

    def take(self, namespace: str, name: str) -> RuntimeClient | None:
        """The pod's warm client, now the caller's to close; None if it is not claimable."""
        channel = self._channels.get((namespace, name))
        if channel is None or not channel.warm or channel.client is None:
            return None
        del self._channels[(namespace, name)]
        client, channel.client = channel.client, None
        return client

    async def until_warm(self, timeout_s: float) -> None:
        """Returns when a pod's channel has become warm (a new candidate), or after
        `timeout_s`."""
        waiter = asyncio.get_running_loop().create_future()
        self._warm_waiters.add(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            pass
        finally:
            self._warm_waiters.discard(waiter)

    def forget_pool_token(self, namespace: str, pool: str) -> None:
        self._tokens.pop((namespace, pool), None)

    # --- keeping the channels ----------------------------------------------------------------
    def _changed(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        pod = self.index.get(namespace, name)
        if claimable(pod):
            if key not in self._channels:
                channel = self._channels[key] = _Channel()
                assert pod is not None
                channel.task = asyncio.get_running_loop().create_task(self._warm(key, pod, channel))
        elif key in self._channels:
            self._drop(key)

    def _drop(self, key: Key) -> None:
        channel = self._channels.pop(key, None)
        if channel is None:
            return
        if channel.task is not None and not channel.task.done():
            channel.task.cancel()
        if channel.client is not None:
            client, channel.client = channel.client, None
            asyncio.get_running_loop().create_task(client.close())

    async def _warm(self, key: Key, pod: Pod, channel: _Channel) -> None:
        """Open the pod's channel with its pool's token and make one call on it; retried
        (with back-off) while the pod stays idle."""
        pool = pool_of(pod)
        ip = pod_ip(pod)
        if pool is None or ip is None:
            return
        delay = 0.2
        while key in self._channels:
            try:
                token = await self._pool_token(key[0], pool)
                if channel.client is None:
                    channel.client = RuntimeClient(
                        runtime_address(ip), token, rpc_timeout_s=self._rpc_timeout_s
                    )
                await channel.client.stats()
            except Exception as exc:  # noqa: BLE001 - an unreachable pod or API: try again
                log.info("idle_pod_warm_failed", pod=f"{key[0]}/{key[1]}", error=str(exc))
                # A pool re-created under the same name has a new token: read it again.
                self.forget_pool_token(key[0], pool)
                if channel.client is not None:
                    client, channel.client = channel.client, None
                    await client.close()
                await asyncio.sleep(delay)
                delay = min(delay * 2, _WARM_RETRY_MAX_S)
                continue
            channel.warm = True
            for waiter in self._warm_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            return

    async def _pool_token(self, namespace: str, pool: str) -> str:
        token = self._tokens.get((namespace, pool))
        if token is None:
            secrets = SessionClient(self._kube, namespace)
            token = await secrets.runtime_token(pool_token_secret_name(pool))
            self._tokens[(namespace, pool)] = token
        return token
