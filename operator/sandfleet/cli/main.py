"""`sandfleet` console script: argument parsing, settings, logging, then one subcommand."""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from rich.console import Console
from rich.text import Text

import sandfleet
from sandfleet.cli.arg_parser import SuggestingParser
from sandfleet.cli.consoles import error_console, output_console
from sandfleet.cli.exit_codes import ExitCode
from sandfleet.cli.failures import exit_for
from sandfleet.cli.renamed_flags import RenamedFlag, flag_notices
from sandfleet.cli.settings_command import resolve_from_arguments
from sandfleet.logs import configure_logging, get_logger
from sandfleet.runs.folders import PRIVATE_UMASK
from sandfleet.settings import Settings, SettingsError

log = get_logger(__name__)

Handler = Callable[[argparse.Namespace, Settings, Console], int]

_DESCRIPTION = """\
Run LLM agents inside lightweight local sandboxes.

  sandfleet run "What is 17 * 23? Write it to the answer file." --model M --base-url URL
  sandfleet run examples/tasks/01_sales_by_region --model M --base-url URL
  sandfleet batch tasks.jsonl --out results.jsonl --concurrency 8 --model M --base-url URL
  sandfleet eval examples/bench/arithmetic --samples 3 --model M --base-url URL
  sandfleet replay examples/trajectories/sales_by_region.jsonl
  sandfleet doctor                  # is the endpoint reachable, can sandboxes start?
  sandfleet config                  # the effective settings and where each came from
  sandfleet runs                    # local runs, newest first; `sandfleet show RUN --full`
  sandfleet sandboxes               # local sandboxes, running and suspended; suspend, rm
  sandfleet mcp                     # sandboxes as MCP tools for any agent framework
  sandfleet serve --config serve.toml   # the OpenAI API, answered from sandboxes
"""

_SETTINGS_EPILOG = """\
settings: flags > SANDFLEET_<FLAG> environment variables named after the flags (--max-turns
is SANDFLEET_MAX_TURNS, --tool-timeout-seconds SANDFLEET_TOOL_TIMEOUT_SECONDS) > config file
(--config, SANDFLEET_CONFIG or ~/.config/sandfleet/config.toml, keys named like the flags:
model, base_url, tool_timeout_seconds, ...) > defaults; `sandfleet config` shows the result.
The API key is read from the variable --api-key-env names (OPENAI_API_KEY); without one, a
--base-url endpoint gets the placeholder key EMPTY, and the OpenAI API itself is refused (exit 2).
"""

_EXIT_CODES = """\
exit codes: 0 submitted with an answer / all submitted with answers / all matched; 1 not
submitted (max_turns, context_exceeded, no_tool_call) or a replay mismatch; 2 bad usage or
input; 3 model endpoint error; 4 sandbox failed to start or was lost; 5 submitted without an
answer (no answer file, no text; batch: all submitted, some without); 6 trajectory: none
stored, or the operator or API server could not answer; 130 interrupted.
"""

_EPILOG = _SETTINGS_EPILOG + "\n" + _EXIT_CODES


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `sandfleet` console script; returns the process exit code.

    Everything it writes (run folders, trajectories, copied outputs, eval results, batch
    files) is private to the user from creation: umask 077 while it runs."""
    previous = os.umask(PRIVATE_UMASK)
    try:
        return _main(argv)
    finally:
        os.umask(previous)  # an in-process caller (a test, a notebook) keeps its own


def _main(argv: Sequence[str] | None) -> int:
    _tolerate_unencodable_output()
    parser = build_parser()
    args = parser.parse_args(argv)
    errors = error_console()  # one error, one line
    try:
        resolved = resolve_from_arguments(args)
    except SettingsError as error:
        errors.print(Text.assemble(("error: ", "red"), str(error)))
        return ExitCode.USAGE
    for notice in [*flag_notices(args), *resolved.notices]:
        errors.print(Text.assemble(("warning: ", "yellow"), notice))
    settings = resolved.settings
    json_logs = settings.log_format == "json" or bool(settings.log_json)
    try:
        configure_logging(
            level=settings.log_level, json=json_logs, text=True, file=settings.log_file
        )
    except OSError as error:  # the --log-file cannot be opened
        errors.print(Text.assemble(("error: ", "red"), f"--log-file: {error}"))
        return ExitCode.USAGE
    handler: Handler = args.handler
    try:
        return handler(args, settings, output_console())
    except BrokenPipeError:
        # The reader went away (`sandfleet show X --full | head -2`): what it wanted it got.
        _silence_stdout()
        return ExitCode.OK
    except KeyboardInterrupt:
        # A second Ctrl-C while the first one's cleanup runs: leave at once. Local sandboxes
        # die with their parent (the runtime agents run with --exit-with-parent).
        errors.print("interrupted")
        return ExitCode.CANCELLED
    # The error contract's net (cli.failures): one line and a documented code, never a
    # traceback, whatever a subcommand let through.
    except Exception as error:
        log.debug("command_failed", exc_info=True)
        code, line = exit_for(error)
        errors.print(Text.assemble(("error: ", "red"), line))
        return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush into the closed pipe
    neither fails nor prints "Exception ignored ... BrokenPipeError"."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout (a test's StringIO): nothing to flush
        pass
    finally:
        os.close(devnull)


def _tolerate_unencodable_output() -> None:
    """A lone surrogate from an endpoint or a trajectory is printed as \\udXXXX, not raised."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def settings_from_arguments(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> Settings:
    """The flags the user typed, layered over the environment and the config file."""
    return resolve_from_arguments(args, environ).settings


