"""`sandfleet runs` (the local runs, newest first) and `sandfleet show RUN` (one run's trace)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sandfleet.cli.consoles import error_console
from sandfleet.cli.exit_codes import ExitCode
from sandfleet.cli.html_pages import runs_html, show_html
from sandfleet.cli.render import NO_ANSWER_TEXT, shorten, stop_style
from sandfleet.cli.trajectory_render import RecordRenderer
from sandfleet.runs.index import RunEntry, RunNotFoundError, list_runs, resolve_run
from sandfleet.runs.outcomes import NO_ANSWER
from sandfleet.settings import Settings


def register(commands: Any, *, parents: Sequence[argparse.ArgumentParser]) -> None:
    """Add the `runs` and `show` subcommands to the CLI's subparsers."""
    runs_parser = commands.add_parser(
        "runs",
        parents=list(parents),
        help="list the local runs (newest first)",
        description="List the runs under the results folder, newest first: run id, task, "
        "when it\nfinished (or started), turns, stop reason, duration.",
    )
    _add_results_dir(runs_parser)
    runs_parser.add_argument(
        "--json", dest="as_json", action="store_true", help="one JSON object per run and line"
    )
    runs_parser.add_argument(
        "--limit", type=int, default=None, metavar="N", help="only the newest N runs"
    )
    runs_parser.add_argument(
        "--html", action="store_true",
        help="write <results-dir>/index.html (the list) and each run's page, self-contained",
    )  # fmt: skip
    runs_parser.set_defaults(handler=runs_command)

    show_parser = commands.add_parser(
        "show",
        parents=list(parents),
        help="print a local run's trace (turns, tool calls, observations, result)",
        description="Render a run's trajectory. RUN is a run id (see `sandfleet runs`), a "
        "task id (its newest run), a unique prefix of a run id, a run folder or a "
        "trajectory.jsonl file.",
    )
    show_parser.add_argument("run", metavar="RUN")
    _add_results_dir(show_parser)
    show_parser.add_argument(
        "--full", action="store_true", help="print observations whole (default: one line each)"
    )
    show_parser.add_argument(
        "--html", action="store_true",
        help="write the run as one self-contained page beside its trajectory "
        "(trajectory.html) and print its path",
    )  # fmt: skip
    show_parser.set_defaults(handler=show_command)


def _add_results_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results-dir", dest="results_dir", type=Path, metavar="DIR",
        help="where the runs' folders are (default ./sandfleet-results)",
    )  # fmt: skip


def runs_command(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    runs = list_runs(settings.results_dir)
    if args.limit is not None:
        runs = runs[: max(args.limit, 0)]
    if args.html:
        page = runs_html(runs, settings.results_dir)
        console.out(str(page), highlight=False)
        return ExitCode.OK
    if args.as_json:
        for run in runs:
            console.out(json.dumps(run.to_record(), ensure_ascii=False), highlight=False)
        return ExitCode.OK
    if not runs:
        console.print(f"no runs in {settings.results_dir}")
        return ExitCode.OK
    console.print(runs_table(runs))
    return ExitCode.OK


def runs_table(runs: Sequence[RunEntry]) -> Table:
    table = Table(box=None, padding=(0, 2, 0, 0))
    for column in ("run id", "task", "when (UTC)", "turns", "status", "time", "answer"):
        table.add_column(column, no_wrap=True, justify="right" if column == "turns" else "left")
    for run in runs:
        outcome = run.outcome
        when = run.when.strftime("%Y-%m-%d %H:%M:%S") if run.when else "?"
        answer = Text("-", style="dim")
        if outcome is None:
            reason, turns, took = Text("(no result)", style="dim"), "-", "-"
        else:
            status = outcome.status
            shown = NO_ANSWER_TEXT if status == NO_ANSWER else status
            reason, turns = Text(shown, style=stop_style(status)), str(outcome.turns)
            took = f"{outcome.total_time_s:.1f}s"
            if outcome.answered and outcome.answer is not None:
                answer = Text(shorten(outcome.answer, 40))
        table.add_row(run.run_id, run.task_id, when, turns, reason, took, answer)
    return table


def show_command(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    errors = error_console()
    try:
        path = resolve_run(settings.results_dir, args.run)
    except RunNotFoundError as error:
        errors.print(Text.assemble(("error: ", "red"), str(error)))
        return ExitCode.USAGE
    if args.html:
        try:
            page = show_html(path)
        except (OSError, ValueError) as error:  # unreadable, not a trajectory, not writable
            errors.print(Text.assemble(("error: ", "red"), f"cannot write the page: {error}"))
            return ExitCode.USAGE
        console.out(str(page), highlight=False)
        return ExitCode.OK
    return render_trajectory_file(path, console, errors, full=args.full)


def render_trajectory_file(path: Path, console: Console, errors: Console, *, full: bool) -> int:
    """Print a local trajectory file as a trace (shared with `trajectory FILE --render`)."""
    render = RecordRenderer(console, full=full)
    try:
        with path.open("rb") as lines:
            for line in lines:
                if line.strip():
                    render(line)
    except BrokenPipeError:
        raise  # stdout's reader left: main() ends quietly
    except OSError as error:
        errors.print(Text.assemble(("error: ", "red"), f"cannot read {path}: {error}"))
        return ExitCode.USAGE
    return ExitCode.OK
