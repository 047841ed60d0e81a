"""The settings reference page, from the pydantic settings models (CLI, operator, gateway...).

The CLI's settings have three public names each (sandfleet.setting_names): the flag, the
SANDFLEET_* variable and the config key; the servers' are environment variables only. The
descriptions are the fields' own docstrings, read from the source with `ast`.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
from collections.abc import Mapping
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from sandfleet.reference.markdown import GENERATED_NOTE, cell, code, table
from sandfleet.setting_names import env_name, flag_name


def field_docstrings(model: type[Any]) -> dict[str, str]:
    """Field name -> the string literal right below its annotated assignment in the class."""
    source = textwrap.dedent(inspect.getsource(model))
    (klass,) = [node for node in ast.parse(source).body if isinstance(node, ast.ClassDef)]
    docs: dict[str, str] = {}
    body = klass.body
    for node, following in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(following.value.value)
    return docs


def default_of(field: FieldInfo) -> str:
    """The default as the user would write it, or a dash when there is none."""
    if field.default_factory is not None:
        return "(computed)"
    if field.is_required():
        return "-"
    value = field.default
    if value is None:
        return "-"
    if isinstance(value, bool):
        return code(str(value).lower())
    if isinstance(value, tuple | list | dict) and not value:
        return "-"
    return code(value)


def cli_settings_rows(model: type[BaseSettings], flags: Mapping[str, str]) -> list[list[str]]:
    """One row per CLI setting: name, flag (when the parser has it), variable, default, and
    the field's docstring, else its flag's help. `flags`: every flag -> its help text."""
    docs = field_docstrings(model)
    rows = []
    for name, field in model.model_fields.items():
        if name == "api_key":  # never a setting: read from the variable api_key_env names
            continue
        flag = flag_name(name)
        rows.append(
            [
                code(name),
                code(flag) if flag in flags else "-",
                code(env_name(name)),
                default_of(field),
                cell(docs.get(name) or flags.get(flag, "")),
            ]
        )
    return rows


def server_settings_rows(model: type[BaseSettings]) -> list[list[str]]:
    """One row per environment variable of a server's settings (prefix + NAME, or its alias)."""
    prefix = str(model.model_config.get("env_prefix", ""))
    docs = field_docstrings(model)
    rows = []
    for name, field in model.model_fields.items():
        alias = field.validation_alias
        variable = alias if isinstance(alias, str) else prefix + name.upper()
        rows.append([code(variable), default_of(field), cell(docs.get(name, ""))])
    return rows


def settings_page(
    cli_settings: type[BaseSettings],
    cli_flags: Mapping[str, str],
    servers: Mapping[str, type[BaseSettings]],
) -> str:
    """Markdown: the CLI's settings, then one table per server (title -> its settings model)."""
    lines = [
        "# Settings",
        "",
        GENERATED_NOTE.format(source="the settings models (`sandfleet.settings` and the servers')"),
        "",
        "## The CLI",
        "",
        "Flags win over `SANDFLEET_*` environment variables, which win over the config file "
        "(`--config`, `SANDFLEET_CONFIG` or `~/.config/sandfleet/config.toml`, keys named like "
        "the flags), which wins over the defaults. `sandfleet config` shows the effective "
        "values and where each came from. A setting without a flag is set by its variable or "
        "its config key.",
        "",
        *table(
            ["config key", "flag", "environment variable", "default", "meaning"],
            cli_settings_rows(cli_settings, cli_flags),
        ),
    ]
    for title, model in servers.items():
        lines += ["", f"## {title}", "", f"`{model.__module__}.{model.__name__}`", ""]
        lines += table(["environment variable", "default", "meaning"], server_settings_rows(model))
    return "\n".join(lines) + "\n"
