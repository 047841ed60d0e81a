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
    script = _script(saved, str(cwd))
    assert "export PWD" not in script and "export SANDFLEET_ID" not in script
    assert "B=C" not in script
    # The fresh shell's own exports: GONE was not saved (unset), the launcher's SANDFLEET_ID
    # and the volatile PWD are the fresh shell's (kept as they are, then cd sets PWD).
    fresh = "export GONE=1 SAME=1 SANDFLEET_ID=new"
    run = subprocess.run(
        ["bash", "-c", f'{fresh}\n{script}\necho "$A|$SAME|${{GONE-none}}|$SANDFLEET_ID|$PWD"'],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert run.stdout == f"it's $HOME `x`|1|none|new|{cwd}\n"
