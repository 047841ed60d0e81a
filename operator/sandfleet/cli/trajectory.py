"""`sandfleet trajectory NAME`: a managed session's trajectory, from the operator's store."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import BinaryIO

from rich.console import Console
from rich.text import Text

from sandfleet.api.trajectories import TrajectoryNameError
from sandfleet.cli.consoles import error_console
from sandfleet.cli.exit_codes import ExitCode
from sandfleet.cli.interrupts import run_until_interrupted
from sandfleet.cli.trajectory_render import RecordRenderer
from sandfleet.errors import SandfleetError
from sandfleet.runs.trajectory_sources import (
    DEFAULT_OPERATOR_NAMESPACE,
    DEFAULT_OPERATOR_SERVICE,
    Fetched,
    TrajectoryFetchError,
    TrajectoryRequest,
    TrajectorySourceConfigError,
    open_trajectory,
)
from sandfleet.settings import Settings
from sandfleet.trajectory.lines import LineSplitter

EPILOG = """\
sources: --store DIR reads the operator's trajectory directory directly; --operator-url URL
asks the operator's HTTP port; otherwise the request goes through the Kubernetes API server's
service proxy to the operator (needs `get services/proxy` in the operator's namespace).
The operator wants a Kubernetes bearer token allowed to get sandboxsessions in the session's
namespace: --token, else SANDFLEET_GATEWAY_TOKEN, else the kubeconfig user's (a
client-certificate user needs one: `kubectl create token SERVICEACCOUNT`).

exit codes: 0 written; 2 bad usage (an invalid name, no Kubernetes configuration, no
token); 6 no trajectory stored, or the operator or API server could not answer; 130
interrupted.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name", metavar="NAME",
        help="the SandboxSession's name, or a local trajectory.jsonl file",
    )  # fmt: skip
    parser.add_argument(
        "--namespace", "-n", metavar="NS",
        help="the session's namespace (default: the kubeconfig context's, else 'default')",
    )  # fmt: skip
    parser.add_argument(
        "--uid", metavar="UID", help="a specific run of the session (default: the latest)"
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--store", type=Path, metavar="DIR",
        help="read the trajectory directory directly (on the operator's volume)",
    )  # fmt: skip
    source.add_argument(
        "--operator-url", dest="operator_url", metavar="URL",
        help="the operator's HTTP port, e.g. http://localhost:8080",
    )  # fmt: skip
    parser.add_argument(
        "--output", "-o", type=Path, metavar="FILE",
        help="write the JSON Lines to FILE instead of stdout",
    )  # fmt: skip
    parser.add_argument(
        "--render", action="store_true",
        help="print a readable trace instead of JSON Lines (with -o, the file still gets them)",
    )  # fmt: skip
    parser.add_argument("--full", action="store_true", help="--render: print observations whole")
    parser.add_argument(
        "--html", action="store_true",
        help="also write the run as a page (trajectory.html) beside the file: with -o FILE "
        "for a session, beside FILE itself for a local file",
    )  # fmt: skip
    parser.add_argument(
        "--token", metavar="TOKEN",
        help="the Kubernetes bearer token the operator checks (default: SANDFLEET_GATEWAY_TOKEN, "
        "then the kubeconfig user's)",
    )  # fmt: skip
    cluster = parser.add_argument_group("cluster (the default source)")
    cluster.add_argument("--kubeconfig", type=Path, metavar="PATH", help="default as kubectl")
    cluster.add_argument(
        "--operator-namespace", dest="operator_namespace", metavar="NS",
        default=DEFAULT_OPERATOR_NAMESPACE, help=f"default {DEFAULT_OPERATOR_NAMESPACE}",
    )  # fmt: skip
    cluster.add_argument(
        "--operator-service", dest="operator_service", metavar="NAME",
        default=DEFAULT_OPERATOR_SERVICE, help=f"default {DEFAULT_OPERATOR_SERVICE}",
    )  # fmt: skip


