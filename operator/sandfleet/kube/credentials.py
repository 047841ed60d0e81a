"""The Authorization header for the API server, from kubernetes_asyncio's loaders, kept fresh.

kubernetes_asyncio (the official client's asyncio twin) does the authentication: kubeconfig
users with a token, tokenFile, client certificate, exec credential plugin (EKS, GKE, AKS,
kubelogin), OIDC auth-provider or username/password, and the pod's service account. What it
does not do is decide when to ask again, so that is ours:

- an exec plugin's token is fetched again once its expirationTimestamp is near (a plugin
  that gives no expiry is asked again only after a 401, as kubectl does);
- a token file (kubeconfig tokenFile, the pod's projected token) and an OIDC id-token are
  looked at again every REREAD_PERIOD_S (kubelet rotates projected tokens well before they
  expire; the library refreshes an expired id-token with its refresh-token);
- a 401 from the server forces a fresh load (`header(refresh=True)`);
- an early refresh that fails (a plugin hiccup, a token file caught mid-rotation) keeps the
  still-valid token and tries again after RETRY_AFTER_FAILURE_S.

A plugin that answers with a client certificate instead of a token is used as loaded: the
TLS context is built once per client, so a rotated certificate needs a new client.

Each refresh builds a fresh loader over the same parsed kubeconfig, so the library's own
per-loader caches never hide a due refresh. Concurrent refreshes are not merged: two
requests that find the token due at the same instant both run the plugin, which is harmless.
Importing kubernetes_asyncio costs ~0.25 s and ~30 MiB (it imports every API model), so
only loading a configuration imports it, never `import sandfleet.kube`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from sandfleet.kube.errors import KubeConfigError
from sandfleet.logs import get_logger

if TYPE_CHECKING:
    from kubernetes_asyncio.client import Configuration

log = get_logger(__name__)

T = TypeVar("T")

REREAD_PERIOD_S = 60.0
"""How long a token read from a file (or an OIDC id-token) is used before looking again."""
EXPIRY_SKEW_S = 30.0
"""An exec plugin's token is replaced this long before its expirationTimestamp."""
RETRY_AFTER_FAILURE_S = 5.0
"""After a failed early refresh (the old token still valid) the source rests this long."""


