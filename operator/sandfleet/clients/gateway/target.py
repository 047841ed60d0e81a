"""Where the gateway is and who the caller is: an argument, the environment, or the kubeconfig.

The address, in order: the explicit argument; SANDFLEET_GATEWAY (host:port; an https:// or
grpcs:// prefix, or SANDFLEET_GATEWAY_TLS=1, means TLS, verified against
SANDFLEET_GATEWAY_CA_FILE or the system's roots); the `sandfleet.dev/gateway` extension of
the kubeconfig context's cluster:

    clusters:
    - name: prod
      cluster:
        server: https://...
        extensions:
        - name: sandfleet.dev/gateway
          extension:
            address: gateway.example.com:443
            tls: true
            ca: |                 # optional PEM (or its base64); default: the system's roots
              -----BEGIN CERTIFICATE-----

The token, in order: the explicit argument; SANDFLEET_GATEWAY_TOKEN; the kubeconfig
context's bearer token (token or tokenFile; in a pod, its service account's token).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sandfleet.api import GATEWAY_PORT
from sandfleet.clients.grpc_channel import Tls
from sandfleet.errors import GatewayConfigError
from sandfleet.kube import KubeConfig, KubeConfigError

GATEWAY_EXTENSION = "sandfleet.dev/gateway"
ADDRESS_ENV = "SANDFLEET_GATEWAY"
TLS_ENV = "SANDFLEET_GATEWAY_TLS"
CA_FILE_ENV = "SANDFLEET_GATEWAY_CA_FILE"
TOKEN_ENV = "SANDFLEET_GATEWAY_TOKEN"
_TLS_PREFIXES = ("https://", "grpcs://")
_PLAIN_PREFIXES = ("http://", "grpc://")
_TRUE = frozenset({"1", "true", "yes", "on"})

__all__ = ["GatewayConfigError", "GatewayTarget", "resolve_gateway"]


@dataclasses.dataclass(frozen=True, slots=True)
class GatewayTarget:
    """One gateway and one identity: where to claim sandboxes, and as whom."""

    address: str
    """host:port of the gateway (its GatewayService and the proxied runtime services)."""
    token: str = dataclasses.field(repr=False)
    """A bearer token the Kubernetes API server accepts (TokenReview)."""
    tls: Tls | None = None
    namespace: str = "default"
    """The kubeconfig context's namespace: where sessions go unless a call names another."""
    source: str = "argument"
    """Where the address came from (argument, SANDFLEET_GATEWAY, kubeconfig), for messages."""
    token_source: Callable[[], str | None] | None = dataclasses.field(
        default=None, repr=False, compare=False
    )
    """Reads the token again (a kubeconfig tokenFile or a pod's service account token
    rotates while a long batch runs); None: `token` never changes."""

    def current_token(self) -> str:
        """The token to send now: the source's latest, else the one resolved at first. It may
        run a kubeconfig exec plugin: call it through asyncio.to_thread from async code."""
        fresh = self.token_source() if self.token_source is not None else None
        return fresh or self.token

    async def token_now(self) -> str:
        """`current_token()` from async code: read in a worker thread when it has a source
        (a file, an exec plugin), at once when the token never changes (every claim would
        otherwise pay a thread hop for a constant)."""
        if self.token_source is None:
            return self.token
        return await asyncio.to_thread(self.current_token)


