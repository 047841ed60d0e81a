"""Served models from a TOML or YAML file: name -> upstream, sandbox source, loop settings.

    [server]                     # all optional
    host = "127.0.0.1"
    port = 8080
    api_key_env = "SANDFLEET_SERVE_API_KEY"   # clients must send it as their bearer token
    max_concurrent_per_tenant = 8
    conversation_ttl_seconds = 900

    [models.coder]
    upstream.base_url = "http://127.0.0.1:8000/v1"
    upstream.model = "Qwen/Qwen2.5-Coder-7B-Instruct"
    upstream.api_key_env = "UPSTREAM_KEY"     # or api_key_file
    max_turns = 30
    tool_timeout_seconds = 60
    temperature = 0.2
    egress = "none"
    warm = 2                                  # local sandboxes kept started

    [served_models]              # cluster mode, gateway.identity = "client" only
    namespaces = ["team-a"]      # also serve these namespaces' ServedModel objects, live

Unknown keys are refused (a typo must not pass silently); every error names its key.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandfleet.agent import AgentConfig
from sandfleet.errors import SandfleetError

API_KEY_ENV = "SANDFLEET_SERVE_API_KEY"


class ServeConfigError(SandfleetError):
    """The served-models file cannot be used; the message names the file and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UpstreamSpec(_Strict):
    base_url: str
    """The OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1."""
    model: str
    """The model name the upstream knows."""
    api_key_env: str | None = None
    """An environment variable holding the upstream's key."""
    api_key_file: Path | None = None
    """A file holding the upstream's key (a mounted Secret)."""


class ServedModelSpec(_Strict):
    upstream: UpstreamSpec
    description: str = ""
    sandbox: Literal["local", "cluster"] = "local"
    """Where sandboxes come from: `local` (the embedded backend) or `cluster` (claimed
    through the sandfleet gateway named in the file's [gateway] table)."""
    pool: str | None = None
    """cluster: the SandboxPool to claim from (warm pods while it has idle ones)."""
    template: str | None = None
    """cluster: a SandboxTemplate (cold starts); neither: the operator's default image."""
    namespace: str | None = None
    """cluster: where the sessions go (default: the [gateway] table's namespace)."""
    system_prompt: str | None = None
    """A seed-format template; None: the paper's default prompt."""
    max_turns: int = Field(default=30, ge=1)
    tool_timeout_seconds: float = Field(default=120.0, gt=0)
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    request_timeout_seconds: float = Field(default=600.0, gt=0)
    max_retries: int = Field(default=2, ge=0)
    egress: Literal["none", "internet", "all"] = "none"
    isolation: Literal["auto", "namespaces", "none"] = "auto"
    warm: int = Field(default=1, ge=0)
    """Local sandboxes kept started, so a request does not wait for one to boot (on a
    cluster the pool is the warm set: unused)."""


