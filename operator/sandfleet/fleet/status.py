"""Typed, read-only views of a SandboxSession object: phase, conditions, pod, agent progress."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from sandfleet.api import ConditionType, Phase

# Conditions in the order that best explains a session that is stuck or failed: the end
# first, then the step closest to it.
_EXPLAINING_ORDER = (
    ConditionType.COMPLETED,
    ConditionType.READY,
    ConditionType.RUNTIME_READY,
    ConditionType.SCHEDULED,
)


@dataclasses.dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    """"True", "False" or "Unknown", as Kubernetes writes it."""
    reason: str = ""
    message: str = ""
    observed_generation: int = 0
    """The spec generation the condition answers (0: not said)."""

    @property
    def is_true(self) -> bool:
        return self.status == "True"

    def describe(self) -> str:
        """ "Reason: message", or whichever of the two is there."""
        if self.reason and self.message:
            return f"{self.reason}: {self.message}"
        return self.reason or self.message or f"{self.type}={self.status}"


@dataclasses.dataclass(frozen=True, slots=True)
class AgentProgress:
    """status.agent of a managed session (written at a bounded rate, not every turn)."""

    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    stop_reason: str | None = None
    result: str | None = None
    """The answer (at most 4 KiB; the trajectory has the rest)."""
    answer_from_file: bool | None = None
    """Whether `result` came from the answer file; None from an operator that does not say."""
    error: str | None = None

    @classmethod
    def from_status(cls, agent: Mapping[str, Any]) -> AgentProgress:
        return cls(
            turns=_int(agent.get("turns")),
            prompt_tokens=_int(agent.get("promptTokens")),
            completion_tokens=_int(agent.get("completionTokens")),
            stop_reason=_text(agent.get("stopReason")),
            result=_text(agent.get("result")),
            answer_from_file=_flag(agent.get("answerFromFile")),
            error=_text(agent.get("error")),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """status.snapshot of a Suspended session: the verified snapshot it resumes from."""

    size_bytes: int
    sha256: str
    suspended_time: dt.datetime | None
    processes_kept: bool = False

    @classmethod
    def from_status(cls, snapshot: Mapping[str, Any]) -> SnapshotInfo:
        return cls(
            size_bytes=_int(snapshot.get("sizeBytes")),
            sha256=str(snapshot.get("sha256") or ""),
            suspended_time=_time(snapshot.get("suspendedTime")),
            processes_kept=bool(snapshot.get("processesKept")),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class SessionState:
    """What a SandboxSession says about itself at one resourceVersion."""

    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    deleting: bool = False
    """metadata.deletionTimestamp is set: the operator is tearing the session down."""
    phase: Phase | None = None
    """None until the operator has seen the session (or for a phase this SDK does not know)."""
    conditions: tuple[Condition, ...] = ()
    pod_name: str | None = None
    pod_ip: str | None = None
    node_name: str | None = None
    pool_name: str | None = None
    token_secret_name: str | None = None
    trajectory: str | None = None
    reclaim_reason: str | None = None
    agent: AgentProgress | None = None
    start_time: dt.datetime | None = None
    ready_time: dt.datetime | None = None
    completion_time: dt.datetime | None = None
    generation: int = 0
    """metadata.generation: bumped by every spec change."""
    suspend_asked: bool = False
    """spec.suspend."""
    snapshot: SnapshotInfo | None = None
    """status.snapshot: set while Suspended (and while a resume restores from it)."""

    @classmethod
    def from_object(cls, session: Mapping[str, Any]) -> SessionState:
        metadata = session.get("metadata") or {}
        status = session.get("status") or {}
        agent = status.get("agent")
        snapshot = status.get("snapshot")
        return cls(
            namespace=str(metadata.get("namespace") or ""),
            name=str(metadata.get("name") or ""),
            uid=str(metadata.get("uid") or ""),
            resource_version=str(metadata.get("resourceVersion") or ""),
            deleting=bool(metadata.get("deletionTimestamp")),
            phase=_phase(status.get("phase")),
            conditions=tuple(_conditions(status.get("conditions"))),
            pod_name=_text(status.get("podName")),
            pod_ip=_text(status.get("podIP")),
            node_name=_text(status.get("nodeName")),
            pool_name=_text(status.get("poolName")),
            token_secret_name=_text(status.get("tokenSecretName")),
            trajectory=_text(status.get("trajectory")),
            reclaim_reason=_text(status.get("reclaimReason")),
            agent=AgentProgress.from_status(agent) if isinstance(agent, Mapping) else None,
            start_time=_time(status.get("startTime")),
            ready_time=_time(status.get("readyTime")),
            completion_time=_time(status.get("completionTime")),
            generation=_int(metadata.get("generation")),
            suspend_asked=(session.get("spec") or {}).get("suspend") is True,
            snapshot=SnapshotInfo.from_status(snapshot) if isinstance(snapshot, Mapping) else None,
        )

    @property
    def duration_s(self) -> float | None:
        """startTime to completionTime, once both are known."""
        if self.start_time is None or self.completion_time is None:
            return None
        return (self.completion_time - self.start_time).total_seconds()

    @property
    def reference(self) -> str:
        return f"{self.namespace}/{self.name}"

    def condition(self, condition_type: ConditionType | str) -> Condition | None:
        for condition in self.conditions:
            if condition.type == condition_type:
                return condition
        return None

    @property
    def ready(self) -> bool:
        """The sandbox serves tool calls (condition Ready=True, not yet finished)."""
        ready = self.condition(ConditionType.READY)
        return ready is not None and ready.is_true and not self.finished

    @property
    def finished(self) -> bool:
        """Succeeded, Failed or Expired: the session will never serve again."""
        return self.phase is not None and self.phase.finished

    def explanation(self) -> str:
        """The most telling condition's reason and message ("" when there is none yet)."""
        for condition_type in _EXPLAINING_ORDER:
            condition = self.condition(condition_type)
            if condition is None:
                continue
            settled_well = condition.is_true and condition_type != ConditionType.COMPLETED
            if not settled_well and (condition.reason or condition.message):
                return condition.describe()
        return ""

    def summary(self) -> str:
        """One line for errors and logs: "ns/name: phase Failed (ImagePullFailed: ...)"."""
        phase = self.phase.value if self.phase else "unknown"
        explanation = self.explanation()
        detail = f" ({explanation})" if explanation else ""
        return f"{self.reference}: phase {phase}{detail}"


def _phase(value: Any) -> Phase | None:
    try:
        return Phase(value)
    except ValueError:
        return None


def _conditions(items: Any) -> list[Condition]:
    if not isinstance(items, list):
        return []
    return [
        Condition(
            type=str(item.get("type") or ""),
            status=str(item.get("status") or "Unknown"),
            reason=str(item.get("reason") or ""),
            message=str(item.get("message") or ""),
            observed_generation=_int(item.get("observedGeneration")),
        )
        for item in items
        if isinstance(item, Mapping)
    ]


def _text(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _time(value: Any) -> dt.datetime | None:
    """An RFC 3339 timestamp as the API server writes it ("2026-01-02T03:04:05Z")."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None
