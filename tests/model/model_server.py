"""The real model behind llama.cpp's OpenAI-compatible server, started from the model cache.

Shared by the model tier's fixture (tests/model/conftest.py), the managed-session test on the
cluster and bench/bench_real_model.py: one process per use, on 127.0.0.1 and a free port, with
1 thread (faster than 2 on a loaded 2-core machine), an 8,192-token context and the corrected
chat template of chat_template.jinja.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from tests.model.model_cache import SETUP_COMMAND, ModelCache

HERE = Path(__file__).resolve().parent
CHAT_TEMPLATE = HERE / "chat_template.jinja"
MODEL_NAME = "qwen2.5-coder-1.5b-instruct"
CONTEXT_TOKENS = 8192
START_TIMEOUT_S = 120.0


class ModelUnavailable(Exception):
    """The cache is incomplete; the message says what is missing and how to fill it."""


class ModelServerFailed(RuntimeError):
    """The cache is complete but the server would not start: an error, never a skip."""


@dataclass(frozen=True)
class ModelServer:
    """A running server: `base_url` ends in /v1, as `sandfleet --base-url` wants it."""

    url: str
    model: str
    log: Path

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"


def unavailable(reason: str) -> NoReturn:
    """Skip, or fail when the run promised the model (SANDFLEET_REQUIRE_MODEL=1)."""
    if os.environ.get("SANDFLEET_REQUIRE_MODEL") == "1":
        pytest.fail(f"model required (SANDFLEET_REQUIRE_MODEL=1) but {reason}", pytrace=False)
    pytest.skip(reason)


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _read_address(process: subprocess.Popen[str], log: Path, deadline: float) -> str:
    assert process.stdout is not None
    while time.monotonic() < deadline:  # serve.py prints one line once it listens
        ready, _, _ = select.select([process.stdout], [], [], 1.0)
        if not ready:
            continue
        line = process.stdout.readline()
        if not line:  # it exited
            break
        if line.startswith("listening "):
            return line.split(" ", 1)[1].strip()
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise ModelServerFailed(f"the model server did not start (exit {process.poll()}):\n{tail}")


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()


@contextlib.contextmanager
def running_model_server(
    log_dir: Path, *, host: str = "127.0.0.1", threads: int = 1, cache: ModelCache | None = None
) -> Iterator[ModelServer]:
    """Start the server, wait until /health answers, stop it on exit (its log stays in log_dir)."""
    cache = cache or ModelCache.default()
    missing = cache.missing()
    if missing:
        raise ModelUnavailable("; ".join(missing) + f" (fill the cache with `{SETUP_COMMAND}`)")
    log = log_dir / "model-server.log"
    command = [
        str(cache.python), str(HERE / "serve.py"),
        "--model", str(cache.gguf), "--chat-template", str(CHAT_TEMPLATE),
        "--host", host, "--threads", str(threads), "--ctx-size", str(CONTEXT_TOKENS),
        "--alias", MODEL_NAME, "--exit-with-parent",
    ]  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT_S
    with log.open("w") as stderr:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    try:
        url = _read_address(process, log, deadline)
        while not healthy(url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise ModelServerFailed(f"the model server at {url} never became healthy ({log})")
            time.sleep(0.2)
        yield ModelServer(url=url, model=MODEL_NAME, log=log)
    finally:
        _stop(process)
