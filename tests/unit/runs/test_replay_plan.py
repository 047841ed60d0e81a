"""Reading a trajectory into a replay plan, and when a replayed observation counts as a match."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sandfleet.agent.prompts import remaining_turns_notice
from sandfleet.runs.replay import ReplayError, _matches, _PathMapping, load_plan
from sandfleet.sandbox.facade import SandboxPaths

META = {
    "kind": "meta",
    "task_id": "t",
    "max_turns": 10,
    "paths": {
        "working_dir": "/testbed",
        "input_dir": "/testbed/input",
        "output_dir": "/testbed/output",
        "answer_file": "/testbed/output/answer.txt",
    },
}
INPUT_FILES = [
    {"name": "a.txt", "encoding": "utf-8", "content": "text", "mode": 0o755},
    {"name": "b.bin", "encoding": "base64", "content": "AAE="},
]
RECORDED = {
    **META,
    "input_files": INPUT_FILES,
    "tool_timeout_s": 30,
    "remaining_turns_notice": 3,
    "offer_undo_edit": False,
}
"""A meta record as the agent writes it: with the inputs and the tool settings."""
LEGACY_INPUTS = {
    "kind": "task_inputs",
    "files": INPUT_FILES,
    "tool_timeout_s": 30,
    "remaining_turns_notice": 3,
}
"""Where CLI trajectories kept the inputs before meta carried them (the shipped example)."""


def call(
    turn: int, call_id: str, name: str = "execute_bash", command: str = "ls"
) -> dict[str, Any]:
    arguments = json.dumps({"command": command})
    return {
        "kind": "tool_call",
        "turn": turn,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def observation(turn: int, call_id: str, output: str) -> dict[str, Any]:
    return {
        "kind": "observation",
        "turn": turn,
        "call_id": call_id,
        "name": "execute_bash",
        "output": output,
    }


def write(path: Path, *records: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_plan_pairs_calls_with_observations_and_stops_at_submit(tmp_path: Path) -> None:
    trajectory = write(
        tmp_path / "t.jsonl",
        RECORDED,
        call(1, "c1"), call(1, "c2"), observation(1, "c1", "one"), observation(1, "c2", "two"),
        call(2, "c3"),
        call(3, "c4", name="submit"), observation(3, "c4", "Submitted."),
        call(4, "c5"),
    )  # fmt: skip

    plan = load_plan(trajectory)

    assert [(c.call_id, c.observation, c.last_in_turn) for c in plan.calls] == [
        ("c1", "one", False),
        ("c2", "two", True),
        ("c3", None, True),
        ("c4", "Submitted.", True),
    ]
    assert plan.files == {"a.txt": b"text", "b.bin": b"\x00\x01"}
    assert plan.modes == {"a.txt": 0o755}
    assert plan.inputs_recorded
    assert plan.paths == SandboxPaths()
    assert plan.tool_timeout_s == 30
    assert plan.notice_turns == 3
    assert plan.offer_undo_edit is False


def test_a_legacy_task_inputs_record_still_supplies_the_inputs_and_settings(
    tmp_path: Path,
) -> None:
    plan = load_plan(write(tmp_path / "t.jsonl", LEGACY_INPUTS, META, call(1, "c1")))

    assert plan.files == {"a.txt": b"text", "b.bin": b"\x00\x01"}
    assert plan.inputs_recorded
    assert plan.tool_timeout_s == 30
    assert plan.notice_turns == 3
    assert plan.offer_undo_edit is True


def test_a_trajectory_that_does_not_record_its_inputs_says_so(tmp_path: Path) -> None:
    plan = load_plan(write(tmp_path / "t.jsonl", META, call(1, "c1")))

    assert plan.files == {}
    assert not plan.inputs_recorded
    assert plan.tool_timeout_s is None
    assert plan.notice_turns == 5


def test_the_loops_steps_remaining_notice_is_not_a_difference(tmp_path: Path) -> None:
    last_turn_notice = remaining_turns_notice(1, notice_turns=3, paths=SandboxPaths())
    trajectory = write(
        tmp_path / "t.jsonl", RECORDED,
        call(8, "a"), observation(8, "a", "out\nSteps remaining: 2"),
        call(9, "b"), call(9, "c"),
        observation(9, "b", "first"), observation(9, "c", "second" + last_turn_notice),
        call(10, "d"),
    )  # fmt: skip
    plan = load_plan(trajectory)
    first, second, third, unrecorded = plan.calls

    assert _matches(first, "out", plan)
    assert _matches(first, "out\nSteps remaining: 2", plan)
    assert not _matches(first, "different", plan)
    assert _matches(second, "first", plan)
    assert not _matches(second, "first\nSteps remaining: 1", plan)  # not the turn's last call
    assert _matches(third, "second", plan)
    assert not _matches(unrecorded, "", plan)


def test_a_trajectory_without_meta_or_calls_cannot_be_replayed(tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match="no meta record"):
        load_plan(write(tmp_path / "a.jsonl", call(1, "c1")))
    with pytest.raises(ReplayError, match="no tool calls"):
        load_plan(write(tmp_path / "b.jsonl", META))
    with pytest.raises(ReplayError, match="cannot read"):
        load_plan(tmp_path / "missing.jsonl")


def test_inputs_recorded_by_digest_only_are_reported(tmp_path: Path) -> None:
    meta = {**META, "input_files": [{"name": "huge.bin", "sha256": "00", "size": 1}]}

    with pytest.raises(
        ReplayError, match=r"digest only.*missing.*huge\.bin \(1 bytes, sha256 00\)"
    ):
        load_plan(write(tmp_path / "t.jsonl", meta, call(1, "c1")))
    legacy = {"kind": "task_inputs", "files": [{"name": "huge.bin", "sha256": "00", "size": 1}]}
    with pytest.raises(ReplayError, match=r"digest only.*huge\.bin"):
        load_plan(write(tmp_path / "t.jsonl", legacy, META, call(1, "c1")))


def test_paths_map_to_a_relocated_sandbox_and_back_in_one_pass() -> None:
    mapping = _PathMapping(
        recorded=SandboxPaths(), current=SandboxPaths.under("/tmp/sbx-1/root/testbed")
    )

    arguments = mapping.to_current('{"path": "/testbed/input/a.csv", "x": "cd /testbed2"}')
    observation = mapping.to_recorded("cat: /tmp/sbx-1/root/testbed/output/b: No such file")

    assert arguments == '{"path": "/tmp/sbx-1/root/testbed/input/a.csv", "x": "cd /testbed2"}'
    assert observation == "cat: /testbed/output/b: No such file"
    same = _PathMapping(recorded=SandboxPaths(), current=SandboxPaths())
    assert same.to_current("/testbed/input") == "/testbed/input"
