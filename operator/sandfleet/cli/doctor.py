"""`sandfleet doctor`: is this machine ready? One line per check (cli.doctor_checks)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from sandfleet.cli.doctor_checks import CHECK_TIMEOUT_S, CheckResult, Status, run_checks
from sandfleet.cli.exit_codes import ExitCode
from sandfleet.settings import Settings

_STYLES = {Status.OK: "green", Status.WARN: "yellow", Status.FAIL: "red", Status.SKIP: "dim"}


def register(commands: Any, *, parents: Sequence[argparse.ArgumentParser]) -> None:
    """Add `doctor` to the subcommands (`commands`: argparse's subparsers action)."""
    parser = commands.add_parser(
        "doctor",
        parents=list(parents),
        help="check the model endpoint, local isolation, cgroups, cluster and gateway",
        description="Check what sandfleet needs, one line each (ok, warn, fail or skip):\n"
        "the model endpoint (GET <base-url>/models with the key), the server's slots\n"
        "(llama.cpp's /props, against --concurrency), local isolation\n"
        "(user namespaces through unshare or bubblewrap), writable cgroups, the cluster\n"
        "(GET /version, when a kubeconfig exists) and the gateway (when one is configured).\n"
        f"Each check gives up after {CHECK_TIMEOUT_S:g} s. Exit 0 when nothing failed, else 1.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--json", dest="as_json", action="store_true", help="one JSON object: the checks"
    )
    parser.add_argument(
        "--concurrency", "-c", dest="concurrency", type=int, metavar="N",
        help="the tasks you mean to run at once: warns when the model server has fewer "
        "slots (llama.cpp)",
    )  # fmt: skip
    add_cluster_flags(parser)
    parser.set_defaults(handler=doctor_command)


def add_cluster_flags(parser: argparse.ArgumentParser) -> None:
    """--kubeconfig, --context and --gateway, as `run` has them."""
    from sandfleet.cli.run import add_gateway_argument

    cluster = parser.add_argument_group("kubernetes")
    cluster.add_argument("--kubeconfig", type=Path, metavar="PATH", help="default as kubectl")
    cluster.add_argument("--context", dest="context", metavar="NAME", help="kubeconfig context")
    add_gateway_argument(cluster)


def doctor_command(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    results = asyncio.run(run_checks(settings, os.environ))
    if args.as_json:
        record = {"ok": not _failed(results), "checks": [result.to_record() for result in results]}
        console.out(json.dumps(record, ensure_ascii=False), highlight=False)
    else:
        for result in results:
            console.print(check_line(result))
    return ExitCode.NOT_SUBMITTED if _failed(results) else ExitCode.OK


def check_line(result: CheckResult) -> Text:
    """`ok    model endpoint  http://...: answers (3 models listed)`."""
    return Text.assemble(
        (f"{result.status.value:<5}", f"bold {_STYLES[result.status]}"),
        (f" {result.name:<16}", "bold"),
        result.detail,
    )


def _failed(results: Sequence[CheckResult]) -> bool:
    return any(result.status is Status.FAIL for result in results)
