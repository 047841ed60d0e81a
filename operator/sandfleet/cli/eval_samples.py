"""One (problem, sample) end to end in either mode, scored: a SampleRecord.

Sandbox mode reuses the CLI's task execution (local sandbox, agent loop, trajectory, outputs
copied back) or, on the kubernetes backend, its managed-session run; llm mode is one chat
completion without tools. The reward runs in its own process afterwards.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
from pathlib import Path
from typing import Any

from sandfleet.agent import AgentConfig, Model, ModelError, StopReason, TrajectoryWriter
from sandfleet.cli.execution import execute_task
from sandfleet.errors import SandfleetError
from sandfleet.eval.accounting import trajectory_token_split
from sandfleet.eval.bench_folder import Benchmark
from sandfleet.eval.problems import Problem, sample_id, sandbox_task
from sandfleet.eval.records import SampleRecord
from sandfleet.eval.user_process import compute_reward
from sandfleet.logs import get_logger
from sandfleet.runs.folders import OUTPUT_FOLDER, TRAJECTORY_FILE, task_folder_name
from sandfleet.runs.outcomes import FAILED_STOP_REASONS, RunFailure, TaskOutcome, utc_now
from sandfleet.settings import Settings
from sandfleet.tasks import TaskSpec
from sandfleet.trajectory.format import FORMAT_VERSION

log = get_logger(__name__)

ANSWER_FILE = "answer.txt"
"""The answer's name in {output_dir}, hence in the copied-back output folder."""
LLM_OK = "answered"
"""The stop reason of an llm-mode sample whose request succeeded."""


@dataclasses.dataclass(frozen=True, slots=True)
class EvalContext:
    """What every sample of one invocation shares."""

    benchmark: Benchmark
    config: AgentConfig
    settings: Settings
    """results_dir is <out>/runs/<mode>: each sample's folder goes there."""
    reward_timeout_s: float
    vanilla_prompts: dict[str, str] = dataclasses.field(default_factory=dict)
    """Problem id -> the llm-mode prompt (create_prompt, else the problem statement)."""


async def _scored(
    context: EvalContext,
    problem: Problem,
    sample: int,
    outcome: TaskOutcome,
    *,
    mode: str,
    agent_answer: str,
    started: float,
    **accounting: Any,
) -> SampleRecord:
    """The record of a finished run: its reward unless the run itself failed."""
    score, error, kind = 0.0, None, None
    if outcome.stop_reason in FAILED_STOP_REASONS:
        error, kind = f"{outcome.stop_reason}: {outcome.error or 'the run failed'}", "run"
    else:
        reward = await compute_reward(
            context.benchmark.reward_file,
            agent_answer=agent_answer,
            ground_truth=problem.ground_truth,
            kwargs=problem.reward_kwargs(),
            timeout_s=context.reward_timeout_s,
        )
        score, error = reward.score, reward.error
        kind = "reward" if error is not None else None
    return SampleRecord(
        mode=mode,
        problem_id=problem.id,
        sample=sample,
        domain=problem.domain,
        score=score,
        correct=error is None and score >= 1.0 - 1e-9,
        error=error,
        error_kind=kind,
        agent_answer=agent_answer,
        ground_truth=problem.ground_truth,
        stop_reason=outcome.stop_reason,
        turns=outcome.turns,
        prompt_tokens=outcome.prompt_tokens,
        completion_tokens=outcome.completion_tokens,
        total_time_s=round(time.perf_counter() - started, 3),
        finished_at=utc_now(),
        **accounting,
    )


async def sandbox_sample(
    context: EvalContext, problem: Problem, sample: int, model: Model
) -> SampleRecord:
    """A local sandbox run; the answer is {output_dir}/answer.txt as copied back."""
    started = time.perf_counter()
    task = sandbox_task(problem, sample, context.benchmark)
    # The benchmark folder (rows, expected answers, reward.py) is never the model's to read.
    spec = TaskSpec(task=task, paths=context.benchmark.paths, hidden=context.benchmark.secret_dirs)
    outcome = await execute_task(
        spec, model=model, config=context.config, settings=context.settings
    )
    folder = Path(outcome.results_dir or context.settings.results_dir)
    answer = await asyncio.to_thread(_read_answer, folder / OUTPUT_FOLDER / ANSWER_FILE)
    split = None
    if outcome.trajectory:
        split = await asyncio.to_thread(trajectory_token_split, Path(outcome.trajectory))
    return await _scored(
        context, problem, sample, outcome, mode="sandbox", agent_answer=answer, started=started,
        model_time_s=outcome.model_time_s, env_time_s=outcome.tool_time_s,
        context_tokens=split.context_tokens if split else None,
        observation_tokens=split.observation_tokens if split else None,
        trajectory=outcome.trajectory,
    )  # fmt: skip


