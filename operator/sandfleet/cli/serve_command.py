"""`sandfleet serve --config FILE`: the OpenAI API, every answer computed by the agent loop
in a sandbox. The server itself lives in sandfleet.serve; this module reads the flags."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from sandfleet.cli.consoles import error_console
from sandfleet.cli.exit_codes import ExitCode
from sandfleet.cli.interrupts import run_until_interrupted
from sandfleet.errors import SandfleetError
from sandfleet.serve import INSTALL_HINT, serve_available
from sandfleet.settings import Settings

_LOOPBACK = ("127.0.0.1", "localhost", "::1")

DESCRIPTION = """\
Serve the OpenAI API (GET /v1/models, POST /v1/chat/completions, POST /v1/responses, GET
and DELETE /v1/responses/ID) where every answer is computed by the agent loop in a sandbox
(local, or on Kubernetes through the sandfleet gateway: --backend kubernetes, or
sandbox = "cluster" per model), against the upstream endpoint each served model names.
Any OpenAI client works unchanged; streaming shows each sandbox step (chat:
reasoning_content deltas; responses: code_interpreter_call items).

  sandfleet serve --config serve.toml
  curl http://127.0.0.1:8080/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model": "coder", "messages": [{"role": "user", "content": "What is 2**100?"}]}'

The server listens on 127.0.0.1 unless the config or --host says otherwise; a
non-loopback address needs an API key (server.api_key_env, or SANDFLEET_SERVE_API_KEY).
See docs/serve.md for the config file.
"""


def register(commands: Any, *, parents: Sequence[argparse.ArgumentParser]) -> None:
    """Add `serve` (`commands`: argparse's subparsers action). Its --config is the
    served-models file, not the settings file the other commands' --config names."""
    parser = commands.add_parser(
        "serve",
        parents=list(parents),
        help="serve the OpenAI API, answered by the agent loop in sandboxes",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config", dest="serve_config", type=Path, required=True, metavar="FILE",
        help="the served models (TOML or YAML; docs/serve.md)",
    )  # fmt: skip
    parser.add_argument(
        "--backend", choices=("local", "kubernetes"),
        help="where every served model's sandboxes come from (default: each model's `sandbox`)",
    )  # fmt: skip
    parser.add_argument("--host", help="address to listen on (default: the file's, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default: the file's, 8080)")
    parser.add_argument("--log-level", dest="log_level", metavar="LEVEL", help="default WARNING")
    parser.set_defaults(handler=serve_command, config=None)


def serve_command(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    errors = error_console()

    def fail(message: str) -> int:
        errors.print(Text.assemble(("error: ", "red"), message))
        return ExitCode.USAGE

    if not serve_available():
        return fail(INSTALL_HINT)
    from sandfleet.serve.app import create_app, serve_http
    from sandfleet.serve.config import API_KEY_ENV, ServeConfigError, load_serve_config
    from sandfleet.serve.service import ServeService

    try:
        config = load_serve_config(args.serve_config, backend=args.backend)
    except ServeConfigError as error:
        return fail(str(error))
    host = args.host or config.server.host
    port = config.server.port if args.port is None else args.port
    if host not in _LOOPBACK and config.api_key is None and config.gateway.identity != "client":
        return fail(
            f"listening on {host} needs an API key for clients: set {API_KEY_ENV} or "
            "server.api_key_env in the config"
        )
    try:
        service = ServeService(config)
    except SandfleetError as error:  # cluster mode: no gateway address or token
        return fail(str(error))
    app = create_app(service)
    models = ", ".join(sorted(config.models))
    print(f"sandfleet serve: http://{host}:{port}/v1 (models: {models})", file=sys.stderr,
          flush=True)  # fmt: skip
    run_until_interrupted(serve_http(app, host=host, port=port))
    return ExitCode.OK
