"""The task_inputs trajectory record: input files embedded for replay, read back byte-exact."""

from __future__ import annotations

import hashlib
from pathlib import Path

from sandfleet.agent import AgentConfig, Task
from sandfleet.cli.execution import embedded_files, task_inputs_record


def test_text_and_binary_inputs_round_trip_with_their_digests(tmp_path: Path) -> None:
    local = tmp_path / "data.csv"
    local.write_text("a,b\n1,2\n")
    task = Task(id="t", prompt="p", files={"data.csv": local, "/etc/blob.bin": b"\xff\x00\x01"})

    record = task_inputs_record(task, AgentConfig(model="m", tool_timeout_s=45))
    files, missing = embedded_files(record)

    assert files == {"data.csv": b"a,b\n1,2\n", "/etc/blob.bin": b"\xff\x00\x01"}
    assert missing == []
    by_name = {entry["name"]: entry for entry in record["files"]}
    assert by_name["data.csv"]["encoding"] == "utf-8"
    assert by_name["/etc/blob.bin"]["encoding"] == "base64"
    assert by_name["data.csv"]["sha256"] == hashlib.sha256(b"a,b\n1,2\n").hexdigest()
    assert record["tool_timeout_s"] == 45


def test_inputs_beyond_the_embedding_budget_are_recorded_by_digest_only() -> None:
    task = Task(id="t", prompt="p", files={"small": b"12345", "big": b"x" * 20, "tail": b"123"})

    record = task_inputs_record(task, AgentConfig(model="m"), max_embedded_bytes=10)
    files, missing = embedded_files(record)

    assert files == {"small": b"12345", "tail": b"123"}
    assert missing == ["big"]
