"""The checks of `sandfleet doctor`: each looks at one thing the CLI depends on and says ok,
warn, fail or skip in one line. Each is small, bounded by a timeout, and never raises."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import shutil
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from sandfleet.agent.endpoint_hints import (
    PROBE_TIMEOUT_S,
    plain_http_instead_of_tls,
    v1_base_url,
)
from sandfleet.cli.preflight import OPENAI_BASE_URL, get_models, models_url
from sandfleet.errors import SandfleetError
from sandfleet.logs import get_logger
from sandfleet.settings import Settings

log = get_logger(__name__)

CHECK_TIMEOUT_S = 10.0
"""Bound on one check (a connection, a probe); a check that takes longer fails."""
_PLACEHOLDER_KEY = "EMPTY"  # what a keyless --base-url endpoint gets (agent.openai_chat)


class Status(enum.StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    """Not configured, so not checked (no kubeconfig, no gateway)."""


@dataclasses.dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    status: Status
    detail: str

    def to_record(self) -> dict[str, str]:
        return {"check": self.name, "status": self.status.value, "detail": self.detail}


Check = Callable[[Settings, Mapping[str, str]], Awaitable[CheckResult]]


async def run_checks(settings: Settings, environ: Mapping[str, str]) -> list[CheckResult]:
    """Every check, concurrently, each bounded by CHECK_TIMEOUT_S; in CHECKS order."""
    return list(await asyncio.gather(*(_bounded(c, settings, environ) for c in CHECKS)))


async def _bounded(check: Check, settings: Settings, environ: Mapping[str, str]) -> CheckResult:
    name = _NAMES[check]
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            return await check(settings, environ)
    except TimeoutError:
        return CheckResult(name, Status.FAIL, f"no answer within {CHECK_TIMEOUT_S:g} s")
    # A check reports, it never stops the others: whatever it raised is its result.
    except Exception as error:
        log.debug("doctor_check_crashed", check=name, exc_info=True)
        return CheckResult(name, Status.FAIL, f"{type(error).__name__}: {error}")


async def model_endpoint(settings: Settings, environ: Mapping[str, str]) -> CheckResult:
    """GET {base_url}/models with the key the runs would send."""
    name = "model endpoint"
    key = settings.api_key.get_secret_value() if settings.api_key else None
    if key is None and "api_key_env" in settings.model_fields_set:
        return CheckResult(
            name, Status.FAIL, f"the API key variable {settings.api_key_env} is unset"
        )
    if settings.base_url is None and key is None:
        return CheckResult(
            name, Status.WARN,
            f"not configured: give --base-url (SANDFLEET_BASE_URL), or export "
            f"{settings.api_key_env} for the OpenAI API",
        )  # fmt: skip
    base = (settings.base_url or OPENAI_BASE_URL).rstrip("/")
    try:
        # An https:// endpoint keeps time for the plain-HTTP probe within the check's bound.
        limit = CHECK_TIMEOUT_S - (PROBE_TIMEOUT_S + 1 if base.startswith("https:") else 0)
        answer = await get_models(base, key or _PLACEHOLDER_KEY, timeout_s=limit, read_body=True)
    except (aiohttp.ClientError, ValueError, TimeoutError) as error:
        if base.startswith("https:") and await plain_http_instead_of_tls(base):
            return CheckResult(
                name, Status.FAIL, f"{base} answered plain HTTP, not TLS: use http://"
            )
        reason = error or type(error).__name__
        return CheckResult(name, Status.FAIL, f"cannot reach {models_url(base)}: {reason}")
    status, body = answer.status, answer.body
    return CheckResult(name, *_endpoint_verdict(base, status, body, settings.model))


def _endpoint_verdict(base: str, status: int, body: Any, model: str | None) -> tuple[Status, str]:
    url = f"{base}/models"
    suggestion = v1_base_url(base) if status == 404 else None
    if suggestion is not None:
        return Status.FAIL, (
            f"HTTP 404 at {url}; OpenAI-compatible servers usually serve under /v1: try "
            f"--base-url {suggestion}"
        )
    if status in (401, 403):
        return Status.FAIL, f"HTTP {status} at {url}: the API key was refused"
    if status != 200:
        return Status.FAIL, f"HTTP {status} at {url}"
    models = _model_ids(body)
    if model and models and model not in models:
        listed = ", ".join(models[:5]) + (", ..." if len(models) > 5 else "")
        return Status.WARN, f"{base} answers, but does not list the model {model} ({listed})"
    return Status.OK, f"{base} answers ({len(models)} models listed)"


def _model_ids(body: Any) -> list[str]:
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return []
    return [str(item["id"]) for item in data if isinstance(item, dict) and "id" in item]


async def local_isolation(settings: Settings, environ: Mapping[str, str]) -> CheckResult:
    """What local sandboxes need: a namespace tool (unshare or bubblewrap) that works here."""
    from sandfleet.backends.local.isolation import OPT_OUT, probe, seccomp_problem

    name = "local isolation"
    if settings.isolation == "none":
        return CheckResult(
            name, Status.WARN,
            "--isolation none: sandboxes run as plain processes that can change what you can",
        )  # fmt: skip
    no_filter = seccomp_problem()
    if no_filter is not None:
        return CheckResult(name, Status.FAIL, no_filter)
    reasons = []
    for mechanism in ("unshare", "bwrap"):
        problem = await probe(mechanism)
        if problem is None:
            return _with_egress(mechanism, settings.egress)
        reasons.append(f"{mechanism}: {problem}")
    return CheckResult(name, Status.FAIL, f"no namespaces ({'; '.join(reasons)}); {OPT_OUT}")


def _with_egress(mechanism: str, egress: str) -> CheckResult:
    """Namespaces work; --egress all/internet also needs slirp4netns (README: Needs)."""
    works = f"{mechanism} gives user, mount, PID, IPC and network namespaces"
    if egress != "none" and shutil.which("slirp4netns") is None:
        return CheckResult(
            "local isolation", Status.FAIL,
            f"{works}, but --egress {egress} needs slirp4netns, which is not installed",
        )  # fmt: skip
    return CheckResult("local isolation", Status.OK, works)


async def cgroups(settings: Settings, environ: Mapping[str, str]) -> CheckResult:
    """Writable cgroups for the sandboxes' pids and memory limits."""
    from sandfleet.backends.local.cgroups import our_cgroup_parents

    parents = await asyncio.to_thread(our_cgroup_parents)
    if parents:
        return CheckResult("cgroups", Status.OK, f"writable: {', '.join(str(p) for p in parents)}")
    return CheckResult(
        "cgroups", Status.WARN,
        "not writable (run as root or in a delegated subtree): sandboxes get RLIMIT_NPROC "
        "only and no memory limit",
    )  # fmt: skip