class ServerSpec(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    api_key_env: str | None = None
    """When set (and the variable is), every request needs `Authorization: Bearer <key>`."""
    max_concurrent_per_tenant: int = Field(default=8, ge=1)
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    conversation_ttl_seconds: float = Field(default=900.0, gt=0)
    """An idle conversation's sandbox is released after this long (suspend: not yet)."""
    max_output_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    max_output_files: int = Field(default=200, ge=0)
    state_dir: Path | None = None
    """Local sandboxes and returned output files live here (default: the cache dir)."""
    metrics: bool = True
    """Serve Prometheus metrics at /metrics."""


class GatewaySpec(_Strict):
    """Cluster mode: the gateway that claims sandboxes, and serve's own identity there."""

    address: str | None = None
    """host:port (an https:// prefix means TLS); None: SANDFLEET_GATEWAY, then the kubeconfig."""
    token_env: str | None = None
    """A variable holding the bearer token; None: SANDFLEET_GATEWAY_TOKEN, then the kubeconfig
    (in a pod: its ServiceAccount's token, re-read as it rotates)."""
    token_file: Path | None = None
    """A file holding the token, re-read on every claim (a projected ServiceAccount token
    rotates); the chart mounts one here."""
    ca_file: Path | None = None
    """The gateway's CA bundle (implies TLS)."""
    namespace: str | None = None
    """Where sessions go unless a model names one; None: the kubeconfig's (in a pod: its own)."""
    claim_timeout_seconds: float = Field(default=120.0, gt=0)
    """How long a cold start may take when the pool has no idle pod."""
    identity: Literal["serve", "client"] = "serve"
    """Whose token claims: serve's own (above), or each client's bearer token passed through
    (a ServiceAccount token as the OpenAI api_key; the gateway's TokenReview, RBAC and
    quotas then decide per client, and serve checks no key of its own)."""


class ServedModelsWatch(_Strict):
    """Cluster mode: also serve the ServedModel objects of these namespaces, watched live
    (docs/serve.md); clients send "<namespace>/<name>" and see only the namespaces where
    their token may list servedmodels. Needs gateway.identity = client."""

    namespaces: list[str] = Field(min_length=1)
    kubeconfig: Path | None = None
    """None: KUBECONFIG, ~/.kube/config, else the pod's ServiceAccount."""
    resync_seconds: float = Field(default=30.0, gt=0)
    """Every object is checked again this often (a Secret created or rotated later)."""


class ServeFile(_Strict):
    server: ServerSpec = ServerSpec()
    gateway: GatewaySpec | None = None
    models: dict[str, ServedModelSpec] = Field(default_factory=dict)
    served_models: ServedModelsWatch | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ServedModel:
    """One served model, ready: its name, its spec, and the loop's AgentConfig."""

    name: str
    spec: ServedModelSpec
    agent: AgentConfig


@dataclasses.dataclass(frozen=True, slots=True)
class ServeConfig:
    server: ServerSpec
    models: Mapping[str, ServedModel]
    api_key: str | None = dataclasses.field(default=None, repr=False)
    """The static key clients must present; None: no key (a loopback-only default)."""
    gateway: GatewaySpec = dataclasses.field(default_factory=GatewaySpec)
    """Cluster mode's gateway (used by models with `sandbox = "cluster"`)."""
    served_models: ServedModelsWatch | None = None
    """Cluster mode: the ServedModel objects also served (None: only `models`)."""


Backend = Literal["local", "kubernetes"]


def load_serve_config(
    path: Path, environ: Mapping[str, str] | None = None, *, backend: Backend | None = None
) -> ServeConfig:
    """Read and check `path` (.toml, .yaml or .yml); raises ServeConfigError. `backend`
    (the --backend flag) puts every served model's sandboxes there."""
    env = os.environ if environ is None else environ
    raw = _read(path)
    try:
        parsed = ServeFile.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ServeConfigError(f"{path}: {where}: {first['msg']}") from error
    if not parsed.models and parsed.served_models is None:
        raise ServeConfigError(
            f"{path}: models: name at least one served model (or watch served_models)"
        )
    for name in parsed.models:
        if "/" in name:
            raise ServeConfigError(
                f"{path}: models.{name}: no '/' in a model name (\"<namespace>/<name>\" names "
                "ServedModel objects)"
            )
    models = {
        name: ServedModel(name, _sandbox_checked(path, name, spec, backend),
                          _agent_config(path, name, spec, env))
        for name, spec in parsed.models.items()
    }  # fmt: skip
    gateway = parsed.gateway or GatewaySpec()
    if gateway.identity == "client":
        local = sorted(name for name, m in models.items() if m.spec.sandbox != "cluster")
        if local:
            raise ServeConfigError(
                f"{path}: gateway.identity: client tokens are checked by the gateway only, so "
                f"every model must be on the cluster (local: {', '.join(local)})"
            )
        return ServeConfig(
            parsed.server, models, None, gateway=gateway, served_models=parsed.served_models
        )
    if parsed.served_models is not None:
        raise ServeConfigError(
            f"{path}: served_models: needs gateway.identity = client (a tenant sees the "
            "namespaces its own Kubernetes token may list servedmodels in)"
        )
    return ServeConfig(
        parsed.server, models, _server_key(path, parsed.server, env), gateway=gateway
    )


def _sandbox_checked(
    path: Path, name: str, spec: ServedModelSpec, backend: Backend | None
) -> ServedModelSpec:
    """`spec` with the --backend override applied; pool, template and namespace are cluster
    settings, refused on a local model (a typo must not silently run locally)."""
    if backend is not None:
        spec = spec.model_copy(
            update={"sandbox": "cluster" if backend == "kubernetes" else "local"}
        )
    if spec.sandbox == "local":
        for key in ("pool", "template", "namespace"):
            if getattr(spec, key) is not None:
                raise ServeConfigError(
                    f'{path}: models.{name}.{key}: only for sandbox = "cluster" '
                    "(or --backend kubernetes)"
                )
    elif spec.pool is not None and spec.template is not None:
        raise ServeConfigError(f"{path}: models.{name}: name a pool or a template, not both")
    return spec


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ServeConfigError(f"cannot read the serve config {path}: {error}") from error
    try:
        if path.suffix == ".toml":
            data: Any = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text)
        else:
            raise ServeConfigError(f"{path}: name a .toml, .yaml or .yml file")
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as error:
        raise ServeConfigError(f"{path} is not valid {path.suffix[1:]}: {error}") from error
    if not isinstance(data, dict):
        raise ServeConfigError(f"{path}: expected a table with `models`")
    return data


