"""The script that re-establishes a bash session: quoting, what is never restored."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sandfleet.snapshots.shell_state import _script


def test_changed_and_new_variables_are_exported_removed_ones_unset_volatile_ones_kept(
    tmp_path: Path,
) -> None:
    cwd = tmp_path / "a dir"
    cwd.mkdir()
    saved = {"A": "it's $HOME `x`", "SAME": "1", "PWD": "/old", "SANDFLEET_ID": "old", "B=C": "x"}
    fresh = {"SAME": "1", "PWD": "/new", "SANDFLEET_ID": "new", "GONE": "y"}
    script = _script(saved, fresh, str(cwd))
    assert "SAME" not in script and "PWD" not in script and "SANDFLEET_ID" not in script
    assert "B=C" not in script
    run = subprocess.run(
        ["bash", "-c", f'export GONE=1\n{script}\necho "$A|${{GONE-none}}|$PWD"'],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert run.stdout == f"it's $HOME `x`|none|{cwd}\n"
