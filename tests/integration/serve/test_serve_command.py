"""`sandfleet serve --config FILE` as a real process: a static API key, a bad config file."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.integration.cli.harness import cli_command, cli_environment
from tests.integration.serve.harness import MODEL, free_port, write_config
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, submit

pytestmark = [pytest.mark.integration]

KEY = "serve-test-key-0123456789"


@contextlib.asynccontextmanager
async def serve_process(home: Path, config: Path, port: int) -> AsyncIterator[str]:
    env = cli_environment(home, SANDFLEET_SERVE_API_KEY=KEY)
    with (home / "serve-stderr.log").open("w") as errlog:
        process = await asyncio.create_subprocess_exec(
            *cli_command("serve", "--config", str(config), "--port", str(port)),
            env=env, cwd=home, stdout=asyncio.subprocess.DEVNULL, stderr=errlog,
        )  # fmt: skip
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        async with asyncio.timeout(60), httpx.AsyncClient() as probe:
            while True:
                try:
                    await probe.get(f"http://127.0.0.1:{port}/healthz")
                    break
                except httpx.TransportError:
                    assert process.returncode is None, (home / "serve-stderr.log").read_text()
                    await asyncio.sleep(0.1)
        yield base_url
    finally:
        if process.returncode is None:
            process.send_signal(2)  # SIGINT, as Ctrl-C: conversations end, sandboxes go
            async with asyncio.timeout(60):
                await process.wait()


async def test_the_command_serves_with_a_static_key(tmp_path: Path) -> None:
    async with ScriptedOpenAIServer([Reply(text="hello", tool_calls=[submit()])]) as upstream:
        config = write_config(tmp_path, upstream.base_url)
        async with serve_process(tmp_path / "home", config, free_port()) as base_url:
            async with openai.AsyncOpenAI(base_url=base_url, api_key="wrong", max_retries=0) as bad:
                with pytest.raises(openai.AuthenticationError) as refused:
                    await bad.models.list()
            async with openai.AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0) as client:
                answer = await client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}]
                )
    assert refused.value.code == "invalid_api_key"
    assert answer.choices[0].message.content == "hello"
    stderr = (tmp_path / "home" / "serve-stderr.log").read_text()
    assert "Traceback" not in stderr


async def test_a_bad_config_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text("[models.x]\nupstream.base_url = 'http://h/v1'\n")
    process = await asyncio.create_subprocess_exec(
        *cli_command("serve", "--config", str(config)), env=cli_environment(tmp_path / "home"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, stderr = await process.communicate()
    text = stderr.decode()
    assert process.returncode == 2
    assert "models.x.upstream.model" in text and "Traceback" not in text
