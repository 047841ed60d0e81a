"""Where each session's runtime is: a watch-fed index of SandboxSessions plus the gateway's claims.

The proxy asks it for every call, so answers come from memory: the gateway's own claims are
known the moment they are made, everything else arrives through one list+watch (per served
namespace). A session the index does not know (yet) costs no API request: the lookup waits a
moment for the watch (a session claimed through another replica an instant ago), then says
there is none; a claimed pod's address the status lacks comes from the claimer's pod index.
Unknown names are free for the API server whoever sends them.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
from collections.abc import Callable, Iterable
from typing import Any

from sandfleet.api import API_VERSION, RUNTIME_PORT, SESSION_PLURAL, Annotation, Phase
from sandfleet.gateway.claim_types import Claimed
from sandfleet.kube import KubeClient
from sandfleet.kube.mirror import feed_mirror
from sandfleet.logs import get_logger

log = get_logger(__name__)

MISS_WAIT_S = 2.0
"""How long a lookup of a session the index does not know waits for the watch to bring it."""
RESUME_POLL_S = 0.05
"""How often a call waiting for its session's resume looks at the index again."""
CLAIM_GRACE_S = 60.0
"""A session this replica claimed stays routable this long even if a relist lacks it: the
list may have been answered before the session was created."""


@dataclasses.dataclass(frozen=True, slots=True)
class Route:
    """One session as the proxy needs it."""

    namespace: str
    name: str
    phase: Phase | None
    pod: str | None
    address: str | None
    """The runtime's host:port; None while the session has no pod (yet)."""
    claimed_at: float | None = None
    """When this replica claimed it (monotonic), None for sessions only seen via the API."""
    deleting: bool = False
    """Released (deletionTimestamp set): its sandbox still answers until it is reclaimed."""

    @property
    def finished(self) -> bool:
        return self.phase is not None and self.phase.finished

    @property
    def holds_quota(self) -> bool:
        """Counts against its namespace's quota: neither finished, released nor Suspended (a
        suspended session holds no pod; its resume is admitted by the quota again, resume.py)."""
        return not self.finished and not self.deleting and self.phase != Phase.SUSPENDED

    @property
    def counted(self) -> bool:
        """What `holds_quota` says, or it never will again (finished, released): a quota
        reservation naming this session is covered by the watch (Quotas' `known`)."""
        return self.phase != Phase.SUSPENDED

    @property
    def ready(self) -> bool:
        """Calls can go through: a pod address, and Ready or Running (no phase yet: a
        gateway-claimed session the operator has not adopted, whose pod is bound)."""
        return self.address is not None and self.phase in (None, Phase.READY, Phase.RUNNING)


def route_from_session(session: dict[str, Any], claimed: Route | None = None) -> Route:
    """The route an API object gives; what this replica recorded fills in what the status
    does not say yet (a gateway-claimed session before the operator adopts it)."""
    meta = session.get("metadata") or {}
    status = session.get("status") or {}
    try:
        phase: Phase | None = Phase(status.get("phase") or "")
    except ValueError:
        phase = None
    pod_ip = status.get("podIP")
    pod = status.get("podName") or (meta.get("annotations") or {}).get(Annotation.CLAIMED_POD)
    address = f"{pod_ip}:{RUNTIME_PORT}" if pod_ip else None
    if claimed is not None and claimed.pod == pod:
        address = address or claimed.address
    return Route(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta["name"]),
        phase=phase,
        pod=str(pod) if pod else None,
        address=address,
        claimed_at=claimed.claimed_at if claimed is not None else None,
        deleting=bool(meta.get("deletionTimestamp")),
    )


