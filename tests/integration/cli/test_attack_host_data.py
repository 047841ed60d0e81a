"""Issue 26, finding 4, as the attack, through the real `sandfleet` console script, real local
sandboxes and a scripted model over real HTTP: a model in one run reads another run's
output and prompt (with --results-dir under /var/tmp), the host's data (/var/tmp, /srv,
/opt, /mnt, the project folder the CLI runs from), and, under `sandfleet eval`, the
benchmark's answer key. Each read must come back empty; the tools on the sandbox's PATH
(an /opt/<tool>/bin among them) must still run; run folders are private (0700/0600)."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cli.harness import (
    TaskScripts,
    cli_environment,
    read_jsonl,
    records_of,
    run_cli,
    run_folder,
)
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

SECRET = f"SECRET-{secrets.token_hex(8)}"


@pytest.fixture
def scratch() -> Iterator[list[Path]]:
    """Folders made on the host for one test, removed afterwards."""
    made: list[Path] = []
    yield made
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def open_folder(made: list[Path], parent: str, prefix: str) -> Path:
    """A new world-traversable folder under `parent` (removed after the test)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    made.append(folder)
    folder.chmod(0o755)
    return folder


def host_folder(made: list[Path], parent: str, prefix: str) -> Path | None:
    """A world-readable folder with a world-readable secret under `parent` (None where we
    may not write: these attacks need root for /srv, /opt and /usr/local/src)."""
    if not os.access(parent, os.W_OK):
        return None
    folder = open_folder(made, parent, prefix)
    (folder / "data.txt").write_text(f"{SECRET} in {parent}\n")
    (folder / "data.txt").chmod(0o644)
    return folder


def observations(trajectory: Path) -> str:
    return "\n".join(r["output"] for r in records_of(trajectory, "observation"))


def flags(server: ScriptedOpenAIServer, results: Path, state: Path) -> list[str]:
    return [
        "--model", "scripted-model", "--base-url", server.base_url, "--max-retries", "0",
        "--results-dir", str(results), "--state-dir", str(state),
    ]  # fmt: skip


def modes(folder: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(folder.stat().st_mode)}
    for path in folder.rglob("*"):
        found[str(path.relative_to(folder))] = stat.S_IMODE(path.lstat().st_mode)
    return found


async def test_a_second_run_reads_neither_another_runs_files_nor_the_hosts_data(
    scratch: list[Path],
) -> None:
    base = open_folder(scratch, "/var/tmp", "sandfleet-attack-runs-")
    results, state = base / "results", base / "state"
    data = [
        folder
        for parent, prefix in (
            ("/var/tmp", "sandfleet-data-"),
            ("/srv", "sandfleet-data-"),
            ("/opt", "sandfleet-data-"),
            ("/mnt", "sandfleet-data-"),
        )
        if (folder := host_folder(scratch, parent, prefix)) is not None
    ]
    # The project folder the user runs from: under a system dir where we may (a checkout in
    # /usr/local/src), else in /var/tmp.
    project = host_folder(scratch, "/usr/local/src", "sandfleet-project-") or host_folder(
        scratch, "/var/tmp", "sandfleet-project-"
    )
    assert project is not None
    tool = host_folder(scratch, "/opt", "sandfleet-tool-")
    path = os.environ.get("PATH", "/usr/bin:/bin")
    if tool is not None:
        (tool / "bin").mkdir()
        (tool / "bin" / "sandfleet-hello").write_text("#!/bin/sh\necho tool-ran\n")
        (tool / "bin" / "sandfleet-hello").chmod(0o755)
        path = f"{tool / 'bin'}:{path}"
    env = cli_environment(base / "home", PATH=path)
    shared = open_folder(scratch, "/var/tmp", "sandfleet-shared-")
    (shared / "given.txt").write_text("given-to-the-task\n")
    (shared / "given.txt").chmod(0o644)

    victim_script = [
        Reply(tool_calls=[bash(f"echo {SECRET}-output > output/secret.txt")]),
        Reply(text="done", tool_calls=[submit()]),
    ]
    async with ScriptedOpenAIServer(victim_script) as server:
        victim = await run_cli(
            "run", f"victim prompt {SECRET}-prompt", "--id", "victim",
            *flags(server, results, state), env=env, cwd=project,
        )  # fmt: skip
    assert victim.returncode == 0, victim
    victim_folder = run_folder(results, "victim")
    assert (victim_folder / "output" / "secret.txt").read_text() == f"{SECRET}-output\n"

    targets = [
        str(victim_folder / "output" / "secret.txt"),
        str(victim_folder / "trajectory.jsonl"),
        str(victim_folder / "result.json"),
        *(str(folder / "data.txt") for folder in [*data, project]),
    ]
    steal = "; ".join(f"cat {shlex.quote(t)} 2>&1" for t in targets)
    steal += f"; ls -la {shlex.quote(str(results))} 2>&1; ls /srv /opt /mnt /var 2>&1"
    steal += f"; sandfleet-hello 2>&1; id; cat {shlex.quote(str(shared / 'given.txt'))}"
    attacker_script = [Reply(tool_calls=[bash(steal)]), Reply(text="done", tool_calls=[submit()])]
    async with ScriptedOpenAIServer(attacker_script) as server:
        attacker = await run_cli(
            "run", "attacker", "--id", "attacker", *flags(server, results, state),
            "--read-only-bind", str(shared), env=env, cwd=project,
        )  # fmt: skip
    assert attacker.returncode == 0, attacker
    seen = observations(run_folder(results, "attacker") / "trajectory.jsonl")

    assert SECRET not in seen, seen
    listed = [line for line in seen.splitlines() if "victim" in line and "cat: " not in line]
    assert listed == [], "not even the victim's folder name"
    assert "No such file" in seen or "Permission denied" in seen, seen
    if tool is not None:
        assert "tool-ran" in seen, "a tool under /opt on the PATH still runs"
    assert "(sandbox)" in seen, "the sandbox's account files, not the host's"
    assert "given-to-the-task" in seen, "--read-only-bind shows what the task needs"
    # Run folders are private from creation: 0700 folders, 0600 files.
    for name, mode in modes(victim_folder).items():
        is_dir = name == "." or (victim_folder / name).is_dir()
        assert mode == (0o700 if is_dir else 0o600), (name, oct(mode))
    assert stat.S_IMODE(results.stat().st_mode) == 0o700


