"""`sandfleet run TASK`: one task in a fresh sandbox, traced live, results saved locally: a
local sandbox, or with --backend kubernetes one claimed through the sandfleet gateway (the
loop still runs here); --managed instead makes a session the operator drives (cli.cluster_run)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from sandfleet.agent import AgentConfig, openai_model
from sandfleet.cli.consoles import error_console, plural
from sandfleet.cli.execution import (
    ConfigurationError,
    agent_config,
    execute_task,
    gateway_target,
    run_folder,
    system_prompt_notices,
)
from sandfleet.cli.exit_codes import ExitCode, outcome_exit_code
from sandfleet.cli.interrupts import run_until_interrupted
from sandfleet.cli.renamed_flags import RenamedFlag
from sandfleet.cli.render import TraceRenderer, print_run_summary
from sandfleet.runs.folders import RESULT_FILE
from sandfleet.runs.outcomes import TaskOutcome
from sandfleet.settings import Settings
from sandfleet.tasks import TaskInputError, TaskSpec, task_from_argument

if TYPE_CHECKING:
    from sandfleet.clients.gateway.target import GatewayTarget


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "task",
        metavar="TASK",
        help="the prompt text, a prompt file, or a task folder (prompt.txt, optional "
        "prompt_config.yaml with system_prompt/instance_prompt templates, optional input/)",
    )
    parser.add_argument(
        "--file", "-f", dest="files", action="append", type=Path, default=[], metavar="PATH",
        help="copy a file (or folder) into the sandbox's input directory; repeatable",
    )  # fmt: skip
    parser.add_argument(
        "--id", dest="task_id", metavar="ID", help="task id (names the results folder)"
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument(
        "--quiet", "-q", action="store_true", help="no live trace, only the summary"
    )
    output.add_argument(
        "--json", dest="as_json", action="store_true",
        help="print only the result record as JSON (for scripts)",
    )  # fmt: skip
    add_cluster_arguments(parser)


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    cluster = parser.add_argument_group(
        "kubernetes backend",
        "--backend kubernetes claims the sandbox through the sandfleet gateway and runs the "
        "loop here, as a local run does. With --managed, a SandboxSession is created instead "
        "and the operator runs the loop: input files go inline (UTF-8 text, 256 KiB in all), "
        "the model endpoint must be reachable from the operator, and its key comes from a "
        "Secret, never from here.",
    )
    add_session_target_arguments(cluster, runs="the task")
    add_gateway_argument(cluster)
    cluster.add_argument(
        "--managed", action="store_true", default=None,
        help="create a managed SandboxSession: the operator runs the agent loop",
    )  # fmt: skip
    cluster.add_argument(
        "--ttl-seconds", "--ttl", dest="ttl_seconds", action=RenamedFlag, type=int,
        metavar="SECONDS",
        help="--managed: keep the finished session this long for `sandfleet trajectory` "
        "(default 3600)",
    )  # fmt: skip
    cluster.add_argument(
        "--rm", dest="remove_session", action="store_true",
        help="--managed: delete the session as soon as it has finished",
    )  # fmt: skip


def add_gateway_argument(cluster: argparse._ArgumentGroup) -> None:
    cluster.add_argument(
        "--gateway", metavar="HOST:PORT",
        help="the sandfleet gateway (https:// or grpcs:// for TLS; default: SANDFLEET_GATEWAY, "
        "then the kubeconfig cluster's sandfleet.dev/gateway extension); the token is "
        "SANDFLEET_GATEWAY_TOKEN or the kubeconfig user's",
    )  # fmt: skip


def add_session_target_arguments(
    cluster: argparse._ArgumentGroup,
    *,
    runs: str,
    sandboxes: str = "the sandbox",
    api_key_secret: bool = True,
) -> None:
    """Where and how sessions are created, the same for `run`, `batch` and `eval`:
    --backend, --namespace, --kubeconfig, --context, --template or --pool, and for managed
    sessions --api-key-secret. `runs` and `sandboxes` name what the command runs ("the
    task") and creates, for the help texts."""
    cluster.add_argument(
        "--backend", choices=["local", "kubernetes"],
        help=f"where to run {runs} (default local)",
    )  # fmt: skip
    cluster.add_argument(
        "--namespace", "-n", metavar="NS",
        help="the sessions' namespace (default: the kubeconfig context's)",
    )  # fmt: skip
    cluster.add_argument("--kubeconfig", type=Path, metavar="PATH", help="default as kubectl")
    cluster.add_argument("--context", dest="context", metavar="NAME", help="kubeconfig context")
    sandbox = cluster.add_mutually_exclusive_group()
    sandbox.add_argument("--template", metavar="NAME", help=f"SandboxTemplate of {sandboxes}")
    sandbox.add_argument("--pool", metavar="NAME", help=f"SandboxPool to claim {sandboxes} from")
    if not api_key_secret:
        return
    cluster.add_argument(
        "--api-key-secret", dest="api_key_secret", metavar="NAME[:KEY]",
        help='Secret with the model API key (key default "api-key")',
    )  # fmt: skip


def run_command(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    errors = error_console()  # one error, one line
    try:
        spec = task_from_argument(args.task, extra_files=args.files, task_id=args.task_id)
        config = agent_config(settings)
    except (TaskInputError, ConfigurationError) as error:
        errors.print(Text.assemble(("error: ", "red"), str(error)))
        return ExitCode.USAGE
    for notice in [*spec.notices, *system_prompt_notices(config, settings)]:
        errors.print(Text.assemble(("warning: ", "yellow"), notice))
    show_trace = not (args.quiet or args.as_json)
    gateway: GatewayTarget | None = None
    if settings.managed and settings.backend != "kubernetes":
        errors.print(Text.assemble(("error: ", "red"), "--managed needs --backend kubernetes"))
        return ExitCode.USAGE
    if settings.managed:
        # Imported here: a local run need not load the Kubernetes client.
        from sandfleet.cli.cluster_run import cluster_run_command

        return cluster_run_command(
            spec, config, settings, console,
            remove=args.remove_session, show_progress=show_trace, as_json=args.as_json,
        )  # fmt: skip
    try:
        if settings.backend == "kubernetes":
            gateway = gateway_target(settings)
        folder = run_folder(settings, spec.task.id)
    except (ConfigurationError, OSError) as error:  # OSError: the results folder
        errors.print(Text.assemble(("error: ", "red"), str(error)))
        return ExitCode.USAGE
    if show_trace:
        _print_header(console, spec, config, folder)
    renderer = TraceRenderer(console, show_waiting=True) if show_trace else None
    outcome = run_until_interrupted(
        _run(
            spec,
            config=config,
            settings=settings,
            renderer=renderer,
            gateway=gateway,
            folder=folder,
        )
    )
    if outcome is None:
        # Cancelled: execute_task wrote result.json (stop reason "cancelled") before it let
        # the cancellation through; show that record.
        outcome = TaskOutcome.read(folder / RESULT_FILE)
        if outcome is None:
            errors.print("interrupted")
            return ExitCode.CANCELLED
    if args.as_json:
        # out(), not print(): no wrapping or markup, so long answers stay valid JSON.
        console.out(json.dumps(outcome.to_record(), ensure_ascii=False), highlight=False)
    else:
        print_run_summary(console, outcome)
    return outcome_exit_code(outcome)


async def _run(
    spec: TaskSpec,
    *,
    config: AgentConfig,
    settings: Settings,
    renderer: TraceRenderer | None,
    gateway: GatewayTarget | None,
    folder: Path,
) -> TaskOutcome:
    model = openai_model(config)
    try:
        return await execute_task(
            spec, model=model, config=config, settings=settings, on_event=renderer,
            gateway=gateway, folder=folder,
        )  # fmt: skip
    finally:
        if renderer is not None:
            renderer.close()
        await model.aclose()


def _print_header(console: Console, spec: TaskSpec, config: AgentConfig, folder: Path) -> None:
    task = spec.task
    files = f", {plural(len(task.files), 'input file')}" if task.files else ""
    console.print(
        Text.assemble(
            ("task ", "bold"), task.id, files,
            ("   model ", "bold"), config.model,
            ("   endpoint ", "bold"), config.base_url or "OpenAI",
        )
    )  # fmt: skip
    console.print(Text.assemble(("results ", "bold"), str(folder)), style="dim")
