"""Issue 27 with the real llama.cpp server (no generation, so each test takes seconds):

- item 1: an https:// --base-url for it (llama.cpp never answers a TLS handshake) fails
  within seconds, saying the endpoint speaks plain HTTP; before, the run was silent for up to
  half an hour (600 s request timeout x 3 attempts);
- item 9: `doctor` reads the server's one slot from /props and warns at --concurrency 2, and
  the README's local-model path works: serve.py started from a shell that then exits keeps
  serving (it used to exit with its parent).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.integration.cli.harness import cli_environment, run_cli
from tests.model.model_cache import ModelCache
from tests.model.model_server import CHAT_TEMPLATE, HERE, ModelServer, unavailable

pytestmark = [pytest.mark.model, pytest.mark.timeout(300)]


async def test_an_https_url_for_the_llama_cpp_server_fails_in_seconds_naming_the_mistake(
    model_server: ModelServer, tmp_path: Path
) -> None:
    wrong = model_server.base_url.replace("http://", "https://")
    started = time.monotonic()
    result = await run_cli(
        "run", "Write 42 to the answer file.", "--id", "tls", "--model", model_server.model,
        "--base-url", wrong, "--results-dir", str(tmp_path / "results"),
        "--state-dir", str(tmp_path / "state"),
        env=cli_environment(tmp_path / "home"), cwd=tmp_path,
    )  # fmt: skip
    took = time.monotonic() - started

    assert result.returncode == 3, result
    assert "answered plain HTTP, not TLS: use http://" in result.stdout, result
    assert took < 60, f"{took:.0f} s"


async def test_doctor_warns_when_concurrency_exceeds_the_servers_one_slot(
    model_server: ModelServer, tmp_path: Path
) -> None:
    env = cli_environment(tmp_path / "home")
    args = ("doctor", "--json", "--base-url", model_server.base_url, "--model", model_server.model)
    two = await run_cli(*args, "--concurrency", "2", env=env, cwd=tmp_path)
    one = await run_cli(*args, "--concurrency", "1", env=env, cwd=tmp_path)

    slots_two = next(c for c in json.loads(two.stdout)["checks"] if c["check"] == "server slots")
    slots_one = next(c for c in json.loads(one.stdout)["checks"] if c["check"] == "server slots")
    assert slots_two["status"] == "warn", two
    assert "runs 1 request(s) at a time" in slots_two["detail"]
    assert "use --concurrency 1" in slots_two["detail"]
    assert slots_one["status"] == "ok", one


def test_serve_py_keeps_serving_after_the_shell_that_started_it_exits(tmp_path: Path) -> None:
    cache = ModelCache.default()
    if cache.missing():
        unavailable("; ".join(cache.missing()))
    port_file = tmp_path / "out"
    # As the README says to: started in the background from a shell, which then exits.
    shell = subprocess.run(
        ["bash", "-c", f"'{cache.python}' '{HERE / 'serve.py'}' --model '{cache.gguf}' "
         f"--chat-template '{CHAT_TEMPLATE}' > '{port_file}' 2> '{tmp_path / 'log'}' & echo $!"],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    pid = int(shell.stdout.strip())
    try:
        deadline = time.monotonic() + 120
        while "listening" not in port_file.read_text() and time.monotonic() < deadline:
            assert _alive(pid), (tmp_path / "log").read_text()[-2000:]
            time.sleep(0.5)
        url = port_file.read_text().split("listening ", 1)[1].strip()
        time.sleep(2.5)  # longer than the orphan watch's 1 s poll: it would have stopped it
        assert _alive(pid)
        with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
            assert response.status == 200
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (no parent reaped it yet) counts as gone.
    try:
        status = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[-1][:1]
    except FileNotFoundError:
        return False
    return status != "Z"
