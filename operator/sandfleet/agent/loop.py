"""The provider-neutral agent loop: model turn -> tool calls in the sandbox -> observations.

Bounded by max_turns; every way out is a StopReason. Model and sandbox failures end the
run with a reason instead of raising. Cancellation is the exception: the loop records a
`cancelled` result (trajectory record and RunFinished event) and lets CancelledError
propagate, so asyncio.timeout, TaskGroup and Ctrl-C handling keep working; callers that
want the partial result read `AgentLoop.result` or the RunFinished event. A controller that
hands the run over (shutting down) calls `suspend_on_cancel()` first: the cancellation then
leaves the trajectory resumable (resume.resume_agent) instead of recording a result.
"""

from __future__ import annotations

import asyncio
import time

from sandfleet.agent.config import AgentConfig, Task
from sandfleet.agent.context_shortening import shrunk_max_tokens
from sandfleet.agent.events import EventSink
from sandfleet.agent.model import ContextLengthExceededError, Model, ModelTurn
from sandfleet.agent.model_retries import listening
from sandfleet.agent.prompts import (
    DEFAULT_INSTANCE_PROMPT,
    DEFAULT_SYSTEM_PROMPT,
    fill_template,
    no_tool_call_nudge,
    remaining_turns_notice,
    template_values,
)
from sandfleet.agent.recorded_run import ResumeError, ResumeState
from sandfleet.agent.recorder import RunRecorder
from sandfleet.agent.results import AgentResult, StopReason, TurnTiming
from sandfleet.agent.run_state import RunState
from sandfleet.agent.sandbox_access import (
    AgentSandbox,
    output_files,
    read_answer,
    upload_task_files,
)
from sandfleet.agent.task_inputs import describe_input_files
from sandfleet.agent.tools import execute_tool_call
from sandfleet.errors import ModelError, SandboxLostError
from sandfleet.logs import get_logger
from sandfleet.tool_calls import SUBMIT, SUBMITTED_OBSERVATION, tool_specs
from sandfleet.trajectory.writer import TrajectoryWriter

log = get_logger(__name__)

_Stop = tuple[StopReason, str | None]


