"""One task end to end for `run` and `batch`: sandbox, agent loop, outputs copied back, result."""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sandfleet.agent import (
    AgentConfig,
    AgentEvent,
    AgentResult,
    EventSink,
    Model,
    RunFinished,
    StopReason,
    Task,
    TaskFileError,
    TrajectoryWriter,
    run_agent,
)
from sandfleet.backends.local import LocalSandboxConfig
from sandfleet.cli.results import (
    OUTPUT_FOLDER,
    RESULT_FILE,
    TRAJECTORY_FILE,
    RunFailure,
    TaskOutcome,
    new_run_folder,
    write_result_file,
)
from sandfleet.errors import SandfleetError
from sandfleet.logs import get_logger
from sandfleet.sandbox.copy_back import CopyLimits, CopyReport
from sandfleet.sandbox.facade import ClusterSandbox, Sandbox, SandboxPaths
from sandfleet.settings import Settings
from sandfleet.tasks import TaskSpec, template_notices

if TYPE_CHECKING:
    from sandfleet.clients.gateway.target import GatewayTarget

log = get_logger(__name__)

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
        tool_timeout_s=settings.tool_timeout_s,
        request_timeout_s=settings.request_timeout_s,
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
    """Run one task in a fresh sandbox and record it under <results_dir>/<run-id>/ (or the
    given empty `folder`, see run_folder): a local sandbox, or, given `gateway`, one claimed
    through the gateway (released at the end). Earlier runs' folders are never touched.

    Never raises for a sandbox that fails to start, a lost sandbox or a model failure: the
    outcome's stop reason says what happened. CancelledError propagates after result.json
    has been written with stop reason `cancelled` and the sandbox has been reclaimed.
    """
    task = spec.task
    if folder is None:
        folder = await asyncio.to_thread(run_folder, settings, task.id)
    started = time.perf_counter()
    finished: list[AgentResult] = []

    def observe(event: AgentEvent) -> None:
        if isinstance(event, RunFinished):
            finished.append(event.result)
        if on_event is not None:
            on_event(event)

    async with contextlib.AsyncExitStack() as stack:
        try:
            sandbox = await stack.enter_async_context(
                _open_sandbox(spec, config, settings, gateway)
            )
        except (SandfleetError, OSError) as error:
            log.warning("sandbox_launch_failed", task=task.id, error=str(error))
            outcome = TaskOutcome.failure(
                task.id, RunFailure.LAUNCH_FAILED, f"the sandbox did not start: {error}",
                model=config.model, results_dir=folder,
                total_time_s=time.perf_counter() - started,
            )  # fmt: skip
            await asyncio.to_thread(write_result_file, folder / RESULT_FILE, outcome)
            return outcome
        trajectory = stack.enter_context(TrajectoryWriter(folder / TRAJECTORY_FILE))
        try:
            result = await run_agent(
                task, sandbox, model, config, trajectory=trajectory, on_event=observe
            )
        except TaskFileError as error:  # an input file vanished or became unreadable
            trajectory.close()
            _remove_if_empty(trajectory.path)  # the loop reads its inputs before any record
            outcome = TaskOutcome.failure(
                task.id, RunFailure.INVALID_TASK, str(error), model=config.model,
                results_dir=folder, total_time_s=time.perf_counter() - started,
            )  # fmt: skip
            await asyncio.to_thread(write_result_file, folder / RESULT_FILE, outcome)
            return outcome
        # The error contract: whatever broke, the run leaves a result.json and an outcome.
        except Exception as error:
            log.warning("task_crashed", task=task.id, error=repr(error))
            log.debug("task_crash_traceback", task=task.id, exc_info=True)
            outcome = _crashed(
                task, error, config.model, folder, started=started, finished=finished
            )
            await asyncio.to_thread(write_result_file, folder / RESULT_FILE, outcome)
            return outcome
        except asyncio.CancelledError:
            partial = finished[0] if finished else None
            outcome = _cancelled_outcome(task, partial, config.model, folder, started)
            # Synchronous on purpose: nothing may be awaited between a cancellation and the
            # record of it, or a second Ctrl-C could leave no result behind.
            write_result_file(folder / RESULT_FILE, outcome)
            raise
        copied, copy_error, report = await _copy_outputs(
            sandbox, result, folder / OUTPUT_FOLDER, copy_limits(settings)
        )
    outcome = TaskOutcome.from_agent_result(
        result, model=config.model, results_dir=folder, output_files=copied,
        total_time_s=time.perf_counter() - started, error=copy_error,
        copy_back=report.to_record() if report is not None else None,
    )  # fmt: skip
    await asyncio.to_thread(write_result_file, folder / RESULT_FILE, outcome)
    return outcome


