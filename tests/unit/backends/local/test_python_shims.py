"""The `python` and `pip` scripts of local sandboxes, run with a real /bin/sh and python3."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sandfleet.backends.local.python_shims import SHIM_DIR, python_path_entries, write_python_shims


def _run(home: Path, *argv: str, path: str) -> str:
    env = {"HOME": str(home), "PATH": f"{python_path_entries(str(home))}:{path}"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, timeout=60)
    return done.stdout


def test_python_and_pip_run_the_python3_on_path(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_python_shims(home)
    assert sorted(p.name for p in (home / SHIM_DIR).iterdir()) == ["pip", "pip3", "python"]
    assert all(os.access(p, os.X_OK) for p in (home / SHIM_DIR).iterdir())
    # A directory whose python3 is this interpreter, and no `python` of its own.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    path = f"{bin_dir}:/usr/bin:/bin"
    script = "import sys; print(sys.prefix)"
    assert _run(home, "python", "-c", script, path=path) == _run(
        home, "python3", "-c", script, path=path
    )
    assert _run(home, "pip", "--version", path=path).startswith("pip ")


def test_the_path_entries_name_the_scripts_then_the_user_scripts() -> None:
    assert python_path_entries("/root") == "/root/.local/sandfleet/bin:/root/.local/bin"