def resolve_gateway(
    address: str | None = None,
    *,
    token: str | None = None,
    tls: bool | None = None,
    ca_file: Path | None = None,
    kubeconfig: Path | None = None,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> GatewayTarget:
    """The gateway to use, found as the module docstring says; raises GatewayConfigError.

    Reads files (kubeconfig, CA bundle): call it through asyncio.to_thread from async code.
    """
    env = os.environ if environ is None else environ
    config, config_error = _load_kubeconfig(kubeconfig, context, env)
    extension = _extension(config)
    if address:
        source = "argument"
    elif env.get(ADDRESS_ENV):
        address, source = env[ADDRESS_ENV], ADDRESS_ENV
    elif extension.get("address"):
        address, source = str(extension["address"]), "kubeconfig"
    else:
        where = f" (the kubeconfig: {config_error})" if config_error else ""
        raise GatewayConfigError(
            "no sandfleet gateway is configured: pass --gateway HOST:PORT (gateway= in the "
            f"SDK), set {ADDRESS_ENV}, or add a {GATEWAY_EXTENSION!r} extension with an "
            f"address to the kubeconfig cluster{where}"
        )
    host, prefixed_tls = _split_scheme(address)
    use_tls = tls if tls is not None else prefixed_tls
    ca: bytes | None = None
    if source == "kubeconfig":
        use_tls = use_tls or bool(extension.get("tls"))
        ca = _inline_ca(extension.get("ca"))
    else:
        use_tls = use_tls or env.get(TLS_ENV, "").strip().lower() in _TRUE
    ca_path = ca_file or (Path(env[CA_FILE_ENV]) if env.get(CA_FILE_ENV) else None)
    if ca_path is not None:
        use_tls = True
        try:
            ca = ca_path.expanduser().read_bytes()
        except OSError as error:
            raise GatewayConfigError(
                f"cannot read the gateway CA bundle {ca_path}: {error}"
            ) from error
    given_token = token or env.get(TOKEN_ENV)
    return GatewayTarget(
        address=_with_port(host, use_tls),
        token=given_token or _kube_token(config, config_error),
        tls=Tls(root_certificates=ca) if use_tls else None,
        namespace=config.namespace if config else "default",
        source=source,
        token_source=config.bearer_token if config and not given_token else None,
    )


def _load_kubeconfig(
    path: Path | None, context: str | None, env: Mapping[str, str]
) -> tuple[KubeConfig | None, str | None]:
    """The kubeconfig, or None and why not: it is optional while address and token are given."""
    try:
        return KubeConfig.load(path, context, environ=env), None
    except KubeConfigError as error:
        return None, str(error)


def _extension(config: KubeConfig | None) -> Mapping[str, Any]:
    value = config.cluster_extensions.get(GATEWAY_EXTENSION) if config else None
    return value if isinstance(value, Mapping) else {}


def _kube_token(config: KubeConfig | None, config_error: str | None) -> str:
    if config is None:
        raise GatewayConfigError(
            f"no token for the gateway: set {TOKEN_ENV} or pass a token; the kubeconfig "
            f"cannot give one: {config_error}"
        )
    token = config.bearer_token()
    if token:
        return token
    who = f"the user of kubeconfig context {config.context!r}" if config.context else "this user"
    how = (
        "authenticates with a client certificate, which cannot be forwarded to the gateway"
        if config.client_cert_file
        else "has no bearer token"
    )
    raise GatewayConfigError(
        f"{who} {how}: create a token (kubectl create token SERVICEACCOUNT -n NAMESPACE) "
        f"and set {TOKEN_ENV} to it, or pass it (--gateway-token, token= in the SDK)"
    )


def _split_scheme(address: str) -> tuple[str, bool]:
    """The address without a URL scheme, and whether the scheme asks for TLS."""
    for prefix in _TLS_PREFIXES:
        if address.startswith(prefix):
            return address.removeprefix(prefix).rstrip("/"), True
    for prefix in _PLAIN_PREFIXES:
        if address.startswith(prefix):
            return address.removeprefix(prefix).rstrip("/"), False
    return address, False


def _with_port(host: str, tls: bool) -> str:
    """host:port; a bare host gets 443 with TLS (an Ingress), else the gateway's own port."""
    _, colon, port = host.rpartition(":")
    if colon and port.isdigit() and not host.endswith("]"):
        return host
    return f"{host}:{443 if tls else GATEWAY_PORT}"


def _inline_ca(value: object) -> bytes | None:
    """The extension's `ca`: PEM text, or the base64 of it (as certificate-authority-data)."""
    if not value:
        return None
    text = str(value).strip()
    if text.startswith("-----BEGIN"):
        return text.encode() + b"\n"
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as error:
        raise GatewayConfigError(
            f"the kubeconfig's {GATEWAY_EXTENSION} ca is neither PEM nor base64: {error}"
        ) from error
