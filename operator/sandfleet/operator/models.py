"""Typed views of the custom resources' specs (they mirror manifests/crds field for field).

The API server validates first (structural schema + CEL); these models re-check what the
operator relies on and give it snake_case attributes. Unknown fields are ignored, not
rejected: an older operator must not fail a newer CRD's objects.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from sandfleet.operator.api import DEFAULT_WORKDIR, EgressMode

ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
"""A shell variable name: per-session env is exported into bash, which accepts no other."""
DECIMAL_PATTERN = r"^[0-9]+(\.[0-9]+)?$"
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]"
    r"|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
"""A Kubernetes resource quantity ("100m", "2", "512Mi"), as the API server checks it."""


class _Spec(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore"
    )


class EnvVar(_Spec):
    name: str = Field(min_length=1, max_length=256, pattern=ENV_NAME_PATTERN)
    value: str = Field(default="", max_length=32768)


class ObjectName(_Spec):
    """A reference to an object in the session's own namespace."""

    name: str = Field(min_length=1)


class KeyRef(_Spec):
    """A key of a ConfigMap or Secret in the session's namespace."""

    name: str = Field(min_length=1)
    key: str = Field(min_length=1)


class ResourceList(_Spec):
    cpu: str | None = Field(default=None, pattern=QUANTITY_PATTERN)
    memory: str | None = Field(default=None, pattern=QUANTITY_PATTERN)


class Resources(_Spec):
    requests: ResourceList = ResourceList()
    limits: ResourceList = ResourceList()


class Toleration(_Spec):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    def to_k8s(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class PodTemplate(_Spec):
    """Pod settings of a sandbox (SandboxTemplate.spec.pod / SandboxSession.spec.template)."""

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
    node_selector: dict[str, str] = {}
    tolerations: tuple[Toleration, ...] = ()
    workdir: str = Field(default=DEFAULT_WORKDIR, pattern="^/")
    """Absolute: the runtime's --workdir, where relative file paths start."""


class NetworkSpec(_Spec):
    egress: EgressMode = EgressMode.NONE
    """None: no egress; Internet: public addresses and DNS only; All: everything."""


class LifecycleSpec(_Spec):
    active_deadline_seconds: int | None = Field(default=None, ge=1)
    """From the session's start; then the session is Expired (DeadlineExceeded)."""
    idle_timeout_seconds: int | None = Field(default=None, ge=1)
    """No tool call for this long (the runtime's last-activity stat): Expired (IdleTimeout)."""
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0)
    """A finished session (Succeeded, Failed, Expired) is deleted this long after it ended."""
    sandbox_lost_retries: int = Field(default=0, ge=0, le=10)
    """A managed session whose pod is lost is restarted on a new sandbox this often.
    The CRD sets no default, so `model_fields_set` tells an unset value (the template's
    applies) from an explicit 0."""


class FileSource(_Spec):
    """One input file placed in the sandbox before the session is Ready."""

    path: str = Field(min_length=1)
    """Absolute, or relative to the sandbox workdir."""
    content: str | None = None
    config_map_key_ref: KeyRef | None = None
    secret_key_ref: KeyRef | None = None
    mode: int = Field(default=0o644, ge=0, le=0o777)
    """Permission bits (420 in JSON is 0o644)."""

    @model_validator(mode="after")
    def _one_source(self) -> FileSource:
        sources = [self.content, self.config_map_key_ref, self.secret_key_ref]
        if sum(s is not None for s in sources) != 1:
            raise ValueError(
                f"file {self.path}: exactly one of content, configMapKeyRef, secretKeyRef"
            )
        return self


class AgentSpec(_Spec):
    """A managed session: the operator drives this loop in the sandbox."""

    model: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    """The task (the problem statement)."""
    base_url: str | None = Field(default=None, alias="baseURL", pattern="^https?://")
    """An OpenAI-compatible endpoint; None: OpenAI's."""
    api_key_secret_ref: KeyRef | None = None
    system_prompt: str | None = None
    instance_prompt: str | None = Field(default=None, max_length=65536)
    """Replaces the template around the prompt ({problem_statement} and the sandbox paths)."""
    """Replaces the built-in system prompt."""
    max_turns: int = Field(default=100, ge=1, le=10000)
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: str | None = Field(default=None, pattern=DECIMAL_PATTERN)
    """A decimal string ("0.7"): Kubernetes API conventions keep floats out of specs."""
    tool_timeout_seconds: int = Field(default=120, ge=1, le=86400)

    @property
    def temperature_value(self) -> float | None:
        return None if self.temperature is None else float(self.temperature)


class SandboxSessionSpec(_Spec):
    template_ref: ObjectName | None = None
    template: PodTemplate | None = None
    pool_ref: ObjectName | None = None
    env: tuple[EnvVar, ...] = Field(default=(), max_length=128)
    """Per-session environment for the sandbox's shells, bound through the runtime API (so a
    warm sandbox keeps it without a restart)."""
    files: tuple[FileSource, ...] = Field(default=(), max_length=64)
    agent: AgentSpec | None = None
    lifecycle: LifecycleSpec = LifecycleSpec()
    network: NetworkSpec | None = None
    """None: the template's egress mode (None if the template sets none)."""

    @model_validator(mode="after")
    def _one_sandbox_source(self) -> SandboxSessionSpec:
        if sum(x is not None for x in (self.template_ref, self.template, self.pool_ref)) > 1:
            raise ValueError("set at most one of templateRef, template and poolRef")
        return self

    @property
    def managed(self) -> bool:
        return self.agent is not None


class SandboxTemplateSpec(_Spec):
    pod: PodTemplate = PodTemplate()
    network: NetworkSpec = NetworkSpec()
    lifecycle: LifecycleSpec = LifecycleSpec()
    """Defaults for sessions made from this template (a session's own values win)."""


class SandboxPoolSpec(_Spec):
    template_ref: ObjectName | None = None
    template: PodTemplate | None = None
    replicas: int = Field(default=1, ge=0, le=10000)
    """Idle warm sandboxes to keep; claimed ones are replaced."""

    @model_validator(mode="after")
    def _one_template(self) -> SandboxPoolSpec:
        if self.template_ref is not None and self.template is not None:
            raise ValueError("set at most one of templateRef and template")
        return self
