"""Pod, network and lifecycle settings of a sandbox, and the SandboxTemplate spec that
bundles them (sessions and pools embed the same pod settings inline)."""

from __future__ import annotations

import enum
from typing import Any, Literal

from pydantic import Field

from sandfleet.api.common import QUANTITY_PATTERN, ApiModel, EnvVar
from sandfleet.api.names import DEFAULT_WORKDIR


class EgressMode(enum.StrEnum):
    """spec.network.egress: what a sandbox may reach."""

    NONE = "None"
    INTERNET = "Internet"
    """Public addresses only: no cluster-internal, private or link-local (metadata) ranges."""
    ALL = "All"


class ResourceList(ApiModel):
    cpu: str | None = Field(default=None, pattern=QUANTITY_PATTERN)
    memory: str | None = Field(default=None, pattern=QUANTITY_PATTERN)


class Resources(ApiModel):
    requests: ResourceList = ResourceList()
    limits: ResourceList = ResourceList()


class Toleration(ApiModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    def to_k8s(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class PodTemplate(ApiModel):
    """Pod settings of a sandbox (SandboxTemplate.spec.pod / SandboxSession.spec.template /
    SandboxPool.spec.template)."""

    image: str | None = None
    """None: the operator's default sandbox image."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    resources: Resources | None = None
    """None: the operator's default requests and limits."""
    runtime_class_name: str | None = None
    scheduler_name: str | None = Field(default=None, max_length=253)
    """None: the operator's default scheduler name (normally the cluster's default)."""
    env: tuple[EnvVar, ...] = Field(default=(), max_length=128)
    """Pod-level environment (baked into the pod; for per-session values use spec.env)."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    workdir: str = Field(default=DEFAULT_WORKDIR, pattern="^/")
    """Absolute: the runtime's --workdir, where relative file paths start."""


class NetworkSpec(ApiModel):
    egress: EgressMode = EgressMode.NONE
    """None: no egress; Internet: public addresses and DNS only; All: everything."""


class LifecycleSpec(ApiModel):
    active_deadline_seconds: int | None = Field(default=None, ge=1)
    """From the session's start; then the session is Expired (DeadlineExceeded)."""
    idle_timeout_seconds: int | None = Field(default=None, ge=1)
    """No tool call for this long (the runtime's last-activity stat): Expired (IdleTimeout)."""
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0)
    """A finished session (Succeeded, Failed, Expired) is deleted this long after it ended."""
    idle_action: Literal["Expire", "Suspend"] = "Expire"
    """What idleTimeoutSeconds does: Expire (the session ends) or Suspend (its files and
    shells' state go to the snapshot store and the pod is given back; raw sessions only)."""
    suspended_ttl_seconds: int | None = Field(default=None, ge=1, alias="suspendedTTLSeconds")
    """A session Suspended this long is deleted with its snapshot. None: kept."""
    sandbox_lost_retries: int = Field(default=0, ge=0, le=10)
    """A managed session whose pod is lost is restarted on a new sandbox this often.
    The CRD sets no default, so `model_fields_set` tells an unset value (the template's
    applies) from an explicit 0."""


class SandboxTemplateSpec(ApiModel):
    pod: PodTemplate = PodTemplate()
    network: NetworkSpec = NetworkSpec()
    lifecycle: LifecycleSpec = LifecycleSpec()
    """Defaults for sessions made from this template (a session's own values win)."""