def trajectory_command(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    errors = error_console()
    if _is_local_file(args.name):
        code = _local_file(args, console, errors)
        return _write_page(Path(args.name), errors) if code == ExitCode.OK and args.html else code
    try:
        if args.html and args.output is None:
            raise _OutputError("--html needs -o FILE: the page is written beside it")
        _request(args).validate()
        written = run_until_interrupted(_fetch_and_write(args, console))
    except (
        TrajectoryFetchError,
        TrajectorySourceConfigError,
        TrajectoryNameError,
        _OutputError,
    ) as error:
        errors.print(Text.assemble(("error: ", "red"), str(error)))
        failed = isinstance(error, TrajectoryFetchError)
        return ExitCode.FETCH_FAILED if failed else ExitCode.USAGE
    except BrokenPipeError:
        # The reader (`| head`) has enough; point stdout at /dev/null so the interpreter's
        # final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return ExitCode.OK
    if written is None:
        errors.print("interrupted")
        return ExitCode.CANCELLED
    if args.output is not None:
        size, uid = written
        errors.print(f"wrote {size} bytes of run {uid or '?'} to {args.output}")
        if args.html:
            return _write_page(args.output, errors)
    return ExitCode.OK


def _write_page(trajectory: Path, errors: Console) -> int:
    """The run's page beside its trajectory file, as `show RUN --html` writes it."""
    # Imported here: only --html needs the page templates.
    from sandfleet.cli.html_pages import show_html

    try:
        page = show_html(trajectory)
    except (OSError, SandfleetError) as error:
        errors.print(Text.assemble(("error: ", "red"), f"cannot write the page: {error}"))
        return ExitCode.USAGE
    errors.print(f"wrote {page}")
    return ExitCode.OK


def _is_local_file(name: str) -> bool:
    # A session name is a DNS label: never a .jsonl file name. Any other name that is no
    # file goes on to the name check ("invalid name" for a path that does not exist).
    return Path(name).is_file() or name.endswith(".jsonl")


def _local_file(args: argparse.Namespace, console: Console, errors: Console) -> int:
    """`trajectory FILE`: a local trajectory file, rendered or written out as it is."""
    # Imported here: a cluster fetch need not load it.
    from sandfleet.cli.runs import render_trajectory_file

    path = Path(args.name)
    if not path.is_file():
        errors.print(Text.assemble(("error: ", "red"), f"no trajectory file {path}"))
        return ExitCode.USAGE
    if args.render:
        return render_trajectory_file(path, console, errors, full=args.full)
    try:
        data = path.read_bytes()
        if args.output is None:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            args.output.write_bytes(data)
    except OSError as error:
        errors.print(Text.assemble(("error: ", "red"), f"cannot copy {path}: {error}"))
        return ExitCode.USAGE
    return ExitCode.OK


def _request(args: argparse.Namespace) -> TrajectoryRequest:
    return TrajectoryRequest(
        args.name,
        namespace=args.namespace,
        uid=args.uid,
        store=args.store,
        operator_url=args.operator_url,
        token=args.token,
        kubeconfig=args.kubeconfig,
        operator_namespace=args.operator_namespace,
        operator_service=args.operator_service,
    )


class _OutputError(SandfleetError):
    """-o FILE cannot be written."""


async def _fetch_and_write(args: argparse.Namespace, console: Console) -> tuple[int, str | None]:
    """Bytes written and the run's uid (when the source names it)."""
    async with open_trajectory(_request(args)) as fetched:
        render = RecordRenderer(console, full=args.full) if args.render else None
        return await _write(fetched, output=args.output, render=render), fetched.uid


async def _write(fetched: Fetched, *, output: Path | None, render: RecordRenderer | None) -> int:
    """Copy the records to -o FILE (renamed into place once complete) or stdout, and/or to
    the renderer; returns the bytes received."""
    if output is None:
        return await _copy(fetched.chunks, None if render else sys.stdout.buffer, render)
    partial = output.with_name(output.name + ".part")
    try:
        raw = partial.open("wb")
    except OSError as error:
        raise _OutputError(f"cannot write {output}: {error}") from error
    try:
        with raw:
            received = await _copy(fetched.chunks, raw, render)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, output)
    return received


async def _copy(
    chunks: AsyncGenerator[bytes, None], raw: BinaryIO | None, render: RecordRenderer | None
) -> int:
    # Synchronous writes: the command has nothing else to do meanwhile, and a slow reader of
    # stdout should slow the download down.
    lines = LineSplitter()
    received = 0
    async with contextlib.aclosing(chunks) as stream:
        async for chunk in stream:
            received += len(chunk)
            if raw is not None:
                raw.write(chunk)
            if render is not None:
                for line in lines.feed(chunk):
                    if line.strip():
                        render(line)
    if raw is not None:
        raw.flush()
    return received
