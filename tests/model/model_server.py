"""The real model behind llama.cpp's OpenAI-compatible server, started from the model cache.

Shared by the model tier's fixture (tests/model/conftest.py), the managed-session test on the
cluster and bench/bench_real_model.py: one process per use, on 127.0.0.1 and a free port, with
1 thread (faster than 2 on a loaded 2-core machine), an 8,192-token context and the corrected
chat template of chat_template.jinja. Each server saves its slot's prompt cache into the model
cache as it stops and the next one restores it, so no process pays for the system prompt and
tool schemas that every run sends alike.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
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
    cache: ModelCache
    slots: Path
    """Where the server writes and reads the slot files of /slots/0?action=save|restore."""

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


def _slot_action(url: str, action: str, filename: str) -> bool:
    request = urllib.request.Request(
        f"{url}/slots/0?action={action}",
        data=json.dumps({"filename": filename}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _restore_prompt_cache(server: ModelServer) -> None:
    """Loads the slot a previous server saved: its ~1,100 tokens of system prompt and tools.

    A fresh server spends ~60 s of CPU (load 10) on them before its first answer; llama.cpp
    reuses a restored slot's longest common prefix with the next request, so a changed
    prompt only costs what changed. Best effort: without the file a server starts cold.
    """
    saved = server.cache.prompt_slot
    if not saved.is_file():
        return
    shutil.copyfile(saved, server.slots / "restore.bin")
    _slot_action(server.url, "restore", "restore.bin")
    (server.slots / "restore.bin").unlink()


def save_prompt_cache(server: ModelServer) -> bool:
    """Keeps the slot for the next server (every test process and CI run starts its own).

    Call it while the server is alive and idle, after a run whose prompt starts as every
    run's does; returns whether it was saved.
    """
    if not _slot_action(server.url, "save", "save.bin"):
        return False
    saved = server.cache.prompt_slot
    partial = saved.with_name(f".{saved.name}.{os.getpid()}")
    shutil.copyfile(server.slots / "save.bin", partial)
    os.replace(partial, saved)  # whole or not at all for a concurrent reader
    (server.slots / "save.bin").unlink()
    return True


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
    slots = log_dir / "slots"
    slots.mkdir(exist_ok=True)
    command = [
        str(cache.python), str(HERE / "serve.py"),
        "--model", str(cache.gguf), "--chat-template", str(CHAT_TEMPLATE),
        "--host", host, "--threads", str(threads), "--ctx-size", str(CONTEXT_TOKENS),
        "--alias", MODEL_NAME, "--slot-save-path", str(slots), "--exit-with-parent",
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
        server = ModelServer(url=url, model=MODEL_NAME, log=log, cache=cache, slots=slots)
        _restore_prompt_cache(server)
        yield server
        if process.poll() is None:
            save_prompt_cache(server)
    finally:
        _stop(process)
