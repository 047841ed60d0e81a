"""Issue 27 items 1 and 8, through the real CLI against a real HTTP endpoint on 127.0.0.1:
the endpoint mistakes a new user makes fail fast, before a sandbox starts where they can,
with a line that names the mistake.

- An https:// URL for a plain-HTTP server (the server never answers the TLS handshake):
  before, the request waited out the 600 s request timeout three times in silence; now the
  connect timeout ends the handshake and one plain-HTTP probe names the mistake.
- A --base-url without a scheme, or with one no model endpoint speaks: before, exit 3 after
  a sandbox had started; now exit 2 (bad usage) with no sandbox started.
- A 404 at a /v2 URL: before, the hint said "try .../v2/v1"; now it names .../v1.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.cli.harness import cli_environment, live_sandboxes, run_cli
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def paths(tmp_path: Path) -> tuple[str, ...]:
    return ("--results-dir", str(tmp_path / "results"), "--state-dir", str(tmp_path / "state"))


async def test_an_https_url_for_a_plain_http_server_fails_in_seconds_saying_use_http(
    tmp_path: Path,
) -> None:
    async with ScriptedOpenAIServer([Reply(tool_calls=[submit()])]) as server:
        wrong = server.base_url.replace("http://", "https://")
        started = time.monotonic()
        result = await run_cli(
            "run", "Just submit.", "--id", "tls", "--model", "m", "--base-url", wrong,
            "--request-timeout-seconds", "600", *paths(tmp_path),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        took = time.monotonic() - started

    assert result.returncode == 3, result
    assert "answered plain HTTP, not TLS: use http://" in result.stdout, result
    assert took < 45, f"took {took:.0f} s"  # connect timeout (10 s) + probe + sandbox
    assert server.chat_requests == []  # never a request it could read


async def test_batch_and_doctor_say_use_http_too(tmp_path: Path) -> None:
    # batch's preflight (GET /models) meets the mistake first: it names it before any task.
    (tmp_path / "tasks.jsonl").write_text('{"id": "a", "prompt": "x"}\n')
    env = cli_environment(tmp_path / "home")
    async with ScriptedOpenAIServer([]) as server:
        wrong = server.base_url.replace("http://", "https://")
        batch = await run_cli(
            "batch", str(tmp_path / "tasks.jsonl"), "--out", str(tmp_path / "out.jsonl"),
            "--model", "m", "--base-url", wrong, *paths(tmp_path), env=env, cwd=tmp_path,
        )  # fmt: skip
        doctor = await run_cli("doctor", "--base-url", wrong, env=env, cwd=tmp_path)

    assert batch.returncode == 3, batch
    assert "answered plain HTTP, not TLS: use http://" in batch.stderr, batch
    assert "no task was started" in batch.stderr
    endpoint = next(line for line in doctor.stdout.splitlines() if "model endpoint" in line)
    assert endpoint.startswith("fail") and "answered plain HTTP, not TLS" in endpoint, doctor


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("127.0.0.1:18080/v1", "has no scheme: give http:// or https://, e.g. --base-url "
                               "http://127.0.0.1:18080/v1"),
        ("ftp://x/v1", "the scheme ftp:// is not one a model endpoint speaks"),
    ],
)  # fmt: skip
async def test_a_base_url_without_a_usable_scheme_is_bad_usage_before_any_sandbox(
    tmp_path: Path, url: str, said: str
) -> None:
    for command in (("run", "Just submit."), ("batch", str(tmp_path / "tasks.jsonl"))):
        (tmp_path / "tasks.jsonl").write_text('{"id": "a", "prompt": "x"}\n')
        extra = ("--out", str(tmp_path / "out.jsonl")) if command[0] == "batch" else ()
        result = await run_cli(
            *command, *extra, "--model", "m", "--base-url", url, *paths(tmp_path),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip

        assert result.returncode == 2, result
        assert said in result.stderr, result
        assert "Traceback" not in result.stderr
        assert live_sandboxes(tmp_path / "state") == []
        assert not (tmp_path / "results").exists()  # no run folder: nothing started
        assert not (tmp_path / "out.jsonl").exists()


async def test_a_404_at_a_v2_url_suggests_v1_not_v2_v1(tmp_path: Path) -> None:
    async with ScriptedOpenAIServer([], only_under_v1=True) as server:
        v2 = server.base_url.removesuffix("/v1") + "/v2"
        result = await run_cli(
            "run", "Just submit.", "--id", "v2", "--model", "m", "--base-url", v2,
            *paths(tmp_path), env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip

    assert result.returncode == 3, result
    assert f"try --base-url {server.base_url}" in result.stdout, result
    assert "/v2/v1" not in result.stdout + result.stderr