BENCH_CONFIG = """\
dataset: json
data_files: data/rows.json
output_dir: /testbed
system_prompt: "Answer file: {output_dir}/answer.txt."
instance_prompt: "Problem: {problem_statement}"
"""
BENCH_REWARD = """\
def compute_score(agent_answer, ground_truth, **kwargs):
    return 1.0 if agent_answer == ground_truth else 0.0
"""


def write_bench(folder: Path) -> Path:
    (folder / "data").mkdir(parents=True)
    (folder / "config.yaml").write_text(BENCH_CONFIG)
    (folder / "reward.py").write_text(BENCH_REWARD + f"# expected: {SECRET}\n")
    rows = [{"id": "p1", "problem_statement": "Guess [p1].", "ground_truth": SECRET}]
    (folder / "data" / "rows.json").write_text(json.dumps(rows))
    (folder / "expected.txt").write_text(SECRET + "\n")
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


@pytest.mark.parametrize("parent", ["/var/tmp", "/usr/local/src"])
async def test_a_model_under_eval_cannot_read_the_benchmark_answer_key(
    parent: str, scratch: list[Path]
) -> None:
    """/var/tmp: a project folder anywhere on the host; /usr/local/src: inside a system dir
    the sandbox sees, so only the eval's own hiding of the benchmark keeps it out."""
    if not os.access(parent, os.W_OK):
        pytest.skip(f"needs write access to {parent} (root)")
    base = open_folder(scratch, parent, "sandfleet-attack-eval-")
    bench = write_bench(base / "bench")
    out = Path(tempfile.mkdtemp(prefix="sandfleet-attack-eval-out-", dir="/var/tmp"))
    scratch.append(out)
    cheat = (
        f"grep -rhoa 'SECRET-[0-9a-f]*' {shlex.quote(str(bench))} 2>&1 | head -1 > answer.txt;"
        f" cat {shlex.quote(str(bench / 'expected.txt'))} 2>&1; cat answer.txt"
    )
    scripts = {"[p1]": [Reply(tool_calls=[bash(cheat)]), Reply(text="done", tool_calls=[submit()])]}
    env = cli_environment(out / "home")
    async with ScriptedOpenAIServer(responder=TaskScripts(scripts)) as server:
        result = await run_cli(
            "eval", str(bench), "--out", str(out / "eval"), "--model", "scripted-model",
            "--base-url", server.base_url, "--max-retries", "0", "--max-turns", "4",
            "--state-dir", str(out / "state"),
            env=env, cwd=bench,
        )  # fmt: skip

    samples = read_jsonl(out / "eval" / "samples.jsonl")
    assert len(samples) == 1, result
    assert samples[0]["score"] == 0.0, "the model found the answer key"
    assert samples[0]["agent_answer"] != SECRET
    trajectory = Path(samples[0]["trajectory"])
    seen = observations(trajectory)
    assert SECRET not in seen and "No such file" in seen, seen
