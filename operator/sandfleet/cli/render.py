"""Rich output of the CLI: the live trace of a run, the run summary and the batch summary."""

from __future__ import annotations

import collections
import json
import re
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from sandfleet.agent import (
    AgentEvent,
    ModelReplied,
    ModelRetried,
    ObservationReceived,
    RunFinished,
    StopReason,
    ToolCalled,
    TurnStarted,
)
from sandfleet.cli.consoles import plural
from sandfleet.runs.folders import OUTPUT_FOLDER, RESULT_FILE
from sandfleet.runs.outcomes import NO_ANSWER, TaskOutcome
from sandfleet.tool_calls import SUBMIT

_OBSERVATION_CHARS = 110
_ANSWER_CHARS = 2000
_STOP_STYLES: dict[str, str] = {
    StopReason.SUBMITTED: "green",
    StopReason.MAX_TURNS: "yellow",
    StopReason.CONTEXT_EXCEEDED: "yellow",
    StopReason.NO_TOOL_CALL: "yellow",
    NO_ANSWER: "yellow",
}
NO_ANSWER_TEXT = "submitted without an answer"
"""What a human reads for the NO_ANSWER status."""


def stop_style(stop_reason: str) -> str:
    return _STOP_STYLES.get(stop_reason, "red")


def shorten(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# The seed-format headers every observation starts with (already flattened to one line);
# the trace shows the exit code and the output without them.
_BASH_HEADER = re.compile(
    r"^Exit code: (?:Error: Exit code )?(-?\d+) Execution output of \\\[execute_bash\]: "
    r"\\\[STDOUT\] ?"
)
_EDITOR_HEADER = "Execution output of \\[str_replace_editor]: "


def observation_summary(output: str) -> str:
    """A flattened observation without its seed-format header: "exit 0 | <output>"."""
    match = _BASH_HEADER.match(output)
    if match:
        rest = output[match.end() :].replace("\\[STDERR] ", "stderr: ")
        return f"exit {match.group(1)} | {rest}" if rest else f"exit {match.group(1)}"
    return output.removeprefix(_EDITOR_HEADER)


class TraceRenderer:
    """Prints a run's events as they happen: turn, model text, tool call, short observation.

    With `full`, tool calls' arguments and observations are printed whole, line by line,
    below their header lines (`sandfleet show --full`). With `show_waiting` on an
    interactive terminal, a ticking "waiting for the model 12s" line stands below the trace
    while a model call is in flight, and "execute_bash running 12s" while a tool runs
    (transient: erased when the reply or the observation comes); elsewhere nothing extra
    is printed. Only one
    such live line may exist per console, so `batch --trace` does not ask for it. Dynamic
    text is put into Text objects, never into markup, so a model's "[red]" or a command's
    brackets print verbatim.
    """

    def __init__(
        self,
        console: Console,
        *,
        prefix: str = "",
        full: bool = False,
        show_waiting: bool = False,
    ) -> None:
        self._console = console
        self._prefix = prefix
        self._full = full
        self._show_waiting = show_waiting and console.is_interactive
        self._waiting: Live | None = None

    def close(self) -> None:
        """Take down the waiting line, if any (the run ended or was interrupted)."""
        if self._waiting is not None:
            self._waiting.stop()
            self._waiting = None

    def __call__(self, event: AgentEvent) -> None:
        self.close()
        try:
            self._print(event)
        finally:
            waiting = self._waiting_for(event) if self._show_waiting else None
            if waiting is not None:
                self._waiting = Live(
                    waiting, console=self._console, transient=True, refresh_per_second=4
                )
                self._waiting.start()

    @staticmethod
    def _waiting_for(event: AgentEvent) -> Waiting | None:
        """What the run waits for after `event`, for the ticking line (None: nothing)."""
        if isinstance(event, TurnStarted | ModelRetried):
            return Waiting("waiting for the model")
        if isinstance(event, ToolCalled) and event.name != SUBMIT:
            return Waiting(f"{event.name} running")
        return None

    def _print(self, event: AgentEvent) -> None:
        if isinstance(event, RunFinished):
            return
        if self._full and isinstance(event, ObservationReceived):
            self._print_full_observation(event)
            return
        if self._full and isinstance(event, ToolCalled) and event.name != SUBMIT:
            self._print_full_call(event)
            return
        line = self._line(event)
        if line is not None:
            # One terminal line per event: the trajectory has the full text.
            self._console.print(
                Text(self._prefix) + line if self._prefix else line,
                no_wrap=True,
                overflow="ellipsis",
            )

    def _print_full_call(self, event: ToolCalled) -> None:
        """The call's header, then each argument whole (JSON decoded; else the raw text)."""
        header = Text.assemble(("  → ", "cyan"), (event.name, "bold cyan"))
        self._console.print(Text(self._prefix) + header, no_wrap=True, overflow="ellipsis")
        for name, value in argument_lines(event.arguments):
            label = Text(self._prefix + "      ") + Text(f"{name}:", style="cyan")
            lines = value.splitlines() or [""]
            if len(lines) == 1:
                self._console.print(label + " " + Text(lines[0]), soft_wrap=True)
                continue
            self._console.print(label)
            for line in lines:
                self._console.print(Text(self._prefix + "        ") + Text(line), soft_wrap=True)

    def _print_full_observation(self, event: ObservationReceived) -> None:
        header = Text.assemble(("    ← ", "dim"), (f"{event.tool_s:.2f}s ", "dim"), event.name)
        self._console.print(Text(self._prefix) + header, no_wrap=True, overflow="ellipsis")
        for line in event.output.splitlines() or [""]:
            # soft_wrap: a long line stays one line (the terminal folds it), never cut.
            self._console.print(Text(self._prefix + "      ") + Text(line), soft_wrap=True)

    def _line(self, event: AgentEvent) -> Text | None:
        if isinstance(event, TurnStarted):
            return Text(f"turn {event.turn}/{event.max_turns}", style="bold blue")
        if isinstance(event, ModelReplied) and event.text:
            return Text.assemble(("  model ", "dim"), (event.text, "italic"))
        if isinstance(event, ModelRetried):
            return Text.assemble(
                ("  ↻ ", "yellow"),
                (f"model request failed (attempt {event.attempt}/{event.attempts}, "
                 f"{event.attempt_s:.1f}s): ", "yellow"),
                event.cause,
                (f"; retrying in {event.wait_s:.1f}s", "yellow"),
            )  # fmt: skip
        if isinstance(event, ToolCalled):
            arguments = "" if event.name == SUBMIT else event.arguments
            return Text.assemble(("  → ", "cyan"), (event.name, "bold cyan"), " ", arguments)
        if isinstance(event, ObservationReceived):
            return Text.assemble(
                ("    ← ", "dim"),
                (f"{event.tool_s:.2f}s ", "dim"),
                shorten(observation_summary(event.output), _OBSERVATION_CHARS),
            )
        return None  # RunFinished and silent replies: the summary follows the run


class Waiting:
    """A renderable that reads the clock each time it is drawn: `… waiting for the model
    12s`, `… execute_bash running 3s`."""

    def __init__(self, label: str) -> None:
        self._label = label
        self._since = time.monotonic()

    def __rich__(self) -> Text:
        return Text(f"  … {self._label} {time.monotonic() - self._since:.0f}s", "dim")


def argument_lines(arguments: str) -> list[tuple[str, str]]:
    """A tool call's arguments as (name, whole value) pairs, in the model's order; text that
    is not a JSON object is one pair named "arguments"."""
    try:
        decoded = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return [("arguments", arguments)]
    if not isinstance(decoded, dict):
        return [("arguments", arguments)]
    return [
        (str(name), value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
        for name, value in decoded.items()
    ]


def print_run_summary(console: Console, outcome: TaskOutcome) -> None:
    """The end of `sandfleet run`: how it stopped, the answer, and where everything went."""
    console.print()
    status = Text.assemble(
        ("stop reason ", "bold"),
        (outcome.stop_reason, f"bold {stop_style(outcome.status)}"),
        (f" ({NO_ANSWER_TEXT})", f"bold {stop_style(NO_ANSWER)}")
        if outcome.status == NO_ANSWER
        else "",
        f"   turns {outcome.turns}   tokens {outcome.prompt_tokens} in / "
        f"{outcome.completion_tokens} out   {outcome.total_time_s:.1f}s "
        f"(agent loop {outcome.wall_time_s:.1f}s)",
    )
    console.print(status)
    if outcome.error:
        console.print(Text.assemble(("error ", "bold red"), outcome.error))
    incomplete = copy_back_line(outcome)
    if incomplete:
        console.print(Text.assemble(("copy-back ", "bold yellow"), incomplete), soft_wrap=True)
    if outcome.status == NO_ANSWER:
        console.print(
            Text.assemble(
                ("answer ", "bold"),
                ("none: the model called submit without writing the answer file or any text",
                 stop_style(NO_ANSWER)),
            )
        )  # fmt: skip
    elif outcome.answer is not None:
        console.print(Text("answer", style="bold"))
        answer = outcome.answer
        if len(answer) > _ANSWER_CHARS:
            answer = answer[:_ANSWER_CHARS] + "…"
        console.print(Text(answer))
    if outcome.results_dir:
        folder = Path(outcome.results_dir)
        table = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
        table.add_column(style="bold")
        table.add_column()
        if outcome.output_files:
            table.add_row("output files", f"{folder / OUTPUT_FOLDER} ({len(outcome.output_files)})")
        if outcome.trajectory:
            table.add_row("trajectory", outcome.trajectory)
        table.add_row("result", str(folder / RESULT_FILE))
        console.print(table)


def finished_task_line(outcome: TaskOutcome) -> Text:
    """One line per task as a batch goes: mark, id, status, turns, answer or error."""
    status = outcome.status
    mark = "✓" if status == StopReason.SUBMITTED else ("✗" if outcome.failed else "•")
    line = Text.assemble(
        (mark + " ", stop_style(status)),
        (outcome.id, "bold"),
        " ",
        (NO_ANSWER_TEXT if status == NO_ANSWER else status, stop_style(status)),
        f"  {plural(outcome.turns, 'turn')}  {outcome.total_time_s:.1f}s",
    )
    if outcome.answered and outcome.answer is not None:
        line.append("  answer: ", style="dim")
        line.append(shorten(outcome.answer, 60))
    if outcome.error:
        line.append("  " + shorten(outcome.error, 100), style="dim")
    incomplete = copy_back_line(outcome)
    if incomplete:
        line.append("  " + shorten(incomplete, 100), style="yellow")
    return line


def copy_back_line(outcome: TaskOutcome) -> str | None:
    """One line when copying output/ back left something behind (result.json has it all)."""
    record = outcome.copy_back or {}
    skipped = int(record.get("skipped_total") or 0)
    if not skipped and not record.get("truncated"):
        return None
    files, size = int(record.get("files", 0)), int(record.get("bytes", 0))
    line = f"copied {plural(files, 'file')} ({plural(size, 'byte')})"
    if skipped:
        first = (record.get("skipped") or [{}])[0]
        line += f"; skipped {skipped}, first: {shorten(str(first.get('reason')), 100)}"
    if record.get("truncated"):
        line += "; cut at a limit (--max-output-bytes, --max-output-files)"
    return line


def batch_summary_table(
    outcomes: Sequence[TaskOutcome], *, ran_now: int, elapsed_s: float
) -> Table:
    """Totals by status (the stop reason; submits without an answer apart) over every task
    in the results log, plus this session's rate."""
    by_reason: dict[str, list[TaskOutcome]] = collections.defaultdict(list)
    for outcome in outcomes:
        by_reason[outcome.status].append(outcome)
    table = Table(title="batch summary", title_justify="left")
    table.add_column("status")
    table.add_column("tasks", justify="right")
    table.add_column("share", justify="right")
    table.add_column("mean turns", justify="right")
    table.add_column("tokens in", justify="right")
    table.add_column("tokens out", justify="right")
    total = len(outcomes)
    ordered = sorted(by_reason.items(), key=lambda item: (-len(item[1]), item[0]))
    for reason, group in ordered:
        table.add_row(
            Text(reason, style=stop_style(reason)),
            str(len(group)),
            f"{len(group) / total:.0%}",
            f"{_mean(o.turns for o in group):.1f}",
            f"{sum(o.prompt_tokens for o in group):,}",
            f"{sum(o.completion_tokens for o in group):,}",
        )
    table.add_section()
    table.add_row(
        Text("all", style="bold"),
        str(total),
        "100%" if total else "-",
        f"{_mean(o.turns for o in outcomes):.1f}",
        f"{sum(o.prompt_tokens for o in outcomes):,}",
        f"{sum(o.completion_tokens for o in outcomes):,}",
    )
    rate = ran_now / (elapsed_s / 60) if elapsed_s > 0 else 0.0
    done = plural(ran_now, "task")
    table.caption = f"this session: {done} in {elapsed_s:.1f}s = {rate:.1f} tasks/min"
    table.caption_justify = "left"
    return table


def _mean(values: Iterable[int]) -> float:
    numbers = list(values)
    return sum(numbers) / len(numbers) if numbers else 0.0
