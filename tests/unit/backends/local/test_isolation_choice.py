"""Choosing the isolation: "auto" never falls back to plain processes without a word."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandfleet.backends.local import isolation
from sandfleet.backends.local.isolation import choose_isolation
from sandfleet.errors import SandboxStartError


@pytest.fixture
def no_namespace_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A PATH with neither unshare nor bwrap, and no cached probe results."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(isolation, "_probe_cache", {})


@pytest.mark.parametrize("requested", ["auto", "namespaces"])
async def test_without_namespaces_the_start_is_refused_with_the_explicit_opt_out(
    requested: str, no_namespace_tools: None
) -> None:
    with pytest.raises(SandboxStartError) as raised:
        await choose_isolation(requested, "auto")  # type: ignore[arg-type]
    message = str(raised.value)
    assert "\n" not in message
    assert "unshare: not installed" in message and "bwrap: not installed" in message
    assert "--isolation none" in message


async def test_none_is_only_what_was_asked_for(no_namespace_tools: None) -> None:
    choice = await choose_isolation("none", "auto")
    assert choice.mechanism == "none"
