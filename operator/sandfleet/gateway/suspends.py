"""Suspend through the gateway: spec.suspend true on a raw session, then the operator's answer.

The operator does the suspend (snapshot, verify, give the pod back: operator.session_suspend);
this asks for it and waits, bounded, for either phase Suspended with the pod given back (the
answer: status.snapshot and the Suspended condition's message) or the Suspended condition
refusing this request
(status False, a failure reason, observedGeneration at least the request's generation: an
earlier refusal with the same message is not mistaken for this one's answer). The operator
tries a refused request again only when the spec changes, so asking again after a refusal
sets spec.suspend false, then true: a new generation.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import grpc

from sandfleet.api import API_VERSION, SESSION_PLURAL, ConditionType, Phase, Reason
from sandfleet.errors import SandfleetError
from sandfleet.fleet.sessions import SessionClient, SessionGoneError, SessionWaitTimeoutError
from sandfleet.fleet.status import SessionState, SnapshotInfo
from sandfleet.kube import KubeClient, NotFoundError, resource_path
from sandfleet.logs import get_logger

log = get_logger(__name__)

SUSPEND_WAIT_S = 300.0
"""How long a Suspend waits for the session to be Suspended when the request names no
timeout: the snapshot of a large tree is written and verified before the phase changes."""

REFUSALS = {
    Reason.SNAPSHOT_TOO_LARGE: grpc.StatusCode.FAILED_PRECONDITION,
    Reason.SUSPEND_NOT_SUPPORTED: grpc.StatusCode.FAILED_PRECONDITION,
    Reason.SNAPSHOT_STORE_UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Reason.SUSPEND_FAILED: grpc.StatusCode.UNAVAILABLE,
}
"""The Suspended condition's reasons that refuse a suspend (the sandbox runs on), and the
status each gives the caller."""


class SuspendRefusedError(SandfleetError):
    """The session is not suspended; `reason` (a condition reason, or "") goes to the caller
    in the `x-sandfleet-reason` trailing metadata."""

    def __init__(self, code: grpc.StatusCode, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True)
class Suspended:
    """A Suspended session's snapshot record, as the Suspend call answers it."""

    namespace: str
    name: str
    snapshot: SnapshotInfo
    message: str
    """The Suspended condition's message (what was stored; processes were not kept)."""


def refusal(state: SessionState, generation: int) -> tuple[Reason, str] | None:
    """The reason and message with which the operator refused a suspend asked for at
    `generation` (or later), or None when it has not (yet)."""
    condition = state.condition(ConditionType.SUSPENDED)
    if condition is None or condition.is_true or condition.observed_generation < generation:
        return None
    try:
        reason = Reason(condition.reason)
    except ValueError:
        return None
    return (reason, condition.message) if reason in REFUSALS else None


def suspended(state: SessionState) -> Suspended:
    condition = state.condition(ConditionType.SUSPENDED)
    snapshot = state.snapshot or SnapshotInfo(size_bytes=0, sha256="", suspended_time=None)
    message = condition.message if condition is not None and condition.is_true else ""
    return Suspended(state.namespace, state.name, snapshot, message)


async def suspend_session(
    kube: KubeClient, namespace: str, name: str, timeout_s: float
) -> Suspended:
    """Ask the operator to suspend the session and wait (at most `timeout_s`) for the answer;
    SuspendRefusedError says why it is not suspended."""
    sessions = SessionClient(kube, namespace)
    reference = f"{namespace}/{name}"
    try:
        body = await kube.get(sessions.path(name))
    except NotFoundError:
        raise SuspendRefusedError(
            grpc.StatusCode.NOT_FOUND, f"no SandboxSession {reference}"
        ) from None
    state = SessionState.from_object(body)
    _check_suspendable(state, body)
    if _released(state) and state.suspend_asked:
        return suspended(state)
    path = resource_path(API_VERSION, SESSION_PLURAL, namespace, name)
    if state.suspend_asked and refusal(state, state.generation) is not None:
        await kube.patch(path, {"spec": {"suspend": False}})  # a new generation: tried again
    asked = SessionState.from_object(await kube.patch(path, {"spec": {"suspend": True}}))
    log.info("suspend_requested", session=reference, generation=asked.generation)
    try:
        final = await sessions.wait_until(
            name,
            lambda s: _released(s) or s.finished or refusal(s, asked.generation) is not None,
            timeout_s,
            since=asked,
        )
    except SessionGoneError as exc:
        raise SuspendRefusedError(grpc.StatusCode.NOT_FOUND, str(exc)) from None
    except SessionWaitTimeoutError as exc:
        raise SuspendRefusedError(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"{reference} is not suspended after {timeout_s:g}s ({_summary(exc.state)}): the "
            "operator may still finish it; call Suspend again to wait for it",
        ) from None
    if _released(final):
        return suspended(final)
    refused = refusal(final, asked.generation)
    if refused is None:  # it ended meanwhile
        raise SuspendRefusedError(
            grpc.StatusCode.FAILED_PRECONDITION, f"{final.summary()}: nothing to suspend"
        )
    reason, message = refused
    raise SuspendRefusedError(
        REFUSALS[reason], f"{reference} was not suspended and runs on: {message}", reason.value
    )


def _released(state: SessionState) -> bool:
    """Suspended, and its pod given back: the phase is written first, while the pod is
    still named (the operator's step 3), the pod's name cleared once it is gone (step 4)."""
    return state.phase == Phase.SUSPENDED and state.pod_name is None


def _check_suspendable(state: SessionState, body: dict[str, Any]) -> None:
    if (body.get("spec") or {}).get("agent") is not None:
        raise SuspendRefusedError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"{state.reference} is a managed session (spec.agent): its agent loop runs in the "
            "operator and cannot be suspended",
            Reason.SUSPEND_NOT_SUPPORTED.value,
        )
    if state.finished or state.deleting:
        ended = "is being deleted" if state.deleting else f"has ended (phase {state.phase})"
        raise SuspendRefusedError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"{state.reference} {ended}: there is nothing to suspend",
        )


def _summary(state: SessionState | None) -> str:
    return state.summary() if state is not None else "no state seen"
