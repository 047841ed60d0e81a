"""`sandfleet run --backend kubernetes`: the task as a managed SandboxSession, followed to its end.

The operator runs the agent loop; the CLI creates the session, prints its progress from a
watch (phase changes and turns, to stderr), and reports the outcome with the same stop
reasons and exit codes as the local backend. A finished session stays for
--ttl-seconds (so `kubectl get sbx` and `sandfleet trajectory NAME` find it) unless --rm;
Ctrl-C deletes it at once, which cancels the loop and reclaims the sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.text import Text

from sandfleet.agent import AgentConfig, StopReason
from sandfleet.api import ConditionType, Phase, Reason
from sandfleet.cli.consoles import error_console
from sandfleet.cli.execution import ConfigurationError
from sandfleet.cli.exit_codes import ExitCode, outcome_exit_code
from sandfleet.cli.input_files import TextInputs, read_text_inputs
from sandfleet.cli.interrupts import run_until_interrupted
from sandfleet.cli.render import print_run_summary
from sandfleet.cluster.session_specs import managed_session_spec
from sandfleet.errors import SandfleetError
from sandfleet.fleet.manifests import (
    ManifestError,
    file_sources,
    generate_name_for,
    secret_key_ref,
    session_body,
)
from sandfleet.fleet.sessions import SessionClient, SessionGoneError
from sandfleet.fleet.status import SessionState
from sandfleet.runs.outcomes import RunFailure, TaskOutcome, utc_now
from sandfleet.sandbox.backend import SandboxPaths
from sandfleet.settings import Settings
from sandfleet.tasks import TaskSpec

# Completed reasons of sessions whose agent never reported a stop reason.
_REASON_STOPS: dict[str, str] = {
    Reason.SUBMITTED: StopReason.SUBMITTED,
    Reason.MAX_TURNS_REACHED: StopReason.MAX_TURNS,
    Reason.MODEL_ERROR: StopReason.MODEL_ERROR,
    Reason.MODEL_REQUEST_REJECTED: StopReason.MODEL_ERROR,
    Reason.CONTEXT_EXCEEDED: StopReason.CONTEXT_EXCEEDED,
    Reason.NO_TOOL_CALL: StopReason.NO_TOOL_CALL,
    Reason.SANDBOX_LOST: StopReason.SANDBOX_LOST,
    Reason.CANCELLED: StopReason.CANCELLED,
    Reason.INVALID_SPEC: RunFailure.INVALID_TASK,
    Reason.TEMPLATE_NOT_FOUND: RunFailure.INVALID_TASK,
    Reason.POOL_NOT_FOUND: RunFailure.INVALID_TASK,
    Reason.SECRET_NOT_FOUND: RunFailure.INVALID_TASK,
    Reason.IMAGE_PULL_FAILED: RunFailure.LAUNCH_FAILED,
    Reason.CONTAINER_CRASHED: RunFailure.LAUNCH_FAILED,
    Reason.CONTAINER_CREATE_FAILED: RunFailure.LAUNCH_FAILED,
    Reason.POD_UNSCHEDULABLE: RunFailure.LAUNCH_FAILED,
    Reason.BIND_FAILED: RunFailure.LAUNCH_FAILED,
    Reason.OPERATOR_RESTARTED: RunFailure.INTERNAL_ERROR,
    # Expired sessions: the budget ran out, like max_turns (exit code 1).
    Reason.DEADLINE_EXCEEDED: "deadline_exceeded",
    Reason.IDLE_TIMEOUT: "idle_timeout",
}
_STOP_REASON_VALUES = frozenset(StopReason)


def session_for_task(
    spec: TaskSpec, config: AgentConfig, settings: Settings, inputs: TextInputs
) -> dict[str, Any]:
    """The SandboxSession body for one task (raises ConfigurationError or ManifestError)."""
    if settings.api_key_secret is None and config.base_url is None:
        raise ConfigurationError(
            "the kubernetes backend never sends your local API key, and OpenAI itself needs "
            "one: create a Secret (kubectl create secret generic openai "
            "--from-literal=api-key=...) and pass --api-key-secret openai"
        )
    paths = spec.paths or SandboxPaths()
    session = managed_session_spec(
        config,
        spec.task,
        files=file_sources(inputs.contents, base_dir=paths.input_dir, modes=inputs.modes),
        api_key_secret=secret_key_ref(settings.api_key_secret) if settings.api_key_secret else None,
        template=settings.template,
        pool=settings.pool,
        paths=spec.paths,
        ttl_seconds_after_finished=settings.ttl_seconds,
    )
    return session_body(session, generate_name=generate_name_for(spec.task.id))


def stop_reason_of(state: SessionState) -> str:
    """The local backend's stop reason (or RunFailure) for a finished session."""
    if state.agent is not None and state.agent.stop_reason in _STOP_REASON_VALUES:
        return state.agent.stop_reason
    completed = state.condition(ConditionType.COMPLETED)
    if completed is not None and completed.reason in _REASON_STOPS:
        return _REASON_STOPS[completed.reason]
    if state.phase == Phase.SUCCEEDED:
        return StopReason.SUBMITTED
    if state.phase == Phase.EXPIRED:
        return "expired"
    # Failed for a reason this CLI does not know: before the loop if it never took a turn.
    started = state.agent is not None and state.agent.turns > 0
    return RunFailure.INTERNAL_ERROR if started else RunFailure.LAUNCH_FAILED


