"""`sandfleet export`: rows to a file, and one clear line (exit 2) for what it cannot use.

The command's handler runs in-process on parsed arguments (main() would reconfigure the
process's logging for every later test); tests/integration/agent/test_token_records.py runs
the real console script.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from sandfleet.cli.main import build_parser
from sandfleet.settings import Settings

RECORDS = [
    {"kind": "meta", "task_id": "t", "record_tokens": True},
    {"kind": "message", "turn": 1, "role": "assistant"},
    {
        "kind": "tokens",
        "turn": 1,
        "prompt_ids": [10, 11],
        "completion_ids": [1, 2],
        "logprobs": [-0.25, -0.5],
        "source": {},
        "unavailable": {},
    },
    {"kind": "result", "stop_reason": "submitted"},
]


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args, Settings(), Console()))


def write(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_rows_go_to_the_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trajectory = write(tmp_path / "a.jsonl", RECORDS)
    out = tmp_path / "rows.jsonl"
    assert main(["export", str(trajectory), "--format", "turns", "-o", str(out)]) == 0
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["prompt_ids"] == [10, 11]
    assert row["response_mask"] == [1, 1]
    assert row["reward"] is None
    assert "wrote 1 rows" in capsys.readouterr().err
    assert not (tmp_path / "rows.jsonl.part").exists()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read the trajectory"),
        ("not json\n{}\n", "cannot read the trajectory"),
        ('{"kind": "meta"}\n', "no token records"),
    ],
    ids=["missing", "not-json", "no-tokens"],
)
def test_unusable_trajectories_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, expected: str
) -> None:
    trajectory = tmp_path / "t.jsonl"
    if content is not None:
        trajectory.write_text(content, encoding="utf-8")
    assert main(["export", str(trajectory)]) == 2
    captured = capsys.readouterr()
    assert expected in captured.err
    assert str(trajectory) in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_a_non_finite_reward_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trajectory = write(tmp_path / "a.jsonl", RECORDS)
    assert main(["export", str(trajectory), "--reward", "nan"]) == 2
    assert "--reward must be a finite number" in capsys.readouterr().err