def _read_answer(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", errors="replace").strip()
    except OSError:  # no answer file: the seed scores ""
        return ""


async def cluster_sample(
    context: EvalContext, problem: Problem, sample: int, body: dict[str, Any]
) -> SampleRecord:
    """A managed SandboxSession, deleted (so its sandbox reclaimed) as soon as it finished.

    The answer is the session's reported result when it is the answer file's text; a run
    that wrote no answer file has no answer (""), as in the seed and as locally, although the
    session reports the model's last text then. (status.agent.result holds at most 4 KiB.)
    """
    from sandfleet.cli.cluster_run import ClusterRun

    started = time.perf_counter()
    run = ClusterRun(context.settings, remove=True)
    outcome = await run.execute(
        body, task_id=sample_id(problem.id, sample), model=context.config.model
    )
    if run.session is not None and outcome.stop_reason == RunFailure.INTERNAL_ERROR:
        # Following the session failed while it went on running: an eval reclaims every
        # sandbox it started, not only the ones it saw finish.
        await _delete_session(context.settings, run.session.namespace, run.session.name)
    agent = run.session.agent if run.session is not None else None
    # None: an operator that does not say where the result came from; take it as it is.
    from_file = agent is None or agent.answer_from_file is not False
    return await _scored(
        context, problem, sample, outcome, mode="sandbox",
        agent_answer=(outcome.answer or "").strip() if from_file else "", started=started,
        session=run.session.reference if run.session else None,
        trajectory=outcome.trajectory,
    )  # fmt: skip


async def _delete_session(settings: Settings, namespace: str, name: str) -> None:
    from sandfleet.fleet.sessions import SessionClient
    from sandfleet.kube import KubeClient, KubeConfig

    try:
        kube_config = await asyncio.to_thread(
            KubeConfig.load, settings.kubeconfig, settings.context
        )
        async with KubeClient(kube_config) as kube:
            await SessionClient(kube, namespace).delete(name)
    except SandfleetError as error:  # the TTL reclaims it in the end; say so and go on
        log.warning("eval_session_not_deleted", session=f"{namespace}/{name}", error=str(error))


async def llm_sample(
    context: EvalContext, problem: Problem, sample: int, model: Model
) -> SampleRecord:
    """Vanilla mode: one chat completion, no tools; the answer is the reply's text."""
    started = time.perf_counter()
    task_id = sample_id(problem.id, sample)
    prompt = context.vanilla_prompts.get(problem.id, problem.problem_statement)
    path = context.settings.results_dir / task_folder_name(task_id) / TRAJECTORY_FILE
    path.unlink(missing_ok=True)
    with TrajectoryWriter(path) as trajectory:
        trajectory.write(
            {
                "kind": "meta", "format": FORMAT_VERSION, "task_id": task_id, "mode": "llm",
                "model": model.name, "base_url": context.config.base_url, "tools": [],
                "max_tokens": context.config.max_tokens,
                "temperature": context.config.temperature,
                "started_at": datetime.datetime.now(datetime.UTC).isoformat(),
            }
        )  # fmt: skip
        trajectory.write({"kind": "message", "turn": 0, "role": "user", "content": prompt})
        asked = time.perf_counter()
        try:
            reply = await model.complete(
                [model.user_message(prompt)], (), max_tokens=context.config.max_tokens
            )
        except ModelError as error:
            model_s = time.perf_counter() - asked
            outcome = TaskOutcome.failure(task_id, StopReason.MODEL_ERROR, str(error))
            trajectory.write({"kind": "result", "stop_reason": "model_error", "error": str(error)})
            return await _scored(
                context, problem, sample, outcome, mode="llm", agent_answer="",
                started=started, model_time_s=round(model_s, 3), env_time_s=0.0,
                trajectory=str(path),
            )  # fmt: skip
        model_s = time.perf_counter() - asked
        usage = reply.usage
        trajectory.write(
            {"kind": "message", "turn": 1, "role": "assistant", "content": reply.text,
             **({"reasoning": reply.reasoning} if reply.reasoning else {})}
        )  # fmt: skip
        trajectory.write(
            {"kind": "usage", "turn": 1, "prompt_tokens": usage.prompt_tokens,
             "completion_tokens": usage.completion_tokens, "model_s": round(model_s, 6)}
        )  # fmt: skip
        trajectory.write({"kind": "result", "stop_reason": LLM_OK, "answer": reply.text})
    outcome = TaskOutcome(
        id=task_id, stop_reason=LLM_OK, answer=reply.text, turns=1,
        prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
    )  # fmt: skip
    return await _scored(
        context, problem, sample, outcome, mode="llm", agent_answer=reply.text.strip(),
        started=started, model_time_s=round(model_s, 3), env_time_s=0.0,
        context_tokens=usage.prompt_tokens + usage.completion_tokens, observation_tokens=0,
        trajectory=str(path),
    )  # fmt: skip
