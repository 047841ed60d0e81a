"""A raw session's suspend and resume steps, with their status writes, for the SessionWorker.

Each step is recorded before the next is taken, so an operator restarted at any point picks
up from the status: a snapshot is stored and verified before the phase says Suspended; the
phase says Suspended (with the pod still named) before the pod, Secret and NetworkPolicy go;
the pod's name is cleared only once they are gone. A Suspended session found with a pod name
is one whose release was interrupted: it is released again (deletes tolerate "gone").
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from sandfleet.api import (
    API_VERSION,
    SESSION_PLURAL,
    Annotation,
    ConditionType,
    Phase,
    Reason,
    ReclaimReason,
)
from sandfleet.fleet.plans import SessionPlan
from sandfleet.fleet.resources import ObjectRef
from sandfleet.kube import resource_path
from sandfleet.logs import get_logger
from sandfleet.operator.context import OperatorContext
from sandfleet.operator.laps import Laps
from sandfleet.operator.reclaim import delete_session, delete_session_children
from sandfleet.operator.recycling import recycle_sandbox
from sandfleet.operator.sandbox_lease import EventSink, PendingBind, Prepare, SandboxLease
from sandfleet.operator.session_status import SessionStatus
from sandfleet.operator.suspension import (
    TransitionError,
    drop_snapshot,
    restore_snapshot,
    save_snapshot,
    saved_state,
)

log = get_logger(__name__)

POLL_S = 0.25
"""How often the pod index is looked at for a cold resume's released pod (memory only)."""
NOT_KEPT = "running processes were not kept"
RELEASED_POD_WAIT_S = 60.0


@dataclasses.dataclass(frozen=True, slots=True)
class Resume:
    """What a resume binds (the saved token) and restores before Ready."""

    token: str
    prepare: Prepare
    started: float


