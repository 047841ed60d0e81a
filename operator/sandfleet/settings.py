"""The CLI's one settings object: flags > environment (SANDFLEET_*) > config file > defaults.

Every setting has one public name, its field's (sandfleet.setting_names):
`tool_timeout_seconds` is --tool-timeout-seconds, SANDFLEET_TOOL_TIMEOUT_SECONDS and the
config key `tool_timeout_seconds`. `resolve_settings` stacks the
layers, remembers which one set each value (`sandfleet config`) and collects warnings about
names nobody reads; the CLI and tests pass their own environment.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from sandfleet.errors import SandfleetError
from sandfleet.sandbox.copy_back import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES
from sandfleet.setting_names import (
    ENV_PREFIX,
    NamedValues,
    config_values,
    env_name,
    environment_values,
    flag_name,
)

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
    tool_timeout_seconds: float = Field(default=120.0, gt=0)
    request_timeout_seconds: float = Field(default=600.0, gt=0)
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
    read_only_bind: tuple[Path, ...] = ()
    """Host paths a local sandbox may read, at the same path inside (it sees no host data
    otherwise); the flag repeats, SANDFLEET_READ_ONLY_BIND separates them with ':'."""
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
    context: str | None = None
    """Kubeconfig context; None: the file's current context."""
    template: str | None = Field(default=None, min_length=1)
    """SandboxTemplate the session's pod is made from (spec.templateRef)."""
    pool: str | None = Field(default=None, min_length=1)
    """SandboxPool to claim a warm sandbox from (spec.poolRef); excludes `template`."""
    api_key_secret: str | None = Field(default=None, pattern=API_KEY_SECRET_PATTERN)
    """Secret holding the model API key, as NAME or NAME:KEY (key default "api-key"). The
    kubernetes backend never sends the local key: the operator reads this Secret."""
    ttl_seconds: int = Field(default=3600, ge=0)
    """A finished session is deleted this long after it ended (ttlSecondsAfterFinished);
    until then `kubectl get sbx` and `sandfleet trajectory NAME` find it."""
    operator_url: str | None = None
    """Base URL of the operator's HTTP API (trajectories), e.g. http://localhost:8080."""
    log_level: str = "WARNING"
    """Level of the structlog lines on stderr (the trace and results go to stdout)."""
    log_format: Literal["text", "json"] = "text"
    """Log lines as short text (`warning: event key=value`) or JSON objects. Text by default
    on a terminal and in a pipe alike: JSON only when asked, never mixed into a trace."""
    log_json: bool | None = None
    """The older spelling of log_format = "json" (True picks JSON)."""
    log_file: Path | None = None
    """Append log lines to this file instead of writing them to stderr."""

    @field_validator("read_only_bind", mode="before")
    @classmethod
    def _path_list(cls, value: Any) -> Any:
        return [part for part in value.split(":") if part] if isinstance(value, str) else value

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


def default_config_path(environ: Mapping[str, str]) -> Path:
    """~/.config/sandfleet/config.toml, honouring XDG_CONFIG_HOME."""
    config_home = environ.get("XDG_CONFIG_HOME")
    if config_home:
        return Path(config_home) / "sandfleet" / "config.toml"
    home = environ.get("HOME")
    base = Path(home) if home else Path.home()
    return base / ".config" / "sandfleet" / "config.toml"


@dataclasses.dataclass(frozen=True, slots=True)
class ResolvedSettings:
    """Settings plus where each value came from and what the user should be told."""

    settings: Settings
    origins: dict[str, str]
    """Field -> "flag", "env SANDFLEET_X", "config PATH (key)" or "default"."""
    notices: list[str]
    """Warnings, one line each: deprecated names, SANDFLEET_* variables nobody reads."""


def load_settings(
    *,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config_path: Path | None = None,
) -> Settings:
    """Merge the layers into one Settings (resolve_settings without origins and notices)."""
    return resolve_settings(flags=flags, environ=environ, config_path=config_path).settings


def resolve_settings(
    *,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config_path: Path | None = None,
) -> ResolvedSettings:
    """Merge the layers into one Settings, remembering which layer set each value.

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
    origins: dict[str, str] = {}
    file_path, from_file = _file_layer(config_path, environ)
    for field in from_file.values:
        origins[field] = f"config {file_path} ({from_file.sources[field]})"
    merged.update(from_file.values)
    # The variable holding the key is read, not a misspelt setting (e.g. SANDFLEET_API_KEY
    # named by SANDFLEET_API_KEY_ENV).
    named_key_variable = str(
        given_flags.get("api_key_env")
        or environ.get(env_name("api_key_env"))
        or merged.get("api_key_env")
        or Settings.model_fields["api_key_env"].default
    )
    from_env = environment_values(environ, CONFIGURABLE_FIELDS, read_elsewhere=[named_key_variable])
    for field in from_env.values:
        origins[field] = f"env {from_env.sources[field]}"
    merged.update(from_env.values)
    origins.update(dict.fromkeys(given_flags, "flag"))
    merged.update(given_flags)

    key_variable = str(merged.get("api_key_env") or Settings.model_fields["api_key_env"].default)
    api_key = environ.get(key_variable)
    if api_key:
        merged["api_key"] = api_key
        origins["api_key"] = f"env {key_variable}"
    try:
        settings = Settings(**merged)
    except ValidationError as error:
        raise SettingsError(_readable(error, origins)) from error
    if settings.template and settings.pool:
        raise SettingsError("set at most one of template and pool (a pool names its template)")
    for field in Settings.model_fields:
        origins.setdefault(field, "default")
    return ResolvedSettings(settings, origins, [*from_file.notices, *from_env.notices])


def _file_layer(config_path: Path | None, environ: Mapping[str, str]) -> tuple[Path, NamedValues]:
    explicit = config_path or (
        Path(environ[CONFIG_ENV_VAR]) if environ.get(CONFIG_ENV_VAR) else None
    )
    path = explicit or default_config_path(environ)
    if explicit is None and not path.is_file():
        return path, NamedValues({}, {}, [], [])
    if not path.expanduser().exists():
        raise SettingsError(f"config file not found: {path}")
    if not path.expanduser().is_file():
        raise SettingsError(f"cannot read config file {path}: not a file")
    try:
        source = TomlConfigSettingsSource(Settings, toml_file=path)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise SettingsError(f"cannot read config file {path}: {error}") from error
    layer = config_values(source.toml_data, CONFIGURABLE_FIELDS, where=f"config file {path}")
    if layer.unknown:
        # A typo in a file written on purpose is an error, not a warning: the file is read
        # on every run, so a silently ignored key would stay wrong for good.
        known = ", ".join(CONFIGURABLE_FIELDS)
        unknown = "; ".join(n for n in layer.notices if "unknown key" in n)
        raise SettingsError(f"{unknown} (known: {known})")
    return path, layer


def _readable(error: ValidationError, origins: Mapping[str, str]) -> str:
    problems = []
    for issue in error.errors():
        field = str(issue["loc"][0]) if issue["loc"] else ""
        where = origins.get(field, "")
        shown = flag_name(field) if where == "flag" else field
        if where.startswith("env "):
            shown = where.removeprefix("env ")
        problems.append(f"{shown}: {issue['msg']}")
    return "invalid settings: " + "; ".join(problems)
