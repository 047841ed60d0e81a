"""`sandfleet export TRAJECTORY...`: token-recorded trajectories as training rows (JSON Lines)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.text import Text

from sandfleet.agent.training_rows import (
    ROW_FORMATS,
    RowFormat,
    TrainingRowsError,
    training_rows,
)
from sandfleet.cli.consoles import error_console
from sandfleet.cli.exit_codes import ExitCode
from sandfleet.errors import SandfleetError
from sandfleet.settings import Settings
from sandfleet.trajectory.reader import read_trajectory

DESCRIPTION = """\
Write training rows of trajectories recorded with --record-tokens, one JSON object a line:
  --format rows (default): one row per trajectory, verl-style: prompt_ids (the first turn's
    prompt), response_ids (every completion and the observation tokens between them, as the
    next prompt holds them), response_mask (1 = model-generated), response_logprobs (0.0
    under mask 0; null when the endpoint sent none), reward.
  --format turns: one row per model turn (its own prompt and completion), for templates
    whose turns do not extend each other token for token.
The reward is --reward, or the score of the trajectory's sample in an eval's samples.jsonl
(--samples), else null."""

EPILOG = """\
exit codes: 0 written; 2 a trajectory without token records, with turns whose prompts do not
chain (for --format rows), unreadable, or bad flags."""


def register(commands: Any, *, parents: Sequence[argparse.ArgumentParser]) -> None:
    """Add the `export` subcommand to the CLI's subparsers."""
    parser = commands.add_parser(
        "export",
        parents=list(parents),
        help="token-recorded trajectories as training rows (prompt/response ids, mask)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("trajectories", nargs="+", type=Path, metavar="TRAJECTORY")
    parser.add_argument("--format", dest="row_format", choices=ROW_FORMATS, default="rows")
    rewards = parser.add_mutually_exclusive_group()
    rewards.add_argument("--reward", type=float, metavar="X", help="the reward of every row")
    rewards.add_argument(
        "--samples", type=Path, metavar="FILE",
        help="an eval's samples.jsonl: each trajectory's reward is its sample's score",
    )  # fmt: skip
    parser.add_argument(
        "--output", "-o", type=Path, metavar="FILE", help="write to FILE instead of stdout"
    )
    parser.set_defaults(handler=export_command)


class _ExportError(SandfleetError):
    """A trajectory or flag the export cannot use; the message names it."""


def export_command(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    errors = error_console()
    try:
        if args.reward is not None and not math.isfinite(args.reward):
            raise _ExportError(f"--reward must be a finite number, not {args.reward}")
        scores = _sample_scores(args.samples) if args.samples is not None else {}
        rows = [
            row
            for path in args.trajectories
            for row in _rows_of(path, args.row_format, _reward(path, args.reward, scores))
        ]
        written = _write(rows, args.output)
    except _ExportError as error:
        errors.print(Text.assemble(("error: ", "red"), str(error)))
        return ExitCode.USAGE
    if args.output is not None:
        errors.print(f"wrote {written} rows to {args.output}")
    return ExitCode.OK


def _rows_of(path: Path, row_format: RowFormat, reward: float | None) -> list[dict[str, Any]]:
    try:
        return training_rows(read_trajectory(path), row_format, reward=reward)
    except TrainingRowsError as error:
        raise _ExportError(f"{path}: {error}") from error
    except (OSError, ValueError) as error:  # unreadable, or not JSON Lines
        raise _ExportError(f"cannot read the trajectory {path}: {error}") from error


def _reward(path: Path, reward: float | None, scores: dict[Path, float]) -> float | None:
    if reward is not None:
        return reward
    return scores.get(path.resolve())


def _sample_scores(samples: Path) -> dict[Path, float]:
    """Trajectory path (resolved) -> score, from an eval's samples.jsonl. Relative paths in
    it are taken as the eval wrote them: relative to the current directory."""
    scores: dict[Path, float] = {}
    try:
        lines = samples.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise _ExportError(f"cannot read the samples file {samples}: {error}") from error
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            sample = json.loads(line)
        except ValueError as error:
            raise _ExportError(f"{samples} line {number} is not JSON: {error}") from error
        trajectory = sample.get("trajectory") if isinstance(sample, dict) else None
        score = sample.get("score") if isinstance(sample, dict) else None
        if isinstance(trajectory, str) and isinstance(score, int | float):
            scores[Path(trajectory).resolve()] = float(score)
    return scores


def _write(rows: list[dict[str, Any]], output: Path | None) -> int:
    """Rows to FILE (renamed into place once complete) or stdout; returns the count."""
    if output is None:
        _dump(rows, sys.stdout)
        return len(rows)
    partial = output.with_name(output.name + ".part")
    try:
        with partial.open("w", encoding="utf-8") as handle:
            _dump(rows, handle)
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise _ExportError(f"cannot write {output}: {error}") from error
    os.replace(partial, output)
    return len(rows)


def _dump(rows: list[dict[str, Any]], handle: IO[str]) -> None:
    for row in rows:
        handle.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
    handle.flush()
