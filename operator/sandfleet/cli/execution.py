"""The CLI's settings turned into what a run needs (the loop's AgentConfig, the API key,
the sandbox source, the run folder), and `execute_task` (sandfleet.runs) as `run`, `batch`
and `eval` call it."""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sandfleet import runs
from sandfleet.agent import AgentConfig, EventSink, Model
from sandfleet.backends.local import LocalSandboxConfig
from sandfleet.errors import SandfleetError
from sandfleet.runs.folders import new_run_folder
from sandfleet.runs.outcomes import TaskOutcome
from sandfleet.runs.sandboxes import GatewaySandboxes, LocalSandboxes, SandboxSource
from sandfleet.sandbox.copy_back import CopyLimits
from sandfleet.sandbox.facade import SandboxPaths
from sandfleet.settings import Settings
from sandfleet.tasks import TaskSpec, template_notices

if TYPE_CHECKING:
    from sandfleet.clients.gateway.target import GatewayTarget

# The --egress names of local sandboxes, as a cluster sandbox's spec.network.egress.
_CLUSTER_EGRESS: dict[str, str | None] = {"none": None, "internet": "Internet", "all": "All"}


class ConfigurationError(SandfleetError):
    """Settings that cannot start a run (e.g. no model named)."""


def agent_config(settings: Settings, *, loop_here: bool | None = None) -> AgentConfig:
    """The loop's configuration from the CLI's settings. `loop_here` False: the operator
    runs the loop (a managed session), so no local API key is needed (default: False on the
    kubernetes backend exactly when it is managed)."""
    if not settings.model:
        raise ConfigurationError(
            'no model given: pass --model, set SANDFLEET_MODEL, or put model = "..." '
            "in the config file"
        )
    check_base_url(settings.base_url)
    return AgentConfig(
        model=settings.model,
        base_url=settings.base_url,
        api_key=api_key(settings, loop_here=loop_here),
        max_turns=settings.max_turns,
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
        top_p=settings.top_p,
        seed=settings.seed,
        extra_body=settings.extra_body,
        system_prompt_override=_system_prompt(settings.system_prompt),
        offer_undo_edit=not settings.no_undo_edit,
        max_nudges=settings.max_nudges,
        record_tokens=settings.record_tokens,
        tool_timeout_s=settings.tool_timeout_seconds,
        request_timeout_s=settings.request_timeout_seconds,
        max_retries=settings.max_retries,
    )


def check_base_url(url: str | None) -> None:
    """Raise ConfigurationError unless `url` is None or an http(s) URL with a host: a URL
    the SDK cannot use must fail before a sandbox starts, as bad usage."""
    if url is None:
        return
    parts = urllib.parse.urlsplit(url)
    if parts.scheme in ("http", "https") and parts.netloc:
        return
    if not parts.scheme or "://" not in url:
        raise ConfigurationError(
            f"--base-url {url} has no scheme: give http:// or https://, e.g. "
            f"--base-url http://{url.split('://')[-1]}"
        )
    raise ConfigurationError(
        f"--base-url {url}: the scheme {parts.scheme}:// is not one a model endpoint speaks; "
        "give http:// or https://"
    )


def system_prompt_notices(config: AgentConfig, settings: Settings) -> list[str]:
    """Warnings about the --system-prompt file's placeholders that nothing fills."""
    if config.system_prompt_override is None:
        return []
    where = f"system prompt file {settings.system_prompt}"
    return template_notices(where, config.system_prompt_override)


def _system_prompt(path: Path | None) -> str | None:
    """The text of the --system-prompt file (blocking: read once, before any run starts)."""
    if path is None:
        return None
    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigurationError(f"cannot read the system prompt file {path}: {error}") from error
    if not text.strip():
        raise ConfigurationError(f"the system prompt file {path} is empty")
    return text


