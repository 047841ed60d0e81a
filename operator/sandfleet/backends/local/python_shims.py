"""`python` and `pip` in local sandboxes, as the sandbox image offers them: two small scripts
in the sandbox's HOME that resolve to the sandbox's `python3`.

Models start with `python -c ...` (the seed's image has `python`); many hosts only have
`python3`. `pip` runs `python3 -m pip`; outside a virtual environment it installs into the
user site under the sandbox's private HOME (PIP_USER), never the host's site-packages, which
are read-only in a namespaced sandbox anyway. PEP 668's "externally managed" refusal guards
the system's packages, which a user-site install into a throwaway HOME cannot touch, so it is
switched off. Inside a virtual environment `pip` installs into it, as there.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SHIM_DIR", "python_path_entries", "write_python_shims"]

SHIM_DIR = ".local/sandfleet/bin"
"""Where the scripts live, relative to the sandbox's HOME."""

_PYTHON = """#!/bin/sh
# `python` of this sandbox (written by sandfleet): the sandbox's python3.
exec python3 "$@"
"""
_PIP = """#!/bin/sh
# `pip` of this sandbox (written by sandfleet): python3 -m pip. Outside a virtual environment
# it installs into the user site under $HOME: the host's site-packages are not writable.
if python3 -c 'import sys; sys.exit(sys.prefix != sys.base_prefix)' 2>/dev/null; then
    export PIP_USER="${PIP_USER-1}" PIP_BREAK_SYSTEM_PACKAGES="${PIP_BREAK_SYSTEM_PACKAGES-1}"
fi
exec python3 -m pip "$@"
"""
_SHIMS = {"python": _PYTHON, "pip": _PIP, "pip3": _PIP}


def write_python_shims(home: Path) -> None:
    """Writes the scripts into `home` (the host side of the sandbox's HOME)."""
    directory = home / SHIM_DIR
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in _SHIMS.items():
        path = directory / name
        path.write_text(text)
        path.chmod(0o755)


def python_path_entries(home: str) -> str:
    """PATH entries to put first, for HOME as the sandbox sees it: the scripts, then where
    `pip install --user` puts console scripts."""
    return f"{home}/{SHIM_DIR}:{home}/.local/bin"
