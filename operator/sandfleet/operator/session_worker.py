"""One session's life, from spec to reclaim: the level-based core behind the kopf daemon.

The worker derives everything from the session's spec and status plus the live pod index,
so it can start at any point: a fresh session, or one a previous operator process left
half-way (its sandbox claimed, its loop running). It is the session's only status writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from sandfleet.agent.config import AgentConfig
from sandfleet.agent.results import AgentResult, StopReason
from sandfleet.api import (
    ConditionType,
    Phase,
    Reason,
    ReclaimReason,
    SandboxSessionSpec,
)
from sandfleet.fleet.plans import PlanError, SessionPlan, parse_session_spec, plan_session
from sandfleet.fleet.resources import ObjectRef
from sandfleet.kube import resource_path
from sandfleet.logs import get_logger
from sandfleet.operator.adoption import claimed_pod_of
from sandfleet.operator.agent_driver import (
    ResumeImpossibleError,
    agent_config,
    drive_agent,
    set_aside_trajectory,
)
from sandfleet.operator.binding import BindError, resolve_files
from sandfleet.operator.context import OperatorContext
from sandfleet.operator.pod_watch import PodFailedError, PodLostError
from sandfleet.operator.reclaim import delete_session, delete_session_children
from sandfleet.operator.sandbox_lease import LeaseRequest, SandboxLease, lease_sandbox
from sandfleet.operator.session_status import SessionStatus
from sandfleet.operator.session_suspend import Resume, SessionSuspender
from sandfleet.operator.suspension import TransitionError

log = get_logger(__name__)

_STOP_REASONS = {
    StopReason.SUBMITTED: (Phase.SUCCEEDED, Reason.SUBMITTED),
    StopReason.MAX_TURNS: (Phase.FAILED, Reason.MAX_TURNS_REACHED),
    StopReason.MODEL_ERROR: (Phase.FAILED, Reason.MODEL_ERROR),
    StopReason.CONTEXT_EXCEEDED: (Phase.FAILED, Reason.CONTEXT_EXCEEDED),
    StopReason.NO_TOOL_CALL: (Phase.FAILED, Reason.NO_TOOL_CALL),
    StopReason.SANDBOX_LOST: (Phase.FAILED, Reason.SANDBOX_LOST),
    StopReason.CANCELLED: (Phase.FAILED, Reason.CANCELLED),
}


def outcome_of(result: AgentResult) -> tuple[Phase, Reason]:
    """Phase and Completed reason of a finished run: only a submitted answer succeeds."""
    return _STOP_REASONS[result.stop_reason]


@dataclasses.dataclass(frozen=True, slots=True)
class Ending:
    """How a session ends: its final phase, the Completed condition's reason and message,
    and why its sandbox is reclaimed (None: no reclaim)."""

    phase: Phase
    reason: Reason
    message: str
    reclaim: ReclaimReason | None = ReclaimReason.COMPLETED


class SessionWorker:
    def __init__(self, ctx: OperatorContext, body: Mapping[str, Any]) -> None:
        meta = body["metadata"]
        self._ctx = ctx
        self._body = body
        self.ref = ObjectRef.of(body)
        self.status = SessionStatus(
            ctx.kube,
            self.ref.namespace,
            self.ref.name,
            generation=int(meta.get("generation", 1)),
            current=dict(body.get("status") or {}),
            metrics=ctx.metrics,
            clock=ctx.clock,
        )
        self._log = log.bind(session=f"{self.ref.namespace}/{self.ref.name}")
        self._suspender = SessionSuspender(ctx, body, self.ref, self.status, self._event)
        created = meta.get("creationTimestamp")
        self._created = dt.datetime.fromisoformat(created) if created else None

    # --- entry ---------------------------------------------------------------------------
    async def run(self) -> None:
        try:
            await self._run()
        finally:
            self.status.forget()

    async def _run(self) -> None:
        spec: SandboxSessionSpec | None = None
        plan: SessionPlan | None = None
        if self.status.phase is None or not self.status.phase.finished:
            try:
                spec = parse_session_spec(dict(self._body.get("spec") or {}))
                plan = await plan_session(self._ctx.kube, self.ref.namespace, spec)
                await self._serve(spec, plan)
            except PlanError as exc:
                await self._finish(Ending(Phase.FAILED, exc.reason, str(exc)))
        await self._after_finish(plan)

    async def _serve(self, spec: SandboxSessionSpec, plan: SessionPlan) -> None:
        """Returns once the session has ended (its final phase written)."""
        if self.status.phase is None:
            # Written with the next step's patch (a sandbox is asked for at once): one API
            # call per session fewer.
            self.status.set_phase(Phase.PENDING)
            self.status.set(startTime=self.status.timestamp())
        deadline = self._deadline(plan)
        try:
            async with asyncio.timeout_at(deadline):
                await self._attempts(spec, plan)
        except TimeoutError:
            if deadline is None or asyncio.get_running_loop().time() < deadline:
                raise
            message = f"activeDeadlineSeconds ({plan.lifecycle.active_deadline_seconds}) passed"
            await self._finish(
                Ending(Phase.EXPIRED, Reason.DEADLINE_EXCEEDED, message, ReclaimReason.DEADLINE)
            )

    def _deadline(self, plan: SessionPlan) -> float | None:
        """The activeDeadlineSeconds deadline in event-loop time (None: no deadline)."""
        seconds = plan.lifecycle.active_deadline_seconds
        if seconds is None:
            return None
        recorded = self.status.get("startTime")
        started = dt.datetime.fromisoformat(recorded) if recorded else self.status.now()
        left = (started - self.status.now()).total_seconds() + seconds
        return asyncio.get_running_loop().time() + left

    # --- the sandbox, as many times as the spec allows -----------------------------------
    async def _attempts(self, spec: SandboxSessionSpec, plan: SessionPlan) -> None:
        """One sandbox after another until the session ends: a lost one is replaced while
        the spec's sandboxLostRetries allow."""
        await self._suspender.roll_back_interrupted_resume()
        while True:
            if self.status.phase == Phase.SUSPENDED and not await self._suspender.stay_suspended(
                plan
            ):
                return  # deleted: its suspendedTTLSeconds ran out
            try:
                if not await self._one_sandbox(spec, plan):
                    return
            except PodLostError as exc:
                restarts = int(self.status.get("restarts") or 0)
                if spec.agent is None or restarts >= plan.lifecycle.sandbox_lost_retries:
                    lost = Ending(Phase.FAILED, Reason.SANDBOX_LOST, str(exc), ReclaimReason.LOST)
                    await self._finish(lost)
                    return
                self._log.warning("sandbox_lost_retrying", error=str(exc), restart=restarts + 1)
                await self._drop_lost_pod()
                set_aside_trajectory(self._ctx, self.ref, restarts + 1)
                self.status.set(restarts=restarts + 1, podName=None, podIP=None, poolName=None)
                self.status.set_phase(Phase.PENDING)
                self.status.condition(ConditionType.READY, False, Reason.SANDBOX_LOST, str(exc))
                await self.status.flush()

    async def _one_sandbox(self, spec: SandboxSessionSpec, plan: SessionPlan) -> bool:
        """Lease a sandbox and serve the session from it to its end (False) or until it is
        suspended (True); raises PodLostError when the sandbox goes away first."""
        resuming = self.status.phase == Phase.RUNNING
        resume: Resume | None = None
        if self.status.phase == Phase.SUSPENDED:
            try:
                resume = await self._suspender.resume()
            except TransitionError as exc:
                self._suspender.resume_failed(exc)
                await self._finish(Ending(Phase.FAILED, exc.reason, str(exc), None))
                return False
        # The endpoint and key are checked before any sandbox is made for the session.
        config = (
            await agent_config(self._ctx, self.ref.namespace, spec.agent)
            if spec.agent is not None
            else None
        )
        files = await resolve_files(self._ctx.kube, self.ref.namespace, _workdir(plan), spec.files)
        request = LeaseRequest(
            session=self.ref,
            plan=plan,
            env=spec.env,
            files=files,
            ready_phase=Phase.READY if spec.agent is None else Phase.RUNNING,
            created=self._created,
            claimed_pod=(
                None if resume else claimed_pod_of(self._body["metadata"].get("annotations"))
            ),
            token=resume.token if resume else None,
            prepare=resume.prepare if resume else None,
        )
        lease = await self._lease(request)
        if isinstance(lease, Ending):
            await self._finish(lease)
            return False
        try:
            if self.status.get("snapshot"):  # resumed (or resumed before a restart)
                await self._suspender.resumed(resume)
            if config is None:
                ending = await self._serve_raw(lease, plan)
            else:
                ending = await self._serve_agent(spec, config, lease, plan, resuming=resuming)
            if ending is None:
                return True
            await self._finish(ending)
            return False
        finally:
            lease.close()

    async def _lease(self, request: LeaseRequest) -> SandboxLease | Ending:
        """The sandbox, or how the session ends when none could be started."""
        try:
            return await lease_sandbox(self._ctx, request, self.status, self._event)
        except PodFailedError as exc:
            return Ending(Phase.FAILED, exc.problem.reason, str(exc), ReclaimReason.LOST)
        except BindError as exc:
            return Ending(Phase.FAILED, Reason.BIND_FAILED, str(exc), ReclaimReason.LOST)
        except TimeoutError as exc:
            return Ending(Phase.FAILED, Reason.POD_PENDING, str(exc), ReclaimReason.LOST)
        except TransitionError as exc:  # the restore before Ready; the snapshot stays
            self._suspender.resume_failed(exc)
            return Ending(Phase.FAILED, exc.reason, str(exc), ReclaimReason.LOST)

    async def _serve_raw(self, lease: SandboxLease, plan: SessionPlan) -> Ending | None:
        """Serve until the sandbox is lost (raises), idle (an Ending) or suspended (None)."""
        idle_limit = plan.lifecycle.idle_timeout_seconds
        while True:
            idle = await self._raw_wait(lease, idle_limit)
            message = f"no tool call for {idle_limit}s (idleTimeoutSeconds)"
            if idle and plan.lifecycle.idle_action != "Suspend":
                return Ending(Phase.EXPIRED, Reason.IDLE_TIMEOUT, message, ReclaimReason.IDLE)
            why = f"idle ({message})" if idle else "spec.suspend"
            if await self._suspender.suspend(lease, plan, why=why):
                return None
            if idle:  # not suspended (the condition says why): wait a while before again
                await asyncio.sleep(min(float(idle_limit or 60), 60.0))

    async def _raw_wait(self, lease: SandboxLease, idle_limit: int | None) -> bool:
        """Until idle (True) or a suspend is asked for (False); raises PodLostError."""
        lost = asyncio.ensure_future(lease.waiter.until_lost())
        idle = asyncio.ensure_future(
            lease.until_idle(idle_limit, self._ctx.settings.idle_check_interval_seconds)
            if idle_limit
            else asyncio.Event().wait()
        )
        asked = asyncio.ensure_future(self._suspender.until_requested())
        try:
            done, _ = await asyncio.wait({lost, idle, asked}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (lost, idle, asked):
                task.cancel()
        if lost in done:
            raise PodLostError(lost.result())
        return idle in done

    async def _serve_agent(
        self,
        spec: SandboxSessionSpec,
        config: AgentConfig,
        lease: SandboxLease,
        plan: SessionPlan,
        *,
        resuming: bool,
    ) -> Ending:
        assert spec.agent is not None
        agent = asyncio.ensure_future(
            drive_agent(
                self._ctx,
                self.ref,
                spec.agent,
                config,
                workdir=_workdir(plan),
                address=lease.address,
                token=lease.token,
                status=self.status,
                resuming=resuming,
            )
        )
        lost = asyncio.ensure_future(lease.waiter.until_lost())
        refusals = asyncio.ensure_future(self._suspender.refuse_while_managed())
        try:
            done, _ = await asyncio.wait({agent, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            refusals.cancel()
            lost.cancel()
            if not agent.done():
                agent.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await agent
        if agent not in done:
            raise PodLostError(lost.result())
        try:
            result = agent.result()
        except ResumeImpossibleError as exc:
            return Ending(
                Phase.FAILED, Reason.OPERATOR_RESTARTED, str(exc), ReclaimReason.COMPLETED
            )
        if result.stop_reason == StopReason.SANDBOX_LOST:
            raise PodLostError(result.error or "the runtime became unreachable")
        phase, reason = outcome_of(result)
        self.status.agent_progress(
            turns=result.turns,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            stop_reason=result.stop_reason.value,
            result=result.answer,
            answer_from_file=result.answer_from_file,
            error=result.error,
        )
        message = result.error or f"{result.stop_reason.value} after {result.turns} turns"
        return Ending(phase, reason, message, ReclaimReason.COMPLETED)

    # --- endings ---------------------------------------------------------------------------
    async def _finish(self, ending: Ending) -> None:
        """Write the final phase, then reclaim the sandbox."""
        phase, reason, message = ending.phase, ending.reason, ending.message
        self.status.set_phase(phase)
        self.status.condition(ConditionType.COMPLETED, True, reason, message)
        self.status.condition(ConditionType.READY, False, reason, message)
        self.status.set(completionTime=self.status.timestamp())
        if ending.reclaim is not None:
            self.status.set(reclaimReason=ending.reclaim.value)
        await self.status.flush()
        self._event(phase != Phase.SUCCEEDED, reason, message)
        self._log.info("session_finished", phase=phase, reason=reason, message=message)
        if ending.reclaim is not None:
            await self._reclaim(ending.reclaim)

    async def _reclaim(self, reason: ReclaimReason) -> None:
        await delete_session_children(
            self._ctx.kube,
            self._ctx.metrics,
            self.ref.namespace,
            self.ref.name,
            pod=self.status.get("podName"),
            reason=reason,
        )

    async def _drop_lost_pod(self) -> None:
        """Before a retry: the lost pod goes; its Secret and NetworkPolicy stay for the next."""
        pod = self.status.get("podName")
        if pod:
            await self._ctx.kube.delete(
                resource_path("v1", "pods", self.ref.namespace, pod), grace_period_s=0
            )
            self._ctx.metrics.reclaimed(ReclaimReason.LOST)

    async def _after_finish(self, plan: SessionPlan | None) -> None:
        """A finished session: make sure nothing is left running, then wait for its TTL."""
        pod = self.status.get("podName")
        if pod and self._ctx.pods.get(self.ref.namespace, pod) is not None:
            await self._reclaim(ReclaimReason.COMPLETED)
        ttl = (
            plan.lifecycle.ttl_seconds_after_finished if plan is not None else _raw_ttl(self._body)
        )
        if ttl is None:
            return
        finished = dt.datetime.fromisoformat(str(self.status.get("completionTime")))
        await asyncio.sleep(max(0.0, (finished - self.status.now()).total_seconds() + ttl))
        self._log.info("session_ttl_expired", ttl_s=ttl)
        await delete_session(self._ctx.kube, self.ref.namespace, self.ref.name, self.ref.uid)
        self._ctx.metrics.reclaimed(ReclaimReason.TTL)

    def _event(self, warning: bool, reason: str, message: str) -> None:
        self._ctx.events(self._body, warning=warning, reason=reason, message=message)


def _workdir(plan: SessionPlan) -> str:
    return plan.pod.workdir if plan.pod is not None else "/testbed"


def _raw_ttl(body: Mapping[str, Any]) -> int | None:
    """The TTL of a session whose spec could not be planned (read straight from the body)."""
    value = ((body.get("spec") or {}).get("lifecycle") or {}).get("ttlSecondsAfterFinished")
    return int(value) if isinstance(value, int) else None