def _agent_config(
    path: Path, name: str, spec: ServedModelSpec, env: Mapping[str, str]
) -> AgentConfig:
    upstream = spec.upstream
    if not upstream.base_url.startswith(("http://", "https://")):
        raise ServeConfigError(
            f"{path}: models.{name}.upstream.base_url: give an http:// or https:// URL"
        )
    return agent_config(spec, _upstream_key(path, name, upstream, env))


def agent_config(spec: ServedModelSpec, api_key: str | None) -> AgentConfig:
    """The loop's settings of a served model whose upstream key is `api_key`."""
    upstream = spec.upstream
    return AgentConfig(
        model=upstream.model,
        base_url=upstream.base_url,
        api_key=api_key,
        max_turns=spec.max_turns,
        max_tokens=spec.max_tokens,
        temperature=spec.temperature,
        top_p=spec.top_p,
        tool_timeout_s=spec.tool_timeout_seconds,
        system_prompt=spec.system_prompt,
        request_timeout_s=spec.request_timeout_seconds,
        max_retries=spec.max_retries,
    )


def _upstream_key(
    path: Path, name: str, upstream: UpstreamSpec, env: Mapping[str, str]
) -> str | None:
    where = f"{path}: models.{name}.upstream"
    if upstream.api_key_env is not None:
        key = env.get(upstream.api_key_env, "")
        if not key:
            raise ServeConfigError(f"{where}.api_key_env: {upstream.api_key_env} is not set")
        return key
    if upstream.api_key_file is not None:
        try:
            key = upstream.api_key_file.read_text(encoding="utf-8").strip()
        except OSError as error:
            raise ServeConfigError(f"{where}.api_key_file: {error}") from error
        if not key:
            raise ServeConfigError(f"{where}.api_key_file: {upstream.api_key_file} is empty")
        return key
    return None


def _server_key(path: Path, server: ServerSpec, env: Mapping[str, str]) -> str | None:
    variable = server.api_key_env
    if variable is None:
        return env.get(API_KEY_ENV) or None
    key = env.get(variable, "")
    if not key:
        raise ServeConfigError(f"{path}: server.api_key_env: {variable} is not set")
    return key
