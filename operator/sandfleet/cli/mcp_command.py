"""`sandfleet mcp`: serve sandboxes as MCP tools, over stdio (desktop clients) or HTTP.

Each MCP session gets its own sandbox at its first tool call, released when the session
ends: a local one (the default), or with --backend kubernetes one claimed through the
gateway, as the caller (over HTTP: with the caller's bearer token, so the gateway's
TokenReview and tenancy apply). The server itself lives in sandfleet.mcp.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from sandfleet.cli.consoles import error_console
from sandfleet.cli.execution import ConfigurationError, gateway_target, sandbox_config
from sandfleet.cli.exit_codes import ExitCode
from sandfleet.cli.interrupts import run_until_interrupted
from sandfleet.cli.run import add_gateway_argument, add_session_target_arguments
from sandfleet.mcp import INSTALL_HINT, mcp_available
from sandfleet.sandbox.facade import Sandbox
from sandfleet.settings import Settings

if TYPE_CHECKING:
    from sandfleet.clients.gateway.target import GatewayTarget
    from sandfleet.mcp.tools import Caller, SandboxOpener
    from sandfleet.sandbox.core import SandboxCore

API_KEY_ENV = "SANDFLEET_MCP_API_KEY"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_NO_SERVER_TOKEN = "-"  # never sent: every HTTP claim replaces it with its caller's token
_CLUSTER_EGRESS: dict[str, str | None] = {"none": None, "internet": "Internet", "all": "All"}

DESCRIPTION = """\
Serve Sandfleet sandboxes to any MCP client (the OpenAI Agents SDK, Claude Desktop, Cursor,
LangGraph, ...). Tools: execute_bash and str_replace_editor (the agent loop's schemas and
observations), upload_file, download_file, reset. Each MCP session gets its own sandbox,
opened at its first tool call and released when the session ends (stdio: the client
disconnects; HTTP: the client deletes the session, or it stays idle --idle-timeout seconds).

  sandfleet mcp                                   # stdio, local sandboxes
  SANDFLEET_MCP_API_KEY=... sandfleet mcp --transport http --port 8765
  sandfleet mcp --backend kubernetes --pool py312 -n team-a

Over HTTP every request needs `Authorization: Bearer <key>`: the key from
SANDFLEET_MCP_API_KEY (or --api-key) for local sandboxes; with --backend kubernetes the
caller's own Kubernetes token, which the gateway checks (TokenReview) when it claims the
session's sandbox. Suspending idle sandboxes is not supported yet: an idle session keeps its
sandbox until it ends. See docs/mcp.md.
"""


def register(commands: Any, *, parents: Sequence[argparse.ArgumentParser]) -> None:
    """Add `mcp` to the subcommands (`commands`: argparse's subparsers action)."""
    parser = commands.add_parser(
        "mcp",
        parents=list(parents),
        help="serve sandboxes as MCP tools (stdio or streamable HTTP)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    server = parser.add_argument_group("MCP server")
    server.add_argument(
        "--transport", choices=["stdio", "http"], default="stdio",
        help="stdio (default: what desktop clients launch) or streamable HTTP at /mcp",
    )  # fmt: skip
    server.add_argument(
        "--host", default="127.0.0.1", help="HTTP: address to listen on (default 127.0.0.1)"
    )
    server.add_argument("--port", type=int, default=8765, help="HTTP: port (default 8765)")
    server.add_argument(
        "--api-key", dest="mcp_api_key", metavar="KEY",
        help=f"HTTP, local sandboxes: the bearer token clients must send (default: "
        f"{API_KEY_ENV}; prefer the variable, a flag shows in `ps`)",
    )  # fmt: skip
    server.add_argument(
        "--idle-timeout", dest="mcp_idle_timeout_s", type=float, default=1800, metavar="SECONDS",
        help="HTTP: end a session (and release its sandbox) after this long without a "
        "request (default 1800)",
    )  # fmt: skip
    cluster = parser.add_argument_group(
        "kubernetes backend",
        "--backend kubernetes claims each session's sandbox through the sandfleet gateway "
        "from --pool or --template (over HTTP with the caller's bearer token).",
    )
    add_session_target_arguments(cluster, runs="the sessions' sandboxes", api_key_secret=False)
    add_gateway_argument(cluster)
    parser.set_defaults(handler=mcp_command)


def mcp_command(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    errors = error_console()

    def fail(message: str) -> int:
        errors.print(Text.assemble(("error: ", "red"), message))
        return ExitCode.USAGE

    if not mcp_available():
        return fail(INSTALL_HINT)
    from sandfleet.mcp import server

    http = args.transport == "http"
    try:
        opener = _opener(settings, http=http)
    except ConfigurationError as error:
        return fail(str(error))
    if not http:
        run_until_interrupted(
            server.run_stdio(opener, tool_timeout_s=settings.tool_timeout_seconds)
        )
        return ExitCode.OK
    verifier: Any
    if settings.backend == "kubernetes":
        verifier = server.CallerTokenVerifier()
    else:
        key = args.mcp_api_key or os.environ.get(API_KEY_ENV, "")
        if not key:
            return fail(
                f"an HTTP server needs an API key for its clients: set {API_KEY_ENV} (or --api-key)"
            )
        verifier = server.StaticKeyVerifier(key)
    loopback = args.host in _LOOPBACK
    app = server.http_app(
        opener,
        verifier,
        tool_timeout_s=settings.tool_timeout_seconds,
        idle_timeout_s=args.mcp_idle_timeout_s,
        allowed_hosts=[f"{h}:{args.port}" for h in ("127.0.0.1", "localhost", "[::1]")]
        if loopback
        else None,
    )
    print(
        f"sandfleet mcp: serving http://{args.host}:{args.port}{server.MCP_PATH}",
        file=sys.stderr,
        flush=True,
    )
    run_until_interrupted(server.serve_http(app, host=args.host, port=args.port))
    return ExitCode.OK


def _opener(settings: Settings, *, http: bool) -> SandboxOpener:
    if settings.backend != "kubernetes":
        config = sandbox_config(settings)

        def local(_: Caller) -> contextlib.AbstractAsyncContextManager[SandboxCore]:
            return Sandbox.local(config, tool_timeout_s=settings.tool_timeout_seconds)

        return local
    if not (settings.pool or settings.template):
        raise ConfigurationError("--backend kubernetes needs --pool or --template")
    target = _caller_target(settings) if http else gateway_target(settings)

    from sandfleet.mcp.openers import as_caller, claimed_sandbox

    def claimed(caller: Caller) -> contextlib.AbstractAsyncContextManager[SandboxCore]:
        # Over HTTP the caller's identity, never the server's.
        return claimed_sandbox(
            as_caller(target, caller.token) if http else target,
            namespace=settings.namespace,
            pool=settings.pool,
            template=settings.template,
            egress=_CLUSTER_EGRESS[settings.egress],
            tool_timeout_s=settings.tool_timeout_seconds,
        )

    return claimed


def _caller_target(settings: Settings) -> GatewayTarget:
    """The gateway an HTTP server claims through: its address from the settings, and no
    token of the server's own (each claim carries its caller's)."""
    from sandfleet.clients.gateway.target import GatewayConfigError, resolve_gateway

    try:
        return resolve_gateway(
            settings.gateway,
            token=_NO_SERVER_TOKEN,
            kubeconfig=settings.kubeconfig,
            context=settings.context,
        )
    except GatewayConfigError as error:
        raise ConfigurationError(str(error)) from error
