"""`sandfleet replay TRAJECTORY.jsonl`: re-run recorded tool calls, compare the observations
(the replay itself is sandfleet.runs.replay)."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.text import Text

from sandfleet.agent.events import summarize_arguments
from sandfleet.cli.consoles import error_console, plural
from sandfleet.cli.execution import sandbox_config
from sandfleet.cli.exit_codes import ExitCode
from sandfleet.cli.interrupts import run_until_interrupted
from sandfleet.errors import SandboxLostError, SandfleetError
from sandfleet.runs.replay import CallReplay, ReplayError, load_plan, replay
from sandfleet.settings import Settings
from sandfleet.tool_calls import SUBMIT

_DIFF_LINES = 30


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trajectory", type=Path, metavar="TRAJECTORY.jsonl")
    parser.add_argument(
        "--diff-lines", type=int, default=_DIFF_LINES, metavar="N",
        help=f"lines of diff shown per differing observation (default {_DIFF_LINES})",
    )  # fmt: skip


def replay_command(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    errors = error_console()
    try:
        plan = load_plan(args.trajectory)
    except ReplayError as error:
        errors.print(Text.assemble(("error: ", "red"), str(error)))
        return ExitCode.USAGE
    timeout_s = args.tool_timeout_seconds or plan.tool_timeout_s or settings.tool_timeout_seconds
    console.print(
        f"replaying {plural(len(plan.calls), 'tool call')} of task {plan.task_id} "
        f"({plural(len(plan.files), 'input file')}) in a fresh local sandbox"
    )
    if not plan.inputs_recorded:
        errors.print(
            Text.assemble(
                ("warning: ", "yellow"),
                "the trajectory does not record the task's input files (it predates that);"
                " replaying without them",
            )
        )
    try:
        replays = run_until_interrupted(
            replay(plan, sandbox_config(settings), tool_timeout_s=timeout_s)
        )
    except SandboxLostError as error:
        errors.print(Text.assemble(("error: the sandbox was lost: ", "red"), str(error)))
        return ExitCode.SANDBOX_ERROR
    except SandfleetError as error:  # the sandbox did not start, or an upload failed
        errors.print(Text.assemble(("error: ", "red"), str(error)))
        return ExitCode.SANDBOX_ERROR
    if replays is None:
        errors.print("interrupted")
        return ExitCode.CANCELLED
    print_report(console, replays, diff_lines=args.diff_lines)
    return ExitCode.OK if all(r.matched for r in replays) else ExitCode.NOT_SUBMITTED


def print_report(console: Console, replays: Sequence[CallReplay], *, diff_lines: int) -> None:
    """One line per call (mark, number, turn, tool, short call), then a diff per difference."""
    for index, item in enumerate(replays, start=1):
        mark, style = _verdict(item)
        summary = summarize_arguments(item.call.name, item.call.arguments)
        console.print(
            Text.assemble(
                (f"{mark} ", style), f"#{index} turn {item.call.turn} ",
                (item.call.name, "bold"), " ", summary,
            )
        )  # fmt: skip
    for index, item in enumerate(replays, start=1):
        if item.matched or item.replayed is None:
            continue
        heading = f"#{index} turn {item.call.turn} {item.call.name}: the observation differs"
        console.print(Text(heading, style="bold red"))
        console.print(_diff(item.call.observation or "", item.replayed, diff_lines))
    checked = [r for r in replays if r.call.name != SUBMIT]
    differing = sum(not r.matched for r in checked)
    ending = "; submit ended the replay" if len(checked) < len(replays) else ""
    if differing:
        verdict = f"{differing} of {len(checked)} observations differ{ending}"
        console.print(Text(verdict, style="bold red"))
    else:
        console.print(Text(f"all {len(checked)} observations match{ending}", style="bold green"))


def _verdict(item: CallReplay) -> tuple[str, str]:
    if item.call.name == SUBMIT:
        return "■", "dim"
    if item.call.observation is None:
        return "?", "yellow"  # the trajectory ends before this call's observation
    return ("✓", "green") if item.matched else ("✗", "bold red")


def _diff(recorded: str, replayed: str, limit: int) -> Text:
    lines = list(
        difflib.unified_diff(
            recorded.splitlines(), replayed.splitlines(), "recorded", "replayed", lineterm="", n=1
        )
    )
    text = Text()
    for line in lines[:limit]:
        style = "red" if line.startswith("-") else "green" if line.startswith("+") else "dim"
        text.append(line + "\n", style=style)
    if len(lines) > limit:
        text.append(f"… {len(lines) - limit} more diff lines\n", style="dim")
    return text
