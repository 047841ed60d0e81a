"""A trajectory read into turns: what the run page shows (task, turns, tokens, times, result)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from sandfleet.agent import read_trajectory

LONG_LINES = 12
LONG_CHARS = 1200
"""An observation or argument longer than this is collapsed (its first lines shown)."""


@dataclasses.dataclass(slots=True)
class Text:
    """A block of text, collapsed on the page when long (`head` shown, the whole on click)."""

    whole: str

    @property
    def long(self) -> bool:
        return self.whole.count("\n") >= LONG_LINES or len(self.whole) > LONG_CHARS

    @property
    def head(self) -> str:
        lines = self.whole.splitlines()[:4]
        return "\n".join(line[:200] for line in lines)

    @property
    def size(self) -> str:
        return f"{self.whole.count(chr(10)) + 1} lines, {len(self.whole):,} characters"


@dataclasses.dataclass(slots=True)
class Step:
    """One tool call and what it gave back."""

    name: str
    arguments: Text
    observation: Text | None = None
    duration_s: float = 0.0


@dataclasses.dataclass(slots=True)
class Turn:
    number: int
    reasoning: Text | None = None
    text: Text | None = None
    steps: list[Step] = dataclasses.field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model_s: float | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    """Retries, nudges and loop notices of the turn, one line each."""

    @property
    def tool_s(self) -> float:
        return sum(step.duration_s for step in self.steps)


@dataclasses.dataclass(slots=True)
class RunView:
    task_id: str = ""
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    system: Text | None = None
    task: Text | None = None
    turns: list[Turn] = dataclasses.field(default_factory=list)
    result: dict[str, Any] | None = None

    @property
    def output_files(self) -> list[str]:
        files = (self.result or {}).get("output_files") or []
        return [str(name) for name in files]


def arguments_text(name: str, raw: str) -> Text:
    """A tool call's arguments, one `key: value` block each (the raw string if not JSON)."""
    try:
        decoded = json.loads(raw)
    except (TypeError, ValueError):
        return Text(str(raw))
    if not isinstance(decoded, dict):
        return Text(str(raw))
    if name == "execute_bash" and set(decoded) <= {"command"}:
        return Text(str(decoded.get("command", "")))
    parts = []
    for key, value in decoded.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{key}: {shown}" if "\n" not in shown else f"{key}:\n{shown}")
    return Text("\n".join(parts))


def build_view(records: Iterable[Mapping[str, Any]]) -> RunView:
    """Fold trajectory records into a RunView (unknown kinds and keys are ignored)."""
    view = RunView()
    turns: dict[int, Turn] = {}

    def turn_of(record: Mapping[str, Any]) -> Turn:
        number = int(record.get("turn") or 0)
        if number not in turns:
            turns[number] = Turn(number)
        return turns[number]

    for record in records:
        kind = record.get("kind")
        if kind == "meta":
            view.meta = dict(record)
            view.task_id = str(record.get("task_id", ""))
        elif kind == "message":
            _message(view, record, turn_of)
        elif kind == "usage":
            turn = turn_of(record)
            turn.prompt_tokens = int(record.get("prompt_tokens") or 0)
            turn.completion_tokens = int(record.get("completion_tokens") or 0)
            turn.model_s = float(record.get("model_s") or 0.0)
        elif kind == "tool_call":
            name = str(record.get("name", "?"))
            args = arguments_text(name, str(record.get("arguments", "")))
            turn_of(record).steps.append(Step(name, args))
        elif kind == "observation":
            _observation(turn_of(record), record)
        elif kind == "retry":
            turn_of(record).notes.append(f"retry {record.get('attempt')}: {record.get('cause')}")
        elif kind == "notice":
            turn_of(record).notes.append(f"notice: {record.get('event')}")
        elif kind == "result":
            view.result = dict(record)
    view.turns = [turns[n] for n in sorted(turns) if n > 0]
    return view


def _message(
    view: RunView, record: Mapping[str, Any], turn_of: Callable[[Mapping[str, Any]], Turn]
) -> None:
    role = record.get("role")
    content = str(record.get("content") or "")
    if int(record.get("turn") or 0) == 0:
        if role == "system":
            view.system = Text(content)
        elif role == "user":
            view.task = Text(content)
        return
    turn = turn_of(record)
    if role == "assistant":
        turn.reasoning = Text(str(record["reasoning"])) if record.get("reasoning") else None
        turn.text = Text(content) if content.strip() else None
    elif role == "user":
        turn.notes.append(f"nudge: {content.strip().splitlines()[0][:200] if content else ''}")


def _observation(turn: Turn, record: Mapping[str, Any]) -> None:
    name = str(record.get("name", "?"))
    waiting = [s for s in turn.steps if s.observation is None and s.name == name]
    step = waiting[0] if waiting else Step(name, Text(""))
    if not waiting:
        turn.steps.append(step)
    step.observation = Text(str(record.get("output", "")))
    step.duration_s = float(record.get("duration_s") or 0.0)


def read_view(path: Path) -> RunView:
    """The RunView of a trajectory file (blocking: reads the file)."""
    return build_view(read_trajectory(path))
