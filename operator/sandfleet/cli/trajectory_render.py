"""A trajectory's JSON Lines as a readable trace: `sandfleet show` and `trajectory --render`."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.text import Text

from sandfleet.agent import (
    ModelReplied,
    ModelRetried,
    ObservationReceived,
    ToolCalled,
    TurnStarted,
)
from sandfleet.agent.events import one_line, summarize_arguments
from sandfleet.cli.render import TraceRenderer, print_run_summary
from sandfleet.runs.outcomes import TaskOutcome


class RecordRenderer:
    """Trajectory records as the live trace of `sandfleet run` shows them, then the summary."""

    def __init__(self, console: Console, *, full: bool = False) -> None:
        self._console = console
        self._full = full
        self._trace = TraceRenderer(console, full=full)
        self._task_id = ""
        self._max_turns = 0
        self._turn = 0

    def __call__(self, line: bytes) -> None:
        try:
            self._render(json.loads(line))
        except (
            TypeError,
            ValueError,
            AttributeError,
        ):  # a record of an unexpected shape: the trace skips it
            return

    def _render(self, record: dict[str, Any]) -> None:
        kind = record.get("kind")
        if kind == "meta":
            self._task_id = str(record.get("task_id", ""))
            self._max_turns = int(record.get("max_turns") or 0)
            self._console.print(
                Text.assemble(
                    ("task ", "bold"), self._task_id,
                    ("   model ", "bold"), str(record.get("model", "?")),
                    ("   started ", "bold"), str(record.get("started_at", "?")),
                )
            )  # fmt: skip
            return
        turn = record.get("turn")
        if isinstance(turn, int) and turn > self._turn:
            self._turn = turn
            self._trace(TurnStarted(self._task_id, turn, self._max_turns))
        if kind == "message" and record.get("role") == "assistant":
            text = one_line(str(record.get("content") or ""))
            self._trace(ModelReplied(self._task_id, self._turn, text, 0, 0.0))
        elif kind == "tool_call":
            name = str(record.get("name", "?"))
            arguments = str(record.get("arguments", ""))
            # --full: the raw arguments, which the trace prints whole, argument by argument.
            shown = arguments if self._full else summarize_arguments(name, arguments)
            self._trace(ToolCalled(self._task_id, self._turn, name, shown))
        elif kind == "retry":
            self._trace(
                ModelRetried(
                    self._task_id, self._turn, int(record.get("attempt") or 0),
                    int(record.get("attempts") or 0), str(record.get("cause", "?")),
                    float(record.get("wait_s") or 0.0), float(record.get("attempt_s") or 0.0),
                )
            )  # fmt: skip
        elif kind == "observation":
            output = str(record.get("output", ""))
            output = output if self._full else one_line(output)
            duration_s = float(record.get("duration_s") or 0.0)
            name = str(record.get("name", "?"))
            self._trace(ObservationReceived(self._task_id, self._turn, name, output, duration_s))
        elif kind == "result":
            self._summary(record)

    def _summary(self, record: dict[str, Any]) -> None:
        fields = {**record, "id": record.get("task_id") or self._task_id, "trajectory": None}
        fields["total_time_s"] = record.get("wall_time_s", 0.0)
        try:
            outcome = TaskOutcome.from_record(fields)
        except TypeError:  # a result record without the fields a summary needs
            return
        print_run_summary(self._console, outcome)
