"""`sandfleet trajectory NAME`: a managed session's trajectory, from the operator's store."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from rich.console import Console
from rich.text import Text

from sandfleet.agent.events import one_line
from sandfleet.api import CALLER_AUTHORIZATION
from sandfleet.api.trajectories import (
    UID_HEADER,
    TrajectoryNameError,
    trajectory_path,
    validate_name,
    validate_namespace,
    validate_uid,
)
from sandfleet.cli.consoles import error_console
from sandfleet.cli.exit_codes import ExitCode
from sandfleet.cli.interrupts import run_until_interrupted
from sandfleet.cli.trajectory_render import RecordRenderer
from sandfleet.errors import SandfleetError
from sandfleet.settings import Settings
from sandfleet.trajectory.lines import LineSplitter
from sandfleet.trajectory.store import CHUNK_BYTES, TrajectoryDirectory, read_chunks, snapshot

if TYPE_CHECKING:
    # Imported where used: aiohttp costs a tenth of a second every other subcommand would pay.
    import aiohttp

    from sandfleet.kube.client import KubeClient
    from sandfleet.kube.config import KubeConfig

DEFAULT_OPERATOR_NAMESPACE = "sandfleet-system"
DEFAULT_OPERATOR_SERVICE = "sandfleet-operator"
OPERATOR_PORT_NAME = "http"
"""The operator Service's port that serves /metrics and /trajectories."""
_CONNECT_TIMEOUT_S = 30.0
_READ_TIMEOUT_S = 120.0
_ERROR_BODY_BYTES = 64 * 1024
TOKEN_ENV = "SANDFLEET_GATEWAY_TOKEN"
"""The caller's Kubernetes token, shared with the gateway's clients (one identity)."""
_TOKEN_HINT = (
    "the operator wants a token the API server accepts: --token or " + TOKEN_ENV + " "
    "(`kubectl create token`)"
)

EPILOG = """\
sources: --store DIR reads the operator's trajectory directory directly; --operator-url URL
asks the operator's HTTP port; otherwise the request goes through the Kubernetes API server's
service proxy to the operator (needs `get services/proxy` in the operator's namespace).
The operator wants a Kubernetes bearer token allowed to get sandboxsessions in the session's
namespace: --token, else SANDFLEET_GATEWAY_TOKEN, else the kubeconfig user's (a
client-certificate user needs one: `kubectl create token SERVICEACCOUNT`).

exit codes: 0 written; 1 no trajectory stored, or the operator or API server could not
answer; 2 bad usage (an invalid name, no Kubernetes configuration); 130 interrupted.
"""


class TrajectoryFetchError(SandfleetError):
    """The trajectory could not be fetched; the message says from where and why."""


class TrajectoryNotFoundError(TrajectoryFetchError):
    """The source answered, and it stores no trajectory for that session (or uid)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Fetched:
    uid: str | None
    """The run the records belong to, when the source says."""
    chunks: AsyncGenerator[bytes, None]


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


def service_proxy_path(
    namespace: str,
    name: str,
    *,
    operator_namespace: str,
    operator_service: str,
    port_name: str = OPERATOR_PORT_NAME,
    uid: str | None = None,
) -> str:
    """The API server path that proxies to the operator Service's trajectory endpoint."""
    service = f"{validate_name(operator_service)}:{port_name}"
    return (
        f"/api/v1/namespaces/{validate_namespace(operator_namespace)}/services/{service}/proxy"
        + trajectory_path(namespace, name, uid)
    )


