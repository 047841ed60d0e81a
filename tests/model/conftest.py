"""The model tier's fixture: the real model behind llama.cpp's server (model_server).

Filled once by `bash tests/model/setup.sh`. Without the cache the tests are skipped with that
command as the reason, unless SANDFLEET_REQUIRE_MODEL=1 (CI), which turns the skip into a
failure, as SANDFLEET_REQUIRE_CLUSTER does for the cluster tier.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.model.model_server import (
    ModelServer,
    ModelUnavailable,
    healthy,
    running_model_server,
    save_prompt_cache,
    unavailable,
)


class ReusedModelServer:
    """One server for the whole tier, started again only when a test left it dead.

    Reuse is the point: a fresh server spends ~60 s (at load 10) of its first request on the
    ~1,100 tokens of system prompt and tool schemas every run sends, and llama.cpp keeps
    them in its slot for the next request with the same prefix (the saved prompt cache of
    model_server.py spares most of that for a fresh server too). The pinned llama.cpp aborts
    on some model outputs (see test_window_overflow_with_real_model), so a dead server is
    replaced before the next test uses it.
    """

    def __init__(self, log_root: Path) -> None:
        self._log_root = log_root
        self._running = contextlib.ExitStack()
        self._server: ModelServer | None = None
        self._starts = 0

    def live(self) -> ModelServer:
        if self._server is None or not healthy(self._server.url):
            self.close()
            self._starts += 1
            log_dir = self._log_root / f"server-{self._starts}"
            log_dir.mkdir()
            self._server = self._running.enter_context(running_model_server(log_dir))
        return self._server

    def keep_prompt_cache(self) -> None:
        """Saves the slot after every test that left the server alive (~0.3 s): the tier's
        last test is the one most likely to kill it, so a save at the end would rarely run."""
        if self._server is not None and healthy(self._server.url):
            save_prompt_cache(self._server)

    def close(self) -> None:
        self._running.close()
        self._server = None


@pytest.fixture(scope="session")
def reused_model_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ReusedModelServer]:
    servers = ReusedModelServer(tmp_path_factory.mktemp("model"))
    try:
        yield servers
    finally:
        servers.close()


@pytest.fixture
def model_server(reused_model_server: ReusedModelServer) -> Iterator[ModelServer]:
    try:
        server = reused_model_server.live()
    except ModelUnavailable as error:
        unavailable(str(error))
    yield server
    reused_model_server.keep_prompt_cache()
