"""What the CLI tells a user who got something wrong, through the real console script and a
real HTTP endpoint: a base URL without /v1, a request timeout, a missing key for `batch`,
a misspelt prompt_config key or placeholder, `sandfleet doctor` against a live and a dead
endpoint, and output piped into a file that must not wrap at 80 columns."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest

from tests.integration.cli.harness import CliResult, cli_environment, run_cli, run_folder
from tests.support.scripted_openai import Hang, Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.integration]


def run_flags(base_url: str, tmp_path: Path) -> list[str]:
    return [
        "--id", "t", "--model", "m", "--base-url", base_url, "--max-retries", "0",
        "--results-dir", str(tmp_path / "results"), "--state-dir", str(tmp_path / "state"),
    ]  # fmt: skip


def result_error(tmp_path: Path) -> str:
    record = json.loads((run_folder(tmp_path / "results", "t") / "result.json").read_text())
    return str(record["error"])


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def offline_environment(home: Path, **extra: str) -> dict[str, str]:
    """No API key and no --base-url: doctor's endpoint check then stays off the network
    (with a key alone it would ask the OpenAI API; tests talk to loopback only)."""
    environ = cli_environment(home, **extra)
    del environ["OPENAI_API_KEY"]
    return environ


def doctor_lines(result: CliResult) -> dict[str, str]:
    """check name -> its line, from `sandfleet doctor`'s text output."""
    names = ("model endpoint", "local isolation", "cgroups", "cluster", "gateway")
    lines = {}
    for line in result.stdout.splitlines():
        for name in names:
            if line[6:].startswith(name):
                lines[name] = line
    return lines


