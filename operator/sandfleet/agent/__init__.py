"""The agent loop: a model drives a sandbox through tools until it submits or runs out of turns.

Exports load lazily (PEP 562), as in `sandfleet/__init__.py`: importing the package (the CLI
does, for `--help` and `replay` too) costs only the modules a caller uses. The openai SDK,
about a second to import, loads when openai_model() creates a model.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "AgentConfig",
    "AgentEvent",
    "AgentLoop",
    "AgentResult",
    "AgentSandbox",
    "ContextLengthExceededError",
    "EventSink",
    "Model",
    "ModelError",
    "ModelReplied",
    "ModelRetried",
    "ModelTurn",
    "ObservationReceived",
    "OpenAIChatModel",
    "RunFinished",
    "StopReason",
    "Task",
    "TaskFileError",
    "ToolCall",
    "ToolCalled",
    "ToolSpec",
    "TrajectoryWriter",
    "TurnStarted",
    "TurnTiming",
    "Usage",
    "execute_tool_call",
    "openai_model",
    "read_trajectory",
    "run_agent",
    "tool_specs",
]

_LAZY = {
    "AgentConfig": "sandfleet.agent.config",
    "Task": "sandfleet.agent.config",
    "AgentEvent": "sandfleet.agent.events",
    "EventSink": "sandfleet.agent.events",
    "ModelReplied": "sandfleet.agent.events",
    "ModelRetried": "sandfleet.agent.events",
    "ObservationReceived": "sandfleet.agent.events",
    "RunFinished": "sandfleet.agent.events",
    "ToolCalled": "sandfleet.agent.events",
    "TurnStarted": "sandfleet.agent.events",
    "AgentLoop": "sandfleet.agent.loop",
    "run_agent": "sandfleet.agent.loop",
    "ContextLengthExceededError": "sandfleet.agent.model",
    "Model": "sandfleet.agent.model",
    "ModelError": "sandfleet.errors",
    "ModelTurn": "sandfleet.agent.model",
    "ToolCall": "sandfleet.tool_calls",
    "Usage": "sandfleet.agent.model",
    "OpenAIChatModel": "sandfleet.agent.openai_chat",
    "AgentResult": "sandfleet.agent.results",
    "StopReason": "sandfleet.agent.results",
    "TurnTiming": "sandfleet.agent.results",
    "AgentSandbox": "sandfleet.agent.sandbox_access",
    "TaskFileError": "sandfleet.agent.task_inputs",
    "ToolSpec": "sandfleet.tool_calls",
    "execute_tool_call": "sandfleet.agent.tools",
    "tool_specs": "sandfleet.tool_calls",
    "TrajectoryWriter": "sandfleet.trajectory.writer",
    "read_trajectory": "sandfleet.trajectory.reader",
}

if TYPE_CHECKING:
    from sandfleet.agent.config import AgentConfig, Task
    from sandfleet.agent.events import (
        AgentEvent,
        EventSink,
        ModelReplied,
        ModelRetried,
        ObservationReceived,
        RunFinished,
        ToolCalled,
        TurnStarted,
    )
    from sandfleet.agent.loop import AgentLoop, run_agent
    from sandfleet.agent.model import ContextLengthExceededError, Model, ModelTurn, Usage
    from sandfleet.agent.openai_chat import OpenAIChatModel
    from sandfleet.agent.results import AgentResult, StopReason, TurnTiming
    from sandfleet.agent.sandbox_access import AgentSandbox
    from sandfleet.agent.task_inputs import TaskFileError
    from sandfleet.agent.tools import execute_tool_call
    from sandfleet.errors import ModelError
    from sandfleet.tool_calls import ToolCall, ToolSpec, tool_specs
    from sandfleet.trajectory.reader import read_trajectory
    from sandfleet.trajectory.writer import TrajectoryWriter


def openai_model(config: AgentConfig) -> OpenAIChatModel:
    """An OpenAIChatModel for `config` (endpoint, key, timeout, retries, sampling).

    The first call imports the openai SDK. Raises ModelError when the SDK cannot be set up
    (e.g. no API key for OpenAI itself).
    """
    from sandfleet.agent.openai_chat import OpenAIChatModel

    return OpenAIChatModel.from_config(config)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sandfleet.agent' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