async def cluster(settings: Settings, environ: Mapping[str, str]) -> CheckResult:
    """The kubeconfig's API server answers GET /version (only when a kubeconfig exists)."""
    from sandfleet.kube.client import KubeClient
    from sandfleet.kube.config import KubeConfig

    name = "cluster"
    if not _kubeconfig_exists(settings, environ):
        return CheckResult(
            name, Status.SKIP, "no kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config)"
        )
    try:
        config = await asyncio.to_thread(
            KubeConfig.load, settings.kubeconfig, settings.context, environ=environ
        )
        async with KubeClient(config, timeout_s=CHECK_TIMEOUT_S) as kube:
            version = await kube.get("/version")
    except (SandfleetError, OSError, aiohttp.ClientError) as error:
        return CheckResult(name, Status.FAIL, str(error) or type(error).__name__)
    where = f"context {config.context}, " if config.context else ""
    return CheckResult(
        name, Status.OK, f"{config.server} ({where}Kubernetes {version.get('gitVersion', '?')})"
    )


def _kubeconfig_exists(settings: Settings, environ: Mapping[str, str]) -> bool:
    if settings.kubeconfig is not None or environ.get("KUBECONFIG"):
        return True
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    home = Path(environ["HOME"]) if environ.get("HOME") else Path.home()
    return (home / ".kube" / "config").is_file()


async def gateway(settings: Settings, environ: Mapping[str, str]) -> CheckResult:
    """A TCP connection to the sandfleet gateway (only when one is configured)."""
    from sandfleet.clients.gateway.target import GatewayConfigError, resolve_gateway

    name = "gateway"
    configured = settings.gateway or environ.get("SANDFLEET_GATEWAY")
    try:
        target = await asyncio.to_thread(
            resolve_gateway, settings.gateway, kubeconfig=settings.kubeconfig,
            context=settings.context, environ=environ,
        )  # fmt: skip
    except GatewayConfigError as error:
        if not configured:
            return CheckResult(name, Status.SKIP, "not configured (--gateway, SANDFLEET_GATEWAY)")
        return CheckResult(name, Status.FAIL, str(error))
    host, _, port = target.address.rpartition(":")
    try:
        _, writer = await asyncio.open_connection(host.strip("[]"), int(port))
    except (OSError, ValueError) as error:
        return CheckResult(name, Status.FAIL, f"cannot connect to {target.address}: {error}")
    writer.close()
    await writer.wait_closed()
    tls = "TLS" if target.tls else "plaintext"
    return CheckResult(name, Status.OK, f"{target.address} accepts connections ({tls}, from "
                       f"{target.source})")  # fmt: skip


async def model_server_slots(settings: Settings, environ: Mapping[str, str]) -> CheckResult:
    """How many requests the server runs at once (llama.cpp), against --concurrency."""
    from sandfleet.cli import server_slots

    status, detail = await server_slots.check(settings)
    return CheckResult("server slots", Status(status), detail)


CHECKS: tuple[Check, ...] = (
    model_endpoint, model_server_slots, local_isolation, cgroups, cluster, gateway,
)  # fmt: skip
_NAMES: dict[Check, str] = {
    model_endpoint: "model endpoint", model_server_slots: "server slots",
    local_isolation: "local isolation", cgroups: "cgroups", cluster: "cluster",
    gateway: "gateway",
}  # fmt: skip