class _RaisedAnyway(logging.Filter):
    """Drops the library's log line for an exec plugin failure it then raises (logger.error
    before `raise`): the KubeConfigError says it once; the user should not read it twice.
    Its other lines (a plugin answer without a token, which it does not raise) stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        raised = record.funcName == "load_from_exec_plugin" and record.levelno >= logging.ERROR
        return not raised or record.getMessage().startswith("exec: missing")


logging.getLogger("kubernetes_asyncio.config.kube_config").addFilter(_RaisedAnyway())


class Credentials:
    """An Authorization header value ("Bearer …", "Basic …") or None, refreshed when due."""

    def __init__(self, header: str | None = None) -> None:
        self._header = header

    async def header(self, *, refresh: bool = False) -> str | None:
        """The header to send now; `refresh` after a 401 asks the source again."""
        return self._header

    def header_blocking(self, *, refresh: bool = False) -> str | None:
        """header() for synchronous callers; may run a credential plugin (blocks meanwhile)."""
        return self._header


class LoadedCredentials(Credentials):
    """Credentials a kubernetes_asyncio loader gives: `load` fills a Configuration."""

    def __init__(
        self,
        load: Callable[[Configuration], Awaitable[Any]],
        *,
        describe: str,
        rereads: bool,
    ) -> None:
        super().__init__()
        self._load = load
        self._describe = describe
        self._loaded_at = -float("inf")
        self._expires_at: float | None = None
        self.configuration: Configuration | None = None
        """The last Configuration the loader filled (host, TLS files, api_key)."""
        self.reread_period_s = REREAD_PERIOD_S if rereads else None
        """Token files and OIDC id-tokens are looked at again after this long (None: never)."""
        self._rest_until = -float("inf")

    def _due(self) -> bool:
        now = time.monotonic()
        if self.configuration is None:
            return True
        if now < self._rest_until:
            return False
        if self._expires_at is not None and now >= self._expires_at - EXPIRY_SKEW_S:
            return True
        period = self.reread_period_s
        return period is not None and now - self._loaded_at >= period

    def _still_valid(self) -> bool:
        """The last credentials are usable for a while yet (a refresh is early, not late)."""
        if self.configuration is None:
            return False
        return self._expires_at is None or time.monotonic() < self._expires_at

    async def header(self, *, refresh: bool = False) -> str | None:
        if refresh or self._due():
            try:
                await self.reload()
            except KubeConfigError as error:
                # A plugin that fails once, a token file caught mid-rotation: the old token
                # still works, so keep it and try again shortly; a 401 (refresh) or an
                # expired token cannot wait.
                if refresh or not self._still_valid():
                    raise
                self._rest_until = time.monotonic() + RETRY_AFTER_FAILURE_S
                log.warning(
                    "kube_credentials_refresh_failed", source=self._describe, error=str(error)
                )
        return self._header

    def header_blocking(self, *, refresh: bool = False) -> str | None:
        if refresh or self._due():
            return run_blocking(lambda: self.header(refresh=refresh))
        return self._header

    async def reload(self) -> Configuration:
        """Ask the source again; KubeConfigError with one clear line when it fails."""
        from kubernetes_asyncio.client import Configuration

        configuration = Configuration()
        try:
            expiry = await self._load(configuration)
        except KubeConfigError:
            raise
        except Exception as error:  # the library raises what its parsers and plugins raise
            message = str(error).strip().replace("\n", " ") or type(error).__name__
            raise KubeConfigError(f"{self._describe}: {message}") from error
        api_key = str(configuration.api_key.get("BearerToken") or "").strip()
        header = api_key or None
        if self.configuration is not None and header != self._header:
            log.info("kube_credentials_refreshed", source=self._describe)
        self._header = header
        self.configuration = configuration
        self._loaded_at = time.monotonic()
        expires = isinstance(expiry, datetime.datetime)
        self._expires_at = _monotonic_deadline(expiry) if expires else None
        return configuration


def kubeconfig_credentials(document: Any, context: str, *, describe: str) -> LoadedCredentials:
    """Credentials of `context` in a parsed kubeconfig (a dict or the library's ConfigNode).

    File references in a ConfigNode from the library's merger are relative to the file that
    holds them; in a plain dict they must be absolute.
    """
    from kubernetes_asyncio.config.kube_config import KubeConfigLoader

    async def load(configuration: Configuration) -> Any:
        loader = KubeConfigLoader(
            config_dict=document, active_context=context, config_base_path=None
        )
        await loader.load_and_set(configuration)
        return getattr(loader, "exec_plugin_expiry", None)

    user = _context_user(document, context)
    rereads = "tokenFile" in user or "auth-provider" in user
    return LoadedCredentials(load, describe=describe, rereads=rereads)


def in_cluster_credentials(
    token_file: str, ca_file: str, environ: Mapping[str, str]
) -> LoadedCredentials:
    """The pod's service account, through the library's in-cluster loader."""
    from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader

    async def load(configuration: Configuration) -> None:
        loader = InClusterConfigLoader(
            token_filename=token_file, cert_filename=ca_file, environ=dict(environ)
        )
        # The library's refresh hook re-reads the token once a minute; we re-read on the
        # same period ourselves (rereads=True), so a fresh loader each time is enough.
        loader.load_and_set(configuration)

    return LoadedCredentials(load, describe="the pod's service account", rereads=True)


def _context_user(document: Any, context: str) -> Mapping[str, Any]:
    """The user section of `context`, or {} (a cluster without credentials)."""
    raw = getattr(document, "value", document)
    contexts = {_plain(c).get("name"): _plain(c) for c in raw.get("contexts") or []}
    user_name = (_plain(contexts.get(context, {})).get("context") or {}).get("user")
    for entry in raw.get("users") or []:
        if _plain(entry).get("name") == user_name:
            user: Mapping[str, Any] = _plain(entry).get("user") or {}
            return user
    return {}


def _plain(value: Any) -> Any:
    """The dict behind the library's ConfigNode (its merger wraps list entries in one)."""
    return getattr(value, "value", value)


def _monotonic_deadline(expiry: datetime.datetime) -> float:
    """An absolute expiry as a time.monotonic() deadline (monotonic: no wall-clock jumps)."""
    if expiry.tzinfo is None:
        expiry = expiry.replace(tzinfo=datetime.UTC)
    remaining = (expiry - datetime.datetime.now(datetime.UTC)).total_seconds()
    return time.monotonic() + remaining


def run_blocking(work: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from synchronous code, inside or outside an event loop.

    Outside a loop (start-up, asyncio.to_thread) it gets its own; inside one (a synchronous
    call from async code) it runs on a private thread, because a loop cannot be nested.
    """

    async def main() -> T:
        return await work()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kube-credentials") as pool:
        return pool.submit(asyncio.run, main()).result()
