"""The ServedModel: a model `sandfleet serve` answers as, published by a tenant in its own
namespace (docs/serve.md): the upstream it calls, where its sandboxes come from, the loop's
settings; and what serve observed (Ready, or why not)."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from sandfleet.api.common import ApiModel, KeyRef, ObjectName
from sandfleet.api.conditions import StatusCondition
from sandfleet.api.session import BASE_URL_PATTERN, check_base_url


class UpstreamEndpoint(ApiModel):
    """The OpenAI-compatible endpoint the loop's model calls go to."""

    base_url: str = Field(alias="baseURL", max_length=2048, pattern=BASE_URL_PATTERN)
    model: str = Field(min_length=1, max_length=1024)
    """The model name the upstream knows."""
    api_key_secret_ref: KeyRef | None = None
    """A key of a Secret in the ServedModel's namespace, labelled
    sandfleet.dev/model-credentials=true (the consent of whoever may read it)."""

    @field_validator("base_url")
    @classmethod
    def _base_url_has_a_plain_host(cls, value: str) -> str:
        check_base_url(value)
        return value


class ServedModelSpec(ApiModel):
    upstream: UpstreamEndpoint
    description: str = Field(default="", max_length=1024)
    pool_ref: ObjectName | None = None
    """A SandboxPool in the same namespace: warm sandboxes while it has idle ones."""
    template_ref: ObjectName | None = None
    """A SandboxTemplate in the same namespace (cold starts); neither: the default image."""
    system_prompt: str | None = Field(default=None, max_length=65536)
    """A seed-format template; unset: the paper's prompt."""
    max_turns: int = Field(default=30, ge=1, le=1000)
    tool_timeout_seconds: int = Field(default=120, ge=1, le=86400)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one_source(self) -> ServedModelSpec:
        if self.pool_ref is not None and self.template_ref is not None:
            raise ValueError("set at most one of poolRef and templateRef")
        return self


class ServedModelStatus(ApiModel):
    """status of a ServedModel; written by `sandfleet serve`."""

    model: str | None = None
    """The name clients send as `model`: "<namespace>/<name>"."""
    observed_generation: int | None = Field(default=None, ge=0)
    conditions: tuple[StatusCondition, ...] = Field(default=(), max_length=16)
