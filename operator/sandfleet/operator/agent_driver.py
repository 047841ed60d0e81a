"""Driving a managed session's agent loop in its sandbox, from the operator.

The loop talks to the model endpoint and to the runtime at the pod IP; the trajectory is
written record by record into the store as it happens, and the session's status hears
about progress at a bounded rate. After an operator restart the run resumes from that
trajectory.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from sandfleet.agent.config import AgentConfig, Task
from sandfleet.agent.events import AgentEvent, ObservationReceived, RunFinished, TurnStarted
from sandfleet.agent.loop import run_agent
from sandfleet.agent.results import AgentResult
from sandfleet.agent.resume import ResumeError, ResumeState, load_resume_state, resume_agent
from sandfleet.api import AgentSpec, Label, Reason
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandfleetError
from sandfleet.fleet.plans import PlanError
from sandfleet.fleet.resources import ObjectRef
from sandfleet.logs import get_logger
from sandfleet.operator.consented_keys import read_consented_key
from sandfleet.operator.context import OperatorContext
from sandfleet.operator.model_endpoints import OPENAI_BASE_URL, EndpointNotAllowedError
from sandfleet.operator.session_status import SessionStatus
from sandfleet.sandbox.facade import Sandbox, SandboxPaths
from sandfleet.trajectory.writer import TrajectoryWriter

log = get_logger(__name__)


class ResumeImpossibleError(SandfleetError):
    """The run was interrupted and its trajectory cannot carry it on."""


async def agent_config(ctx: OperatorContext, namespace: str, agent: AgentSpec) -> AgentConfig:
    """The loop's configuration. A session that names no endpoint and no key gets the
    platform's default endpoint and key; the platform's key never goes anywhere else.

    The operator acts for the session's creator here, so it does only what the creator may
    have done: it calls an endpoint only when the platform's allowlist admits it, and reads
    the key Secret only when its owner labelled it sandfleet.dev/model-credentials=true.
    Raises PlanError (EndpointNotAllowed, SecretNotLabelled, SecretNotFound, InvalidSpec).
    """
    api_key = None
    base_url = agent.base_url
    settings = ctx.settings
    if base_url is None and agent.api_key_secret_ref is None and settings.default_model_base_url:
        base_url = settings.default_model_base_url
        if settings.default_model_api_key_file is not None:
            key_file = settings.default_model_api_key_file
            api_key = (await asyncio.to_thread(key_file.read_text)).strip()
    try:
        # Before the Secret is read: a refused endpoint never costs a read.
        ctx.model_endpoints.check(base_url or OPENAI_BASE_URL)
    except EndpointNotAllowedError as exc:
        raise PlanError(Reason.ENDPOINT_NOT_ALLOWED, str(exc)) from None
    if agent.api_key_secret_ref is not None:
        ref = agent.api_key_secret_ref
        value = await read_consented_key(
            ctx.kube,
            namespace,
            "secrets",
            ref.name,
            ref.key,
            label=Label.MODEL_CREDENTIALS,
            use=f"apiKeySecretRef {ref.name}/{ref.key}",
        )
        api_key = value.decode()
    return AgentConfig(
        model=agent.model,
        base_url=base_url,
        api_key=api_key,
        max_turns=agent.max_turns,
        max_tokens=agent.max_tokens,
        temperature=agent.temperature_value,
        top_p=agent.top_p_value,
        seed=agent.seed,
        extra_body=agent.extra_body_value,
        tool_timeout_s=float(agent.tool_timeout_seconds),
        system_prompt=agent.system_prompt,
        record_tokens=agent.record_tokens,
        # A redirect would carry the prompts (and, to the same host, the key) to a URL the
        # allowlist never saw.
        follow_redirects=False,
    )


class _Progress:
    """Agent events -> metrics at once, and status progress (flushed at a bounded rate)."""

    def __init__(self, ctx: OperatorContext, status: SessionStatus, turns_before: int) -> None:
        self._ctx = ctx
        self._status = status
        self._turns_before = turns_before
        self.turns = turns_before

    def __call__(self, event: AgentEvent) -> None:
        if isinstance(event, TurnStarted):
            self.turns = event.turn
            self._ctx.metrics.agent_turn()
            agent = self._status.get("agent") or {}
            self._status.agent_progress(
                turns=event.turn,
                prompt_tokens=agent.get("promptTokens", 0),
                completion_tokens=agent.get("completionTokens", 0),
            )
        elif isinstance(event, ObservationReceived):
            self._ctx.metrics.tool_called(event.name, event.tool_s)
        elif isinstance(event, RunFinished):
            result = event.result
            self._ctx.metrics.agent_finished(
                result.stop_reason.value, result.prompt_tokens, result.completion_tokens
            )


@contextlib.asynccontextmanager
async def _flushing(status: SessionStatus, interval_s: float) -> AsyncIterator[None]:
    """Publishes progress every `interval_s` while the block runs. A failed patch is only
    progress not shown yet (the next one carries it): it never ends the run."""

    async def flush_forever() -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await status.flush(throttle_s=interval_s)
            except Exception as exc:  # noqa: BLE001 - an API hiccup must not fail the run
                log.warning("status_progress_failed", error=str(exc))

    task = asyncio.create_task(flush_forever())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def drive_agent(
    ctx: OperatorContext,
    session: ObjectRef,
    agent: AgentSpec,
    config: AgentConfig,
    *,
    workdir: str,
    address: str,
    token: str,
    status: SessionStatus,
    resuming: bool,
) -> AgentResult:
    """Run (or, when `resuming`, continue) the session's loop to its end.

    `config` comes from agent_config (made before the sandbox is leased). Raises
    ResumeImpossibleError when an interrupted run's trajectory is missing or unusable.
    """
    model = ctx.model_for(config)
    path = ctx.store.writer_path(session.namespace, session.name, session.uid)
    status.set(trajectory=ctx.store.reference(session.namespace, session.name, session.uid))
    task = Task(
        id=f"{session.namespace}/{session.name}",
        prompt=agent.prompt,
        instance_prompt=agent.instance_prompt,
    )
    sandbox = Sandbox(
        RuntimeClient(address, token),
        paths=SandboxPaths.under(workdir),
        tool_timeout_s=float(agent.tool_timeout_seconds),
    )
    state = await _resume_state(path) if resuming else None
    turns_before = state.turns if state is not None else 0
    progress = _Progress(ctx, status, turns_before)
    log.info("agent_started", session=task.id, model=agent.model, resuming=resuming)
    try:
        with ctx.store.writing(path), TrajectoryWriter(path) as writer:
            async with _flushing(status, ctx.settings.status_interval_seconds or 1.0):
                if state is not None:
                    return await resume_agent(
                        task,
                        sandbox,
                        model,
                        config,
                        state,
                        trajectory=writer,
                        on_event=progress,
                    )
                return await run_agent(
                    task, sandbox, model, config, trajectory=writer, on_event=progress
                )
    finally:
        await sandbox.close()


def set_aside_trajectory(ctx: OperatorContext, session: ObjectRef, attempt: int) -> None:
    """A lost sandbox's run starts over: its trajectory so far is kept beside the new one."""
    path = ctx.store.writer_path(session.namespace, session.name, session.uid)
    if path.exists():
        path.rename(path.with_name(f"{path.stem}.lost-{attempt}{path.suffix}"))


async def _resume_state(path: Path) -> ResumeState:
    """The state to continue an interrupted run from (see sandfleet.agent.resume).

    A shutdown cancels the loop, which records a `cancelled` result: that run was
    interrupted by us, not finished, so it carries on (carry_on_cancelled).
    """
    try:
        state = await load_resume_state(path, carry_on_cancelled=True)
    except ResumeError as exc:
        raise ResumeImpossibleError(f"cannot resume from the trajectory: {exc}") from exc
    if state is None:
        raise ResumeImpossibleError("the trajectory already ends with a result")
    return state