def trajectory_command(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    errors = error_console()
    if _is_local_file(args.name):
        return _local_file(args, console, errors)
    try:
        validate_name(args.name)
        for value, validate in ((args.namespace, validate_namespace), (args.uid, validate_uid)):
            if value is not None:
                validate(value)
        written = run_until_interrupted(_fetch_and_write(args, console))
    except (TrajectoryFetchError, _UsageError, TrajectoryNameError) as error:
        errors.print(Text.assemble(("error: ", "red"), str(error)))
        failed = isinstance(error, TrajectoryFetchError)
        return ExitCode.NOT_SUBMITTED if failed else ExitCode.USAGE
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


class _UsageError(SandfleetError):
    """The command cannot run as asked (no Kubernetes configuration)."""


async def _fetch_and_write(args: argparse.Namespace, console: Console) -> tuple[int, str | None]:
    """Bytes written and the run's uid (when the source names it)."""
    async with _open_source(args) as fetched:
        render = RecordRenderer(console, full=args.full) if args.render else None
        return await _write(fetched, output=args.output, render=render), fetched.uid


@contextlib.asynccontextmanager
async def _open_source(args: argparse.Namespace) -> AsyncIterator[Fetched]:
    if args.store is not None:
        yield await _from_store(args.store, args.namespace or "default", args.name, args.uid)
        return
    import aiohttp

    # No total limit: a big trajectory over a slow link may take long; a stalled one may not.
    timeout = aiohttp.ClientTimeout(sock_connect=_CONNECT_TIMEOUT_S, sock_read=_READ_TIMEOUT_S)
    if args.operator_url is not None:
        url = args.operator_url.rstrip("/") + trajectory_path(
            args.namespace or "default", args.name, args.uid
        )
        token = await _caller_token(args.token, None, args.kubeconfig)
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession(timeout=timeout) as session:
            yield await _from_http(
                lambda: session.get(url, headers=headers),
                what="the operator at " + args.operator_url,
                hints={401: _TOKEN_HINT},
            )
        return
    async with _api_server(args.kubeconfig) as api:
        token = await _caller_token(args.token, api.kube.config, args.kubeconfig)
        path = service_proxy_path(
            args.namespace or api.context_namespace,
            args.name,
            operator_namespace=args.operator_namespace,
            operator_service=args.operator_service,
            uid=args.uid,
        )
        what = (
            f"the operator service {args.operator_namespace}/{args.operator_service} "
            f"through the API server {api.server}"
        )
        hints = {
            401: f"are the kubeconfig's credentials still valid? ({_TOKEN_HINT})",
            403: f"may you get services/proxy in namespace {args.operator_namespace}?",
            503: "is the operator running and ready?",
        }
        yield await _from_http(
            lambda: api.kube.open_response(
                path,
                timeout=timeout,
                what="GET",
                # The API server drops Authorization on its way to the operator; this it
                # passes on.
                headers={CALLER_AUTHORIZATION: f"Bearer {token}"},
            ),
            what=what,
            hints=hints,
        )


async def _from_store(root: Path, namespace: str, name: str, uid: str | None) -> Fetched:
    store = TrajectoryDirectory(root)
    path = await (
        store.latest(namespace, name) if uid is None else store.path(namespace, name, uid)
    )
    which = f"{namespace}/{name}" + (f" uid {uid}" if uid else "")
    if path is None:
        raise TrajectoryNotFoundError(f"no trajectory stored for session {which} in {root}")
    try:
        trajectory = await snapshot(path)
    except OSError as error:
        raise TrajectoryFetchError(f"cannot read {path}: {error}") from error
    return Fetched(uid=trajectory.uid, chunks=read_chunks(trajectory))


async def _from_http(
    get: Callable[[], Awaitable[aiohttp.ClientResponse]],
    *,
    what: str,
    hints: Mapping[int, str] | None = None,
) -> Fetched:
    """The body of the response `get` opens, as chunks; an error answer raises with its
    message and, when `hints` has one for the status, a hint on the likely cause."""
    import aiohttp

    from sandfleet.kube.errors import KubeConnectionError

    try:
        response = await get()
    except (aiohttp.ClientError, KubeConnectionError) as error:
        raise TrajectoryFetchError(f"cannot reach {what}: {error}") from error
    if response.status != 200:
        try:
            body = await response.content.read(_ERROR_BODY_BYTES)
        except aiohttp.ClientError:
            body = b""
        finally:
            response.release()
        message = _error_message(response.status, body)
        if response.status == 404 and _is_ours(body):
            raise TrajectoryNotFoundError(f"{what} answered {response.status}: {message}")
        hint = (hints or {}).get(response.status)
        message = f"{message} ({hint})" if hint else message
        raise TrajectoryFetchError(f"{what} answered {response.status}: {message}")
    return Fetched(uid=response.headers.get(UID_HEADER), chunks=_body_chunks(response, what))


async def _body_chunks(response: aiohttp.ClientResponse, what: str) -> AsyncGenerator[bytes, None]:
    import aiohttp

    try:
        async for chunk in response.content.iter_chunked(CHUNK_BYTES):
            yield chunk
    except aiohttp.ClientError as error:  # cut off: fewer bytes than the Content-Length
        raise TrajectoryFetchError(f"the transfer from {what} broke off: {error}") from error
    finally:
        response.release()


def _decoded(body: bytes) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}


