"""The operator's API vocabulary: group, kinds, labels, phases, condition types and reasons.

Everything that crosses a boundary (resource fields, labels, log fields) is named here once,
so the CRDs in manifests/crds, the builders, the reconciler and the SDK cannot drift apart.
"""

from __future__ import annotations

import enum
from typing import Final

GROUP: Final = "sandfleet.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

SESSION_KIND: Final = "SandboxSession"
SESSION_PLURAL: Final = "sandboxsessions"
TEMPLATE_KIND: Final = "SandboxTemplate"
TEMPLATE_PLURAL: Final = "sandboxtemplates"
POOL_KIND: Final = "SandboxPool"
POOL_PLURAL: Final = "sandboxpools"

FINALIZER: Final = f"{GROUP}/finalizer"
RUNTIME_PORT: Final = 50051
"""The runtime agent's gRPC port in every sandbox pod."""
RUNTIME_CONTAINER: Final = "runtime"
TOKEN_SECRET_KEY: Final = "token"
"""Key of the runtime bearer token in a session's (or pool's) token Secret."""
DEFAULT_WORKDIR: Final = "/testbed"


class Label(enum.StrEnum):
    """Labels the operator puts on everything it creates (selectors and the orphan sweep)."""

    MANAGED_BY = "app.kubernetes.io/managed-by"
    COMPONENT = "app.kubernetes.io/component"
    SESSION = "sandfleet.dev/session"
    POOL = "sandfleet.dev/pool"
    STATE = "sandfleet.dev/state"


MANAGED_BY_VALUE: Final = "sandfleet-operator"


class Component(enum.StrEnum):
    """Value of the component label."""

    SANDBOX = "sandbox"
    """A sandbox pod (cold, warm or claimed)."""
    TOKEN = "runtime-token"
    """A Secret holding a runtime bearer token."""
    NETWORK_POLICY = "sandbox-network"


class PodState(enum.StrEnum):
    """Value of the state label on pool pods: idle ones can be claimed, exactly once."""

    IDLE = "idle"
    CLAIMED = "claimed"


class Annotation(enum.StrEnum):
    CLAIMED_AT = "sandfleet.dev/claimed-at"
    TEMPLATE_HASH = "sandfleet.dev/template-hash"
    """Hash of the pod settings a pool pod was made from; stale idle pods are replaced."""


class Phase(enum.StrEnum):
    """status.phase of a SandboxSession: a summary for printing; conditions are the API."""

    PENDING = "Pending"
    STARTING = "Starting"
    READY = "Ready"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    EXPIRED = "Expired"

    @property
    def finished(self) -> bool:
        return self in {Phase.SUCCEEDED, Phase.FAILED, Phase.EXPIRED}


class EgressMode(enum.StrEnum):
    """spec.network.egress: what a sandbox may reach."""

    NONE = "None"
    INTERNET = "Internet"
    """Public addresses only: no cluster-internal, private or link-local (metadata) ranges."""
    ALL = "All"


class ConditionType(enum.StrEnum):
    SCHEDULED = "Scheduled"
    RUNTIME_READY = "RuntimeReady"
    READY = "Ready"
    COMPLETED = "Completed"


class Reason(enum.StrEnum):
    """PascalCase condition reasons (also the Event reasons)."""

    # Scheduled
    POD_CREATED = "PodCreated"
    POD_SCHEDULED = "PodScheduled"
    POD_UNSCHEDULABLE = "PodUnschedulable"
    WAITING_FOR_WARM_SANDBOX = "WaitingForWarmSandbox"
    WARM_SANDBOX_CLAIMED = "WarmSandboxClaimed"
    # RuntimeReady / Ready
    POD_PENDING = "PodPending"
    RUNTIME_SERVING = "RuntimeServing"
    RUNTIME_BOUND = "RuntimeBound"
    BIND_FAILED = "BindFailed"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    CONTAINER_CRASHED = "ContainerCrashed"
    # Completed (agent stop reasons, CamelCased)
    SUBMITTED = "Submitted"
    MAX_TURNS_REACHED = "MaxTurnsReached"
    MODEL_ERROR = "ModelError"
    MODEL_REQUEST_REJECTED = "ModelRequestRejected"
    CONTEXT_EXCEEDED = "ContextExceeded"
    SANDBOX_LOST = "SandboxLost"
    CANCELLED = "Cancelled"
    OPERATOR_RESTARTED = "OperatorRestarted"
    # Reclaim
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    IDLE_TIMEOUT = "IdleTimeout"
    # Spec problems
    INVALID_SPEC = "InvalidSpec"
    TEMPLATE_NOT_FOUND = "TemplateNotFound"
    POOL_NOT_FOUND = "PoolNotFound"
    SECRET_NOT_FOUND = "SecretNotFound"


class ReclaimReason(enum.StrEnum):
    """Why a sandbox was taken away (the reclaims metric's label and the log field)."""

    COMPLETED = "completed"
    TTL = "ttl"
    IDLE = "idle"
    DEADLINE = "deadline"
    DELETED = "deleted"
    ORPHAN = "orphan"
    LOST = "lost"