def build_parser() -> argparse.ArgumentParser:
    from sandfleet.cli import (
        batch,
        doctor,
        export_rows,
        mcp_command,
        replay,
        run,
        runs,
        sandboxes,
        serve_command,
        settings_command,
        trajectory,
    )
    from sandfleet.cli import eval as eval_cli

    parser = SuggestingParser(
        prog="sandfleet",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"sandfleet {sandfleet.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _common_options()
    agent = _agent_options()

    run_parser = commands.add_parser(
        "run",
        parents=[common, agent],
        help="run one task in a fresh sandbox (local, or on Kubernetes through the gateway)",
        description="Run one task: a prompt, a prompt file, or a seed-format task folder\n"
        "(prompt.txt, optional prompt_config.yaml and input/). Results go to\n"
        "<results-dir>/<run-id>/ (run id: task id + UTC start time; earlier runs are kept):\n"
        "output/, trajectory.jsonl, result.json. List runs with `sandfleet runs`.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_arguments(run_parser)
    run_parser.set_defaults(handler=run.run_command)

    batch_parser = commands.add_parser(
        "batch",
        parents=[common, agent],
        help="run many tasks from a JSON Lines file, resumably",
        description='Run every task of TASKS.jsonl ({"id", "prompt", "files"?, "task_dir"?} '
        "per line),\nappending one result line per task to --out as it finishes.\n"
        "Re-running the same command skips ids already in --out. Before the first task, one\n"
        "GET <base-url>/models checks the endpoint (exit 3 if it cannot be used).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    batch.add_arguments(batch_parser)
    batch_parser.set_defaults(handler=batch.batch_command)

    eval_parser = commands.add_parser(
        "eval",
        parents=[common, agent],
        help="score a seed-format benchmark folder (sandbox or plain-LLM mode), resumably",
        description=eval_cli.DESCRIPTION,
        epilog=eval_cli.EPILOG + "\n" + _SETTINGS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    eval_cli.add_arguments(eval_parser)
    eval_parser.set_defaults(handler=eval_cli.eval_command)

    replay_parser = commands.add_parser(
        "replay",
        parents=[common, _sandbox_options()],
        help="re-execute a trajectory's tool calls and compare the observations",
        description="Re-run the tool calls recorded in a trajectory in a fresh local sandbox\n"
        "(the recorded input files uploaded first; no model needed) and report, per call,\n"
        "whether the observation matches the recorded one. Exits 0 when all match.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay.add_arguments(replay_parser)
    replay_parser.set_defaults(handler=replay.replay_command)

    trajectory_parser = commands.add_parser(
        "trajectory",
        parents=[common],
        help="a cluster session's trajectory (JSON Lines) from the operator, or a local file",
        description="Write the trajectory of the SandboxSession NAME (its latest run, or --uid)\n"
        "as JSON Lines to stdout or -o FILE; --render prints a readable trace instead.",
        epilog=trajectory.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    trajectory.add_arguments(trajectory_parser)
    trajectory_parser.set_defaults(handler=trajectory.trajectory_command)
    export_rows.register(commands, parents=[common])
    # Both take run's flags (the same command line works), but list only those that change
    # what they do: doctor's checks; config lists every setting, flags included, itself.
    doctor.register(commands, parents=[common, _listing_only(_agent_options(), DOCTOR_FLAGS)])
    settings_command.register(commands, parents=[common, _listing_only(_agent_options(), set())])
    runs.register(commands, parents=[common])
    sandboxes.register(commands, parents=[common])
    mcp_command.register(commands, parents=[common, _sandbox_options()])
    serve_command.register(commands, parents=[])
    return parser


DOCTOR_FLAGS = frozenset({"--model", "--base-url", "--api-key-env", "--isolation", "--egress"})
"""The agent and sandbox flags `doctor`'s checks read (the rest it accepts silently)."""


def _listing_only(options: SuggestingParser, shown: Iterable[str]) -> SuggestingParser:
    """`options` with every flag but those in `shown` left out of --help (still accepted)."""
    keep = set(shown)
    for action in options._actions:
        if not keep.intersection(action.option_strings):
            action.help = argparse.SUPPRESS
    return options


def _common_options() -> SuggestingParser:
    options = SuggestingParser(add_help=False)
    group = options.add_argument_group("configuration")
    group.add_argument(
        "--config", type=Path, metavar="PATH", help="config file (TOML) instead of the default"
    )
    group.add_argument("--log-level", dest="log_level", metavar="LEVEL", help="default WARNING")
    group.add_argument(
        "--log-format",
        dest="log_format",
        choices=["text", "json"],
        help="log lines as text (default: `warning: event key=value`) or JSON objects",
    )
    group.add_argument(
        "--log-json",
        dest="log_json",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=argparse.SUPPRESS,  # the older spelling of --log-format json
    )
    group.add_argument(
        "--log-file",
        dest="log_file",
        type=Path,
        metavar="PATH",
        help="append log lines to PATH instead of stderr (nothing then mixes into the trace)",
    )
    return options


def _sandbox_options() -> SuggestingParser:
    options = SuggestingParser(add_help=False)
    group = options.add_argument_group("sandbox")
    group.add_argument(
        "--isolation",
        choices=["auto", "namespaces", "none"],
        help="local sandbox isolation (default auto: user, mount, PID, IPC and network "
        "namespaces, or fail; none: plain processes that can change whatever you can)",
    )
    group.add_argument(
        "--egress",
        choices=["none", "internet", "all"],
        help="network of a local sandbox (default none: loopback only; internet: public "
        "addresses only; all: through slirp4netns, never the host's loopback)",
    )
    group.add_argument(
        "--state-dir",
        dest="state_dir",
        type=Path,
        metavar="DIR",
        help="where local sandboxes keep their private directories",
    )
    group.add_argument(
        "--read-only-bind",
        dest="read_only_bind",
        action="append",
        type=Path,
        metavar="PATH",
        help="a host path a local sandbox may read, at the same path (repeatable; the "
        "sandbox sees the host's system files and none of its data otherwise)",
    )
    group.add_argument(
        "--tool-timeout-seconds", "--tool-timeout", dest="tool_timeout_seconds",
        action=RenamedFlag, type=float, metavar="SECONDS",
        help="timeout of one execute_bash call (default 120)",
    )  # fmt: skip
    return options


def _agent_options() -> SuggestingParser:
    options = SuggestingParser(add_help=False, parents=[_sandbox_options()])
    model = options.add_argument_group("model")
    model.add_argument("--model", "-m", help="model name at the endpoint")
    model.add_argument(
        "--base-url",
        dest="base_url",
        metavar="URL",
        help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1",
    )
    model.add_argument(
        "--api-key-env",
        dest="api_key_env",
        metavar="VAR",
        help="environment variable holding the API key (default OPENAI_API_KEY)",
    )
    model.add_argument(
        "--max-turns",
        dest="max_turns",
        type=int,
        metavar="N",
        help="model calls per task (default 100)",
    )
    model.add_argument(
        "--max-tokens",
        dest="max_tokens",
        type=int,
        metavar="N",
        help="completion tokens per model call",
    )
    model.add_argument("--temperature", type=float)
    model.add_argument(
        "--top-p", dest="top_p", type=float, metavar="P", help="nucleus sampling (0 < P <= 1)"
    )
    model.add_argument("--seed", type=int, metavar="N", help="sampling seed sent with requests")
    model.add_argument(
        "--extra-body", dest="extra_body", metavar="JSON",
        help="JSON object merged into every request body, e.g. "
        '\'{"chat_template_kwargs": {"enable_thinking": false}}\'',
    )  # fmt: skip
    model.add_argument(
        "--system-prompt", dest="system_prompt", type=Path, metavar="FILE",
        help="system prompt template file (replaces the built-in one and a task's own)",
    )  # fmt: skip
    model.add_argument(
        "--no-undo-edit", dest="no_undo_edit", action="store_true", default=None,
        help="leave undo_edit out of the editor tool (the seed project's exact schema)",
    )  # fmt: skip
    model.add_argument(
        "--record-tokens", dest="record_tokens", action="store_true", default=None,
        help="ask the endpoint for token ids and logprobs and record them per turn "
        "(vLLM, SGLang, llama.cpp; for `sandfleet export`)",
    )  # fmt: skip
    model.add_argument(
        "--max-nudges", dest="max_nudges", type=int, metavar="N",
        help="replies in a row without a tool call before the run stops (default 3)",
    )  # fmt: skip
    model.add_argument(
        "--request-timeout-seconds", "--request-timeout", dest="request_timeout_seconds",
        action=RenamedFlag, type=float, metavar="SECONDS",
        help="timeout of one model request (default 600)",
    )  # fmt: skip
    model.add_argument(
        "--max-retries",
        dest="max_retries",
        type=int,
        metavar="N",
        help="retries of a failed model request (default 2)",
    )
    model.add_argument(
        "--results-dir",
        dest="results_dir",
        type=Path,
        metavar="DIR",
        help="where each task's folder goes (default ./sandfleet-results)",
    )
    model.add_argument(
        "--max-output-bytes", dest="max_output_bytes", type=int, metavar="N",
        help="bytes of the sandbox's output folder copied back per task (default 1 GiB)",
    )  # fmt: skip
    model.add_argument(
        "--max-output-files", dest="max_output_files", type=int, metavar="N",
        help="files of the sandbox's output folder copied back per task (default 10000)",
    )  # fmt: skip
    return options


if __name__ == "__main__":
    sys.exit(main())