class SessionSuspender:
    def __init__(
        self,
        ctx: OperatorContext,
        body: Mapping[str, Any],
        ref: ObjectRef,
        status: SessionStatus,
        event: EventSink,
    ) -> None:
        self._ctx = ctx
        self._body = body  # kopf's live view: spec.suspend is read from it as it changes
        self._ref = ref
        self._status = status
        self._event = event
        self._refused_generation: int | None = None
        self._released_pod: str | None = None
        """The pod this worker deleted at suspend: a cold resume's pod takes its name."""
        self._spec_generation = 0
        """The generation of this operator's own spec.suspend patch (an idle suspend): the
        live body is not read for a resume before the watch has brought it."""
        self._log = log.bind(session=f"{ref.namespace}/{ref.name}")

    # --- requests --------------------------------------------------------------------------
    def _generation(self) -> int:
        return int(self._body["metadata"].get("generation", 1))

    def wants_suspend(self) -> bool:
        """spec.suspend is true, and not at the generation a suspend was already refused."""
        asked = bool((self._body.get("spec") or {}).get("suspend"))
        return asked and self._generation() != self._refused_generation

    async def until_requested(self) -> None:
        await self._ctx.session_signals.until(self._ref.uid, self.wants_suspend)

    async def refuse_while_managed(self) -> None:
        """A managed session's agent loop runs in the operator and cannot be suspended: each
        spec.suspend request gets a condition saying so (once per generation)."""
        while True:
            await self.until_requested()
            self._refused_generation = self._generation()
            message = "a managed session (spec.agent) cannot be suspended; it runs on"
            self._status.condition(
                ConditionType.SUSPENDED, False, Reason.SUSPEND_NOT_SUPPORTED, message
            )
            await self._status.flush()
            self._event(True, Reason.SUSPEND_NOT_SUPPORTED, message)
            self._ctx.metrics.transition_failed("suspend", "not_supported")

    # --- suspend ---------------------------------------------------------------------------
    async def suspend(self, lease: SandboxLease, plan: SessionPlan, *, why: str) -> bool:
        """Snapshot, record, release; False (the sandbox runs on, a condition says why)
        when the snapshot could not be stored."""
        started = asyncio.get_running_loop().time()
        laps = Laps()
        workdir = plan.pod.workdir if plan.pod is not None else "/testbed"
        try:
            stored = await save_snapshot(self._ctx, self._ref, lease.address, lease.token, workdir)
        except TransitionError as exc:
            self._refused_generation = self._generation()
            # The refused generation in the condition: whoever asked (the gateway's Suspend)
            # tells this answer from an earlier refusal with the same message.
            self._status.condition(
                ConditionType.SUSPENDED, False, exc.reason, str(exc),
                generation=self._refused_generation,
            )  # fmt: skip
            await self._status.flush()
            self._event(True, exc.reason, str(exc))
            self._ctx.metrics.transition_failed("suspend", exc.metric)
            self._log.warning("suspend_failed", reason=exc.reason, error=str(exc))
            return False
        laps.lap("snapshot")
        if not self.wants_suspend():
            # An idle suspend: spec.suspend true records it, so the session stays suspended
            # (across operator restarts too) until someone sets it false again.
            await self._mark_suspended()
        when = dt.datetime.fromtimestamp(stored.stored_at, dt.UTC)
        message = f"{why}: snapshot of {stored.size_bytes} bytes stored; {NOT_KEPT}"
        self._status.set(
            snapshot={
                "sizeBytes": stored.size_bytes,
                "sha256": stored.sha256,
                "suspendedTime": when.isoformat().replace("+00:00", "Z"),
                "processesKept": False,
            }
        )
        self._status.set_phase(Phase.SUSPENDED)
        self._status.condition(ConditionType.SUSPENDED, True, Reason.SUSPENDED, message)
        self._status.condition(ConditionType.READY, False, Reason.SUSPENDED, message)
        await self._status.flush()
        laps.lap("record")
        await self._release(lease.token)
        laps.lap("release")
        elapsed = asyncio.get_running_loop().time() - started
        self._ctx.metrics.transition("suspend", elapsed)
        self._event(False, Reason.SUSPENDED, message)
        self._log.info(
            "session_suspended", bytes=stored.size_bytes, seconds=round(elapsed, 3),
            steps_ms=laps.ms,
        )  # fmt: skip
        return True

    async def _mark_suspended(self) -> None:
        path = resource_path(API_VERSION, SESSION_PLURAL, self._ref.namespace, self._ref.name)
        patched = await self._ctx.kube.patch(path, {"spec": {"suspend": True}})
        self._spec_generation = int(patched["metadata"].get("generation", 0))

    def _resume_asked(self) -> bool:
        if self._generation() < self._spec_generation:
            return False  # our own suspend patch has not reached the live body yet
        return not (self._body.get("spec") or {}).get("suspend")

    async def _release(self, token: str | None) -> None:
        """The pod back to its pool (when it recycles) or deleted, the Secret and the
        NetworkPolicy deleted; then the status stops naming them."""
        ns, name = self._ref.namespace, self._ref.name
        pod, pool = self._status.get("podName"), self._status.get("poolName")
        if pod and pool and token and await recycle_sandbox(self._ctx, ns, pod, pool, token):
            pod = None
        await delete_session_children(
            self._ctx.kube, self._ctx.metrics, ns, name, pod=pod, reason=ReclaimReason.SUSPENDED
        )
        self._released_pod = None if pool else pod  # a pool pod's successor has another name
        annotations = self._body["metadata"].get("annotations") or {}
        if annotations.get(Annotation.CLAIMED_POD):
            # A resumed session is the operator's: its token lives in a Secret, not derived
            # from the pod the gateway once claimed.
            path = resource_path(API_VERSION, SESSION_PLURAL, ns, name)
            patch = {"metadata": {"annotations": {Annotation.CLAIMED_POD: None}}}
            await self._ctx.kube.patch(path, patch)
        self._status.set(
            podName=None,
            podIP=None,
            nodeName=None,
            poolName=None,
            tokenSecretName=None,
            reclaimReason=ReclaimReason.SUSPENDED.value,
        )
        await self._status.flush()

    # --- suspended -------------------------------------------------------------------------
    async def roll_back_interrupted_resume(self) -> None:
        """A resume an earlier operator did not finish (the status still records the snapshot,
        the phase says a pod is being placed or started): back to Suspended, so the pod it
        took is released and the resume starts over from the snapshot. Served as it is, that
        pod would be Ready without the restored files, and the snapshot then deleted."""
        phase = self._status.phase
        if self._status.get("snapshot") and phase in (Phase.PENDING, Phase.STARTING):
            self._log.warning("interrupted_resume_rolled_back", phase=str(phase))
            self._status.set_phase(Phase.SUSPENDED)
            await self._status.flush()

    async def stay_suspended(self, plan: SessionPlan) -> bool:
        """Wait while Suspended; True when a resume is asked for, False when the session
        was deleted (suspendedTTLSeconds ran out)."""
        if self._status.get("podName"):
            await self._release(None)  # a release an earlier operator did not finish
        snapshot = self._status.get("snapshot") or {}
        size = int(snapshot.get("sizeBytes") or 0)
        ttl = plan.lifecycle.suspended_ttl_seconds
        since = snapshot.get("suspendedTime")
        deadline = None
        if ttl is not None and since:
            left = (dt.datetime.fromisoformat(since) - self._status.now()).total_seconds() + ttl
            deadline = asyncio.get_running_loop().time() + left
        self._ctx.metrics.snapshot_held(self._ref.namespace, size, held=True)
        try:
            signals = self._ctx.session_signals
            if await signals.until(self._ref.uid, self._resume_asked, deadline=deadline):
                return True
            self._log.info("suspended_ttl_expired", ttl_s=ttl)
            await delete_session(self._ctx.kube, self._ref.namespace, self._ref.name, self._ref.uid)
            return False
        finally:
            self._ctx.metrics.snapshot_held(self._ref.namespace, size, held=False)

    # --- resume ----------------------------------------------------------------------------
    async def resume(self) -> Resume:
        """The saved token and the restore step; raises TransitionError (nothing taken)."""
        started = asyncio.get_running_loop().time()
        snapshot = dict(self._status.get("snapshot") or {})
        if not snapshot:
            raise TransitionError(
                Reason.SNAPSHOT_CORRUPT, "corrupt", "the session records no snapshot to resume"
            )
        self._status.condition(ConditionType.SUSPENDED, False, Reason.RESUMED, "resuming")
        state = await saved_state(self._ctx, self._ref, snapshot)
        self._log.info(
            "resume_started",
            state_read_ms=round((asyncio.get_running_loop().time() - started) * 1000, 1),
        )
        await self._until_released_pod_gone()

        async def prepare(address: str, token: str, pending: PendingBind | None) -> None:
            await restore_snapshot(self._ctx, self._ref, snapshot, address, token, pending=pending)

        return Resume(str(state["token"]), prepare, started)

    async def _until_released_pod_gone(self) -> None:
        """A cold pod is named after its session: the deleted one must be gone from the
        API before the resume creates its successor, or the create would find it."""
        pod, self._released_pod = self._released_pod, None
        deadline = asyncio.get_running_loop().time() + RELEASED_POD_WAIT_S
        while pod and self._ctx.pods.get(self._ref.namespace, pod) is not None:
            if asyncio.get_running_loop().time() > deadline:
                self._log.warning("released_pod_lingers", pod=pod)
                return
            await asyncio.sleep(POLL_S)

    async def resumed(self, resume: Resume | None) -> None:
        """The session is Ready again: its snapshot goes (the sandbox holds the state now)."""
        # The resume's latency ends at Ready (written just before): what comes after is
        # clean-up no client waits for.
        elapsed = asyncio.get_running_loop().time() - resume.started if resume else 0.0
        await drop_snapshot(self._ctx, self._ref)
        message = f"resumed; {NOT_KEPT}"
        self._status.set(snapshot=None, reclaimReason=None)
        self._status.condition(ConditionType.SUSPENDED, False, Reason.RESUMED, message)
        await self._status.flush()
        if resume is not None:
            self._ctx.metrics.transition("resume", elapsed)
        self._event(False, Reason.RESUMED, message)
        self._log.info("session_resumed", seconds=round(elapsed, 3))

    def resume_failed(self, exc: TransitionError) -> None:
        self._ctx.metrics.transition_failed("resume", exc.metric)
        self._log.warning("resume_failed", reason=exc.reason, error=str(exc))
