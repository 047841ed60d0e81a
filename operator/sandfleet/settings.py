"""The CLI's one settings object: flags > environment (SANDFLEET_*) > config file > defaults.

The environment and TOML layers are pydantic-settings sources, as for the operator's
settings; `load_settings` stacks them, so the CLI and tests can pass their own environment.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from sandfleet.copy_back import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES
from sandfleet.errors import SandfleetError

ENV_PREFIX = "SANDFLEET_"
CONFIG_ENV_VAR = "SANDFLEET_CONFIG"
"""Names a config file, like --config (the flag wins)."""


API_KEY_SECRET_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[-._a-zA-Z0-9]+)?$"
"""--api-key-secret: a Secret name, optionally followed by ":" and a key of that Secret."""


class SettingsError(SandfleetError):
    """A config file, environment variable or flag holds a value that cannot be used."""


class Settings(BaseSettings):
    """Everything `sandfleet` needs to know about the user's setup, built once in main()."""

    model_config = SettingsConfigDict(
        frozen=True,
        extra="forbid",
        env_prefix=ENV_PREFIX,
        # An empty variable counts as unset, as shells make `VAR= cmd` the way to clear one.
        env_ignore_empty=True,
    )

    model: str | None = None
    """Model name sent to the OpenAI-compatible endpoint."""
    base_url: str | None = None
    """OpenAI-compatible endpoint, e.g. http://localhost:8000/v1."""
    api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable that holds the API key (the key itself is never
    read from a file or a flag, so it stays out of shell history and dotfiles)."""
    api_key: SecretStr | None = None
    """Resolved from the variable named by api_key_env; only load_settings sets it."""
    max_turns: int = Field(default=100, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)
    """Completion tokens per model call; None leaves it to the endpoint."""
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    """Nucleus sampling sent with every request; None leaves it to the endpoint."""
    seed: int | None = None
    """Sampling seed sent with every request (for endpoints that honour it)."""
    extra_body: Annotated[dict[str, Any] | None, NoDecode] = None
    """JSON object merged into every chat-completions request body, e.g.
    {"chat_template_kwargs": {"enable_thinking": false}}; a JSON string from a flag or a
    variable, a table in the config file."""
    system_prompt: Path | None = None
    """A file whose text replaces the system prompt template (a task's own too)."""
    no_undo_edit: bool = False
    """Leave `undo_edit` out of the editor tool's schema (the seed project's exact tools)."""
    record_tokens: bool = False
    """Ask the endpoint for token ids and logprobs and record them per turn in the trajectory
    (vLLM, SGLang, llama.cpp), for `sandfleet export` training rows."""
    max_nudges: int = Field(default=3, ge=0)
    """Replies in a row without a tool call that get a nudge before the run stops
    (stop reason no_tool_call)."""
    tool_timeout_s: float = Field(default=120.0, gt=0)
    request_timeout_s: float = Field(default=600.0, gt=0)
    max_retries: int = Field(default=2, ge=0)
    """Retries of one model request (429/5xx/connection errors), done by the openai SDK."""
    results_dir: Path = Path("sandfleet-results")
    """Where each task's output/, trajectory.jsonl and result.json go (<results_dir>/<task-id>/)."""
    max_output_bytes: int = Field(default=DEFAULT_MAX_BYTES, gt=0)
    """Bytes of a run's output folder copied back to results_dir (more is skipped, reported)."""
    max_output_files: int = Field(default=DEFAULT_MAX_FILES, gt=0)
    """Files of a run's output folder copied back to results_dir (more are skipped, reported)."""
    concurrency: int = Field(default=4, gt=0)
    """Tasks running at once in `sandfleet batch`."""
    isolation: Literal["auto", "namespaces", "none"] = "auto"
    """Local sandbox isolation: user, mount, PID, IPC and network namespaces ("auto" and
    "namespaces" alike: without them the start fails), or "none" (plain processes), only
    when chosen explicitly."""
    egress: Literal["none", "internet", "all"] = "none"
    """Network of local namespaced sandboxes: "none" (loopback only), "internet" (public
    addresses only, as on the cluster) or "all" (slirp4netns; never the host's loopback)."""
    state_dir: Path | None = None
    """Where local sandboxes keep their private directories (None: the backend's default)."""
    backend: Literal["local", "kubernetes"] = "local"
    """Where `run` and `batch` run their tasks: a local sandbox, or a sandbox on a cluster
    claimed through the sandfleet gateway (`replay` runs locally)."""
    gateway: str | None = Field(default=None, min_length=1)
    """The sandfleet gateway's address (host:port; https:// or grpcs:// for TLS); None:
    the kubeconfig cluster's sandfleet.dev/gateway extension. SANDFLEET_GATEWAY too."""
    managed: bool = False
    """`run --backend kubernetes`: create a managed SandboxSession (the operator runs the
    agent loop) instead of running the loop here on a sandbox claimed through the gateway."""
    namespace: str | None = None
    """Kubernetes namespace of the sessions; None: the kubeconfig context's namespace."""
    kubeconfig: Path | None = None
    """Kubeconfig file; None: $KUBECONFIG, then ~/.kube/config, then the in-cluster account."""
    kube_context: str | None = None
    """Kubeconfig context; None: the file's current context."""
    template: str | None = Field(default=None, min_length=1)
    """SandboxTemplate the session's pod is made from (spec.templateRef)."""
    pool: str | None = Field(default=None, min_length=1)
    """SandboxPool to claim a warm sandbox from (spec.poolRef); excludes `template`."""
    api_key_secret: str | None = Field(default=None, pattern=API_KEY_SECRET_PATTERN)
    """Secret holding the model API key, as NAME or NAME:KEY (key default "api-key"). The
    kubernetes backend never sends the local key: the operator reads this Secret."""
    session_ttl_s: int = Field(default=3600, ge=0)
    """A finished session is deleted this long after it ended (ttlSecondsAfterFinished);
    until then `kubectl get sbx` and `sandfleet trajectory NAME` find it."""
    operator_url: str | None = None
    """Base URL of the operator's HTTP API (trajectories), e.g. http://localhost:8080."""
    log_level: str = "WARNING"
    """Level of the structlog lines on stderr (the trace and results go to stdout)."""
    log_json: bool | None = None
    """JSON log lines; None picks JSON when stderr is not a terminal."""

    @field_validator("extra_body", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(f"not valid JSON ({error.msg} at character {error.pos})") from None
        if not isinstance(decoded, dict):
            raise ValueError("must be a JSON object, e.g. '{\"top_k\": 20}'")
        return decoded

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Only the values passed in: load_settings stacks the layers, so a Settings built in
        # code (a test, an embedding program) never reads the process's environment.
        return (init_settings,)


# Settings a config file or SANDFLEET_* variable may set; api_key is resolved separately.
CONFIGURABLE_FIELDS: tuple[str, ...] = tuple(
    name for name in Settings.model_fields if name != "api_key"
)


class _Environment(EnvSettingsSource):
    """The SANDFLEET_* variables of one environment (os.environ, or a test's own)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(Settings)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {
            name if self.case_sensitive else name.lower(): value
            for name, value in self._environ.items()
            if not (self.env_ignore_empty and value == "")
        }


def default_config_path(environ: Mapping[str, str]) -> Path:
    """~/.config/sandfleet/config.toml, honouring XDG_CONFIG_HOME."""
    config_home = environ.get("XDG_CONFIG_HOME")
    if config_home:
        return Path(config_home) / "sandfleet" / "config.toml"
    home = environ.get("HOME")
    base = Path(home) if home else Path.home()
    return base / ".config" / "sandfleet" / "config.toml"


def load_settings(
    *,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config_path: Path | None = None,
) -> Settings:
    """Merge the layers into one Settings.

    flags: values the user gave on the command line (None values count as "not given").
    environ: the process environment (os.environ when None); tests pass their own.
    config_path: --config; when absent, SANDFLEET_CONFIG, then the default path if it exists.
    """
    environ = os.environ if environ is None else environ
    given_flags = {name: value for name, value in (flags or {}).items() if value is not None}
    unknown = set(given_flags) - set(CONFIGURABLE_FIELDS)
    if unknown:
        raise SettingsError(f"unknown settings: {', '.join(sorted(unknown))}")

    merged: dict[str, Any] = {}
    merged.update(_file_layer(config_path, environ))
    merged.update(_configurable(_Environment(environ)()))
    merged.update(given_flags)

    key_variable = str(merged.get("api_key_env") or Settings.model_fields["api_key_env"].default)
    api_key = environ.get(key_variable)
    if api_key:
        merged["api_key"] = api_key
    try:
        settings = Settings(**merged)
    except ValidationError as error:
        raise SettingsError(_readable(error)) from error
    if settings.template and settings.pool:
        raise SettingsError("set at most one of template and pool (a pool names its template)")
    return settings


def _configurable(values: Mapping[str, Any]) -> dict[str, Any]:
    """The values of a layer that may set them (never api_key)."""
    return {name: value for name, value in values.items() if name in CONFIGURABLE_FIELDS}


def _file_layer(config_path: Path | None, environ: Mapping[str, str]) -> dict[str, Any]:
    explicit = config_path or (
        Path(environ[CONFIG_ENV_VAR]) if environ.get(CONFIG_ENV_VAR) else None
    )
    path = explicit or default_config_path(environ)
    if explicit is None and not path.is_file():
        return {}
    if not path.expanduser().exists():
        raise SettingsError(f"config file not found: {path}")
    if not path.expanduser().is_file():
        raise SettingsError(f"cannot read config file {path}: not a file")
    try:
        source = TomlConfigSettingsSource(Settings, toml_file=path)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise SettingsError(f"cannot read config file {path}: {error}") from error
    unknown = set(source.toml_data) - set(CONFIGURABLE_FIELDS)
    if unknown:
        raise SettingsError(
            f"config file {path}: unknown keys {', '.join(sorted(unknown))} "
            f"(known: {', '.join(CONFIGURABLE_FIELDS)})"
        )
    return _configurable(source())


def _readable(error: ValidationError) -> str:
    problems = [
        f"{'.'.join(str(part) for part in issue['loc'])}: {issue['msg']}"
        for issue in error.errors()
    ]
    return "invalid settings: " + "; ".join(problems)