def _is_ours(body: bytes) -> bool:
    """The operator's own 404 (no trajectory), as opposed to the API server's (no service)."""
    return "error" in _decoded(body)


def _error_message(status: int, body: bytes) -> str:
    document = _decoded(body)
    if "error" in document:  # the operator's answer
        return str(document["error"])
    if document.get("kind") == "Status":  # the API server's (no such service, forbidden)
        return str(document.get("message") or document.get("reason") or status)
    text = body.decode(errors="replace").strip()
    return one_line(text, 300) if text else f"HTTP {status}"


async def _caller_token(
    given: str | None, config: KubeConfig | None, kubeconfig: Path | None
) -> str:
    """The bearer token the operator checks: --token, SANDFLEET_GATEWAY_TOKEN, then the
    kubeconfig user's (read in a thread: an exec plugin may run)."""
    from sandfleet.kube.config import KubeConfig
    from sandfleet.kube.errors import KubeConfigError

    token = given or os.environ.get(TOKEN_ENV)
    if token:
        return token
    why = "has no bearer token"
    try:
        if config is None:
            config = await asyncio.to_thread(KubeConfig.load, kubeconfig)
        token = await asyncio.to_thread(config.bearer_token)
        if config.client_cert_file:
            why = "authenticates with a client certificate, which cannot be passed on"
    except KubeConfigError as error:
        why = f"cannot be read ({error})"
    if token:
        return token
    raise _UsageError(
        f"the operator wants a Kubernetes bearer token and the kubeconfig user {why}: pass "
        f"--token or set {TOKEN_ENV} (`kubectl create token SERVICEACCOUNT -n NAMESPACE`)"
    )


@dataclasses.dataclass(frozen=True, slots=True)
class _ApiServer:
    kube: KubeClient
    """Sends the kubeconfig's credentials (whatever the kubeconfig uses, refreshed)."""
    server: str
    context_namespace: str


@contextlib.asynccontextmanager
async def _api_server(kubeconfig: Path | None) -> AsyncIterator[_ApiServer]:
    """The project's Kubernetes client, authenticated the way the kubeconfig says."""
    from sandfleet.kube.client import KubeClient
    from sandfleet.kube.config import KubeConfig
    from sandfleet.kube.errors import KubeConfigError

    try:
        config = await asyncio.to_thread(KubeConfig.load, kubeconfig)
        kube = await KubeClient(config).__aenter__()
    except KubeConfigError as error:
        raise _UsageError(f"no usable Kubernetes configuration: {error}") from error
    try:
        yield _ApiServer(kube, config.server, config.namespace)
    finally:
        await kube.close()


async def _write(fetched: Fetched, *, output: Path | None, render: RecordRenderer | None) -> int:
    """Copy the records to -o FILE (renamed into place once complete) or stdout, and/or to
    the renderer; returns the bytes received."""
    if output is None:
        return await _copy(fetched.chunks, None if render else sys.stdout.buffer, render)
    partial = output.with_name(output.name + ".part")
    try:
        raw = partial.open("wb")
    except OSError as error:
        raise _UsageError(f"cannot write {output}: {error}") from error
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
