"""docs/security.md names the test that proves each defence: every test path it names exists,
and every attack test in the tree is named there (a new attack test is a new defence to
document)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "security.md"


def _named_paths(text: str) -> set[str]:
    """Full paths, and short names resolved against the last full path's folder in the row."""
    named: set[str] = set()
    for line in text.splitlines():
        folder = None
        for match in re.finditer(r"`((?:tests/[\w/]+/)?test_\w+\.py)`", line):
            value = match.group(1)
            if "/" in value:
                folder = value.rsplit("/", 1)[0]
                named.add(value)
            elif folder is not None:
                named.add(f"{folder}/{value}")
    return named


def test_every_test_the_security_doc_names_exists() -> None:
    named = _named_paths(DOC.read_text())
    assert named, "docs/security.md names no test"
    missing = sorted(path for path in named if not (ROOT / path).is_file())
    assert not missing, f"docs/security.md names tests that do not exist: {missing}"


def test_every_attack_test_is_named_in_the_security_doc() -> None:
    named = _named_paths(DOC.read_text())
    attacks = {str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("test_attack_*.py")}
    unnamed = sorted(attacks - named)
    assert not unnamed, f"attack tests docs/security.md does not name: {unnamed}"


def test_the_readme_points_at_the_security_doc() -> None:
    assert "docs/security.md" in (ROOT / "README.md").read_text()
