"""copy_back.relative_parts: only plain names strictly below the root are copied."""

from __future__ import annotations

import pytest

from sandfleet.sandbox.copy_back import relative_parts

ROOT = "/testbed/output"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/testbed/output/a.txt", ("a.txt",)),
        ("/testbed/output/sub/b.txt", ("sub", "b.txt")),
        ("/testbed/output/../x", "not normalised"),
        ("/testbed/output/./a", "not normalised"),
        ("/testbed/output//a", "not normalised"),
        ("/testbed/output/a/", "not normalised"),
        ("/testbed/output", "outside"),
        ("/testbed/outputs/a", "outside"),
        ("/etc/passwd", "outside"),
        ("a.txt", "outside"),
        ("/testbed/output/a\x00b", "NUL"),
        ("/testbed/output/" + "n" * 256, "too long"),
    ],
)
def test_paths(path: str, expected: tuple[str, ...] | str) -> None:
    result = relative_parts(ROOT, path)
    if isinstance(expected, tuple):
        assert result == expected
    else:
        assert isinstance(result, str) and expected in result
