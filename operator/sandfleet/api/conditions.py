"""Conditions: their types, their PascalCase reasons, and the status.conditions[] item."""

from __future__ import annotations

import datetime as dt
import enum
from typing import Literal

from pydantic import Field

from sandfleet.api.common import ApiModel


class ConditionType(enum.StrEnum):
    SCHEDULED = "Scheduled"
    RUNTIME_READY = "RuntimeReady"
    READY = "Ready"
    COMPLETED = "Completed"
    SUSPENDED = "Suspended"


class Reason(enum.StrEnum):
    """PascalCase condition reasons (also the Event reasons)."""

    # Scheduled
    POD_CREATED = "PodCreated"
    POD_SCHEDULED = "PodScheduled"
    POD_UNSCHEDULABLE = "PodUnschedulable"
    WAITING_FOR_WARM_SANDBOX = "WaitingForWarmSandbox"
    WARM_SANDBOX_CLAIMED = "WarmSandboxClaimed"
    ADOPTION_FAILED = "AdoptionFailed"
    """A gateway-claimed session whose pod is not (or no longer) the one it claimed, or an
    operator without the session key its token derives from."""
    # RuntimeReady / Ready
    POD_PENDING = "PodPending"
    RUNTIME_SERVING = "RuntimeServing"
    RUNTIME_BOUND = "RuntimeBound"
    BIND_FAILED = "BindFailed"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    CONTAINER_CRASHED = "ContainerCrashed"
    CONTAINER_CREATE_FAILED = "ContainerCreateFailed"
    """The kubelet could not create the runtime's container until the start deadline
    (CreateContainerConfigError, CreateContainerError...: passing until then)."""
    # Completed (agent stop reasons, CamelCased)
    SUBMITTED = "Submitted"
    MAX_TURNS_REACHED = "MaxTurnsReached"
    MODEL_ERROR = "ModelError"
    MODEL_REQUEST_REJECTED = "ModelRequestRejected"
    CONTEXT_EXCEEDED = "ContextExceeded"
    NO_TOOL_CALL = "NoToolCall"
    SANDBOX_LOST = "SandboxLost"
    CANCELLED = "Cancelled"
    OPERATOR_RESTARTED = "OperatorRestarted"
    # Reclaim
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    IDLE_TIMEOUT = "IdleTimeout"
    # Suspended (spec.suspend, lifecycle.idleAction Suspend)
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    SUSPEND_FAILED = "SuspendFailed"
    """The snapshot could not be taken (the runtime did not answer): the sandbox runs on."""
    SNAPSHOT_STORE_UNAVAILABLE = "SnapshotStoreUnavailable"
    SNAPSHOT_TOO_LARGE = "SnapshotTooLarge"
    SUSPEND_NOT_SUPPORTED = "SuspendNotSupported"
    """A managed session (its agent loop runs in the operator), or no snapshot store."""
    SNAPSHOT_CORRUPT = "SnapshotCorrupt"
    """Resume found the snapshot missing, truncated or not matching its checksum."""
    RESUME_FAILED = "ResumeFailed"
    # ServedModel Ready
    SERVING = "Serving"
    """serve answers the model: its upstream key (if any) read, its pool or template found."""
    # Spec problems
    INVALID_SPEC = "InvalidSpec"
    TEMPLATE_NOT_FOUND = "TemplateNotFound"
    POOL_NOT_FOUND = "PoolNotFound"
    SECRET_NOT_FOUND = "SecretNotFound"
    SECRET_NOT_LABELLED = "SecretNotLabelled"
    """A Secret (or ConfigMap) the session names lacks the label by which whoever may read
    it lets sessions use it (sandfleet.dev/model-credentials or sandfleet.dev/session-files)."""
    ENDPOINT_NOT_ALLOWED = "EndpointNotAllowed"
    """spec.agent.baseURL is not among the model endpoints the platform admin allowed."""


class StatusCondition(ApiModel):
    """One item of status.conditions (Kubernetes condition conventions; sessions and pools).

    `type` is a plain string, not a ConditionType: a pool's conditions have types of their
    own, and a reader must not fail on a type a newer operator adds.
    """

    type: str = Field(min_length=1, max_length=316)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(default="", max_length=1024)
    message: str = Field(default="", max_length=32768)
    last_transition_time: dt.datetime | None = None
    observed_generation: int | None = Field(default=None, ge=0)