class SessionRoutes:
    """Sessions by (namespace, name), their count per namespace, and channel eviction hooks.

    `on_gone(address)` is called when a runtime address stops being any session's (the
    session was deleted, finished, or moved): the proxy closes its channel there.
    """

    def __init__(
        self,
        kube: KubeClient,
        namespaces: Iterable[str] = (),
        *,
        pod_address: Callable[[str, str], str | None] = lambda namespace, pod: None,
        miss_wait_s: float = MISS_WAIT_S,
    ) -> None:
        self._kube = kube
        self._scopes: list[str | None] = list(namespaces) or [None]
        self._pod_address = pod_address
        """(namespace, pod) -> the runtime's host:port from a watch-fed pod index, or None."""
        self._miss_wait_s = miss_wait_s
        self._waiters: dict[tuple[str, str], list[asyncio.Future[None]]] = {}
        self._routes: dict[tuple[str, str], Route] = {}
        self._active: collections.Counter[str] = collections.Counter()
        self.on_gone: Callable[[str], None] = lambda address: None
        self.synced = asyncio.Event()
        """Set once every served namespace has been listed."""

    def __len__(self) -> int:
        return len(self._routes)

    def get(self, namespace: str, name: str) -> Route | None:
        return self._routes.get((namespace, name))

    def active(self, namespace: str) -> int:
        """Sessions in the namespace neither finished, released nor Suspended (what quotas
        count)."""
        return self._active[namespace]

    def active_by_namespace(self) -> dict[str, int]:
        return {ns: count for ns, count in self._active.items() if count}

    def record(self, claimed: Claimed) -> None:
        """A session this replica just claimed or connected: routable at once."""
        route = Route(
            namespace=claimed.namespace,
            name=claimed.name,
            phase=Phase.READY,
            pod=claimed.pod,
            address=claimed.address,
            claimed_at=time.monotonic(),
        )
        held = self._routes.get((claimed.namespace, claimed.name))
        if held is not None and held.pod == claimed.pod and held.address:
            route = dataclasses.replace(held, claimed_at=route.claimed_at)
        self._put(route)

    async def resolve(self, namespace: str, name: str) -> Route | None:
        """The session's route from memory; None when there is no such session. A name the
        index does not know waits (at most `miss_wait_s`) for the watch, never asks the API
        server: a miss costs every caller the same, and the API server nothing."""
        key = (namespace, name)
        route = self._routes.get(key)
        if route is None and self._miss_wait_s > 0:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.setdefault(key, []).append(waiter)
            try:
                await asyncio.wait_for(waiter, self._miss_wait_s)
            except TimeoutError:
                pass
            finally:
                waiting = self._waiters.get(key, [])
                if waiter in waiting:
                    waiting.remove(waiter)
                if not waiting:
                    self._waiters.pop(key, None)
            route = self._routes.get(key)
        if route is None or route.address is not None or not route.pod or route.finished:
            return route
        # Claimed by another replica a moment ago: the operator has not written the pod's
        # IP into the status yet; the claimer's pod index has it.
        address = self._pod_address(namespace, route.pod)
        return dataclasses.replace(route, address=address) if address else route

    async def wait_resumed(self, namespace: str, name: str, timeout_s: float) -> Route | None:
        """The session's route once it is Ready again, finished or gone (None), or as it is
        when `timeout_s` runs out. The index is watch-fed: this only looks at memory."""
        deadline = time.monotonic() + timeout_s
        while True:
            route = await self.resolve(namespace, name)
            if route is None or route.ready or route.finished:
                return route
            if time.monotonic() >= deadline:
                return route
            await asyncio.sleep(RESUME_POLL_S)

    # --- feeding ---------------------------------------------------------------------------
    def apply(self, event_type: str, session: dict[str, Any]) -> None:
        """One watch event."""
        meta = session.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        held = self._routes.get(key)
        if event_type == "DELETED":
            self._drop(key)
            return
        self._put(route_from_session(session, held if held and held.claimed_at else None))

    def replace_scope(self, namespace: str | None, sessions: Iterable[dict[str, Any]]) -> None:
        """A fresh list of one namespace (None: all): what it lacks is gone, except this
        replica's claims younger than the list can know about."""
        fresh = {}
        for session in sessions:
            meta = session.get("metadata") or {}
            fresh[(str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = session
        now = time.monotonic()
        for key, route in list(self._routes.items()):
            if key in fresh or namespace not in (None, key[0]):
                continue
            if route.claimed_at is None or now - route.claimed_at > CLAIM_GRACE_S:
                self._drop(key)
        for session in fresh.values():
            self.apply("ADDED", session)

    def _put(self, route: Route) -> None:
        key = (route.namespace, route.name)
        previous = self._routes.get(key)
        if previous is not None and previous.holds_quota:
            self._active[route.namespace] -= 1
        if route.holds_quota:
            self._active[route.namespace] += 1
        self._routes[key] = route
        for waiter in self._waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(None)
        if (
            previous is not None
            and previous.address
            and (previous.address != route.address or route.finished)
        ):
            self._gone(previous.address)

    def _drop(self, key: tuple[str, str]) -> None:
        route = self._routes.pop(key, None)
        if route is None:
            return
        if route.holds_quota:
            self._active[route.namespace] -= 1
        if route.address:
            self._gone(route.address)

    def _gone(self, address: str) -> None:
        """`on_gone`, unless another live session is at that address: a recycled pod serves
        its next session at the same address, often before the last one's route goes, and
        closing the channel then cut that session's calls off (their first command hung)."""
        if not any(r.address == address and not r.finished for r in self._routes.values()):
            self.on_gone(address)

    async def run(self, *, retry_delay_s: float = 1.0) -> None:
        """List then watch the sessions forever (one stream per served namespace, or one for
        the cluster), listing again when a watch expires. Cancel to stop."""
        await feed_mirror(
            self._kube, self, API_VERSION, SESSION_PLURAL, self._scopes,
            what="gateway_sessions", retry_delay_s=retry_delay_s,
        )  # fmt: skip
