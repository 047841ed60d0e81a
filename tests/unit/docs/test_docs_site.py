"""The documentation site builds in strict mode: a broken link or anchor, a page missing from
the nav or a reference generator that no longer matches the code fails here (and in CI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def test_the_site_builds_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for page in ("cli", "settings", "crds", "metrics", "grpc"):
        html = (site / "reference" / page / "index.html").read_text(encoding="utf-8")
        assert "Generated" in html, page
    # A generated page carries what the code says, e.g. a flag and its variable.
    settings = (site / "reference" / "settings" / "index.html").read_text(encoding="utf-8")
    assert "SANDFLEET_TOOL_TIMEOUT" in settings and "--tool-timeout" in settings


@pytest.mark.parametrize("page", ["index.md", "concepts/index.md", "operations/monitoring.md"])
def test_hand_written_pages_exist(page: str) -> None:
    assert (ROOT / "docs" / page).is_file()
