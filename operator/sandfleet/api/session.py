"""The SandboxSession: its spec (sandbox source, env, files, agent, lifecycle, network) and
its status (phase, conditions, pod, agent progress)."""

from __future__ import annotations

import datetime as dt
import json
import urllib.parse
from typing import Any, Final

from pydantic import Field, field_validator, model_validator

from sandfleet.api.common import DECIMAL_PATTERN, ApiModel, EnvVar, KeyRef, ObjectName
from sandfleet.api.conditions import StatusCondition
from sandfleet.api.phases import Phase
from sandfleet.api.template import LifecycleSpec, NetworkSpec, PodTemplate

BASE_URL_PATTERN: Final = r"^https?://[^/?#@\\\s]+([/?#][^@\\\s]*)?$"
"""http(s), a host, and no userinfo, backslash or whitespace anywhere (the CRD's pattern)."""

AGENT_RESULT_LIMIT_CHARS = 4096
"""status.agent.result is a preview (the CRD's maxLength); the trajectory has everything."""


class FileSource(ApiModel):
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


class AgentSpec(ApiModel):
    """A managed session: the operator drives this loop in the sandbox."""

    model: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    """The task (the problem statement)."""
    base_url: str | None = Field(
        default=None, alias="baseURL", max_length=2048, pattern=BASE_URL_PATTERN
    )
    """An OpenAI-compatible endpoint; None: OpenAI's. The operator calls it only when the
    platform's allowlist (operator setting model_endpoints_allowed) admits it."""
    api_key_secret_ref: KeyRef | None = None
    system_prompt: str | None = None
    """Replaces the built-in system prompt."""
    instance_prompt: str | None = Field(default=None, max_length=65536)
    """Replaces the template around the prompt ({problem_statement} and the sandbox paths)."""
    max_turns: int = Field(default=100, ge=1, le=10000)
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: str | None = Field(default=None, pattern=DECIMAL_PATTERN)
    """A decimal string ("0.7"): Kubernetes API conventions keep floats out of specs."""
    top_p: str | None = Field(default=None, pattern=DECIMAL_PATTERN)
    """Nucleus sampling as a decimal string ("0.95")."""
    seed: int | None = None
    """Sampling seed sent with every request."""
    extra_body: str | None = Field(default=None, max_length=65536)
    """A JSON object as text, merged into every chat-completions request body. Text, not a
    nested object: free-form JSON would need a field that escapes the API server's pruning."""
    tool_timeout_seconds: int = Field(default=120, ge=1, le=86400)
    record_tokens: bool = False
    """Ask the endpoint for token ids and logprobs and record them per turn in the
    trajectory (for training rows, `sandfleet export`); vLLM, SGLang, llama.cpp only."""

    @property
    def temperature_value(self) -> float | None:
        return None if self.temperature is None else float(self.temperature)

    @property
    def top_p_value(self) -> float | None:
        return None if self.top_p is None else float(self.top_p)

    @property
    def extra_body_value(self) -> dict[str, Any] | None:
        return None if self.extra_body is None else _json_object(self.extra_body)

    @field_validator("base_url")
    @classmethod
    def _base_url_has_a_plain_host(cls, value: str | None) -> str | None:
        if value is not None:
            check_base_url(value)
        return value

    @field_validator("extra_body")
    @classmethod
    def _extra_body_is_a_json_object(cls, value: str | None) -> str | None:
        if value is not None:
            _json_object(value)
        return value


def check_base_url(url: str) -> None:
    """Raises ValueError unless `url` is http(s) with a host and nothing that makes parsers
    disagree on which host that is: no userinfo (`https://allowed@evil`), no backslash, no
    whitespace or control characters."""
    if any(c in url for c in "\\@") or any(c.isspace() or not c.isprintable() for c in url):
        raise ValueError("baseURL must not contain '@', '\\', whitespace or control characters")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("baseURL must be an http:// or https:// URL with a host")
    try:
        parts.port  # noqa: B018 - parsing the port raises on a bad one
    except ValueError as exc:
        raise ValueError(f"baseURL has a bad port: {exc}") from None


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"extraBody is not valid JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise ValueError("extraBody must be a JSON object")
    return value


class SandboxSessionSpec(ApiModel):
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
    suspend: bool = False
    """True: save the sandbox's files and shells' state to the snapshot store and give its
    pod back (phase Suspended); back to false (or an access through the gateway) resumes it."""

    @model_validator(mode="after")
    def _one_sandbox_source(self) -> SandboxSessionSpec:
        if sum(x is not None for x in (self.template_ref, self.template, self.pool_ref)) > 1:
            raise ValueError("set at most one of templateRef, template and poolRef")
        return self

    @property
    def managed(self) -> bool:
        return self.agent is not None


class AgentStatus(ApiModel):
    """status.agent of a managed session: progress (written at a bounded rate) and outcome."""

    turns: int = Field(default=0, ge=0)
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    stop_reason: str | None = Field(default=None, max_length=64)
    """The agent loop's stop reason in snake_case (submitted, max_turns, ...)."""
    result: str | None = Field(default=None, max_length=AGENT_RESULT_LIMIT_CHARS)
    answer_from_file: bool | None = None
    """Whether `result` is the answer file's content (else the model's last text)."""
    error: str | None = None


class SnapshotStatus(ApiModel):
    """status.snapshot of a Suspended session: the verified snapshot it resumes from."""

    size_bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    suspended_time: dt.datetime
    processes_kept: bool = False
    """Always false: running processes end at suspend (said here so nobody expects them)."""


class SandboxSessionStatus(ApiModel):
    """status of a SandboxSession; written only by the operator, piece by piece, so every
    field may be absent."""

    phase: Phase | None = None
    observed_generation: int | None = Field(default=None, ge=0)
    conditions: tuple[StatusCondition, ...] = Field(default=(), max_length=16)
    pod_name: str | None = None
    pod_ip: str | None = Field(default=None, alias="podIP")
    node_name: str | None = None
    pool_name: str | None = None
    token_secret_name: str | None = None
    start_time: dt.datetime | None = None
    ready_time: dt.datetime | None = None
    completion_time: dt.datetime | None = None
    restarts: int = Field(default=0, ge=0)
    """How often the session moved to a new sandbox after losing one."""
    reclaim_reason: str | None = Field(default=None, max_length=64)
    """A ReclaimReason value; a plain string so a reader never fails on one a newer
    operator adds."""
    trajectory: str | None = None
    """Where the trajectory is stored: a reference (sandfleet.api.trajectories)."""
    agent: AgentStatus | None = None
    snapshot: SnapshotStatus | None = None
    """Set while Suspended (and while a resume restores from it)."""
