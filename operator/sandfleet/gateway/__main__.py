"""`sandfleet-gateway` / `python -m sandfleet.gateway`: settings, logging, clients, the server.

Bad settings end the process at once with one line on stderr and exit status 2; SIGTERM
(and SIGINT) stop it gracefully: new calls are refused, calls in flight get the grace.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from pydantic import ValidationError

from sandfleet.api.session_tokens import read_session_key
from sandfleet.errors import SandfleetError
from sandfleet.gateway.claims import Claimer, ClaimSettings
from sandfleet.gateway.server import GatewayServer
from sandfleet.gateway.settings import GatewaySettings
from sandfleet.kube import KubeClient, KubeConfig, KubeConfigError
from sandfleet.logs import configure_logging, get_logger

log = get_logger(__name__)

EXIT_BAD_SETTINGS = 2


class GatewaySettingsError(SandfleetError):
    """The process cannot start as configured; the message is the one line to print."""


def settings_problem(error: ValidationError) -> str:
    """One line naming each bad setting by its environment variable."""
    problems = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"])
        name = "SANDFLEET_LOG_LEVEL" if field == "SANDFLEET_LOG_LEVEL" else field
        if name and not name.startswith("SANDFLEET_"):
            name = f"SANDFLEET_GATEWAY_{name.upper()}"
        message = str(item["msg"]).removeprefix("Value error, ")
        problems.append(f"{name}: {message}" if name else message)
    return "; ".join(problems)


def build_claimer(kube: KubeClient, settings: GatewaySettings, session_key: bytes) -> Claimer:
    """The claim path for these settings."""
    claim_settings = ClaimSettings(
        namespaces=tuple(settings.namespaces),
        session_key=session_key,
        replica=settings.replica,
        default_timeout_s=settings.cold_start_timeout_seconds,
    )
    return Claimer(kube, claim_settings)


async def run_gateway(settings: GatewaySettings, session_key: bytes) -> None:
    try:
        config = KubeConfig.load(settings.kubeconfig)
    except KubeConfigError as error:
        raise GatewaySettingsError(str(error)) from error
    async with KubeClient(config, qps=settings.kube_qps, burst=settings.kube_burst) as kube:
        server = GatewayServer(
            settings, kube=kube, claimer=build_claimer(kube, settings, session_key)
        )
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        try:
            starting = asyncio.create_task(server.start())
            stop_wait = asyncio.create_task(stopping.wait())
            await asyncio.wait({starting, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if starting.done():
                starting.result()  # a bind failure raises here
                await stop_wait
            else:
                starting.cancel()
            log.info("gateway_stopping", grace_s=settings.shutdown_grace_seconds)
        finally:
            await server.stop()


def main() -> int:
    try:
        settings = GatewaySettings()
    except ValidationError as error:
        print(f"sandfleet-gateway: bad settings: {settings_problem(error)}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    try:
        session_key = _session_key(settings)
        configure_logging(level=settings.log_level)
        asyncio.run(run_gateway(settings, session_key))
    except GatewaySettingsError as problem:
        print(f"sandfleet-gateway: {problem}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    except OSError as error:
        print(f"sandfleet-gateway: cannot serve: {error}", file=sys.stderr)
        return 1
    return 0


def _session_key(settings: GatewaySettings) -> bytes:
    if settings.session_key_file is None:
        raise GatewaySettingsError(
            "SANDFLEET_GATEWAY_SESSION_KEY_FILE is not set: the gateway needs the session "
            "key it shares with the operator (the chart mounts it)"
        )
    try:
        return read_session_key(settings.session_key_file)
    except ValueError as error:
        raise GatewaySettingsError(str(error)) from error


if __name__ == "__main__":
    sys.exit(main())
