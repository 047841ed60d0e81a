"""The gateway under benchmark: `python -m sandfleet.gateway` as its own process (so its RSS
is its own), as the gateway's ServiceAccount, serving only the bench's namespace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.cluster.harness.operator_harness import free_port

ROOT = Path(__file__).resolve().parents[2]


class GatewayProcess:
    def __init__(self, kubeconfig: Path, key_file: Path, namespaces: list[str], workdir: Path):
        self.port = free_port()
        self.http_port = free_port()
        self.log_path = workdir / "gateway.log"
        self.metrics_token = ""
        """A token allowed `get` on /metrics (tests.cluster.harness.operator_harness)."""
        self._env = {
            **os.environ,
            "SANDFLEET_GATEWAY_KUBECONFIG": str(kubeconfig),
            "SANDFLEET_GATEWAY_SESSION_KEY_FILE": str(key_file),
            "SANDFLEET_GATEWAY_HOST": "127.0.0.1",
            "SANDFLEET_GATEWAY_PORT": str(self.port),
            "SANDFLEET_GATEWAY_HTTP_HOST": "127.0.0.1",
            "SANDFLEET_GATEWAY_HTTP_PORT": str(self.http_port),
            "SANDFLEET_GATEWAY_NAMESPACES": json.dumps(namespaces),
            "SANDFLEET_GATEWAY_REPLICA": "bench-gateway",
            "SANDFLEET_GATEWAY_KUBE_QPS": "1000",
            "SANDFLEET_GATEWAY_KUBE_BURST": "2000",
            "SANDFLEET_LOG_LEVEL": "INFO",
        }
        self._env.pop("KUBECONFIG", None)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self._process is not None, "the gateway is not running"
        return self._process.pid

    def start(self, timeout_s: float = 60.0) -> None:
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "sandfleet.gateway"],
                env=self._env,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout_s
        while not self._ready():
            if self._process.poll() is not None:
                raise RuntimeError(f"gateway exited at start:\n{self.log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"gateway not ready after {timeout_s}s")
            time.sleep(0.2)

    def _ready(self) -> bool:
        url = f"http://127.0.0.1:{self.http_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def metrics(self) -> str:
        """/metrics, with metrics_token (a token allowed `get` on /metrics)."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.http_port}/metrics",
            headers={"Authorization": f"Bearer {self.metrics_token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return str(response.read().decode())

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.send_signal(signal.SIGTERM)
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None
