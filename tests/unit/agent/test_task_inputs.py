"""Input files in the meta record: embedded for replay, read back byte-exact, or digests."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from sandfleet.agent import (
    AgentConfig,
    Task,
    TaskFileError,
    TrajectoryWriter,
    read_trajectory,
    run_agent,
)
from sandfleet.agent.sandbox_access import upload_task_files
from sandfleet.agent.task_inputs import (
    MissingInput,
    describe_input_files,
    recorded_input_files,
)
from tests.support.agent_fakes import FakeSandbox, ScriptedModel, turn


def test_text_and_binary_inputs_round_trip_with_their_digests(tmp_path: Path) -> None:
    local = tmp_path / "data.csv"
    local.write_text("a,b\n1,2\n")
    local.chmod(0o750)
    task = Task(id="t", prompt="p", files={"data.csv": local, "/etc/blob.bin": b"\xff\x00\x01"})

    entries = describe_input_files(task.files)
    inputs = recorded_input_files(entries)

    assert inputs.files == {"data.csv": b"a,b\n1,2\n", "/etc/blob.bin": b"\xff\x00\x01"}
    assert inputs.missing == []
    assert inputs.modes == {"data.csv": 0o750}
    by_name = {entry["name"]: entry for entry in entries}
    assert by_name["data.csv"]["encoding"] == "utf-8"
    assert by_name["/etc/blob.bin"]["encoding"] == "base64"
    assert by_name["data.csv"]["sha256"] == hashlib.sha256(b"a,b\n1,2\n").hexdigest()


def test_inputs_beyond_the_embedding_budget_are_recorded_by_digest_only(tmp_path: Path) -> None:
    big_local = tmp_path / "big_local.bin"
    big_local.write_bytes(b"y" * 30)
    files = {"small": b"12345", "big": b"x" * 20, "big_local": big_local, "tail": b"123"}

    entries = describe_input_files(files, max_embedded_bytes=10)
    inputs = recorded_input_files(entries)

    assert inputs.files == {"small": b"12345", "tail": b"123"}
    assert inputs.missing == [
        MissingInput("big", size=20, sha256=hashlib.sha256(b"x" * 20).hexdigest()),
        MissingInput("big_local", size=30, sha256=hashlib.sha256(b"y" * 30).hexdigest()),
    ]
    assert "big_local (30 bytes, sha256 " in inputs.missing[1].describe()


async def test_the_meta_record_carries_what_replay_needs(tmp_path: Path) -> None:
    local = tmp_path / "notes.txt"
    local.write_text("remember\n")
    task = Task(id="t", prompt="p", files={"notes.txt": local, "/opt/raw.bin": b"\x00\xff"})
    config = AgentConfig(
        model="m", tool_timeout_s=45, remaining_turns_notice=3, offer_undo_edit=False
    )

    with TrajectoryWriter(tmp_path / "t.jsonl") as trajectory:
        model = ScriptedModel([turn("", ("submit", {}))])
        await run_agent(task, FakeSandbox(), model, config, trajectory=trajectory)
    records = list(read_trajectory(tmp_path / "t.jsonl"))

    meta = records[0]
    assert meta["kind"] == "meta"
    assert meta["tool_timeout_s"] == 45
    assert meta["remaining_turns_notice"] == 3
    assert meta["offer_undo_edit"] is False
    assert meta["paths"]["input_dir"] == "/testbed/input"
    assert recorded_input_files(meta["input_files"]).files == {
        "notes.txt": b"remember\n",
        "/opt/raw.bin": b"\x00\xff",
    }
    assert [r["kind"] for r in records].count("meta") == 1


async def test_a_task_without_files_records_an_empty_input_list(tmp_path: Path) -> None:
    with TrajectoryWriter(tmp_path / "t.jsonl") as trajectory:
        model = ScriptedModel([turn("", ("submit", {}))])
        await run_agent(
            Task(id="t", prompt="p"), FakeSandbox(), model, AgentConfig(model="m"),
            trajectory=trajectory,
        )  # fmt: skip
    meta = next(read_trajectory(tmp_path / "t.jsonl"))
    assert meta["input_files"] == []


async def test_an_unreadable_input_file_raises_before_anything_is_recorded(
    tmp_path: Path,
) -> None:
    task = Task(id="t", prompt="p", files={"gone.csv": tmp_path / "gone.csv"})
    sandbox = FakeSandbox()

    with (
        TrajectoryWriter(tmp_path / "t.jsonl") as trajectory,
        pytest.raises(TaskFileError, match=r"gone\.csv.*No such file"),
    ):
        await run_agent(
            task, sandbox, ScriptedModel([]), AgentConfig(model="m"), trajectory=trajectory
        )
    assert (tmp_path / "t.jsonl").read_text() == ""
    # Without a trajectory the upload finds the same problem and says it the same way.
    with pytest.raises(TaskFileError, match=r"gone\.csv.*No such file"):
        await run_agent(task, sandbox, ScriptedModel([]), AgentConfig(model="m"))
    assert sandbox.files == {}


class ModeRecordingSandbox(FakeSandbox):
    def __init__(self) -> None:
        super().__init__()
        self.modes: dict[str, int | None] = {}

    async def upload(self, source: Path | bytes, remote: str, *, mode: int | None = None) -> object:
        self.modes[remote] = mode
        return await super().upload(source, remote, mode=mode)


async def test_recorded_modes_are_applied_when_inputs_are_uploaded_again() -> None:
    sandbox = ModeRecordingSandbox()

    await upload_task_files(
        sandbox, {"run.sh": b"echo hi\n", "a.txt": b"a"}, modes={"run.sh": 0o755}
    )

    assert sandbox.modes == {"/testbed/input/run.sh": 0o755, "/testbed/input/a.txt": None}
    assert sandbox.files["/testbed/input/run.sh"] == b"echo hi\n"
