"""Where the API server is and how to authenticate: kubeconfig files or the in-cluster account."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import ssl
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from sandfleet.kube.errors import KubeConfigError
from sandfleet.logs import get_logger

log = get_logger(__name__)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

# kubeconfig fields that name files; relative paths are relative to the file that holds them.
_FILE_FIELDS = ("certificate-authority", "client-certificate", "client-key", "tokenFile")


class TokenFile:
    """A bearer token in a file that is rewritten when it rotates (projected SA tokens).

    The file is read again whenever its inode, size or mtime changes; kubelet replaces
    projected tokens by swapping a symlink, which changes the inode.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._token = ""

    def read(self) -> str:
        try:
            stat = self.path.stat()
            stamp = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if stamp != self._stamp:
                token = self.path.read_text().strip()
                if self._stamp is not None:
                    log.info("kube_token_reloaded", path=str(self.path))
                self._stamp, self._token = stamp, token
        except OSError as error:
            if not self._token:
                raise KubeConfigError(f"cannot read token file {self.path}: {error}") from error
            # Mid-rotation the file can vanish for an instant: the last token is still valid.
            log.warning("kube_token_file_unreadable", path=str(self.path), error=str(error))
        return self._token


@dataclasses.dataclass(frozen=True)
class KubeConfig:
    """One API server and one identity: what a kubeconfig context or a pod's account gives.

    Certificates and keys are held as PEM bytes, read when the configuration is loaded;
    only the token file is read again later, because service account tokens rotate.
    """

    server: str
    namespace: str = "default"
    token: str | None = None
    token_file: Path | None = None
    certificate_authority: bytes | None = None
    client_certificate: bytes | None = None
    client_key: bytes | None = None
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    context: str | None = None
    """The kubeconfig context this came from (None in-cluster or when built by hand)."""
    cluster_extensions: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False)
    """The context's cluster's `extensions`, by name (e.g. sandfleet.dev/gateway)."""
    _token_source: TokenFile | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if self.token_file is not None:
            object.__setattr__(self, "_token_source", TokenFile(self.token_file))

    def bearer_token(self) -> str | None:
        """The token to send now: `token` if set (kubeconfig precedence), else the file's."""
        if self.token:
            return self.token
        if self._token_source is not None:
            return self._token_source.read()
        return None

    def ssl_context(self) -> ssl.SSLContext:
        """TLS settings for the server: its CA (or the system's), the client certificate."""
        cadata = self.certificate_authority.decode() if self.certificate_authority else None
        context = ssl.create_default_context(cadata=cadata)
        if self.insecure_skip_tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.client_certificate and self.client_key:
            # ssl loads certificate chains only from files: a private directory, removed at once.
            with tempfile.TemporaryDirectory(prefix="sandfleet-kube-") as workdir:
                cert, key = Path(workdir, "client.crt"), Path(workdir, "client.key")
                cert.write_bytes(self.client_certificate)
                key.touch(mode=0o600)
                key.write_bytes(self.client_key)
                context.load_cert_chain(cert, key)
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
        files: call it at start-up.
        """
        env = os.environ if environ is None else environ
        if path is not None:
            files = [path]
        elif env.get("KUBECONFIG"):
            listed = [Path(p) for p in env["KUBECONFIG"].split(os.pathsep) if p]
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
        return cls.from_kubeconfig(_merge([_read_kubeconfig(f) for f in files]), context)

    @classmethod
    def from_kubeconfig(cls, document: Mapping[str, Any], context: str | None = None) -> KubeConfig:
        """A parsed kubeconfig document; file references in it must already be absolute."""
        name = context or document.get("current-context")
        if not name:
            raise KubeConfigError("the kubeconfig has no current-context and none was named")
        ctx = _named(document, "contexts", "context", name)
        cluster = _named(document, "clusters", "cluster", ctx.get("cluster"))
        user = _named(document, "users", "user", ctx.get("user")) if ctx.get("user") else {}
        for plugin in ("exec", "auth-provider"):
            if user.get(plugin):
                raise KubeConfigError(
                    f"user {ctx.get('user')!r} authenticates with an {plugin} plugin, which is "
                    "not supported: use a token, tokenFile or client certificate"
                )
        server = cluster.get("server")
        if not server:
            raise KubeConfigError(f"cluster {ctx.get('cluster')!r} has no server")
        token_file = user.get("tokenFile")
        return cls(
            server=str(server).rstrip("/"),
            namespace=str(ctx.get("namespace") or "default"),
            token=user.get("token") or None,
            token_file=Path(token_file) if token_file else None,
            certificate_authority=_material(cluster, "certificate-authority"),
            client_certificate=_material(user, "client-certificate"),
            client_key=_material(user, "client-key"),
            insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify")),
            tls_server_name=cluster.get("tls-server-name") or None,
            context=str(name),
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
        """The pod's own service account: its token, the cluster CA and its namespace."""
        env = os.environ if environ is None else environ
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
        if not host or not port:
            raise KubeConfigError(
                "not running in a pod: KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are unset"
            )
        token_file = service_account_dir / "token"
        if not token_file.is_file():
            raise KubeConfigError(f"no service account token at {token_file}")
        ca_file = service_account_dir / "ca.crt"
        namespace_file = service_account_dir / "namespace"
        namespace = namespace_file.read_text().strip() if namespace_file.is_file() else ""
        config = cls(
            server=f"https://{f'[{host}]' if ':' in host else host}:{port}",
            namespace=namespace or "default",
            token_file=token_file,
            certificate_authority=ca_file.read_bytes() if ca_file.is_file() else None,
        )
        config.bearer_token()  # fail now, not at the first request, if it is unreadable
        return config