@pytest.mark.slow
async def test_a_base_url_without_v1_gets_a_hint_with_the_url_to_try(tmp_path: Path) -> None:
    async with ScriptedOpenAIServer(only_under_v1=True) as server:
        root = f"http://127.0.0.1:{server.port}"
        result = await run_cli(
            "run", "hello", *run_flags(root, tmp_path),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        paths = [request.path for request in server.requests]

    assert result.returncode == 3, result
    assert paths == ["/chat/completions"]
    hint = (
        f"the endpoint answered 404 at {root}/chat/completions; OpenAI-compatible servers "
        f"usually serve under /v1: try --base-url {root}/v1"
    )
    assert hint in result_error(tmp_path)
    assert hint in " ".join(result.stdout.split())


@pytest.mark.slow
async def test_a_request_timeout_names_the_limit_and_the_flag(tmp_path: Path) -> None:
    async with ScriptedOpenAIServer([Hang()]) as server:
        result = await run_cli(
            "run", "hello", *run_flags(server.base_url, tmp_path), "--request-timeout-seconds", "1",
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip

    assert result.returncode == 3, result
    error = result_error(tmp_path)
    assert f"the model endpoint {server.base_url} timed out: no answer within 1 s" in error
    assert "--request-timeout-seconds" in error and "SANDFLEET_REQUEST_TIMEOUT_SECONDS" in error


async def test_batch_without_any_key_for_openai_is_one_line_and_exit_2(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "hi"}\n')
    environ = cli_environment(tmp_path / "home")
    del environ["OPENAI_API_KEY"]
    result = await run_cli(
        "batch", str(tasks), "--out", str(tmp_path / "out.jsonl"), "--model", "m",
        env=environ, cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 2, result
    assert result.stderr.splitlines() == [
        "error: no API key for the OpenAI API: export OPENAI_API_KEY=<key> (or name another "
        "variable with --api-key-env), or give --base-url for an endpoint that needs none"
    ]
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.slow
async def test_unknown_prompt_config_keys_and_placeholders_are_warned_about_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "prompt.txt").write_text("Say hi.\n")
    (folder / "prompt_config.yaml").write_text(
        "sytem_prompt: You are careful.\n"
        "instance_prompt: '{problem_statement} Work in {workdir}.'\n"
    )
    async with ScriptedOpenAIServer([Reply(text="done", tool_calls=[submit()])]) as server:
        result = await run_cli(
            "run", str(folder), *run_flags(server.base_url, tmp_path),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        first_user = server.chat_requests[0].body["messages"][1]["content"]

    assert result.returncode == 0, result
    config = folder / "prompt_config.yaml"
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings[0] == (
        f"warning: prompt config {config}: unknown key sytem_prompt is ignored; "
        "did you mean system_prompt?"
    )
    assert warnings[1].startswith(
        f"warning: prompt config {config}: instance_prompt: the placeholder {{workdir}} is "
        "not filled in; did you mean working_dir? (known: {problem_statement}, {working_dir},"
    )
    assert len(warnings) == 2, result
    assert "Work in {workdir}." in first_user  # left as written, as the warning says


async def test_doctor_reports_a_live_endpoint_ok_and_exits_0(tmp_path: Path) -> None:
    async with ScriptedOpenAIServer(models=["m", "other"]) as server:
        text = await run_cli(
            "doctor", "--base-url", server.base_url, "--model", "m", "--isolation", "none",
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        as_json = await run_cli(
            "doctor", "--base-url", server.base_url, "--model", "absent", "--json",
            "--isolation", "none", env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        model_requests = [r for r in server.requests if r.path == "/v1/models"]

    assert text.returncode == 0, text
    lines = doctor_lines(text)
    assert lines["model endpoint"].startswith("ok    model endpoint"), text
    assert f"{server.base_url} answers (2 models listed)" in lines["model endpoint"]
    assert lines["local isolation"].startswith("warn "), text
    assert lines["cluster"].startswith("skip "), text  # a clean HOME has no kubeconfig
    assert lines["gateway"].startswith("skip "), text
    assert model_requests[0].headers["authorization"] == "Bearer sk-test-placeholder"
    report = json.loads(as_json.stdout)
    checks = {check["check"]: check for check in report["checks"]}
    assert checks["model endpoint"]["status"] == "warn"
    assert "does not list the model absent" in checks["model endpoint"]["detail"]
    assert report["ok"] is True and as_json.returncode == 0


@pytest.mark.parametrize("where", ["dead", "no-v1"])
async def test_doctor_fails_a_dead_or_misaddressed_endpoint_and_exits_1(
    tmp_path: Path, where: str
) -> None:
    async with ScriptedOpenAIServer(only_under_v1=True) as server:
        port = closed_port() if where == "dead" else server.port
        root = f"http://127.0.0.1:{port}"
        result = await run_cli(
            "doctor", "--base-url", root, "--isolation", "none", "--json",
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip

    assert result.returncode == 1, result
    report = json.loads(result.stdout)
    endpoint = next(c for c in report["checks"] if c["check"] == "model endpoint")
    assert report["ok"] is False and endpoint["status"] == "fail"
    if where == "dead":
        assert f"cannot reach {root}/models" in endpoint["detail"]
    else:
        assert f"try --base-url {root}/v1" in endpoint["detail"]


async def test_doctor_checks_a_configured_gateway_by_connecting(tmp_path: Path) -> None:
    """The check opens a TCP connection, no more: a plain listener stands in for the
    gateway's port (the claim path itself is covered by the gateway tests)."""
    accepted: list[bool] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(True)
        writer.close()

    listener = await asyncio.start_server(accept, "127.0.0.1", 0)
    live = listener.sockets[0].getsockname()[1]
    dead = closed_port()
    environ = offline_environment(tmp_path / "home", SANDFLEET_GATEWAY_TOKEN="t")
    async with listener:
        up = await run_cli(
            "doctor", "--gateway", f"127.0.0.1:{live}", "--isolation", "none", "--json",
            env=environ, cwd=tmp_path,
        )  # fmt: skip
    down = await run_cli(
        "doctor", "--gateway", f"127.0.0.1:{dead}", "--isolation", "none", "--json",
        env=environ, cwd=tmp_path,
    )  # fmt: skip

    up_check = next(c for c in json.loads(up.stdout)["checks"] if c["check"] == "gateway")
    down_check = next(c for c in json.loads(down.stdout)["checks"] if c["check"] == "gateway")
    assert up_check["status"] == "ok" and accepted, up
    assert up_check["detail"] == f"127.0.0.1:{live} accepts connections (plaintext, from argument)"
    assert up.returncode == 0, up
    assert down_check["status"] == "fail", down
    assert f"cannot connect to 127.0.0.1:{dead}" in down_check["detail"]
    assert down.returncode == 1


@pytest.mark.slow
async def test_piped_output_keeps_long_lines_whole(tmp_path: Path) -> None:
    words = " ".join(f"word{index}" for index in range(40))  # ~300 characters
    script = [
        Reply(text=words, tool_calls=[bash(f"echo '{words}' > output/answer.txt")]),
        Reply(text="done", tool_calls=[submit()]),
    ]
    environ = cli_environment(tmp_path / "home")
    del environ["COLUMNS"]  # as in CI or `| grep`: no terminal, no width given
    async with ScriptedOpenAIServer(script) as server:
        result = await run_cli(
            "run", "echo", *run_flags(server.base_url, tmp_path), env=environ, cwd=tmp_path
        )

    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    assert any(line.strip() == words for line in lines), result  # the answer, unwrapped
    # The trace shortens a reply to one line of 120 characters (the trajectory has it all);
    # piped, that line is neither wrapped nor cut at 80 columns.
    traced = next(index for index, line in enumerate(lines) if line.startswith("  model word0"))
    assert len(lines[traced]) > 100, result
    assert lines[traced + 1].startswith("  → execute_bash echo 'word0 word1"), result
    assert len(lines[traced + 1]) > 100, result


async def test_doctor_fails_a_kubeconfig_whose_api_server_is_down(tmp_path: Path) -> None:
    server = f"http://127.0.0.1:{closed_port()}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "dead",
            "clusters": [{"name": "dead", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u"}}],
        })
    )  # fmt: skip
    result = await run_cli(
        "doctor", "--isolation", "none", "--json",
        env=offline_environment(tmp_path / "home", KUBECONFIG=str(kubeconfig)), cwd=tmp_path,
    )  # fmt: skip

    checks = {check["check"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["cluster"]["status"] == "fail", result
    assert "127.0.0.1" in checks["cluster"]["detail"], result
    assert result.returncode == 1


async def test_doctor_probes_the_isolation_local_runs_use(tmp_path: Path) -> None:
    """The same probe a local run starts with: where `run` works (every local CLI test
    here runs namespaced sandboxes), doctor says ok and names the mechanism."""
    result = await run_cli(
        "doctor", "--json", env=offline_environment(tmp_path / "home"), cwd=tmp_path
    )

    checks = {check["check"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["local isolation"]["status"] == "ok", result
    assert checks["local isolation"]["detail"].split()[0] in ("unshare", "bwrap")
    assert checks["cgroups"]["status"] in ("ok", "warn")
