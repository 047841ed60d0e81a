"""Sandboxes as RL environments: a Gymnasium-style interface over the agent's tools.

    batch = await SandboxEnvBatch.local(8, reward=score)
    observations = await batch.reset_all(tasks)      # prompt messages + tool schemas
    results = await batch.step(calls)                # (observation, done, info) per env

`SandboxEnv` is one environment; `SyncSandboxEnvBatch` the same batch without asyncio;
`episode_row` turns a policy's per-turn TokenRecords into a training row. No Gymnasium
dependency: its spaces model tensors, and these observations are chat messages.
"""

from __future__ import annotations

from sandfleet.rl.batch import ResetFailure, SandboxEnvBatch
from sandfleet.rl.env import EpisodeNotStartedError, SandboxEnv
from sandfleet.rl.episode import (
    EnvConfig,
    Observation,
    RewardFn,
    StepInfo,
    StepResult,
    command_id,
    function_tools,
    prompt_messages,
)
from sandfleet.rl.rows import TrainingRowsError, episode_row, episode_turn_rows
from sandfleet.rl.sync_batch import SyncSandboxEnvBatch

__all__ = [
    "EnvConfig",
    "EpisodeNotStartedError",
    "Observation",
    "ResetFailure",
    "RewardFn",
    "SandboxEnv",
    "SandboxEnvBatch",
    "StepInfo",
    "StepResult",
    "SyncSandboxEnvBatch",
    "TrainingRowsError",
    "command_id",
    "episode_row",
    "episode_turn_rows",
    "function_tools",
    "prompt_messages",
]
