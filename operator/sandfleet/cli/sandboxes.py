"""`sandfleet sandboxes`: the local sandboxes (running and suspended); `suspend ID`, `rm ID`.

There is no `resume` here: a local sandbox lives as long as the program that opened it, so
one resumed by this command would end with it. A program resumes one with
`Sandbox.resume(ID)` (docs/suspend.md).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sandfleet.backends.local.config import GIB, default_state_dir
from sandfleet.backends.local.inventory import (
    LocalSandboxEntry,
    list_sandboxes,
    remove_sandbox,
    suspend_from_outside,
)
from sandfleet.cli.consoles import error_console
from sandfleet.cli.exit_codes import ExitCode
from sandfleet.errors import SandfleetError, SuspendError
from sandfleet.settings import Settings

_DESCRIPTION = """\
The local sandboxes of the state dir: running (opened by a program), orphaned (their
program is gone; the next start sweeps them), suspended (on disk, with their size), and
incomplete (a suspend that did not finish, kept for inspection).

  sandfleet sandboxes                 # the list
  sandfleet sandboxes suspend ID      # save a running sandbox's files, then end it
  sandfleet sandboxes rm ID           # delete a suspended one (--force: a running one)

A program resumes a suspended sandbox with Sandbox.resume("ID"): a sandbox resumed by this
command would end with it. Suspending from here saves the files but not the bash sessions'
cwd and environment (only the program holds the sandbox's agent token), and the program that
opened the sandbox loses it; sandbox.suspend() in that program saves both (docs/suspend.md).
"""


def register(commands: Any, *, parents: Sequence[argparse.ArgumentParser]) -> None:
    """Add `sandboxes` (with `suspend` and `rm`) to the CLI's subparsers."""
    parser = commands.add_parser(
        "sandboxes",
        parents=list(parents),
        help="list local sandboxes (running, suspended); suspend or remove one",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _state_dir_flag(parser)
    parser.add_argument("--json", dest="as_json", action="store_true", help="one object a line")
    parser.set_defaults(handler=list_command)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    suspend = actions.add_parser(
        "suspend", help="save a running sandbox's files (verified), then end it"
    )
    suspend.add_argument("sandbox_id", metavar="ID")
    _state_dir_flag(suspend)
    suspend.add_argument(
        "--max-bytes", dest="max_bytes", type=int, default=GIB, metavar="N",
        help="refuse when its files exceed N bytes (default 1 GiB; 0: no limit)",
    )  # fmt: skip
    suspend.set_defaults(handler=suspend_command)
    remove = actions.add_parser("rm", help="delete a suspended sandbox (--force: a running one)")
    remove.add_argument("sandbox_id", metavar="ID")
    _state_dir_flag(remove)
    remove.add_argument(
        "--force", action="store_true", help="also end and delete a running sandbox"
    )
    remove.set_defaults(handler=rm_command)


def list_command(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    entries = list_sandboxes(_state_dir(args, settings))
    if args.as_json:
        for entry in entries:
            console.print_json(json.dumps(_as_dict(entry)), indent=None)
        return ExitCode.OK
    if not entries:
        console.print(f"no local sandboxes in {_state_dir(args, settings)}")
        return ExitCode.OK
    table = Table(box=None, pad_edge=False)
    for column in ("ID", "STATE", "SIZE", "SINCE", "PROGRAM"):
        table.add_column(column)
    for entry in entries:
        table.add_row(
            entry.id,
            Text(entry.state, style=_STYLES.get(entry.state, "")),
            _size(entry.size_bytes) if entry.state == "suspended" else "",
            _when(entry.since),
            f"pid {entry.owner_pid}" if entry.owner_pid else "",
        )
    console.print(table)
    return ExitCode.OK


def suspend_command(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    state_dir = _state_dir(args, settings)
    try:
        manifest = suspend_from_outside(
            state_dir, args.sandbox_id, limit_bytes=args.max_bytes or None
        )
    except SandfleetError as error:
        return _fail(error)
    console.print(
        f"suspended {manifest.sandbox_id}: {_size(manifest.size_bytes)} "
        f"({', '.join(manifest.saved_paths)}), sha256 {manifest.sha256[:12]}, in "
        f"{state_dir / 'suspended' / manifest.sandbox_id}\n"
        "its processes were ended and its program lost it; bash sessions' cwd and environment "
        "are not saved from the CLI\n"
        f'resume it from a program: await Sandbox.resume("{manifest.sandbox_id}")'
    )
    return ExitCode.OK


def rm_command(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    try:
        state = remove_sandbox(_state_dir(args, settings), args.sandbox_id, force=args.force)
    except SandfleetError as error:
        return _fail(error)
    console.print(f"removed {args.sandbox_id} ({state})")
    return ExitCode.OK


_STYLES = {"running": "green", "suspended": "cyan", "orphaned": "yellow", "incomplete": "red"}


def _fail(error: SandfleetError) -> int:
    error_console().print(Text.assemble(("error: ", "red"), str(error)))
    return ExitCode.SANDBOX_ERROR if isinstance(error, SuspendError) else ExitCode.USAGE


def _state_dir_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir", dest="state_dir", type=Path, metavar="DIR", default=argparse.SUPPRESS,
        help="the local sandboxes' state dir (default ~/.cache/sandfleet/sandboxes)",
    )  # fmt: skip


def _state_dir(args: argparse.Namespace, settings: Settings) -> Path:
    given = getattr(args, "state_dir", None) or settings.state_dir
    return Path(given) if given else default_state_dir()


def _as_dict(entry: LocalSandboxEntry) -> dict[str, Any]:
    return {
        "id": entry.id, "state": entry.state, "since": entry.since,
        "size_bytes": entry.size_bytes, "owner_pid": entry.owner_pid,
    }  # fmt: skip


def _size(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size / 1e3:.1f} kB"


def _when(stamp: float) -> str:
    if not stamp:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))