def outcome_of(
    state: SessionState, *, task_id: str, model: str, total_time_s: float
) -> TaskOutcome:
    """A finished session as the TaskOutcome the local backend would have recorded."""
    agent = state.agent
    stop_reason = stop_reason_of(state)
    error = agent.error if agent is not None else None
    if error is None and stop_reason != StopReason.SUBMITTED:
        error = state.explanation() or None
    return TaskOutcome(
        id=task_id,
        stop_reason=str(stop_reason),
        answer=agent.result if agent is not None else None,
        turns=agent.turns if agent is not None else 0,
        prompt_tokens=agent.prompt_tokens if agent is not None else 0,
        completion_tokens=agent.completion_tokens if agent is not None else 0,
        wall_time_s=round(state.duration_s or 0.0, 3),
        total_time_s=round(total_time_s, 3),
        error=error,
        model=model,
        trajectory=state.trajectory,
        finished_at=utc_now(),
    )


class SessionProgress:
    """Prints a followed session's changes: created, each phase, Ready, turns, the end."""

    def __init__(self, console: Console, *, max_turns: int) -> None:
        self._console = console
        self._max_turns = max_turns
        self._phase: Phase | None = None
        self._turns = 0
        self._ready = False

    def __call__(self, state: SessionState) -> None:
        # The last turns and the final phase arrive together: the turns come first.
        if state.finished:
            self._print_turns(state)
        self._print_phase(state)
        if state.ready and not self._ready:
            self._ready = True
            source = f" (warm, from pool {state.pool_name})" if state.pool_name else ""
            self._console.print(
                Text.assemble(
                    ("sandbox ready ", "green"),
                    f"pod {state.pod_name or '?'} on {state.node_name or '?'}{source}",
                )
            )
        self._print_turns(state)

    def _print_phase(self, state: SessionState) -> None:
        if state.phase is None or state.phase == self._phase:
            return
        self._phase = state.phase
        explanation = state.explanation()
        self._console.print(
            Text.assemble(
                ("phase ", "dim"),
                (state.phase.value, "bold"),
                ("  " + explanation if explanation else "", "dim"),
            )
        )

    def _print_turns(self, state: SessionState) -> None:
        agent = state.agent
        if agent is None or agent.turns == self._turns:
            return
        self._turns = agent.turns
        self._console.print(
            Text.assemble(
                (f"turn {agent.turns}/{self._max_turns}", "bold blue"),
                (f"  tokens {agent.prompt_tokens} in / {agent.completion_tokens} out", "dim"),
            )
        )