def api_key(settings: Settings, *, loop_here: bool | None = None) -> str | None:
    """The model API key, or None for an endpoint that needs none.

    A variable named on purpose (--api-key-env, SANDFLEET_API_KEY_ENV, the config file) must
    be set. Without a key, OpenAI itself cannot be used, while a --base-url endpoint is
    assumed to be a local server that ignores keys (it gets a placeholder). Managed sessions
    never get a local key (the operator reads a Secret), so they need none here.
    """
    if loop_here is None:
        loop_here = not (settings.backend == "kubernetes" and settings.managed)
    if settings.api_key is not None:
        return settings.api_key.get_secret_value()
    variable = settings.api_key_env
    if "api_key_env" in settings.model_fields_set:
        raise ConfigurationError(
            f"the API key variable {variable} (named by --api-key-env or api_key_env) is "
            f"not set or empty: export {variable}=<key>"
        )
    if settings.base_url is None and loop_here:
        raise ConfigurationError(
            f"no API key for the OpenAI API: export {variable}=<key> (or name another "
            "variable with --api-key-env), or give --base-url for an endpoint that needs none"
        )
    return None


def sandbox_config(
    settings: Settings, paths: SandboxPaths | None = None, hidden: Sequence[Path] = ()
) -> LocalSandboxConfig:
    """A local sandbox for the CLI: it never sees the results dir (other runs' outputs and
    prompts) nor `hidden` (a benchmark folder), even where a bind would show them."""
    return LocalSandboxConfig(
        paths=paths or SandboxPaths(),
        isolation=settings.isolation,
        egress=settings.egress,
        state_dir=settings.state_dir,
        read_only_binds=settings.read_only_bind,
        hidden_paths=(settings.results_dir.absolute(), *(path.absolute() for path in hidden)),
    )


def copy_limits(settings: Settings) -> CopyLimits:
    return CopyLimits(max_bytes=settings.max_output_bytes, max_files=settings.max_output_files)


def run_folder(settings: Settings, task_id: str) -> Path:
    """A new, empty folder for one run of the task under results_dir (blocking)."""
    return new_run_folder(settings.results_dir, task_id)


async def execute_task(
    spec: TaskSpec,
    *,
    model: Model,
    config: AgentConfig,
    settings: Settings,
    on_event: EventSink | None = None,
    gateway: GatewayTarget | None = None,
    folder: Path | None = None,
) -> TaskOutcome:
    """sandfleet.runs.execute_task as the CLI's settings configure it: a local sandbox, or,
    given `gateway`, one claimed through the gateway; recorded under
    <results_dir>/<run-id>/ (or the given empty `folder`, see run_folder)."""
    if folder is None:
        folder = await asyncio.to_thread(run_folder, settings, spec.task.id)
    return await runs.execute_task(
        spec,
        model=model,
        config=config,
        sandboxes=sandbox_source(settings, gateway),
        folder=folder,
        copy_limits=copy_limits(settings),
        on_event=on_event,
    )


def sandbox_source(settings: Settings, gateway: GatewayTarget | None = None) -> SandboxSource:
    """Local sandboxes as the settings configure them, or, given `gateway`, sandboxes
    claimed through it from the settings' pool or template."""
    if gateway is None:
        return LocalSandboxes(sandbox_config(settings))
    return GatewaySandboxes(
        gateway,
        namespace=settings.namespace,
        pool=settings.pool,
        template=settings.template,
        egress=_CLUSTER_EGRESS[settings.egress],
    )


def gateway_target(settings: Settings) -> GatewayTarget:
    """The gateway `run` and `batch` claim sandboxes through (kubernetes backend); raises
    ConfigurationError, saying how to name one, when none is known. Reads files."""
    from sandfleet.clients.gateway.target import GatewayConfigError, resolve_gateway

    try:
        return resolve_gateway(
            settings.gateway, kubeconfig=settings.kubeconfig, context=settings.context
        )
    except GatewayConfigError as error:
        raise ConfigurationError(str(error)) from error
