"""Replaying a trajectory: the plan read from it (untrusted input), its recorded tool calls
re-run in a fresh local sandbox, each observation compared with the recorded one.

`sandfleet replay` (sandfleet.cli.replay) shows the result.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sandfleet.agent import execute_tool_call, read_trajectory
from sandfleet.agent.prompts import remaining_turns_notice
from sandfleet.agent.sandbox_access import remote_input_path, upload_task_files
from sandfleet.agent.task_inputs import RecordedInputs, recorded_input_files
from sandfleet.backends.local import LocalSandboxConfig
from sandfleet.errors import SandfleetError
from sandfleet.sandbox.facade import Sandbox, SandboxPaths
from sandfleet.tool_calls import SUBMIT, ToolCall, tool_specs

# AgentConfig's default, for trajectories whose records do not say.
_DEFAULT_NOTICE_TURNS = 5
_LEGACY_INPUTS_KIND = "task_inputs"
"""Where CLI trajectories recorded the inputs before the meta record carried them."""
MAX_TRAJECTORY_BYTES = 256 * 1024 * 1024
"""Replay refuses bigger files (a run's trajectory with 16 MiB of embedded inputs is far
below; a crafted one could otherwise take the machine's memory)."""


class ReplayError(SandfleetError):
    """The trajectory cannot be replayed (unreadable, no tool calls, inputs not recorded)."""


@dataclasses.dataclass(frozen=True, slots=True)
class RecordedCall:
    turn: int
    call_id: str
    name: str
    arguments: str
    """Raw JSON text, exactly as the model sent it."""
    observation: str | None
    """What the model saw; None when the trajectory ends before the observation."""
    last_in_turn: bool
    """The loop appends the "Steps remaining" notice to the last observation of a turn."""


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayPlan:
    task_id: str
    paths: SandboxPaths
    """The sandbox layout the model saw (observations mention these paths)."""
    files: dict[str, bytes]
    modes: dict[str, int]
    """Permission bits of the input files that came from local files."""
    inputs_recorded: bool
    """False for trajectories written before the meta record carried the input files."""
    calls: tuple[RecordedCall, ...]
    max_turns: int | None
    notice_turns: int
    tool_timeout_s: float | None
    offer_undo_edit: bool


@dataclasses.dataclass(frozen=True, slots=True)
class CallReplay:
    call: RecordedCall
    replayed: str | None
    """The new observation, with the new sandbox's paths written as the recorded ones."""
    matched: bool


def load_plan(path: Path) -> ReplayPlan:
    """Read what replay needs from a trajectory: meta, recorded inputs, calls and observations.

    The file is untrusted input: anything that is not a well-formed trajectory (not a
    regular file, too big, bad JSON, wrong types, input names that leave the sandbox's
    directories) raises ReplayError, never anything else.
    """
    _check_file(path)
    try:
        records = list(read_trajectory(path))
    except (OSError, ValueError, RecursionError) as error:
        raise ReplayError(f"cannot read trajectory {path}: {error}") from error
    try:
        return _plan(path, records)
    except ReplayError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as error:
        raise ReplayError(f"{path} is not a valid trajectory: {error}") from error


def _check_file(path: Path) -> None:
    try:
        info = path.stat()
    except OSError as error:
        raise ReplayError(f"cannot read trajectory {path}: {error.strerror}") from error
    if not stat.S_ISREG(info.st_mode):
        raise ReplayError(f"cannot read trajectory {path}: not a regular file")
    if info.st_size > MAX_TRAJECTORY_BYTES:
        raise ReplayError(
            f"trajectory {path} is {info.st_size} bytes; replay reads at most "
            f"{MAX_TRAJECTORY_BYTES}"
        )


def _plan(path: Path, records: Sequence[dict[str, Any]]) -> ReplayPlan:
    meta = next((r for r in records if r.get("kind") == "meta"), None)
    if meta is None:
        raise ReplayError(f"{path} has no meta record: not a sandfleet trajectory")
    # The meta record carries the inputs and the tool settings. Older CLI trajectories keep
    # them in a task_inputs record instead, so the settings below are looked up in both.
    legacy = next((r for r in records if r.get("kind") == _LEGACY_INPUTS_KIND), None)
    recorded = {**(legacy or {}), **meta}
    entries = meta.get("input_files", legacy.get("files") if legacy else None)
    if entries is not None and not isinstance(entries, list):
        raise ReplayError(f"{path}: input_files must be a list")
    inputs = recorded_input_files(entries or [])
    if inputs.missing:
        raise ReplayError(_missing_inputs_message(path, inputs))
    calls = _recorded_calls(records)
    if not calls:
        raise ReplayError(f"{path} has no tool calls to replay")
    recorded_paths = meta.get("paths") or {}
    if not isinstance(recorded_paths, dict) or not all(
        isinstance(value, str) for value in recorded_paths.values()
    ):
        raise ReplayError(f"{path}: paths must map names to strings")
    paths = SandboxPaths(**recorded_paths) if recorded_paths else SandboxPaths()
    for name, mode in inputs.modes.items():
        if not 0 <= mode <= 0o7777:
            raise ReplayError(f"{path}: input file {name!r} has an invalid mode {mode}")
    for name in inputs.files:
        problem = _input_name_problem(name, paths)
        if problem is not None:
            raise ReplayError(f"{path}: input file {name!r} {problem}")
    return ReplayPlan(
        task_id=str(meta.get("task_id", path.stem)),
        paths=paths,
        files=inputs.files,
        modes=inputs.modes,
        inputs_recorded=entries is not None,
        calls=tuple(calls),
        max_turns=_number(meta, "max_turns", int),
        notice_turns=_or(_number(recorded, "remaining_turns_notice", int), _DEFAULT_NOTICE_TURNS),
        tool_timeout_s=_number(recorded, "tool_timeout_s", float),
        offer_undo_edit=bool(recorded.get("offer_undo_edit", True)),
    )


def _number(record: dict[str, Any], key: str, kind: type[int] | type[float]) -> Any:
    """A number in [0, 10^9) the record gives for `key` (None when absent)."""
    value = record.get(key)
    if value is None:
        return None
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if not numeric or (kind is int and not isinstance(value, int)) or not 0 <= value < 1e9:
        raise ReplayError(f"{key} must be a number from 0 to 10^9, not {value!r}")
    return kind(value)


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def _input_name_problem(name: str, paths: SandboxPaths) -> str | None:
    """Why an input file name may not be replayed (None: it may). A name stays inside the
    recorded working directory, as the run that recorded it could only have put it there."""
    if "\x00" in name or not name:
        return "is empty or contains a NUL byte"
    target = remote_input_path(paths, name)
    roots = (paths.working_dir, paths.input_dir, paths.output_dir)
    if not any(target == root or target.startswith(root.rstrip("/") + "/") for root in roots):
        return "is outside the sandbox's working, input and output directories"
    return None


def _missing_inputs_message(path: Path, inputs: RecordedInputs) -> str:
    listed = "; ".join(missing.describe() for missing in inputs.missing)
    return (
        f"{path} records input files by digest only (too large to embed), so they are missing"
        f" and the replay cannot run: {listed}"
    )


def _recorded_calls(records: Sequence[dict[str, Any]]) -> list[RecordedCall]:
    calls: list[dict[str, Any]] = []
    observations: list[str | None] = []
    waiting: dict[str, int] = {}  # call_id -> index of the call still without its observation
    for record in records:
        kind = record.get("kind")
        if kind == "tool_call":
            waiting[str(record.get("call_id", ""))] = len(calls)
            calls.append(record)
            observations.append(None)
        elif kind == "observation":
            index = waiting.pop(str(record.get("call_id", "")), None)
            if index is not None:
                observations[index] = str(record.get("output", ""))
    plan: list[RecordedCall] = []
    for index, call in enumerate(calls):
        turn = int(call.get("turn", 0))
        next_turn = int(calls[index + 1].get("turn", 0)) if index + 1 < len(calls) else None
        plan.append(
            RecordedCall(
                turn=turn,
                call_id=str(call.get("call_id", "")),
                name=str(call.get("name", "")),
                arguments=str(call.get("arguments", "")),
                observation=observations[index],
                last_in_turn=next_turn != turn,
            )
        )
        if call.get("name") == SUBMIT:
            break
    return plan


async def replay(
    plan: ReplayPlan, sandbox_config: LocalSandboxConfig, *, tool_timeout_s: float
) -> list[CallReplay]:
    """Run the plan's calls in a fresh local sandbox (`sandbox_config` with the plan's
    paths); submit ends the replay."""
    specs = tool_specs(offer_undo_edit=plan.offer_undo_edit)
    replays: list[CallReplay] = []
    config = dataclasses.replace(sandbox_config, paths=plan.paths)
    async with Sandbox.local(config, tool_timeout_s=tool_timeout_s) as sandbox:
        mapping = _PathMapping(recorded=plan.paths, current=sandbox.paths)
        # Absolute input names are recorded paths; they go where the new sandbox has them.
        files = {mapping.to_current_name(name): data for name, data in plan.files.items()}
        modes = {mapping.to_current_name(name): mode for name, mode in plan.modes.items()}
        await upload_task_files(sandbox, files, modes=modes)
        for call in plan.calls:
            if call.name == SUBMIT:
                replays.append(CallReplay(call, replayed=None, matched=True))
                break
            arguments = mapping.to_current(call.arguments)
            replayed_call = ToolCall(call.call_id, call.name, arguments)
            output = await execute_tool_call(sandbox, replayed_call, specs=specs)
            replayed = mapping.to_recorded(output)
            replays.append(CallReplay(call, replayed, _matches(call, replayed, plan)))
    return replays


def _matches(call: RecordedCall, replayed: str, plan: ReplayPlan) -> bool:
    if call.observation is None:
        return False
    if call.observation == replayed:
        return True
    # The loop appended a "Steps remaining" notice to the turn's last observation; it is the
    # loop's text, not the tool's, so it is added here rather than expected from the sandbox.
    if call.last_in_turn and plan.max_turns is not None:
        notice = remaining_turns_notice(
            plan.max_turns - call.turn, notice_turns=plan.notice_turns, paths=plan.paths
        )
        return bool(notice) and call.observation == replayed + notice
    return False


@dataclasses.dataclass(frozen=True, slots=True)
class _PathMapping:
    """Where the new sandbox's layout differs from the recorded one (no namespaces on this
    machine, so /testbed lives below a private directory), arguments are rewritten to the new
    paths and observations back to the recorded ones."""

    recorded: SandboxPaths
    current: SandboxPaths

    def _pairs(self) -> dict[str, str]:
        names = ("working_dir", "input_dir", "output_dir")
        pairs = {getattr(self.recorded, name): getattr(self.current, name) for name in names}
        return {old: new for old, new in pairs.items() if old != new}

    def to_current(self, text: str) -> str:
        return _replace_paths(text, self._pairs())

    def to_current_name(self, name: str) -> str:
        return self.to_current(name) if posixpath.isabs(name) else name

    def to_recorded(self, text: str) -> str:
        return _replace_paths(text, {new: old for old, new in self._pairs().items()})


def _replace_paths(text: str, replacements: dict[str, str]) -> str:
    """Replace whole path prefixes in one pass (a replaced path is never replaced again, and
    /testbed/input wins over its prefix /testbed); /testbed2 is not /testbed."""
    if not replacements:
        return text
    alternatives = "|".join(re.escape(p) for p in sorted(replacements, key=len, reverse=True))
    pattern = re.compile(f"(?:{alternatives})(?![\\w.-])")
    return pattern.sub(lambda match: replacements[match.group(0)], text)
