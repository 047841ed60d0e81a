"""The real helm binary (built by tests/cluster/build_helm.sh) and the chart it is run on.

helm runs with its own config, cache and data directories (nothing under ~/.config) and,
for cluster tests, with an explicit kubeconfig: it never picks up the caller's environment.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.cluster.harness.layout import CLUSTER_DIR, REPO_ROOT, cache_root

CHART_DIR = REPO_ROOT / "charts" / "sandfleet"
CI_VALUES_DIR = CHART_DIR / "ci"
HELMBUILD_GO_MOD = CLUSTER_DIR / "helmbuild" / "go.mod"
BUILD_SCRIPT = CLUSTER_DIR / "build_helm.sh"

Manifest = dict[str, Any]


class HelmError(RuntimeError):
    """helm exited non-zero; the message carries its stderr."""

    def __init__(self, args: Sequence[str], returncode: int, stderr: str) -> None:
        super().__init__(f"helm {' '.join(args)} exited {returncode}:\n{stderr}")
        self.returncode = returncode
        self.stderr = stderr


def helm_version() -> str:
    """The helm release helmbuild/go.mod pins (what build_helm.sh builds)."""
    match = re.search(r"^\s*helm\.sh/helm/v3 (v\S+)", HELMBUILD_GO_MOD.read_text(), re.M)
    if match is None:
        raise RuntimeError(f"no helm.sh/helm/v3 requirement in {HELMBUILD_GO_MOD}")
    return match.group(1)


def helm_binary_path() -> Path:
    return cache_root() / "bin" / f"helm-{helm_version()}" / "helm"


def missing_helm_reason() -> str | None:
    """Why helm cannot run here, or None when it can."""
    path = helm_binary_path()
    if os.access(path, os.X_OK):
        return None
    return f"helm {helm_version()} is not built ({path}); build it with: bash {BUILD_SCRIPT}"


class Helm:
    """One helm binary with private state directories; optionally bound to one cluster."""

    def __init__(self, binary: Path, home: Path, *, kubeconfig: Path | None = None) -> None:
        """`home`: an empty directory for helm's state and the values files written here."""
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.home = home
        self._values_written = 0
        self._env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }
        if kubeconfig is not None:
            self._env["KUBECONFIG"] = str(kubeconfig)

    def run(self, *args: str, timeout_s: float = 120.0) -> str:
        """Run helm to the end; stdout, or HelmError with stderr."""
        result = subprocess.run(
            [str(self.binary), *args],
            env=self._env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if result.returncode != 0:
            raise HelmError(args, result.returncode, result.stderr)
        return result.stdout

    async def run_async(self, *args: str, timeout_s: float = 300.0) -> str:
        """Like run, without blocking the event loop (install and upgrade wait on the cluster)."""
        process = await asyncio.create_subprocess_exec(
            str(self.binary),
            *args,
            env=self._env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(timeout_s):
                stdout, stderr = await process.communicate()
        except BaseException:  # a timeout, or the caller cancelled: no process left behind
            process.kill()
            await process.wait()
            raise
        if process.returncode != 0:
            raise HelmError(args, process.returncode or -1, stderr.decode(errors="replace"))
        return stdout.decode()

    def template(
        self,
        *,
        release: str = "sandfleet",
        namespace: str = "sandfleet-system",
        values_files: Sequence[Path] = (),
        values: Mapping[str, Any] | None = None,
        extra_args: Sequence[str] = (),
    ) -> list[Manifest]:
        """`helm template` of the chart: the rendered objects, in helm's order."""
        args = ["template", release, str(CHART_DIR), "--namespace", namespace]
        args += self.values_args(values_files, values)
        return parse_manifests(self.run(*args, *extra_args))

    def values_args(
        self, values_files: Sequence[Path] = (), values: Mapping[str, Any] | None = None
    ) -> list[str]:
        """--values arguments: the files, then `values` (written to a file: --set would turn
        strings such as "1" into numbers)."""
        args: list[str] = []
        for path in values_files:
            args += ["--values", str(path)]
        if values:
            self._values_written += 1
            path = self.home / f"values-{self._values_written}.yaml"
            path.write_text(yaml.safe_dump(dict(values)))
            args += ["--values", str(path)]
        return args


def parse_manifests(text: str) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def ci_values_files() -> list[Path]:
    return sorted(CI_VALUES_DIR.glob("*-values.yaml"))


def find(manifests: Sequence[Manifest], kind: str, name: str | None = None) -> list[Manifest]:
    """The rendered objects of one kind (and name)."""
    return [
        m
        for m in manifests
        if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)
    ]


def only(manifests: Sequence[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = find(manifests, kind, name)
    if len(found) != 1:
        raise AssertionError(f"expected one {kind} {name or ''}, rendered {len(found)}")
    return found[0]
