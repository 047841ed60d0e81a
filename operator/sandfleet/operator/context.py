"""The one object every handler receives as kopf's `memo`: settings, clients, shared state.

Built once in __main__ and shared (kopf shallow-copies memos per object; `__copy__` returns
the same instance), so nothing below the handlers reads the environment or a global.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import functools
import json
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from sandfleet.agent.config import AgentConfig
from sandfleet.agent.model import Model
from sandfleet.fleet.pod_index import PodIndex
from sandfleet.fleet.resources import PlatformDefaults
from sandfleet.kube import KubeClient
from sandfleet.kube.rate_limit import TokenBucket
from sandfleet.operator.metrics import OperatorMetrics
from sandfleet.operator.model_endpoints import EndpointAllowlist
from sandfleet.operator.session_signals import SessionSignals
from sandfleet.operator.settings import OperatorSettings
from sandfleet.operator.trajectory_store import TrajectoryStore
from sandfleet.operator.warm_pools import ClaimsInFlight, PoolsReturning, PoolTokens
from sandfleet.snapshots.store import SnapshotStore


class EventRecorder(Protocol):
    """Posts a Kubernetes Event about an object (kopf's poster in the operator)."""

    def __call__(self, body: object, *, warning: bool, reason: str, message: str) -> None: ...


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclasses.dataclass(eq=False)
class OperatorContext:
    settings: OperatorSettings
    kube: KubeClient
    pods: PodIndex
    metrics: OperatorMetrics
    store: TrajectoryStore
    defaults: PlatformDefaults
    events: EventRecorder
    clock: Callable[[], dt.datetime] = _utc_now
    session_key: bytes | None = None
    """The fleet's session key (shared with the gateway): tokens of gateway-claimed sessions
    derive from it. None: no gateway is configured, and such sessions fail."""
    snapshots: SnapshotStore | None = None
    """Where suspended sessions' files go; None: suspend is refused."""
    claims: ClaimsInFlight = dataclasses.field(default_factory=ClaimsInFlight)
    pool_tokens: PoolTokens = dataclasses.field(default_factory=PoolTokens)
    pools_returning: PoolsReturning = dataclasses.field(default_factory=PoolsReturning)
    """Released pods being recycled, by pool: the keepers count them as theirs."""
    session_signals: SessionSignals = dataclasses.field(default_factory=SessionSignals)
    """Wakes a session's worker when kopf sees its session change (spec.suspend)."""
    pool_pod_creates: TokenBucket = dataclasses.field(default_factory=lambda: TokenBucket(20, 100))
    """Pod creations of all pools' refills (settings.pool_pod_creates_per_second, _burst)."""
    background: list[Callable[[], Coroutine[Any, Any, None]]] = dataclasses.field(
        default_factory=list
    )
    """Long-running jobs started with the operator (pod index feed, sweeps, HTTP)."""
    _models: dict[tuple[object, ...], Model] = dataclasses.field(default_factory=dict)
    _tasks: list[asyncio.Task[None]] = dataclasses.field(default_factory=list)

    def start_background(self) -> None:
        for job in self.background:
            self._tasks.append(asyncio.create_task(job()))

    async def stop_background(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    def __copy__(self) -> OperatorContext:
        return self

    @functools.cached_property
    def model_endpoints(self) -> EndpointAllowlist:
        """The endpoints managed sessions may use (the admin's list and the default)."""
        return EndpointAllowlist(
            self.settings.model_endpoints_allowed, self.settings.default_model_base_url
        )

    def model_for(self, config: AgentConfig) -> Model:
        """One model client per endpoint, key and sampling settings, shared by sessions (an
        HTTP client per session would cost a connection pool each)."""
        extra_body = json.dumps(config.extra_body, sort_keys=True) if config.extra_body else None
        key = (
            config.base_url,
            config.api_key,
            config.model,
            config.temperature,
            config.top_p,
            config.seed,
            extra_body,
            config.record_tokens,  # changes every request's body (token fields)
            config.follow_redirects,
        )
        model = self._models.get(key)
        if model is None:
            from sandfleet.agent import openai_model  # openai loads on first managed session

            model = self._models[key] = openai_model(config)
        return model
