"""A trainer's agent loop over SandboxEnvBatch: rollouts with token-faithful training rows.

The policy is a toy: whatever an OpenAI-compatible endpoint (vLLM, SGLang) answers, asked
for token ids and logprobs. Each round resets every environment (the sandbox goes back to
its pristine tree, processes killed) for its next task, then steps all environments
together until every episode is done. A finished episode becomes one verl-style row
(prompt_ids, response_ids, response_mask, response_logprobs, reward); an episode whose
sandbox died is masked (no row), never mistaken for a policy failure.

    python examples/rl/rollouts.py --base-url http://localhost:8000/v1 --model Qwen/Qwen3-4B \\
        --envs 4 --rounds 2 --out rows.jsonl
    # through the gateway instead of local sandboxes:
    python examples/rl/rollouts.py ... --pool py312 --namespace team-a

Needs only sandfleet[control] (openai is one of its dependencies); no trainer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI

from sandfleet import SandboxCore
from sandfleet.agent import Task
from sandfleet.rl import (
    TOKEN_REQUEST_FIELDS,
    EnvConfig,
    Observation,
    RewardFn,
    SandboxEnvBatch,
    StepResult,
    TokenRecord,
    TrainingRowsError,
    episode_row,
    token_record,
)
from sandfleet.tool_calls import ToolCall


class EndpointPolicy:
    """One chat-completions request per model turn, asking for token ids and logprobs."""

    def __init__(self, base_url: str, model: str, api_key: str, max_tokens: int) -> None:
        self._client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=2)
        self._model = model
        self._max_tokens = max_tokens

    async def act(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], list[ToolCall], TokenRecord]:
        response = await self._client.chat.completions.create(
            model=self._model,
            messages=messages,  # type: ignore[arg-type]
            tools=tools,  # type: ignore[arg-type]
            max_tokens=self._max_tokens,
            extra_body=dict(TOKEN_REQUEST_FIELDS),
        )
        choice = response.choices[0]
        message = choice.message.model_dump(exclude_none=True, exclude={"reasoning_content"})
        calls = [
            ToolCall(call.id, call.function.name, call.function.arguments)
            for call in choice.message.tool_calls or ()
            if call.type == "function"
        ]
        return message, calls, token_record(response, choice)

    async def close(self) -> None:
        await self._client.close()


class Episode:
    """One environment's episode as the trainer sees it: the transcript, the calls still to
    run from the last reply, and the per-turn token records."""

    def __init__(self, task: Task, observation: Observation) -> None:
        self.task = task
        self.messages = list(observation.messages)
        self.tools = observation.tools
        self.pending: list[ToolCall] = []
        self.tokens: list[TokenRecord] = []
        self.done = False
        self.last: StepResult | None = None


def answer_reward(expected: str) -> RewardFn:
    """The reward of one task: 1.0 when the answer file holds its expected answer."""

    async def reward(answer: str | None, sandbox: SandboxCore) -> float:
        del sandbox  # a real task might run its tests in the sandbox here
        return 1.0 if answer == expected else 0.0

    return reward


async def run_round(
    batch: SandboxEnvBatch,
    policy: EndpointPolicy,
    tasks: Sequence[Task],
    rewards: Sequence[RewardFn],
    max_turns: int,
) -> list[Episode | None]:
    """Reset every environment for its task and step them together until all are done."""
    observations = await batch.reset_all(tasks, rewards)
    episodes: list[Episode | None] = [
        Episode(task, obs) if isinstance(obs, Observation) else None
        for task, obs in zip(tasks, observations, strict=True)
    ]
    for _ in range(max_turns):
        live = [e for e in episodes if e is not None and not e.done]
        if not live:
            break
        # Ask the policy for every episode without calls left to run (concurrently).
        asking = [e for e in live if not e.pending]
        replies = await asyncio.gather(*(policy.act(e.messages, e.tools) for e in asking))
        for asked, (message, reply_calls, tokens) in zip(asking, replies, strict=True):
            asked.messages.append(message)
            asked.tokens.append(tokens)
            # No tool call: the loop would nudge; this toy ends the episode (the reward is 0).
            asked.pending = reply_calls or [ToolCall("none", "submit", "{}")]
        step_calls = [e.pending.pop(0) if e is not None and not e.done else None for e in episodes]
        results = await batch.step(step_calls)
        for stepped, result in zip(episodes, results, strict=True):
            if stepped is None or result is None:
                continue
            stepped.last = result
            if result.observation or not result.done:
                stepped.messages.append(result.message())
            stepped.done = result.done
    return episodes


def episode_rows(episodes: Sequence[Episode | None]) -> tuple[list[dict[str, Any]], int]:
    """Rows of the finished episodes, and how many were masked (sandbox lost, no tokens)."""
    rows: list[dict[str, Any]] = []
    masked = 0
    for episode in episodes:
        info = episode.last.info if episode is not None and episode.last is not None else None
        if episode is None or info is None or info.sandbox_lost or not episode.done:
            masked += 1
            continue
        stop = "submitted" if info.submitted else "max_turns"
        try:
            rows.append(
                episode_row(
                    episode.tokens, reward=info.reward, task_id=episode.task.id, stop_reason=stop
                )
            )
        except TrainingRowsError as exc:  # the endpoint returned no token ids
            print(f"masked {episode.task.id}: {exc}", file=sys.stderr)
            masked += 1
    return rows, masked


def load_tasks(path: Path) -> tuple[list[Task], dict[str, str]]:
    tasks, answers = [], {}
    for line in path.read_text().splitlines():
        if line.strip():
            raw = json.loads(line)
            files = {name: text.encode() for name, text in raw.get("files", {}).items()}
            tasks.append(Task(id=raw["id"], prompt=raw["prompt"], files=files))
            answers[raw["id"]] = raw["answer"]
    return tasks, answers


async def main(args: argparse.Namespace) -> dict[str, Any]:
    tasks, answers = load_tasks(args.tasks)
    config = EnvConfig(max_turns=args.max_turns, tool_timeout_s=60)
    policy = EndpointPolicy(args.base_url, args.model, args.api_key, args.max_tokens)
    if args.pool or args.template:
        batch = await SandboxEnvBatch.on_cluster(
            args.envs, args.namespace, config, pool=args.pool, template=args.template
        )
    else:
        batch = await SandboxEnvBatch.local(args.envs, config=config)
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    masked = episodes_run = 0
    async with batch:
        for round_index in range(args.rounds):
            count = args.envs
            round_tasks = [tasks[(round_index * count + i) % len(tasks)] for i in range(count)]
            rewards = [answer_reward(answers[task.id]) for task in round_tasks]
            episodes = await run_round(batch, policy, round_tasks, rewards, args.max_turns)
            round_rows, round_masked = episode_rows(episodes)
            rows += round_rows
            masked += round_masked
            episodes_run += len(episodes)
    await policy.close()
    elapsed = time.perf_counter() - started
    with args.out.open("w") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    scores = [row["reward"] for row in rows if row["reward"] is not None]
    return {
        "episodes": episodes_run,
        "rows": len(rows),
        "masked": masked,
        "mean_reward": sum(scores) / len(scores) if scores else None,
        "episodes_per_s": episodes_run / elapsed if elapsed > 0 else None,
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True, help="OpenAI-compatible endpoint (…/v1)")
    parser.add_argument("--model", default="policy")
    parser.add_argument("--api-key", default="EMPTY")
    parser.add_argument("--tasks", type=Path, default=Path(__file__).with_name("tasks.jsonl"))
    parser.add_argument("--envs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--out", type=Path, default=Path("rows.jsonl"))
    parser.add_argument("--pool", help="claim the sandboxes from this pool through the gateway")
    parser.add_argument("--template", help="claim cold sandboxes of this template")
    parser.add_argument("--namespace", help="the gateway namespace (default: kubeconfig's)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(parse_args()))))
