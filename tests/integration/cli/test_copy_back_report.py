"""`sandfleet run` reports what copying output/ back left behind: result.json and one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.cli.harness import cli_environment, run_cli, run_folder
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


async def test_links_and_files_over_the_cap_are_skipped_reported_and_the_rest_copied(
    tmp_path: Path,
) -> None:
    make = (
        "cd output && echo 42 > answer.txt && ln -s /etc/shadow shadow && mkfifo pipe"
        " && echo b > b.txt && echo z > z.txt && echo zz > zz.txt"
    )
    script = [Reply(tool_calls=[bash(make)]), Reply(tool_calls=[submit()])]
    async with ScriptedOpenAIServer(script) as server:
        result = await run_cli(
            "run", "write things", "--id", "t", "--model", "m", "--base-url", server.base_url,
            "--results-dir", str(tmp_path / "results"), "--state-dir", str(tmp_path / "state"),
            "--max-output-files", "3",
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip

    assert result.returncode == 0, result
    folder = run_folder(tmp_path / "results", "t")
    outcome = json.loads((folder / "result.json").read_text())
    assert outcome["answer"] == "42"
    assert outcome["output_files"] == ["answer.txt", "b.txt", "z.txt"]
    assert sorted(p.name for p in (folder / "output").iterdir()) == outcome["output_files"]
    report = outcome["copy_back"]
    assert report["files"] == 3 and report["bytes"] == 7 and report["truncated"] is True
    reasons = {entry["path"].rsplit("/", 1)[-1]: entry["reason"] for entry in report["skipped"]}
    assert set(reasons) == {"shadow", "pipe", "zz.txt"}
    assert "symbolic link" in reasons["shadow"] and "FIFO" in reasons["pipe"]
    assert "over the limit of 3 files" in reasons["zz.txt"]
    summary = [line for line in result.stdout.splitlines() if line.startswith("copy-back ")]
    assert len(summary) == 1, result
    assert "copied 3 files (7 bytes); skipped 3" in summary[0]
    assert "first: " in summary[0] and "/pipe is a FIFO" in summary[0]
    assert "cut at a limit" in summary[0]
