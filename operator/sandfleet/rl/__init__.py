"""Sandboxes as RL environments: a Gymnasium-style interface over the agent's tools.

    batch = await SandboxEnvBatch.local(8, reward=score)
    observations = await batch.reset_all(tasks)      # prompt messages + tool schemas
    results = await batch.step(calls)                # (observation, done, info) per env

`SandboxEnv` is one environment; `SyncSandboxEnvBatch` the same batch without asyncio;
`episode_row` turns a policy's per-turn TokenRecords (`token_record(response, choice)` reads
one from an OpenAI-compatible answer that was asked for TOKEN_REQUEST_FIELDS) into a training
row. No Gymnasium
dependency: its spaces model tensors, and these observations are chat messages.
"""

from __future__ import annotations

from sandfleet.agent.token_records import TOKEN_REQUEST_FIELDS, TokenRecord, token_record
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
    "TOKEN_REQUEST_FIELDS",
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
    "TokenRecord",
    "TrainingRowsError",
    "command_id",
    "episode_row",
    "episode_turn_rows",
    "function_tools",
    "prompt_messages",
    "token_record",
]