def gateway_target(settings: Settings) -> GatewayTarget:
    """The gateway `run` and `batch` claim sandboxes through (kubernetes backend); raises
    ConfigurationError, saying how to name one, when none is known. Reads files."""
    from sandfleet.clients.gateway.target import GatewayConfigError, resolve_gateway

    try:
        return resolve_gateway(
            settings.gateway, kubeconfig=settings.kubeconfig, context=settings.kube_context
        )
    except GatewayConfigError as error:
        raise ConfigurationError(str(error)) from error


def _open_sandbox(
    spec: TaskSpec, config: AgentConfig, settings: Settings, gateway: GatewayTarget | None
) -> contextlib.AbstractAsyncContextManager[Sandbox]:
    if gateway is None:
        return Sandbox.local(
            sandbox_config(settings, spec.paths, spec.hidden), tool_timeout_s=config.tool_timeout_s
        )
    return _claimed_sandbox(spec, config, settings, gateway)


@contextlib.asynccontextmanager
async def _claimed_sandbox(
    spec: TaskSpec, config: AgentConfig, settings: Settings, gateway: GatewayTarget
) -> AsyncIterator[Sandbox]:
    """One sandbox through the gateway (pool or template of the settings), released at exit."""
    # Imported here: a local run need not load the cluster backend.
    from sandfleet.backends.gateway import GatewayBackend, GatewaySandboxRequest
    from sandfleet.cluster.manifests import generate_name_for

    request = GatewaySandboxRequest(
        settings.namespace,
        pool=settings.pool,
        template=settings.template,
        egress=_CLUSTER_EGRESS[settings.egress],
        generate_name=generate_name_for(spec.task.id),
        target=gateway,
        paths=spec.paths,
    )
    opened = await GatewayBackend(request).open()
    sandbox = ClusterSandbox.from_opened(opened, tool_timeout_s=config.tool_timeout_s)
    try:
        yield sandbox
    finally:
        try:
            await sandbox.close()
        except SandfleetError as error:
            # The run's record matters more than the release: the session's idle timeout or
            # deadline reclaims it (an admin sees it in `kubectl get sbx`).
            log.warning(
                "gateway_release_failed", task=spec.task.id, session=sandbox.name, error=str(error)
            )


def _crashed(
    task: Task,
    error: Exception,
    model: str,
    folder: Path,
    *,
    started: float,
    finished: list[AgentResult],
) -> TaskOutcome:
    """An internal_error outcome (exit 1) for a run that raised instead of ending."""
    text = f"{type(error).__name__}: {error}"
    if finished:  # the loop had recorded its result; what broke came after it
        return TaskOutcome.from_agent_result(
            finished[0], model=model, results_dir=folder, output_files=[],
            total_time_s=time.perf_counter() - started, error=text,
        )  # fmt: skip
    return TaskOutcome.failure(
        task.id, RunFailure.INTERNAL_ERROR, text, model=model, results_dir=folder,
        total_time_s=time.perf_counter() - started,
    )  # fmt: skip


def _cancelled_outcome(
    task: Task, partial: AgentResult | None, model: str, folder: Path, started: float
) -> TaskOutcome:
    if partial is None:
        return TaskOutcome.failure(
            task.id, StopReason.CANCELLED, "the run was cancelled", model=model,
            results_dir=folder, total_time_s=time.perf_counter() - started,
        )  # fmt: skip
    return TaskOutcome.from_agent_result(
        partial, model=model, results_dir=folder, output_files=[],
        total_time_s=time.perf_counter() - started,
    )  # fmt: skip


async def _copy_outputs(
    sandbox: Sandbox, result: AgentResult, local_dir: Path, limits: CopyLimits
) -> tuple[list[str], str | None, CopyReport | None]:
    """Copy the sandbox's output directory back: (relative paths, error or None, report).

    What the copy skipped (links, FIFOs, devices, paths outside the folder, files over the
    limits) is in the report; an error means nothing could be copied at all.
    """
    if not result.output_files or result.stop_reason == StopReason.SANDBOX_LOST:
        return [], None, None
    try:
        report = await sandbox.copy_tree(sandbox.paths.output_dir, local_dir, limits)
    except (SandfleetError, OSError) as error:  # OSError: the results folder is unwritable
        return [], f"copying the output files failed: {error}", None
    if report.skipped_total or report.truncated:
        log.warning(
            "copy_back_incomplete",
            files=len(report.files),
            skipped=report.skipped_total,
            truncated=report.truncated,
        )
    return sorted(report.files), None, report


def _remove_if_empty(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.stat().st_size == 0:
            path.unlink()
