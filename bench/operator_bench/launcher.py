"""The operator under benchmark: `python -m sandfleet.operator` as its ServiceAccount.

Like tests/cluster/operator_harness.OperatorProcess (same CRDs, RBAC and token), with what a
benchmark needs on top: the pid (RSS and CPU from /proc), the operator's production
intervals instead of the tests' fast ones, a namespace scope, an optional cProfile run and
an optional API server address (the call-counting proxy).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from operator_bench import memory_trace
from operator_bench.memory_trace import SNAPSHOT_DIR_ENV
from tests.cluster.kube_api import KubeApi
from tests.cluster.operator_harness import free_port, install_api, operator_kubeconfig

ROOT = Path(__file__).resolve().parents[2]


class BenchOperator:
    def __init__(
        self,
        admin_kubeconfig: Path,
        runtime_image: str,
        workdir: Path,
        *,
        namespaces: list[str],
        env: dict[str, str],
        profile_to: Path | None = None,
        snapshot_dir: Path | None = None,
        api_server: str | None = None,
    ) -> None:
        self.workdir = workdir
        self.log_path = workdir / "operator.log"
        self.profile_to = profile_to
        self.snapshot_dir = snapshot_dir
        self._snapshots = 0
        self.rivals_seen: set[int] = set()
        """Other sandfleet operators seen while this one ran (bench_context watches)."""
        self.http_port = free_port()
        self.liveness_port = free_port()
        self._admin_kubeconfig = admin_kubeconfig
        self._api_server = api_server
        self._process: subprocess.Popen[bytes] | None = None
        self._env = {
            **os.environ,
            "SANDFLEET_OPERATOR_DEFAULT_IMAGE": runtime_image,
            "SANDFLEET_OPERATOR_IMAGE_PULL_POLICY": "Never",
            # The test node has no cluster DNS; sandboxes use the host's resolver.
            "SANDFLEET_OPERATOR_DNS_POLICY": "Default",
            "SANDFLEET_OPERATOR_HTTP_HOST": "127.0.0.1",
            "SANDFLEET_OPERATOR_HTTP_PORT": str(self.http_port),
            "SANDFLEET_OPERATOR_LIVENESS_PORT": str(self.liveness_port),
            "SANDFLEET_OPERATOR_TRAJECTORY_DIR": str(workdir / "trajectories"),
            # Only the bench's namespaces: sessions of other users must not load this one.
            "SANDFLEET_OPERATOR_NAMESPACES": json.dumps(namespaces),
            **env,
        }
        self._env.pop("KUBECONFIG", None)

    @property
    def pid(self) -> int:
        assert self._process is not None, "the operator is not running"
        return self._process.pid

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/metrics"

    def start(self, timeout_s: float = 90.0) -> None:
        """Install the API and RBAC, write the operator's kubeconfig, start, wait healthy."""
        admin = KubeApi.from_kubeconfig(self._admin_kubeconfig)
        install_api(admin)
        kubeconfig = operator_kubeconfig(
            admin, self._admin_kubeconfig, self.workdir / "operator.kubeconfig"
        )
        if self._api_server is not None:
            config = yaml.safe_load(kubeconfig.read_text())
            config["clusters"][0]["cluster"]["server"] = self._api_server
            kubeconfig.write_text(yaml.safe_dump(config))
        self._env["SANDFLEET_OPERATOR_KUBECONFIG"] = str(kubeconfig)
        command = [sys.executable]
        if self.profile_to is not None:
            command += ["-m", "cProfile", "-o", str(self.profile_to)]
        if self.snapshot_dir is not None:
            self._env[SNAPSHOT_DIR_ENV] = str(self.snapshot_dir)
            command += [str(Path(memory_trace.__file__))]
        else:
            command += ["-m", "sandfleet.operator"]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                command, env=self._env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout_s
        while not self._healthy():
            if self._process.poll() is not None:
                raise RuntimeError(f"operator exited at start:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"operator not healthy after {timeout_s}s:\n{self.log_tail()}")
            time.sleep(0.2)

    def _healthy(self) -> bool:
        try:
            for port in (self.http_port, self.liveness_port):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                    pass
        except OSError:
            return False
        return True

    def metrics(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            return str(response.read().decode())

    def memory_snapshot(self, timeout_s: float = 300.0) -> Path:
        """Ask the tracemalloc wrapper for a snapshot; the file once it is complete."""
        assert self.snapshot_dir is not None, "started without tracemalloc"
        self._snapshots += 1
        target = self.snapshot_dir / f"snapshot-{self._snapshots}.pickle"
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + timeout_s
        while not target.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no tracemalloc snapshot after {timeout_s}s")
            time.sleep(0.2)
        return target

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM (kopf shuts down cleanly; cProfile then writes its file), SIGKILL if stuck."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def log_lines(self) -> list[str]:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace").splitlines()
        return []

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_lines()[-lines:])

    def log_summary(self) -> dict[str, object]:
        """Lines logged, and warnings/errors by event name (JSON lines: not a TTY)."""
        lines = self.log_lines()
        problems: dict[str, int] = {}
        for line in lines:
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and record.get("level") in {"warning", "error"}:
                    name = str(record.get("event"))[:80]
                    problems[name] = problems.get(name, 0) + 1
        return {"lines": len(lines), "warnings": problems}
