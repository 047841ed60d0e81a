"""Where the API server is and how to authenticate, as kubectl finds it: kubeconfig files or
the pod's service account. Parsing, merging and every authentication method are
kubernetes_asyncio's (see sandfleet.kube.credentials); this adapts its result to the shape
the project's client and callers use.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandfleet.kube.credentials import (
    Credentials,
    LoadedCredentials,
    in_cluster_credentials,
    kubeconfig_credentials,
    run_blocking,
)
from sandfleet.kube.errors import KubeConfigError

if TYPE_CHECKING:
    from kubernetes_asyncio.client import Configuration

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclasses.dataclass(frozen=True)
class KubeConfig:
    """One API server and one identity: what a kubeconfig context or a pod's account gives.

    Built by hand (tests, stand-in servers) from `server` and a `token` or `token_file`;
    `load()` fills it from kubeconfig files or the pod's service account and carries the
    library's refreshing credentials. TLS material is named by file (the library writes
    inline `*-data` to private temporary files).
    """

    server: str
    namespace: str = "default"
    token: str | None = dataclasses.field(default=None, repr=False)
    token_file: Path | None = None
    ca_file: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    context: str | None = None
    """The kubeconfig context this came from (None in-cluster or when built by hand)."""
    cluster_extensions: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False)
    """The context's cluster's `extensions`, by name (e.g. sandfleet.dev/gateway)."""
    credentials: Credentials | None = dataclasses.field(default=None, repr=False, compare=False)
    """Gives the Authorization header, refreshed when due (exec plugins, token files);
    None: built from `token` or `token_file`."""
    _auth: Credentials = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        auth = self.credentials
        if auth is None and self.token_file is not None:
            document = _single_user_kubeconfig(self.server, {"tokenFile": str(self.token_file)})
            auth = kubeconfig_credentials(
                document, "hand-built", describe=f"token file {self.token_file}"
            )
        elif auth is None:
            auth = Credentials(f"Bearer {self.token}" if self.token else None)
        object.__setattr__(self, "_auth", auth)

    @property
    def auth(self) -> Credentials:
        """The credentials in use: `credentials`, or those built from `token`/`token_file`."""
        return self._auth

    async def auth_header(self, *, refresh: bool = False) -> str | None:
        """The Authorization header to send now; `refresh` (after a 401) asks the source again."""
        return await self._auth.header(refresh=refresh)

    def bearer_token(self, *, refresh: bool = False) -> str | None:
        """The bearer token to send now (None for client certificates or basic auth).

        Synchronous: a due refresh runs the credential plugin while the caller waits.
        """
        header = self._auth.header_blocking(refresh=refresh)
        if header and header.startswith("Bearer "):
            return header.removeprefix("Bearer ").strip() or None
        return None

    def ssl_context(self) -> ssl.SSLContext:
        """TLS settings for the server: its CA (or the system's), the client certificate."""
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.insecure_skip_tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.client_cert_file and self.client_key_file:
            context.load_cert_chain(self.client_cert_file, self.client_key_file)
        return context

    @classmethod
    def load(
        cls,
        path: Path | None = None,
        context: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        service_account_dir: Path = SERVICE_ACCOUNT_DIR,
    ) -> KubeConfig:
        """The configuration a client should use, found the way kubectl finds it.

        `path` if given; else the files in $KUBECONFIG (merged, first definition wins);
        else ~/.kube/config; else the in-cluster service account. `context` picks a context
        by name instead of the current one. `environ` stands in for os.environ. Reads
        files and runs the user's credential plugin once: call it at start-up (or through
        asyncio.to_thread). Raises KubeConfigError with one line saying what is wrong.
        """
        env = os.environ if environ is None else environ
        if path is not None:
            if not path.expanduser().is_file():
                raise KubeConfigError(f"the kubeconfig {path} does not exist")
            files = [path.expanduser()]
        elif env.get("KUBECONFIG"):
            listed = [Path(p).expanduser() for p in env["KUBECONFIG"].split(os.pathsep) if p]
            files = [p for p in listed if p.is_file()]
            if not files:
                raise KubeConfigError(f"none of the files in KUBECONFIG exist: {env['KUBECONFIG']}")
        else:
            home = Path(env["HOME"]) if env.get("HOME") else Path.home()
            default = home / ".kube" / "config"
            if default.is_file():
                files = [default]
            elif env.get("KUBERNETES_SERVICE_HOST"):
                return cls.in_cluster(service_account_dir, environ=env)
            else:
                raise KubeConfigError(
                    f"no Kubernetes configuration: KUBECONFIG is unset, {default} does not "
                    "exist and this is not a pod (KUBERNETES_SERVICE_HOST is unset)"
                )
        return cls._from_files(files, context)

    @classmethod
    def _from_files(cls, files: list[Path], context: str | None) -> KubeConfig:
        from kubernetes_asyncio.config.kube_config import KubeConfigMerger

        where = ", ".join(str(f) for f in files)
        try:
            merger = KubeConfigMerger(os.pathsep.join(str(f) for f in files))
            merged = merger.config
            if merged is None:
                raise KubeConfigError(f"no kubeconfig could be read from {where}")
            # kubectl takes the first file's current-context; the library's merger the last.
            name = context or next(
                (
                    str(merger.config_files[p]["current-context"])
                    for p in merger.paths
                    if merger.config_files[p].get("current-context")
                ),
                None,
            )
            if not name:
                raise KubeConfigError(
                    f"the kubeconfig ({where}) has no current-context and none was named"
                )
            chosen = merged["contexts"].get_with_name(name, safe=True)
        except KubeConfigError:
            raise
        except Exception as error:  # yaml errors, a document that is not a kubeconfig
            message = str(error).strip().replace("\n", " ")
            raise KubeConfigError(f"cannot read the kubeconfig ({where}): {message}") from error
        if chosen is None:
            known = [c.get("name") for c in _entries(merged, "contexts")]
            raise KubeConfigError(
                f"the kubeconfig ({where}) has no context named {name!r}; it has {known}"
            )
        credentials = kubeconfig_credentials(merged, name, describe=f"kubeconfig context {name!r}")
        configuration = run_blocking(credentials.reload)
        ctx = chosen.value.get("context") or {}
        cluster = next(
            (
                c.get("cluster") or {}
                for c in _entries(merged, "clusters")
                if c.get("name") == ctx.get("cluster")
            ),
            {},
        )
        return cls._from_configuration(
            configuration,
            credentials,
            namespace=str(ctx.get("namespace") or "default"),
            context=name,
            cluster_extensions={
                str(entry.get("name")): entry.get("extension")
                for entry in cluster.get("extensions") or []
                if isinstance(entry, Mapping)
            },
        )

    @classmethod
    def in_cluster(
        cls,
        service_account_dir: Path = SERVICE_ACCOUNT_DIR,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> KubeConfig:
        """The pod's own service account: its (rotating) token, the cluster CA, its namespace."""
        env = os.environ if environ is None else environ
        credentials = in_cluster_credentials(
            str(service_account_dir / "token"), str(service_account_dir / "ca.crt"), env
        )
        configuration = run_blocking(credentials.reload)
        namespace_file = service_account_dir / "namespace"
        namespace = namespace_file.read_text().strip() if namespace_file.is_file() else ""
        return cls._from_configuration(configuration, credentials, namespace=namespace or "default")

    @classmethod
    def _from_configuration(
        cls,
        configuration: Configuration,
        credentials: LoadedCredentials,
        *,
        namespace: str,
        context: str | None = None,
        cluster_extensions: Mapping[str, Any] | None = None,
    ) -> KubeConfig:
        """Our view of the Configuration the library's loader filled."""
        return cls(
            server=str(configuration.host).rstrip("/"),
            namespace=namespace,
            ca_file=configuration.ssl_ca_cert,
            client_cert_file=configuration.cert_file,
            client_key_file=configuration.key_file,
            insecure_skip_tls_verify=not configuration.verify_ssl,
            tls_server_name=configuration.tls_server_name,
            context=context,
            cluster_extensions=cluster_extensions or {},
            credentials=credentials,
        )


def _entries(merged: Any, section: str) -> list[Mapping[str, Any]]:
    """A section's entries as plain dicts (the library's merger wraps each in a ConfigNode)."""
    return [getattr(entry, "value", entry) for entry in merged.value.get(section) or []]


def _single_user_kubeconfig(server: str, user: Mapping[str, Any]) -> dict[str, Any]:
    """A one-context kubeconfig document, for a configuration built by hand."""
    return {
        "current-context": "hand-built",
        "clusters": [{"name": "hand-built", "cluster": {"server": server}}],
        "users": [{"name": "hand-built", "user": dict(user)}],
        "contexts": [
            {"name": "hand-built", "context": {"cluster": "hand-built", "user": "hand-built"}}
        ],
    }
