"""A trajectory folds into turns: reasoning, calls with their observations, tokens, times."""

from __future__ import annotations

import json
from pathlib import Path

from sandfleet.report.html import run_page, write_run_page
from sandfleet.report.run_view import LONG_LINES, build_view, read_view

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "trajectories" / "sales_by_region.jsonl"


def test_the_shipped_example_has_its_turns_and_result() -> None:
    view = read_view(EXAMPLE)
    results = [json.loads(line) for line in EXAMPLE.read_text().splitlines() if line.strip()]
    assert len(view.turns) == max(int(r.get("turn") or 0) for r in results)
    assert view.result is not None and view.result["stop_reason"] == "submitted"
    assert all(step.observation is not None for turn in view.turns for step in turn.steps)
    assert view.task is not None and view.task_id == "01_sales_by_region"


def test_long_observations_are_collapsed_and_html_is_escaped() -> None:
    long_output = "\n".join(f"line {n}" for n in range(LONG_LINES + 5))
    records = [
        {"kind": "meta", "task_id": "t<script>", "model": "m"},
        {"kind": "message", "turn": 0, "role": "user", "content": "do <b>it</b>"},
        {"kind": "message", "turn": 1, "role": "assistant", "content": "", "reasoning": "hmm"},
        {"kind": "usage", "turn": 1, "prompt_tokens": 10, "completion_tokens": 2, "model_s": 0.5},
        {"kind": "tool_call", "turn": 1, "name": "execute_bash", "arguments": '{"command": "ls"}'},
        {"kind": "observation", "turn": 1, "name": "execute_bash", "output": long_output,
         "duration_s": 0.25},
        {"kind": "result", "stop_reason": "max_turns", "output_files": []},
    ]  # fmt: skip
    view = build_view(records)
    (turn,) = view.turns
    assert (turn.prompt_tokens, turn.completion_tokens, turn.tool_s) == (10, 2, 0.25)
    assert turn.steps[0].arguments.whole == "ls" and turn.steps[0].observation is not None
    assert turn.steps[0].observation.long
    page = run_page(view, folder=None)
    assert "<script>" not in page and "t&lt;script&gt;" in page
    assert "do &lt;b&gt;it&lt;/b&gt;" in page
    assert page.count("<details>") == 1 and f"line {LONG_LINES + 4}" in page


def test_the_page_links_files_copied_back(tmp_path: Path) -> None:
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "plot.png").write_bytes(b"png")
    trajectory = tmp_path / "trajectory.jsonl"
    records = [
        {"kind": "meta", "task_id": "t"},
        {"kind": "result", "stop_reason": "submitted", "output_files": ["plot.png", "gone.txt"]},
    ]
    trajectory.write_text("".join(json.dumps(r) + "\n" for r in records))
    page = write_run_page(trajectory).read_text()
    assert '<a href="output/plot.png">plot.png</a>' in page
    assert "<li>gone.txt</li>" in page