class ClusterRun:
    """One task on the cluster; remembers the session so an interruption can name it."""

    def __init__(self, settings: Settings, *, remove: bool) -> None:
        self.settings = settings
        self.remove = remove
        self.session: SessionState | None = None

    async def execute(
        self,
        body: dict[str, Any],
        *,
        task_id: str,
        model: str,
        on_created: Callable[[SessionState], None] | None = None,
        on_state: Callable[[SessionState], None] | None = None,
    ) -> TaskOutcome:
        """Create the session, follow it to its end and return the outcome.

        Cluster failures become failure outcomes (launch_failed, invalid_task). Cancellation
        deletes the session, then propagates.
        """
        from sandfleet.kube import InvalidError, KubeClient, KubeConfig

        started = time.perf_counter()

        def failure(reason: RunFailure | StopReason, error: str) -> TaskOutcome:
            elapsed = time.perf_counter() - started
            return TaskOutcome.failure(task_id, reason, error, model=model, total_time_s=elapsed)

        try:
            config = await asyncio.to_thread(
                KubeConfig.load, self.settings.kubeconfig, self.settings.context
            )
        except SandfleetError as error:
            return failure(RunFailure.INVALID_TASK, str(error))
        async with KubeClient(config) as kube:
            sessions = SessionClient(kube, self.settings.namespace or config.namespace)
            try:
                self.session = await _create_or_undo(sessions, body)
            except InvalidError as error:
                return failure(
                    RunFailure.INVALID_TASK, f"the API server refused the session: {error}"
                )
            except SandfleetError as error:
                return failure(RunFailure.LAUNCH_FAILED, f"cannot create the session: {error}")
            name = self.session.name
            if on_created is not None:
                on_created(self.session)
            try:
                final = await self._follow(sessions, self.session, on_state)
            except SessionGoneError as error:
                return failure(StopReason.CANCELLED, f"{error} before it finished")
            except SandfleetError as error:
                # The run goes on in the cluster; only following it failed.
                return failure(RunFailure.INTERNAL_ERROR, f"lost track of the session: {error}")
            except asyncio.CancelledError:
                await asyncio.shield(sessions.delete(name))
                raise
            if self.remove:
                await sessions.delete(name)
        return outcome_of(
            final, task_id=task_id, model=model, total_time_s=time.perf_counter() - started
        )

    async def _follow(
        self,
        sessions: SessionClient,
        created: SessionState,
        on_state: Callable[[SessionState], None] | None,
    ) -> SessionState:
        # From the created object's version on: a fast operator's changes are all seen.
        states = sessions.states(created.name, since=created)
        async with contextlib.aclosing(states):
            async for state in states:
                self.session = state
                if on_state is not None:
                    on_state(state)
                if state.finished:
                    return state
        raise AssertionError("unreachable: states() never ends without an error")


async def _create_or_undo(sessions: SessionClient, body: dict[str, Any]) -> SessionState:
    """Create the session; if cancelled meanwhile, delete what the server may have made.

    With generateName only the answer tells the name, so the request finishes (shielded)
    even when the caller is cancelled, and its session is deleted at once.
    """
    creation = asyncio.ensure_future(sessions.create(body))
    try:
        return await asyncio.shield(creation)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            created = await creation
            await sessions.delete(created.name)
        raise


def cluster_run_command(
    spec: TaskSpec,
    config: AgentConfig,
    settings: Settings,
    console: Console,
    *,
    remove: bool,
    show_progress: bool,
    as_json: bool,
) -> int:
    """The kubernetes half of `sandfleet run`; returns the exit code."""
    errors = error_console()
    try:
        inputs = read_text_inputs(spec.task.files)
        body = session_for_task(spec, config, settings, inputs)
    except (ConfigurationError, ManifestError) as error:
        errors.print(Text.assemble(("error: ", "red"), str(error)))
        return ExitCode.USAGE
    run = ClusterRun(settings, remove=remove)
    progress = SessionProgress(errors, max_turns=config.max_turns) if show_progress else None
    if show_progress:
        errors.print(
            Text.assemble(
                ("task ", "bold"), spec.task.id,
                ("   model ", "bold"), config.model,
                ("   namespace ", "bold"), settings.namespace or "(kubeconfig default)",
            )
        )  # fmt: skip

    def announce(state: SessionState) -> None:
        if show_progress:
            errors.print(Text.assemble(("session ", "bold"), state.reference, " created"))

    outcome = run_until_interrupted(
        run.execute(
            body, task_id=spec.task.id, model=config.model, on_created=announce, on_state=progress
        )
    )
    if outcome is None:
        where = f"the session {run.session.reference} was deleted" if run.session else "nothing"
        outcome = TaskOutcome.failure(
            spec.task.id, StopReason.CANCELLED, f"interrupted: {where}", model=config.model
        )
    if as_json:
        record = outcome.to_record()
        record["session"] = run.session.reference if run.session else None
        console.out(json.dumps(record, ensure_ascii=False), highlight=False)
        return outcome_exit_code(outcome)
    print_run_summary(console, outcome)
    if run.session is not None:
        console.print(
            _session_line(run.session, outcome, remove=remove, ttl_s=settings.ttl_seconds)
        )
    return outcome_exit_code(outcome)


def _session_line(state: SessionState, outcome: TaskOutcome, *, remove: bool, ttl_s: int) -> Text:
    if remove or outcome.stop_reason == StopReason.CANCELLED:
        kept = "deleted"
    else:
        kept = f"kept {ttl_s}s; trajectory: sandfleet trajectory {state.name} -n {state.namespace}"
    return Text.assemble(("session ", "bold"), state.reference, (f"  ({kept})", "dim"))