def _read_kubeconfig(path: Path) -> dict[str, Any]:
    """One kubeconfig file, with its relative file references made absolute."""
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise KubeConfigError(f"cannot read kubeconfig {path}: {error}") from error
    if not isinstance(document, dict):
        raise KubeConfigError(f"kubeconfig {path} is not a mapping")
    base = path.resolve().parent
    for section, key in (("clusters", "cluster"), ("users", "user")):
        for entry in document.get(section) or []:
            body = entry.get(key) or {}
            for field in _FILE_FIELDS:
                if body.get(field):
                    body[field] = str(base / Path(body[field]).expanduser())
    return document


def _merge(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """kubectl's merge of several kubeconfig files: the first definition of a name wins."""
    merged: dict[str, Any] = {"current-context": ""}
    for section in ("clusters", "users", "contexts"):
        seen: dict[str, Any] = {}
        for document in documents:
            for entry in document.get(section) or []:
                seen.setdefault(entry.get("name"), entry)
        merged[section] = list(seen.values())
    merged["current-context"] = next(
        (d["current-context"] for d in documents if d.get("current-context")), ""
    )
    return merged


def _named(document: Mapping[str, Any], section: str, key: str, name: object) -> dict[str, Any]:
    for entry in document.get(section) or []:
        if entry.get("name") == name:
            body: dict[str, Any] = entry.get(key) or {}
            return body
    raise KubeConfigError(f"the kubeconfig has no {key} named {name!r}")


def _material(entry: Mapping[str, Any], field: str) -> bytes | None:
    """A PEM credential given inline (`<field>-data`, base64) or as a file (`<field>`)."""
    inline = entry.get(f"{field}-data")
    if inline:
        try:
            return base64.b64decode(inline)
        except (binascii.Error, ValueError) as error:
            raise KubeConfigError(f"{field}-data is not valid base64: {error}") from error
    path = entry.get(field)
    if path:
        try:
            return Path(path).read_bytes()
        except OSError as error:
            raise KubeConfigError(f"cannot read {field} {path}: {error}") from error
    return None
