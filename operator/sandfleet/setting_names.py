"""What the CLI's settings are called outside Python: flag, SANDFLEET_* variable, config key.

One public name per setting, its field's: `tool_timeout_seconds` is --tool-timeout-seconds,
SANDFLEET_TOOL_TIMEOUT_SECONDS and the config key `tool_timeout_seconds`. Durations say
`seconds`, as Kubernetes fields do (docs/architecture.md, "Names"). Names a setting had before
still work as deprecated aliases, with a warning. Names nobody reads are reported with the
closest known one (difflib), never silently dropped. Pure: callers pass the environment or the
config file's table and print the notices.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping
from typing import Any

ENV_PREFIX = "SANDFLEET_"

DEPRECATED_NAMES: Mapping[str, str] = {
    "tool_timeout": "tool_timeout_seconds",
    "tool_timeout_s": "tool_timeout_seconds",
    "request_timeout": "request_timeout_seconds",
    "request_timeout_s": "request_timeout_seconds",
    "ttl": "ttl_seconds",
    "session_ttl_s": "ttl_seconds",
    "kube_context": "context",
}
"""Old public names (snake_case, as config keys; the variables and flags follow) -> the
settings field that took their place."""

VARIABLES_READ_ELSEWHERE = frozenset(
    {
        "SANDFLEET_CONFIG",  # the config file (settings.CONFIG_ENV_VAR)
        "SANDFLEET_GATEWAY_TOKEN",  # the gateway credential (clients.gateway.target)
        "SANDFLEET_SANDBOX_ID",  # set by the local backend in every sandbox
        "SANDFLEET_SESSION_ID",  # set by the runtime agent in every shell
        "SANDFLEET_MODEL_CACHE",  # the model test tier
    }
)
"""SANDFLEET_* variables that are not CLI settings but are read by some other part."""

OTHER_COMPONENT_PREFIXES = (
    "SANDFLEET_OPERATOR_", "SANDFLEET_GATEWAY_", "SANDFLEET_RUNTIME_", "SANDFLEET_HOOK_",
    "SANDFLEET_TEST_", "SANDFLEET_CLUSTER_", "SANDFLEET_REQUIRE_", "SANDFLEET_BENCH_",
)  # fmt: skip
"""Variables of the operator, gateway, runtime, webhook, tests and benchmarks: their own
settings classes check them."""


def env_name(field: str) -> str:
    """The SANDFLEET_* variable of a settings field (`ttl_seconds` -> SANDFLEET_TTL_SECONDS)."""
    return ENV_PREFIX + field.upper()


def flag_name(field: str) -> str:
    """The flag of a settings field (`ttl_seconds` -> --ttl-seconds)."""
    return "--" + field.replace("_", "-")


def deprecated_names(fields: Iterable[str]) -> dict[str, str]:
    """Old name -> field, for the old names of `fields`."""
    wanted = set(fields)
    return {old: field for old, field in DEPRECATED_NAMES.items() if field in wanted}


@dataclasses.dataclass(frozen=True, slots=True)
class NamedValues:
    """The values one layer gives, by settings field, and what to tell the user about it."""

    values: dict[str, Any]
    sources: dict[str, str]
    """Field -> the name it was given under (a variable or a config key)."""
    notices: list[str]
    """One line each: a deprecated name that still worked, a name nobody reads."""
    unknown: list[str]
    """Names that set nothing (already in notices)."""


def environment_values(
    environ: Mapping[str, str], fields: Iterable[str], *, read_elsewhere: Iterable[str] = ()
) -> NamedValues:
    """The settings the SANDFLEET_* variables of `environ` set (empty values count as unset).

    The public name wins over a deprecated alias set at the same time. `read_elsewhere`:
    further variables someone reads (e.g. the one --api-key-env names), never reported.
    """
    fields = tuple(fields)
    also_read = set(read_elsewhere)
    canonical = {env_name(field): field for field in fields}
    deprecated = {
        ENV_PREFIX + old.upper(): field for old, field in deprecated_names(fields).items()
    }
    result = NamedValues({}, {}, [], [])
    for name in sorted(environ):
        value = environ[name]
        if not name.startswith(ENV_PREFIX) or value == "":
            continue
        if name in canonical:
            field = canonical[name]
            result.values[field] = value
            result.sources[field] = name
        elif name in deprecated:
            field = deprecated[name]
            new = env_name(field)
            result.notices.append(f"{name} is deprecated: use {new}")
            if environ.get(new, "") == "":
                result.values[field] = value
                result.sources[field] = name
        elif not (_read_elsewhere(name) or name in also_read):
            result.unknown.append(name)
            result.notices.append(_unknown_variable(name, [*canonical, *VARIABLES_READ_ELSEWHERE]))
    return result


def config_values(table: Mapping[str, Any], fields: Iterable[str], *, where: str) -> NamedValues:
    """The settings a config file's top-level table sets; `where` names the file in notices."""
    fields = tuple(fields)
    canonical = {field: field for field in fields}
    deprecated = deprecated_names(fields)
    result = NamedValues({}, {}, [], [])
    for key, value in table.items():
        if key in canonical:
            result.values[canonical[key]] = value
            result.sources[canonical[key]] = key
        elif key in deprecated:
            field = deprecated[key]
            result.notices.append(f"{where}: the key {key} is deprecated: use {field}")
            if field not in table:
                result.values[field] = value
                result.sources[field] = key
        elif key == "api_key":
            result.unknown.append(key)
            result.notices.append(
                f"{where}: unknown key api_key: the key is never read from a file; put it "
                "in the variable api_key_env names (default OPENAI_API_KEY)"
            )
        else:
            result.unknown.append(key)
            result.notices.append(f"{where}: unknown key {key}{did_you_mean(key, canonical)}")
    return result


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """ "; did you mean X?" for the closest known name, or "" when none is close."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def _read_elsewhere(name: str) -> bool:
    return name in VARIABLES_READ_ELSEWHERE or name.startswith(OTHER_COMPONENT_PREFIXES)


def _unknown_variable(name: str, known: Iterable[str]) -> str:
    if name == ENV_PREFIX + "API_KEY":
        return (
            f"{name} is not read: the API key comes from the variable --api-key-env names "
            "(default OPENAI_API_KEY), e.g. SANDFLEET_API_KEY_ENV=SANDFLEET_API_KEY"
        )
    return f"{name} is not a sandfleet setting and is ignored{did_you_mean(name, known)}"
