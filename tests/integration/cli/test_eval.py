"""`sandfleet eval`: a seed-format benchmark folder scored through the real CLI, with real
local sandboxes and a real-HTTP scripted model: inputs, output_dir, kwargs, both modes,
samples and pass@k, resume, a raising reward, a missing answer, a malformed row."""

from __future__ import annotations

import asyncio
import collections
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cli.harness import (
    CLI_TIMEOUT_S,
    TaskScripts,
    cli_environment,
    live_sandboxes,
    press_ctrl_c,
    read_jsonl,
    read_until,
    run_cli,
    start_cli,
)
from tests.support.example_bench import EXAMPLE, EXAMPLE_SOLUTIONS
from tests.support.scripted_openai import (
    Fail,
    Hang,
    RecordedRequest,
    Reply,
    ScriptedOpenAIServer,
    Step,
    bash,
    submit,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

CONFIG = """\
dataset: json
data_files: data/rows.json
output_dir: /testbed
system_prompt: "Solve it. Answer file: {output_dir}/answer.txt; inputs in {input_dir}; {{braces}}."
instance_prompt: "Problem: {problem_statement}"
"""

REWARD = """\
import json
from pathlib import Path


def compute_score(agent_answer, ground_truth, **kwargs):
    print("reward noise on stdout")  # must not reach the answer channel
    with Path("kwargs.log").open("a") as log:
        log.write(json.dumps({"answer": agent_answer, **kwargs}) + "\\n")
    if kwargs.get("explode"):
        raise ValueError("boom from reward.py")
    if "unit" in kwargs and kwargs["unit"] != "cm":
        return 0.0
    return 1.0 if agent_answer == ground_truth else 0.0
"""

VANILLA_PROMPT = """\
def create_prompt(problem_data):
    return "VANILLA " + problem_data["problem_statement"]
"""

ROWS: list[dict[str, Any]] = [
    {"id": "files", "problem_statement": "Multiply [files].", "ground_truth": "42",
     "input_files": {"numbers.txt": "6 7\n"}},
    {"id": "json-files", "problem_statement": "List [json-files].", "ground_truth": "a.txt",
     "input_files": json.dumps({"a.txt": "hello", "skipped.txt": None})},
    {"id": "kwargs", "problem_statement": "Say [kwargs].", "ground_truth": "x", "unit": "cm",
     "input_files": None},
    {"id": "explodes", "problem_statement": "Try [explodes].", "ground_truth": "1",
     "explode": True},
    {"id": "no-answer", "problem_statement": "Skip [no-answer].", "ground_truth": "7"},
]  # fmt: skip

# Relative paths: the working dir is /testbed, which is also the configured output_dir.
SANDBOX_SCRIPTS: dict[str, list[Step]] = {
    "[files]": [
        Reply(
            tool_calls=[bash("read a b < input/numbers.txt; echo $((a * b)) > answer.txt")],
            prompt_tokens=300,
            completion_tokens=20,
        ),
        Reply(tool_calls=[submit()], prompt_tokens=400, completion_tokens=10),
    ],
    "[json-files]": [
        Reply(tool_calls=[bash("ls input > answer.txt")]),
        Reply(tool_calls=[submit()]),
    ],
    "[kwargs]": [Reply(tool_calls=[bash("echo x > answer.txt")]), Reply(tool_calls=[submit()])],
    "[explodes]": [Reply(tool_calls=[bash("echo 1 > answer.txt")]), Reply(tool_calls=[submit()])],
    "[no-answer]": [Reply(text="7", tool_calls=[submit()])],
}
LLM_SCRIPTS: dict[str, list[Step]] = {
    "[files]": [Reply(text="42", prompt_tokens=50, completion_tokens=3)],
    "[json-files]": [Reply(text="no idea")],
    "[kwargs]": [Reply(text=" x\n")],
    "[explodes]": [Reply(text="1")],
    "[no-answer]": [Reply(text="7")],
}


def write_bench(folder: Path, rows: list[dict[str, Any]] = ROWS) -> Path:
    (folder / "data").mkdir(parents=True)
    (folder / "config.yaml").write_text(CONFIG)
    (folder / "reward.py").write_text(REWARD)
    (folder / "vanilla_llm_prompt.py").write_text(VANILLA_PROMPT)
    (folder / "data" / "rows.json").write_text(json.dumps(rows))
    return folder


def eval_args(bench: Path, out: Path, server: ScriptedOpenAIServer, *extra: str) -> list[str]:
    return [
        "eval", str(bench), "--out", str(out), "--model", "scripted-model",
        "--base-url", server.base_url, "--max-retries", "0", "--max-turns", "4",
        "--concurrency", "3", "--state-dir", str(out.parent / "state"), *extra,
    ]  # fmt: skip


def by_problem(out: Path, mode: str) -> dict[str, dict[str, Any]]:
    lines = read_jsonl(out / "samples.jsonl")
    return {line["problem_id"]: line for line in lines if line["mode"] == mode}


async def test_both_modes_score_a_folder_into_one_out_with_inputs_kwargs_and_errors(
    tmp_path: Path,
) -> None:
    bench = write_bench(tmp_path / "bench")
    out = tmp_path / "out"
    env = cli_environment(tmp_path / "home")
    async with ScriptedOpenAIServer(responder=TaskScripts(SANDBOX_SCRIPTS)) as server:
        sandbox_run = await run_cli(*eval_args(bench, out, server), env=env, cwd=tmp_path)
        sandbox_requests = list(server.chat_requests)
    async with ScriptedOpenAIServer(responder=TaskScripts(LLM_SCRIPTS)) as server:
        llm_run = await run_cli(
            *eval_args(bench, out, server, "--mode", "llm"), env=env, cwd=tmp_path
        )
        llm_requests = list(server.chat_requests)

    assert sandbox_run.returncode == 1, sandbox_run
    check_sandbox_mode(out, bench, sandbox_requests)
    assert live_sandboxes(tmp_path / "state") == []
    assert llm_run.returncode == 1, llm_run
    check_llm_mode(out, llm_requests)
    check_results_and_report(out)
    assert "mean score" in llm_run.stdout and "pass@1" in llm_run.stdout


def check_sandbox_mode(out: Path, bench: Path, requests: list[RecordedRequest]) -> None:
    """One error (the reward raised), everything else scored; inputs, kwargs, accounting."""
    sandbox = by_problem(out, "sandbox")
    assert sorted(sandbox) == sorted(row["id"] for row in ROWS)
    assert (sandbox["files"]["score"], sandbox["files"]["agent_answer"]) == (1.0, "42")
    assert sandbox["json-files"]["agent_answer"] == "a.txt"  # null contents were skipped
    assert sandbox["kwargs"]["score"] == 1.0
    assert sandbox["explodes"]["error_kind"] == "reward"
    assert "boom from reward.py" in sandbox["explodes"]["error"]
    assert sandbox["explodes"]["score"] == 0.0
    missing = sandbox["no-answer"]
    assert (missing["agent_answer"], missing["score"], missing["error"]) == ("", 0.0, None)
    assert missing["stop_reason"] == "submitted"
    # The config's templates and output_dir reached the model.
    first = requests[0].body["messages"]
    assert first[0]["content"].startswith("Solve it. Answer file: /testbed/answer.txt;")
    assert "{braces}" in first[0]["content"]
    assert all("tools" in request.body for request in requests)
    # Token and time accounting from the trajectory: 400 - 300 - 20 tokens came back.
    assert sandbox["files"]["observation_tokens"] == 80
    assert sandbox["files"]["context_tokens"] == 410
    assert sandbox["files"]["env_time_s"] > 0 and sandbox["files"]["model_time_s"] > 0
    assert Path(sandbox["files"]["trajectory"]).is_file()
    logged = [json.loads(line) for line in (bench / "kwargs.log").read_text().splitlines()]
    kwargs = next(entry for entry in logged if entry.get("id") == "kwargs")
    assert kwargs["unit"] == "cm" and kwargs["problem_statement"] == "Say [kwargs]."
    assert "ground_truth" not in kwargs


def check_llm_mode(out: Path, requests: list[RecordedRequest]) -> None:
    """One request per problem, no tools, create_prompt's text."""
    assert len(requests) == len(ROWS)
    for request in requests:
        assert "tools" not in request.body
        (message,) = request.body["messages"]
        assert message["role"] == "user" and message["content"].startswith("VANILLA ")
    llm = by_problem(out, "llm")
    assert llm["files"]["score"] == 1.0 and llm["kwargs"]["agent_answer"] == "x"
    assert llm["json-files"]["score"] == 0.0 and llm["json-files"]["error"] is None


def check_results_and_report(out: Path) -> None:
    results = json.loads((out / "results.json").read_text())
    for key in ("mean_score", "total", "num_errors", "elapsed_time_seconds", "config"):
        assert key in results
    assert results["mode"] == "llm" and results["total"] == len(ROWS)
    assert results["mean_score"] == pytest.approx(3 / 5)  # files, kwargs, no-answer
    assert results["num_errors"] == 1
    assert results["modes"]["sandbox"]["all"]["mean_score"] == pytest.approx(3 / 5)
    assert results["modes"]["sandbox"]["all"]["reward_errors"] == 1
    assert results["config"]["output_dir"] == "/testbed"
    report = (out / "report.md").read_text()
    assert "## sandbox mode" in report and "## llm mode" in report
    assert "## sandbox vs llm" in report
    assert "boom from reward.py" in report
    # report.html beside it links every sample with a trajectory to its run page.
    html = (out / "report.html").read_text()
    links = re.findall(r'<a href="([^"]+)">view</a>', html)
    assert len(links) == 2 * len(ROWS) and all((out / link).is_file() for link in links)
    assert html.count("<svg") >= 3  # score by domain, tokens, time (pass@k needs K > 1)


def counting_responder() -> Any:
    """[p1]: right on its first request only; [p2]: always right."""
    seen: collections.Counter[str] = collections.Counter()

    def respond(request: RecordedRequest) -> Step:
        content = request.body["messages"][0]["content"]
        key = "[p1]" if "[p1]" in content else "[p2]"
        seen[key] += 1
        if key == "[p1]":
            return Reply(text="1" if seen[key] == 1 else "0")
        return Reply(text="2")

    return respond


async def test_three_samples_report_pass_at_k_with_the_unbiased_estimator(
    tmp_path: Path,
) -> None:
    rows = [
        {"id": "p1", "problem_statement": "Solve [p1].", "ground_truth": "1"},
        {"id": "p2", "problem_statement": "Solve [p2].", "ground_truth": "2"},
    ]
    bench = write_bench(tmp_path / "bench", rows)
    out = tmp_path / "out"
    async with ScriptedOpenAIServer(responder=counting_responder()) as server:
        result = await run_cli(
            *eval_args(bench, out, server, "--mode", "llm", "--samples", "3"),
            "--temperature", "0.6", "--max-tokens", "64",
            "--extra-body", '{"chat_template_kwargs": {"enable_thinking": false}}',
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        bodies = [request.body for request in server.chat_requests]

    assert result.returncode == 0, result
    lines = read_jsonl(out / "samples.jsonl")
    assert sorted((line["problem_id"], line["sample"]) for line in lines) == [
        ("p1", 0), ("p1", 1), ("p1", 2), ("p2", 0), ("p2", 1), ("p2", 2),
    ]  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    assert results["mean_score"] == pytest.approx(4 / 6)
    # p1: n=3, c=1 -> pass@1 = 1/3, pass@3 = 1; p2: 1 and 1.
    assert results["pass_at_k"]["pass@1"] == pytest.approx((1 / 3 + 1) / 2, abs=1e-6)
    assert results["pass_at_k"]["pass@3"] == pytest.approx(1.0)
    assert "pass@3 1.000" in result.stdout
    for body in bodies:  # the run's settings reach every request
        assert body["chat_template_kwargs"] == {"enable_thinking": False}
        assert (body["temperature"], body["max_tokens"]) == (0.6, 64)


async def test_an_interrupted_eval_resumes_and_retry_errors_reruns_only_errors(
    tmp_path: Path,
) -> None:
    rows = [
        {"id": name, "problem_statement": f"Solve [{name}].", "ground_truth": name}
        for name in ("a", "b", "c")
    ]
    bench = write_bench(tmp_path / "bench", rows)
    out = tmp_path / "out"
    env = cli_environment(tmp_path / "home")
    scripts: dict[str, list[Step]] = {"[a]": [Reply(text="a")], "[b]": [Hang()], "[c]": [Hang()]}
    async with ScriptedOpenAIServer(responder=TaskScripts(scripts)) as server:
        process = await start_cli(
            *eval_args(bench, out, server, "--mode", "llm"), env=env, cwd=tmp_path
        )
        assert process.stdout is not None
        await read_until(process.stdout, "✓ a#0", timeout_s=CLI_TIMEOUT_S)
        await server.wait_for_requests(3)
        press_ctrl_c(process)
        async with asyncio.timeout(CLI_TIMEOUT_S):
            rest = (await process.stdout.read()).decode()
            await process.wait()
        interrupted = read_jsonl(out / "samples.jsonl")
        scripts["[b]"] = [Reply(text="b")]
        scripts["[c]"] = [Fail(400, "this prompt is rejected")]
        before = len(server.chat_requests)
        resumed = await run_cli(
            *eval_args(bench, out, server, "--mode", "llm"), env=env, cwd=tmp_path
        )
        after = len(server.chat_requests)
        lines = read_jsonl(out / "samples.jsonl")
        scripts["[c]"] = [Reply(text="c")]
        retried = await run_cli(
            *eval_args(bench, out, server, "--mode", "llm", "--retry-errors"), env=env, cwd=tmp_path
        )
        retried_requests = len(server.chat_requests) - after

    assert process.returncode == 130, rest
    assert "run the same command again to resume" in rest
    assert [line["problem_id"] for line in interrupted] == ["a"]
    assert resumed.returncode == 1, resumed  # c's request failed: an error, not a wrong answer
    assert "1 already in" in resumed.stdout and "2 to run" in resumed.stdout
    assert after - before == 2
    assert sorted(line["problem_id"] for line in lines) == ["a", "b", "c"]
    failed = next(line for line in lines if line["problem_id"] == "c")
    assert (failed["error_kind"], failed["stop_reason"]) == ("run", "model_error")
    assert "this prompt is rejected" in failed["error"]
    # --retry-errors runs only the error again; its newer line wins.
    assert retried.returncode == 0, retried
    assert "2 already in" in retried.stdout and retried_requests == 1
    assert len(read_jsonl(out / "samples.jsonl")) == 4
    results = json.loads((out / "results.json").read_text())
    assert (results["mean_score"], results["total"], results["num_errors"]) == (1.0, 3, 0)


async def test_a_malformed_row_is_named_before_any_model_request(tmp_path: Path) -> None:
    rows = [
        {"id": "fine", "problem_statement": "Solve [fine].", "ground_truth": "1"},
        {"id": "broken", "ground_truth": "2"},
    ]
    bench = write_bench(tmp_path / "bench", rows)
    async with ScriptedOpenAIServer(responder=lambda _: Fail(500, "must not be asked")) as server:
        result = await run_cli(
            *eval_args(bench, tmp_path / "out", server),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        requests = len(server.requests)

    assert result.returncode == 2, result
    assert "row 1 (id 'broken'): missing problem_statement" in result.stderr
    assert "Traceback" not in result.stderr
    assert requests == 0


async def test_the_shipped_example_scores_full_marks_when_the_model_computes_in_the_sandbox(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    async with ScriptedOpenAIServer(responder=TaskScripts(EXAMPLE_SOLUTIONS)) as server:
        result = await run_cli(
            *eval_args(EXAMPLE, out, server), env=cli_environment(tmp_path / "home"), cwd=tmp_path
        )

    assert result.returncode == 0, result
    results = json.loads((out / "results.json").read_text())
    assert (results["mean_score"], results["total"], results["num_errors"]) == (1.0, 4, 0)
    assert set(results["modes"]["sandbox"]) == {"all", "math", "data"}
    assert live_sandboxes(tmp_path / "state") == []
