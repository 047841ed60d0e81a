"""The agent loop: a model drives a sandbox through tools until it submits or runs out of turns."""

from sandfleet.agent.config import AgentConfig, Task
from sandfleet.agent.events import (
    AgentEvent,
    EventSink,
    ModelReplied,
    ObservationReceived,
    RunFinished,
    ToolCalled,
    TurnStarted,
)
from sandfleet.agent.loop import AgentLoop, run_agent
from sandfleet.agent.model import (
    ContextLengthExceededError,
    Model,
    ModelError,
    ModelTurn,
    ToolCall,
    Usage,
)
from sandfleet.agent.openai_model import OpenAIChatModel, openai_model
from sandfleet.agent.results import AgentResult, StopReason, TurnTiming
from sandfleet.agent.sandbox_access import AgentSandbox
from sandfleet.agent.tools import ToolSpec, tool_specs
from sandfleet.agent.trajectory import TrajectoryWriter, read_trajectory

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
    "ModelTurn",
    "ObservationReceived",
    "OpenAIChatModel",
    "RunFinished",
    "StopReason",
    "Task",
    "ToolCall",
    "ToolCalled",
    "ToolSpec",
    "TrajectoryWriter",
    "TurnStarted",
    "TurnTiming",
    "Usage",
    "openai_model",
    "read_trajectory",
    "run_agent",
    "tool_specs",
]
