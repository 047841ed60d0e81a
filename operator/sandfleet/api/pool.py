"""The SandboxPool: how many warm sandboxes to keep and from what, and what it observed."""

from __future__ import annotations

from pydantic import Field, model_validator

from sandfleet.api.common import ApiModel, ObjectName
from sandfleet.api.conditions import StatusCondition
from sandfleet.api.template import PodTemplate


class SandboxPoolSpec(ApiModel):
    template_ref: ObjectName | None = None
    template: PodTemplate | None = None
    replicas: int = Field(default=1, ge=0, le=10000)
    """Idle warm sandboxes to keep; claimed ones are replaced."""
    recycle: bool = False
    """A released sandbox whose Reset verifies clean goes back to the pool, idle, instead of
    being deleted (docs/pools.md); off by default: sessions of one namespace then share
    pods one after another, which suits a trainer that owns them all, not mutual strangers."""
    max_uses: int = Field(default=20, ge=1, le=100000)
    """With recycle: sessions one pod serves before it is replaced by a fresh one."""

    @model_validator(mode="after")
    def _one_template(self) -> SandboxPoolSpec:
        if self.template_ref is not None and self.template is not None:
            raise ValueError("set at most one of templateRef and template")
        return self


class SandboxPoolStatus(ApiModel):
    """status of a SandboxPool; written only by the operator."""

    replicas: int = Field(default=0, ge=0)
    """Idle warm sandboxes ready to be claimed (the scale subresource's status replicas)."""
    starting_replicas: int = Field(default=0, ge=0)
    claims: int = Field(default=0, ge=0)
    """Sandboxes of the pool that sessions hold now (claimed, not yet reclaimed)."""
    selector: str | None = None
    """Label selector of the pool's idle pods (for the scale subresource)."""
    observed_generation: int | None = Field(default=None, ge=0)
    conditions: tuple[StatusCondition, ...] = Field(default=(), max_length=16)