class AgentLoop:
    """One run of one task. Use once: `result = await AgentLoop(...).run()`.

    With `resume`, the loop continues a run another process started: it appends to the same
    trajectory (a `resumed` notice, no second meta record), does not upload the task files
    again, numbers turns on from `resume.turns + 1` within the same max_turns, and its result
    counts the whole run.
    """

    def __init__(
        self,
        task: Task,
        sandbox: AgentSandbox,
        model: Model,
        config: AgentConfig,
        *,
        trajectory: TrajectoryWriter | None = None,
        on_event: EventSink | None = None,
        resume: ResumeState | None = None,
    ) -> None:
        if resume is not None and resume.task_id != task.id:
            raise ResumeError(f"the trajectory is of task {resume.task_id!r}, not {task.id!r}")
        self._task = task
        self._sandbox = sandbox
        self._model = model
        self._config = config
        self._trajectory = trajectory
        self._recorder = RunRecorder(task.id, trajectory, on_event)
        self._specs = tool_specs(offer_undo_edit=config.offer_undo_edit)
        self._state = RunState.fresh(config)
        """The whole run state; a resumed run replaces it with the recorded one."""
        self._turn_model_s = 0.0
        """Model time of the turn in progress (added to the state when the turn closes)."""
        self._resume = resume
        self._suspending = False
        self.result: AgentResult | None = None
        """Set when the run ends, including when it is cancelled (not when suspended)."""

    def suspend_on_cancel(self) -> None:
        """Make the coming cancellation suspend the run rather than end it: a `suspended`
        notice instead of the `cancelled` result, so another process can resume it."""
        self._suspending = True

    async def run(self) -> AgentResult:
        if self.result is not None:
            raise RuntimeError("an AgentLoop runs once")
        started = time.perf_counter()
        try:
            if self._resume is None:
                await self._record_start()
                log.info("agent_run_started", task=self._task.id, model=self._model.name)
            else:
                started -= self._resume.elapsed_s()  # wall time counts from the first start
            stop, error = await self._run_until_stopped()
            answer, files, stop, error = await self._collect_outputs(stop, error)
        except asyncio.CancelledError:
            if self._suspending:
                self._recorder.suspended(self._state.turns)
                log.info("agent_run_suspended", task=self._task.id, turn=self._state.turns)
                raise
            # Nothing here awaits: a second cancellation cannot interrupt the bookkeeping.
            self._finish(
                StopReason.CANCELLED, self._state.last_text, [], "the run was cancelled", started
            )
            raise
        return self._finish(stop, answer, files, error, started)

    async def _record_start(self) -> None:
        """The meta record; it embeds the task's input files, so they are read first."""
        input_files = None
        if self._trajectory is not None and self._task.files:
            input_files = await asyncio.to_thread(describe_input_files, self._task.files)
        self._recorder.started(
            model=self._model.name,
            config=self._config,
            specs=self._specs,
            paths=self._sandbox.paths,
            input_files=input_files,
        )

    async def _run_until_stopped(self) -> _Stop:
        if self._resume is not None:
            self._restore(self._resume)
            if self._resume.submitted:
                return StopReason.SUBMITTED, None
            if self._state.nudges > self._config.max_nudges:
                return StopReason.NO_TOOL_CALL, self._no_tool_call_error()
        if not self._state.transcript:
            try:
                await upload_task_files(self._sandbox, self._task.files)
            except SandboxLostError as exc:
                return StopReason.SANDBOX_LOST, f"uploading the task files failed: {exc}"
            self._start_transcript()
        for turn in range(self._state.turns + 1, self._config.max_turns + 1):
            stop = await self._run_turn(turn)
            if stop is not None:
                return stop
        return StopReason.MAX_TURNS, None

    def _restore(self, recorded: ResumeState) -> None:
        """Take over the recorded part of the run; an unprompted state starts over."""
        self._state = RunState.resumed(recorded, self._config, self._model)
        lost = [call.call_id for call in recorded.lost_calls]
        self._recorder.resumed(
            recorded.turns + 1,
            turns_done=recorded.turns,
            lost_calls=lost,
            synthesized=recorded.synthesized,
        )
        log.info(
            "agent_run_resumed",
            task=self._task.id,
            turns_done=recorded.turns,
            lost_calls=len(lost),
        )

    def _start_transcript(self) -> None:
        paths = self._sandbox.paths
        values = template_values(paths, self._task.prompt)
        system_template = (
            self._config.system_prompt_override
            or self._task.system_prompt
            or self._config.system_prompt
            or DEFAULT_SYSTEM_PROMPT
        )
        instance_template = (
            self._task.instance_prompt or self._config.instance_prompt or DEFAULT_INSTANCE_PROMPT
        )
        system = fill_template(system_template, values)
        instance = fill_template(instance_template, values)
        self._state.transcript.append(self._model.system_message(system))
        self._state.transcript.append(self._model.user_message(instance))
        self._recorder.message(0, "system", system)
        self._recorder.message(0, "user", instance)

    async def _run_turn(self, turn: int) -> _Stop | None:
        turn_started = time.perf_counter()
        self._state.turns = turn
        self._turn_model_s = 0.0
        tool_s = 0.0
        self._recorder.turn_started(turn, self._config.max_turns)
        try:
            try:
                reply = await self._ask_model(turn)
            except ContextLengthExceededError as exc:
                return StopReason.CONTEXT_EXCEEDED, str(exc)
            except ModelError as exc:
                return StopReason.MODEL_ERROR, str(exc)
            self._take_reply(turn, reply)
            notice = remaining_turns_notice(
                self._config.max_turns - turn,
                notice_turns=self._config.remaining_turns_notice,
                paths=self._sandbox.paths,
            )
            if not reply.tool_calls:
                return self._nudge(turn, notice)
            self._state.nudges = 0
            last = len(reply.tool_calls) - 1
            for index, call in enumerate(reply.tool_calls):
                self._recorder.tool_called(turn, call)
                if call.name == SUBMIT:
                    self._recorder.observed(turn, call, SUBMITTED_OBSERVATION, 0.0)
                    return StopReason.SUBMITTED, None
                call_started = time.perf_counter()
                try:
                    output = await execute_tool_call(self._sandbox, call, specs=self._specs)
                except SandboxLostError as exc:
                    return StopReason.SANDBOX_LOST, str(exc)
                finally:
                    call_s = time.perf_counter() - call_started
                    tool_s += call_s
                if index == last:
                    output += notice
                self._state.observations.add(len(self._state.transcript), turn, call, output)
                self._state.transcript.append(self._model.tool_result_message(call, output))
                self._recorder.observed(turn, call, output, call_s)
            return None
        finally:
            self._close_turn(turn, turn_started, tool_s)

    def _nudge(self, turn: int, notice: str) -> _Stop | None:
        """Answer a reply without a tool call: a nudge, or the end after max_nudges in a row."""
        self._state.nudges += 1
        if self._state.nudges > self._config.max_nudges:
            return StopReason.NO_TOOL_CALL, self._no_tool_call_error()
        nudge = no_tool_call_nudge(self._sandbox.paths) + notice
        self._state.transcript.append(self._model.user_message(nudge))
        self._recorder.message(turn, "user", nudge)
        return None

    def _no_tool_call_error(self) -> str:
        return f"the model replied {self._state.nudges} times in a row without calling a tool"

    async def _ask_model(self, turn: int) -> ModelTurn:
        """The model's reply; a context-length rejection first shrinks max_tokens (up to
        context_retries times), then shortens the history, and is raised when neither helps."""
        shrinks = 0
        while True:
            asked = time.perf_counter()
            try:
                with listening(lambda retry: self._recorder.retried(turn, retry)):
                    return await self._model.complete(
                        self._state.transcript, self._specs, max_tokens=self._state.max_tokens
                    )
            except ContextLengthExceededError as exc:
                smaller = shrunk_max_tokens(
                    self._state.max_tokens, exc, floor=self._config.min_completion_tokens
                )
                if smaller is None or shrinks >= self._config.context_retries:
                    if self._shorten_history(turn, exc):
                        continue
                    raise
                shrinks += 1
                log.warning(
                    "max_tokens_reduced",
                    task=self._task.id,
                    turn=turn,
                    old=self._state.max_tokens,
                    new=smaller,
                )
                self._recorder.max_tokens_reduced(turn, self._state.max_tokens, smaller, str(exc))
                self._state.max_tokens = smaller
            except ModelError:
                raise
            # A Model must raise only ModelError; one that breaks that (an adapter bug, a reply
            # no check foresaw) still ends the run with a recorded outcome, not a crash.
            except Exception as exc:
                log.warning("model_call_crashed", task=self._task.id, error=repr(exc))
                raise ModelError(f"the model call failed: {type(exc).__name__}: {exc}") from exc
            finally:
                self._turn_model_s += time.perf_counter() - asked

    def _shorten_history(self, turn: int, error: ContextLengthExceededError) -> bool:
        """Clip old observations in the transcript; False when nothing is left to clip."""
        kept, clippings = self._state.observations.shorten(
            turn - 1, self._config.context_keep_turns
        )
        if not clippings:
            return False
        for clipping in clippings:
            observation = clipping.observation
            self._state.transcript[observation.index] = self._model.tool_result_message(
                observation.call, observation.text
            )
        log.warning("context_shortened", task=self._task.id, turn=turn, clipped=len(clippings))
        self._recorder.context_shortened(
            turn, kept_turns=kept, clipped=[c.to_record() for c in clippings], reason=str(error)
        )
        return True

    def _take_reply(self, turn: int, reply: ModelTurn) -> None:
        self._state.usage += reply.usage
        if reply.text:
            self._state.last_text = reply.text
        self._state.transcript.append(reply.message)
        self._recorder.replied(
            turn, reply, model_s=self._turn_model_s, max_tokens=self._state.max_tokens
        )

    def _close_turn(self, turn: int, started: float, tool_s: float) -> None:
        wall = time.perf_counter() - started
        self._state.model_time_s += self._turn_model_s
        self._state.tool_time_s += tool_s
        overhead = max(0.0, wall - self._turn_model_s - tool_s)
        self._state.timings.append(TurnTiming(turn, self._turn_model_s, tool_s, overhead))
        log.debug("agent_turn_completed", task=self._task.id, turn=turn, overhead_s=overhead)

    async def _collect_outputs(
        self, stop: StopReason, error: str | None
    ) -> tuple[str | None, list[str], StopReason, str | None]:
        if stop is StopReason.SANDBOX_LOST:
            return self._state.last_text, [], stop, error
        try:
            files = await output_files(self._sandbox)
        except SandboxLostError as exc:
            return self._state.last_text, [], StopReason.SANDBOX_LOST, f"listing outputs: {exc}"
        paths = [entry.path for entry in files]
        try:
            answer = await read_answer(self._sandbox, files)
        except SandboxLostError as exc:
            return (
                self._state.last_text,
                paths,
                StopReason.SANDBOX_LOST,
                f"reading the answer: {exc}",
            )
        except ValueError as exc:  # oversized answer file
            return self._state.last_text, paths, stop, error or str(exc)
        self._state.answer_from_file = answer is not None
        return (answer if answer is not None else self._state.last_text), paths, stop, error

    def _finish(
        self,
        stop: StopReason,
        answer: str | None,
        files: list[str],
        error: str | None,
        started: float,
    ) -> AgentResult:
        result = AgentResult(
            task_id=self._task.id,
            stop_reason=stop,
            answer=answer,
            answer_from_file=self._state.answer_from_file,
            turns=self._state.turns,
            prompt_tokens=self._state.usage.prompt_tokens,
            completion_tokens=self._state.usage.completion_tokens,
            model_time_s=self._state.model_time_s,
            tool_time_s=self._state.tool_time_s,
            wall_time_s=time.perf_counter() - started,
            output_files=files,
            error=error,
            trajectory_path=self._trajectory.path if self._trajectory is not None else None,
            turn_timings=tuple(self._state.timings),
        )
        self.result = result
        log.info(
            "agent_run_finished",
            task=self._task.id,
            stop_reason=stop.value,
            turns=self._state.turns,
            error=error,
        )
        self._recorder.finished(result)
        return result


async def run_agent(
    task: Task,
    sandbox: AgentSandbox,
    model: Model,
    config: AgentConfig,
    *,
    trajectory: TrajectoryWriter | None = None,
    on_event: EventSink | None = None,
) -> AgentResult:
    """Upload the task's files, run the loop, collect the answer and the output file list.

    Never raises for model or sandbox failures (the stop reason says what happened).
    CancelledError propagates after the `cancelled` result is recorded and reported.
    TaskFileError (a local input file cannot be read) is raised before the run starts.
    """
    loop = AgentLoop(task, sandbox, model, config, trajectory=trajectory, on_event=on_event)
    return await loop.run()
