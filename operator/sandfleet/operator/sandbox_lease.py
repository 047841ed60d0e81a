"""A session's hold on one started, bound sandbox: claim or create it, wait, bind, report.

`lease_sandbox` is where the Scheduled, RuntimeReady and Ready conditions come from. It
also picks up a sandbox a previous operator process already set up (status.podName), and
adopts the pod the gateway claimed and bound for a session it created (adoption.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
from collections.abc import Awaitable, Callable, Sequence

from sandfleet.api import TOKEN_SECRET_KEY, ConditionType, EgressMode, EnvVar, Phase, Reason
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandboxLostError
from sandfleet.fleet.naming import pool_token_secret_name
from sandfleet.fleet.plans import SessionPlan
from sandfleet.fleet.pod_index import Pod, pod_ip, pool_of, runtime_address
from sandfleet.fleet.resources import ObjectRef
from sandfleet.logs import get_logger
from sandfleet.operator.adoption import claimed_pod, session_token
from sandfleet.operator.binding import bind_runtime
from sandfleet.operator.context import OperatorContext
from sandfleet.operator.laps import Laps
from sandfleet.operator.pod_watch import (
    PodProblem,
    PodWaiter,
    is_scheduled,
    ready_as_is,
    ready_for_binding,
)
from sandfleet.operator.provisioning import (
    claim_warm_sandbox,
    create_cold_sandbox,
    ensure_network_policy,
    ensure_session_token,
    read_secret_value,
)
from sandfleet.operator.session_status import SessionStatus

log = get_logger(__name__)

EventSink = Callable[[bool, str, str], None]


@dataclasses.dataclass(frozen=True, slots=True)
class PendingBind:
    """A bind that runs while a prepare does: it starts once the prepare sets `streaming`
    (its call is under way: the runtime holds `token_now`, the pool's, until then);
    `bound` is done when the runtime holds the session's token."""

    token_now: str
    streaming: asyncio.Event
    bound: asyncio.Future[None]


Prepare = Callable[[str, str, PendingBind | None], Awaitable[None]]
"""Runs on the started sandbox (address, the session's token, the bind still running or
None when it is bound) and is done before the session is Ready."""


@dataclasses.dataclass(eq=False)
class SandboxLease:
    pod_name: str
    address: str
    token: str
    waiter: PodWaiter
    _client: RuntimeClient | None = None

    async def until_idle(self, limit_s: int, check_interval_s: float) -> None:
        """Returns once the runtime reports no tool call for `limit_s` seconds."""
        if self._client is None:
            self._client = RuntimeClient(self.address, self.token, rpc_timeout_s=10)
        while True:
            try:
                idle_s = (await self._client.stats()).idle_s
            except SandboxLostError as exc:
                # The pod watch decides whether the sandbox is gone; a missed probe is not.
                log.info("idle_probe_failed", pod=self.pod_name, error=str(exc))
                idle_s = 0.0
            if idle_s >= limit_s:
                return
            await asyncio.sleep(min(check_interval_s, max(limit_s - idle_s, 0.5)))

    def close(self) -> None:
        self.waiter.close()
        if self._client is not None:
            client, self._client = self._client, None
            asyncio.ensure_future(client.close())  # noqa: RUF006 - fire and forget close


async def _pool_token(ctx: OperatorContext, namespace: str, pool: str) -> str:
    token = ctx.pool_tokens.get(namespace, pool)
    if token is None:
        name = pool_token_secret_name(pool)
        token = await read_secret_value(ctx.kube, namespace, name, TOKEN_SECRET_KEY)
        ctx.pool_tokens.remember(namespace, pool, token)
    return token


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseRequest:
    """What a session asks of its sandbox."""

    session: ObjectRef
    plan: SessionPlan
    env: Sequence[EnvVar]
    files: Sequence[tuple[str, bytes, int]]
    """(absolute sandbox path, content, mode) of each input file."""
    ready_phase: Phase
    """The session's phase once the sandbox serves: Ready (raw) or Running (managed)."""
    created: dt.datetime | None
    """The session's creationTimestamp, for the time-to-ready metric."""
    claimed_pod: str | None = None
    """The pod the gateway claimed and bound for the session (its claimed-pod annotation)."""
    token: str | None = None
    """The runtime token to bind (a resumed session keeps its own); None: a new one."""
    prepare: Prepare | None = None
    """A resume's restore: runs before Ready is reported."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Placement:
    """Where the session's sandbox is: its pod, the pool it came from, the session's token."""

    pod_name: str
    pool: str | None
    token: str
    claimed: bool
    """The pod came from a pool (it was started before, and holds a pool token)."""
    fresh_claim: bool = False
    """Claimed by this lease, so its runtime still holds the pool's token."""


async def lease_sandbox(
    ctx: OperatorContext, request: LeaseRequest, status: SessionStatus, event: EventSink
) -> SandboxLease:
    """A running sandbox bound to the session, which is then in `request.ready_phase`.
    Raises PodFailedError, BindError, TimeoutError (the pod never started) or PodLostError."""
    session = request.session
    laps = Laps()
    recording: asyncio.Future[bool] | None = None
    await ctx.pods.synced.wait()
    if status.get("podName"):  # set up (at least partly) by an earlier worker
        placement = await _earlier_placement(ctx, request, status)
        waiter = PodWaiter(ctx.pods, session.namespace, placement.pod_name, known=True)
        if status.phase in {Phase.READY, Phase.RUNNING}:
            pod = await waiter.until(ready_for_binding, timeout_s=30)
            address = runtime_address(_ip(pod))
            return SandboxLease(placement.pod_name, address, placement.token, waiter)
    elif request.claimed_pod is not None:
        return await _adopt(ctx, request, status, event, request.claimed_pod)
    else:
        placement = await _place(ctx, request, status)
        # The Starting record (pod, pool, Secret) is written while the pod is waited for,
        # bound and prepared: one API round trip less before Ready. A restarted operator
        # that finds no record is where it would be had the write not been sent yet; the
        # claimed pod carries the session's label either way.
        recording = asyncio.ensure_future(status.flush())
        waiter = PodWaiter(ctx.pods, session.namespace, placement.pod_name, known=placement.claimed)
    laps.lap("place")
    needs_bind = placement.claimed or bool(request.env) or bool(request.files)
    try:
        pod = await _until_started(ctx, waiter, status, event, needs_bind=needs_bind)
        laps.lap("start")
        address = runtime_address(_ip(pod))
        await _bind_and_prepare(ctx, request, placement, address, laps, bind=needs_bind)
    except BaseException:
        if recording is not None:  # written (or its fields left for the next write) first
            with contextlib.suppress(Exception):
                await recording
        raise
    if recording is not None:
        await recording  # Starting is written before Ready is
        laps.lap("recorded")
    _report_ready(
        ctx,
        status,
        pod,
        created=request.created,
        claimed=placement.claimed,
        bound=needs_bind,
        phase=request.ready_phase,
    )
    await status.flush()
    laps.lap("report")
    event(False, Reason.RUNTIME_BOUND if needs_bind else Reason.RUNTIME_SERVING, address)
    log.info(
        "session_ready",
        session=f"{session.namespace}/{session.name}",
        pod=placement.pod_name,
        warm=placement.claimed,
        bound=needs_bind,
        steps_ms=laps.ms,
    )
    return SandboxLease(placement.pod_name, address, placement.token, waiter)


async def _bind_and_prepare(
    ctx: OperatorContext,
    request: LeaseRequest,
    placement: _Placement,
    address: str,
    laps: Laps,
    *,
    bind: bool,
) -> None:
    prepare = request.prepare
    overlap = placement.fresh_claim and placement.pool is not None and not request.files
    if bind and prepare is not None and overlap:
        await _bind_while_preparing(ctx, request, placement, address, prepare)
        laps.lap("bind_and_prepare")
        return
    if bind:
        await _bind(ctx, request, placement, address)
        laps.lap("bind")
    if prepare is not None:
        await prepare(address, placement.token, None)
        laps.lap("prepare")


async def _bind_while_preparing(
    ctx: OperatorContext,
    request: LeaseRequest,
    placement: _Placement,
    address: str,
    prepare: Prepare,
) -> None:
    """A resume's restore starts on the freshly claimed sandbox with the pool's token, and
    the bind runs while it streams (the runtime checks a call's token when it starts).
    Not with input files: the bind uploads them, and a restore swapping the tree in at the
    same time would race them (the serial path restores after they are written)."""
    assert placement.pool is not None
    pool_token = await _pool_token(ctx, request.session.namespace, placement.pool)
    streaming = asyncio.Event()

    async def bind_once_streaming() -> None:
        await streaming.wait()
        await _bind(ctx, request, placement, address)

    bound = asyncio.ensure_future(bind_once_streaming())
    try:
        await prepare(address, placement.token, PendingBind(pool_token, streaming, bound))
        await bound  # a failed bind fails the lease, as in the serial path
    finally:
        if not bound.done():
            bound.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await bound


async def _earlier_placement(
    ctx: OperatorContext, request: LeaseRequest, status: SessionStatus
) -> _Placement:
    """The pod and token an earlier worker recorded in the session's status (a gateway's
    session has no token Secret: its token is derived again)."""
    session, pod_name = request.session, status.get("podName")
    secret = status.get("tokenSecretName")
    if request.claimed_pod is not None and not secret:
        token = session_token(ctx, session, pod_name)
    else:
        token = await read_secret_value(ctx.kube, session.namespace, secret, TOKEN_SECRET_KEY)
    pool = status.get("poolName")
    return _Placement(pod_name, pool, token, claimed=bool(pool))


async def _adopt(
    ctx: OperatorContext,
    request: LeaseRequest,
    status: SessionStatus,
    event: EventSink,
    pod_name: str,
) -> SandboxLease:
    """The gateway claimed and bound the pod already: own it, derive the token, and report
    the session ready in one status write, without binding again."""
    session = request.session
    token = session_token(ctx, session, pod_name)
    pod, _ = await asyncio.gather(
        claimed_pod(ctx, session, pod_name),
        # Adds the session's egress: the pool's policy already admits the gateway and the
        # operator and denies egress, so a session without egress needs none (two API
        # writes and a firewall update fewer per claim). Reclaimed with the session.
        asyncio.sleep(0)
        if request.plan.egress is EgressMode.NONE
        else ensure_network_policy(ctx, session, request.plan.egress),
    )
    waiter = PodWaiter(ctx.pods, session.namespace, pod_name, known=True)
    pool = pool_of(pod) or request.plan.pool
    status.set(podName=pod_name, poolName=pool)
    _report_ready(
        ctx,
        status,
        pod,
        created=request.created,
        claimed=True,
        bound=True,
        phase=request.ready_phase,
    )
    await status.flush()
    address = runtime_address(_ip(pod))
    event(False, Reason.RUNTIME_BOUND, f"adopted {pod_name}, claimed by the gateway")
    log.info("session_adopted", session=f"{session.namespace}/{session.name}", pod=pod_name)
    return SandboxLease(pod_name, address, token, waiter)


async def _place(ctx: OperatorContext, request: LeaseRequest, status: SessionStatus) -> _Placement:
    """The session's token and NetworkPolicy, then a warm pod claimed or a cold one created;
    set in the status with the Scheduled condition (Starting), for the caller to write."""
    session, plan = request.session, request.plan
    # The claim does not wait for the token and policy: the pool's policy already covers
    # the pod, and the token is needed only at the bind.
    (token, secret), _, claimed_pod = await asyncio.gather(
        ensure_session_token(ctx, session, request.token),
        ensure_network_policy(ctx, session, plan.egress),
        _claim(ctx, session, plan.pool),
    )
    pool: str | None
    if claimed_pod is not None:
        pod_name, pool = claimed_pod["metadata"]["name"], plan.pool
        reason, message = Reason.WARM_SANDBOX_CLAIMED, f"claimed {pod_name} from {pool}"
    else:
        pod_name = await create_cold_sandbox(
            ctx, session, plan.pod, secret, attempt=int(status.get("restarts") or 0)
        )
        pool = None
        reason, message = Reason.POD_CREATED, f"created pod {pod_name}"
    claimed = claimed_pod is not None
    status.set(podName=pod_name, poolName=pool, tokenSecretName=secret)
    status.set_phase(Phase.STARTING)
    status.condition(ConditionType.SCHEDULED, claimed, reason, message)
    return _Placement(pod_name, pool, token, claimed=claimed, fresh_claim=claimed)


async def _claim(ctx: OperatorContext, session: ObjectRef, pool: str | None) -> Pod | None:
    return None if pool is None else await claim_warm_sandbox(ctx, session, pool)


async def _until_started(
    ctx: OperatorContext,
    waiter: PodWaiter,
    status: SessionStatus,
    event: EventSink,
    *,
    needs_bind: bool,
) -> Pod:
    """The pod once its runtime can be dialled (bound next) or is ready as it is; each kind
    of trouble on the way (unschedulable, say) is reported once, as condition and event."""
    reported: set[Reason] = set()

    def on_problem(problem: PodProblem) -> None:
        if problem.reason not in reported:
            reported.add(problem.reason)
            status.condition(ConditionType.SCHEDULED, False, problem.reason, problem.message)
            event(True, problem.reason, problem.message)

    return await waiter.until(
        ready_for_binding if needs_bind else ready_as_is,
        timeout_s=ctx.settings.pod_start_timeout_seconds,
        on_problem=on_problem,
    )


async def _bind(
    ctx: OperatorContext, request: LeaseRequest, placement: _Placement, address: str
) -> None:
    """Give the runtime the session's token, env and files."""
    session = request.session
    candidates = [placement.token]
    if placement.pool:
        # After a fresh claim the runtime holds the pool's token; a worker picking up an
        # earlier one cannot know whether that bind went through, so it tries both.
        pool_token = await _pool_token(ctx, session.namespace, placement.pool)
        candidates = (
            [pool_token, placement.token]
            if placement.fresh_claim
            else [placement.token, pool_token]
        )
    await bind_runtime(
        address,
        candidates,
        placement.token,
        session=f"{session.namespace}/{session.name}",
        env=request.env,
        files=request.files,
        timeout_s=ctx.settings.runtime_bind_timeout_seconds,
    )


def _report_ready(
    ctx: OperatorContext,
    status: SessionStatus,
    pod: Pod,
    *,
    created: dt.datetime | None,
    claimed: bool,
    bound: bool,
    phase: Phase,
) -> None:
    now = status.now()
    if is_scheduled(pod):
        reason = Reason.WARM_SANDBOX_CLAIMED if claimed else Reason.POD_SCHEDULED
        status.condition(
            ConditionType.SCHEDULED, True, reason, f"on node {pod['spec']['nodeName']}"
        )
    runtime_reason = Reason.RUNTIME_BOUND if bound else Reason.RUNTIME_SERVING
    status.condition(ConditionType.RUNTIME_READY, True, runtime_reason, "")
    status.condition(ConditionType.READY, True, runtime_reason, "")
    status.set(
        podIP=pod_ip(pod),
        nodeName=(pod.get("spec") or {}).get("nodeName"),
        readyTime=status.timestamp(),
    )
    status.set_phase(phase)
    if created is not None:
        seconds = (now - created).total_seconds()
        ctx.metrics.session_ready(warm=claimed, seconds=max(seconds, 0.0))


def _ip(pod: Pod) -> str:
    ip = pod_ip(pod)
    assert ip is not None  # ready_for_binding / ready_as_is require an address
    return ip
