"""The two installs: `pip install sandfleet` (the SDK and the CLI) and the sandbox image's
runtime-only install (the wheel with --no-deps plus runtime/requirements.txt).

The slow test builds the real wheel, installs it into a fresh virtual environment with no
extra (its dependencies come from the package index, as a user's would), and runs
`sandfleet --help` and a real task in a local sandbox against a scripted OpenAI-compatible
server on loopback.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, bash, submit

ROOT = Path(__file__).resolve().parents[3]
RUNTIME_REQUIREMENTS = ROOT / "runtime" / "requirements.txt"
RUNTIME_PACKAGES = (ROOT / "runtime" / "sandfleet_runtime", ROOT / "proto" / "sandfleet_proto")
OWN_PACKAGES = {"sandfleet", "sandfleet_runtime", "sandfleet_proto"}


def _pins() -> dict[str, str]:
    """runtime/requirements.txt as {distribution: pinned version}."""
    pins = {}
    for text in RUNTIME_REQUIREMENTS.read_text().splitlines():
        line = text.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", f"{line}: pin an exact version"
            pins[requirement.name] = specifier.version
    return pins


def _base_dependencies() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {
        canonicalize_name(Requirement(line).name): Requirement(line)
        for line in project["dependencies"]
    }


def _third_party_imports(packages: tuple[Path, ...]) -> set[str]:
    """Top-level names of every non-stdlib, non-project module the packages import."""
    names: set[str] = set()
    for package in packages:
        for module in [package] if package.is_file() else package.rglob("*.py"):
            for node in ast.walk(ast.parse(module.read_text(), str(module))):
                if isinstance(node, ast.Import):
                    names.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - OWN_PACKAGES


def test_the_runtime_requirements_pin_exactly_what_the_runtime_imports() -> None:
    """Every distribution the runtime's and the stubs' imports come from is pinned, and nothing
    else: a new runtime import without its pin (or a stale pin) fails here, not in a sandbox."""
    distributions = importlib.metadata.packages_distributions()
    imported = {
        dist.lower()
        for name in _third_party_imports(RUNTIME_PACKAGES)
        for dist in distributions.get(name, [name])
    }

    # google.protobuf is protobuf's; grpc_health / grpc_reflection are their own distributions.
    assert imported == set(_pins())


def test_each_runtime_pin_is_within_the_range_the_package_declares() -> None:
    dependencies = _base_dependencies()

    for name, version in _pins().items():
        assert name in dependencies, f"{name} is pinned but not a dependency in pyproject.toml"
        assert dependencies[name].specifier.contains(version), (name, version)


def test_the_user_install_needs_no_extra_for_the_cli_and_the_sdk() -> None:
    """What the CLI's and the SDK's own imports need is in the base dependencies; only the
    operator, the gateway, `sandfleet eval`'s `datasets` loader, `sandfleet mcp` (the MCP
    SDK and its HTTP server), `sandfleet serve` (the same HTTP stack), report.html's plots
    (matplotlib) and the operator's S3 snapshot store (obstore) have extras."""
    extras_only = {
        "kopf", "prometheus_client", "cachetools", "datasets", "mcp", "starlette", "uvicorn",
        "matplotlib", "obstore",
    }  # fmt: skip
    distributions = importlib.metadata.packages_distributions()
    control = ROOT / "operator" / "sandfleet"
    packages = tuple(
        path
        for path in control.iterdir()
        if path.name not in {"operator", "gateway"} and (path.is_dir() or path.suffix == ".py")
    )
    needed = {
        canonicalize_name(dist)
        for name in _third_party_imports(packages) - extras_only
        for dist in distributions.get(name, [name])
    }

    assert needed <= set(_base_dependencies()), needed - set(_base_dependencies())


# -- the user install, for real -------------------------------------------------------------


def _build_wheel(out: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), "."],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob("sandfleet-*.whl")
    return wheel


def _user_install(wheel: Path, venv: Path) -> Path:
    """A fresh venv with `pip install sandfleet` semantics: the wheel, no extra, its
    dependencies from the package index. Returns the venv's bin directory."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    bin_dir = venv / "bin"
    install = subprocess.run(
        [str(bin_dir / "pip"), "install", "--disable-pip-version-check", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert install.returncode == 0, install.stderr
    return bin_dir


async def _run(*command: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *command,
        env=env,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(240):
        stdout, stderr = await process.communicate()
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(1200)
async def test_the_wheel_with_no_extra_runs_the_cli_and_a_task_in_a_fresh_venv(
    tmp_path: Path,
) -> None:
    wheel = await asyncio.to_thread(_build_wheel, tmp_path / "dist")
    bin_dir = await asyncio.to_thread(_user_install, wheel, tmp_path / "venv")
    code, listed, _ = await _run(
        str(bin_dir / "python"),
        "-m",
        "pip",
        "list",
        "--format=json",
        env=dict(os.environ),
        cwd=tmp_path,
    )
    assert code == 0
    names = {package["name"].lower() for package in json.loads(listed)}
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "LANG": "C.UTF-8",
        "COLUMNS": "200",
        "OPENAI_API_KEY": "sk-user-install",
    }

    code, help_text, help_err = await _run(
        str(bin_dir / "sandfleet"), "--help", env=env, cwd=tmp_path
    )
    script = [
        Reply(tool_calls=[bash("echo 391 > output/answer.txt")]),
        Reply(tool_calls=[submit()]),
    ]
    async with ScriptedOpenAIServer(script) as server:
        run_code, run_out, run_err = await _run(
            str(bin_dir / "sandfleet"), "run", "What is 17 * 23?", "--id", "multiply",
            "--model", "scripted-model", "--base-url", server.base_url,
            "--results-dir", str(tmp_path / "results"), "--state-dir", str(tmp_path / "state"),
            env=env, cwd=tmp_path,
        )  # fmt: skip

    assert code == 0, help_err
    assert "run" in help_text and "batch" in help_text
    # No extra: neither the operator's nor the eval loader's libraries came along.
    assert not {"kopf", "prometheus-client", "datasets"} & names
    assert run_code == 0, f"{run_out}\n{run_err}"
    # Without the [mcp] extra, `sandfleet mcp` says how to get it, in one line.
    assert "mcp" not in names
    mcp_code, _, mcp_err = await _run(str(bin_dir / "sandfleet"), "mcp", env=env, cwd=tmp_path)
    assert mcp_code == 2 and "pip install 'sandfleet[mcp]'" in mcp_err, mcp_err
    assert "Traceback" not in mcp_err
    # One run, so one run folder (<task id>-<UTC start time>).
    (folder,) = (tmp_path / "results").glob("multiply-*")
    result = json.loads((folder / "result.json").read_text())
    assert (result["stop_reason"], result["answer"]) == ("submitted", "391")
    # The HTML pages' templates are in the wheel.
    page_code, page, page_err = await _run(
        str(bin_dir / "sandfleet"), "show", str(folder), "--html", env=env, cwd=tmp_path
    )
    assert page_code == 0, page_err
    assert page.strip() == str(folder / "trajectory.html")
    assert "391" in await asyncio.to_thread((folder / "trajectory.html").read_text)
