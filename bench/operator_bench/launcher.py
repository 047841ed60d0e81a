"""The operator under benchmark: tests/cluster/operator_harness.OperatorProcess with more.

The same process as the cluster tests run (CRDs, RBAC, the ServiceAccount token, health
checks), plus what a benchmark needs: the pid (RSS and CPU from /proc), the operator's
production intervals instead of the tests' fast ones, a namespace scope, an optional cProfile
or tracemalloc run and an optional API server address (the call-counting proxy).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import ClassVar

import yaml

from bench.operator_bench import memory_trace
from bench.operator_bench.memory_trace import SNAPSHOT_DIR_ENV
from tests.cluster.harness import cluster
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.layout import Image, Layout
from tests.cluster.harness.operator_harness import (
    OperatorProcess,
    install_api,
    metrics_reader_token,
    operator_kubeconfig,
)


def running_cluster() -> tuple[Layout, Path, dict[str, Image]]:
    """The local test cluster a bench uses as it is: its layout, admin kubeconfig and built
    images. Exits with the command to run when it is not up or has no runtime image."""
    layout = Layout.default()
    kubeconfig = cluster.running_kubeconfig(layout)
    if kubeconfig is None:
        raise SystemExit(
            "the local test cluster is not running (python -m tests.cluster.harness.cluster up)"
        )
    images = layout.read_images()
    if "runtime" not in images:
        raise SystemExit("no runtime image built: bash tests/cluster/setup.sh")
    return layout, kubeconfig, images


def env_pairs(items: list[str]) -> dict[str, str]:
    """`--operator-env KEY=VALUE` arguments as a dict (SystemExit on a malformed one)."""
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--operator-env wants KEY=VALUE, not {item!r}")
        env[key] = value
    return env


class BenchOperator(OperatorProcess):
    TIMING_ENV: ClassVar[dict[str, str]] = {}
    """None: the production intervals are part of what is measured."""

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
        # Only the bench's namespaces: sessions of other users must not load this operator.
        scope = {"SANDFLEET_OPERATOR_NAMESPACES": json.dumps(namespaces)}
        super().__init__(workdir / "operator.kubeconfig", runtime_image, workdir, **scope, **env)
        self.workdir = workdir
        self.profile_to = profile_to
        self.snapshot_dir = snapshot_dir
        self._snapshots = 0
        self.rivals_seen: set[int] = set()
        """Other sandfleet operators seen while this one ran (bench_context watches)."""
        self._admin_kubeconfig = admin_kubeconfig
        self._api_server = api_server

    @property
    def pid(self) -> int:
        assert self._process is not None, "the operator is not running"
        return self._process.pid

    def command(self) -> list[str]:
        python, *operator = super().command()
        profiler = ["-m", "cProfile", "-o", str(self.profile_to)] if self.profile_to else []
        if self.snapshot_dir is not None:
            operator = [memory_trace.__file__]  # runs sandfleet.operator under tracemalloc
        return [python, *profiler, *operator]

    def start(self, timeout_s: float = 90.0) -> None:
        """Install the API and RBAC, write the operator's kubeconfig, start, wait healthy."""
        admin = KubeApi.from_kubeconfig(self._admin_kubeconfig)
        install_api(admin)
        operator_kubeconfig(admin, self._admin_kubeconfig, self.kubeconfig)
        self.metrics_token = metrics_reader_token(admin)
        if self._api_server is not None:
            config = yaml.safe_load(self.kubeconfig.read_text())
            config["clusters"][0]["cluster"]["server"] = self._api_server
            self.kubeconfig.write_text(yaml.safe_dump(config))
        if self.snapshot_dir is not None:
            self._env[SNAPSHOT_DIR_ENV] = str(self.snapshot_dir)
        super().start(timeout_s)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> None:
        """SIGTERM (kopf shuts down cleanly; cProfile then writes its file), SIGKILL if stuck."""
        super().stop(sig, timeout_s)

    def metrics(self, timeout_s: float = 10.0) -> str:
        """/metrics of an operator under load: it may take a while to answer."""
        return super().metrics(timeout_s)

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
