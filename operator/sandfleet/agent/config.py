"""What one agent run needs to know: the model and loop settings (AgentConfig) and the Task."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True, slots=True)
class AgentConfig:
    model: str
    """Model name sent to the endpoint."""
    base_url: str | None = None
    """OpenAI-compatible endpoint, e.g. http://localhost:8000/v1; None means OpenAI itself."""
    api_key: str | None = dataclasses.field(default=None, repr=False)
    """None: the SDK's own lookup for OpenAI, a placeholder for a custom base_url."""
    max_turns: int = 100
    """Model calls allowed per run (a reply without a tool call counts too)."""
    max_tokens: int | None = None
    """Completion tokens per call; None leaves it to the endpoint."""
    temperature: float | None = None
    top_p: float | None = None
    """Nucleus sampling; None leaves it to the endpoint."""
    seed: int | None = None
    """Sampling seed sent with every request (servers that honour it repeat themselves)."""
    tool_timeout_s: float = 120.0
    """Bound on one tool call; the sandbox enforces it (a timeout is an observation)."""
    system_prompt: str | None = None
    """Seed-format template; None uses prompts.DEFAULT_SYSTEM_PROMPT."""
    system_prompt_override: str | None = None
    """A template that wins over the task's own system_prompt too (the CLI's --system-prompt)."""
    instance_prompt: str | None = None
    """Seed-format template around the task text; None uses prompts.DEFAULT_INSTANCE_PROMPT."""
    offer_undo_edit: bool = True
    """Advertise `undo_edit` in the editor's enum; False gives the seed project's exact schema."""
    request_timeout_s: float = 600.0
    """Per HTTP request to the model endpoint (each retry gets its own)."""
    max_retries: int = 2
    """Retries of one request on 408/409/429/5xx and connection errors, done by the SDK."""
    endpoint_concurrency: int = 64
    """Requests in flight per base_url, shared by every run in the process."""
    remaining_turns_notice: int = 5
    """Over the last this-many turns, observations end with "Steps remaining: N"."""
    context_retries: int = 3
    """How often a context-length rejection may shrink max_tokens before the run stops."""
    min_completion_tokens: int = 1024
    """max_tokens is never shrunk below this; below it the run stops with context_exceeded."""
    extra_body: Mapping[str, Any] | None = None
    """Extra JSON fields for the endpoint, e.g. {"chat_template_kwargs": {...}} for vLLM."""
    context_keep_turns: int = 2
    """When a context-length rejection survives shrinking max_tokens, tool observations of
    all but this many latest turns are clipped (then of all but the latest one, and as a last
    resort the latest one's too)."""
    max_nudges: int = 3
    """Replies in a row without a tool call that get a nudge; the next one ends the run
    with no_tool_call (its text is the result)."""
    follow_redirects: bool = True
    """Follow HTTP redirects of the endpoint; the operator turns it off (a redirect would
    take a managed session's requests to a URL its endpoint allowlist never checked)."""
    record_tokens: bool = False
    """Ask the endpoint for token ids and logprobs (token_records.TOKEN_REQUEST_FIELDS) and
    record them per turn in the trajectory (a `tokens` record), for training rows. For vLLM,
    SGLang and llama.cpp; OpenAI itself rejects the fields."""

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if self.endpoint_concurrency < 1:
            raise ValueError("endpoint_concurrency must be at least 1")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError("max_tokens must be positive")
        if self.context_keep_turns < 1:
            raise ValueError("context_keep_turns must be at least 1")
        if self.max_nudges < 0:
            raise ValueError("max_nudges must not be negative")


@dataclasses.dataclass(frozen=True, slots=True)
class Task:
    id: str
    prompt: str
    """The problem statement ({problem_statement} in the instance template)."""
    files: Mapping[str, Path | bytes] = dataclasses.field(default_factory=dict)
    """Sandbox path (relative to input_dir, or absolute) -> local file or content."""
    system_prompt: str | None = None
    """Overrides AgentConfig.system_prompt for this task."""
    instance_prompt: str | None = None
    """Overrides AgentConfig.instance_prompt for this task."""
