"""`sandfleet config`: the effective settings, each with where it came from (flag, env,
config file, default) and the name to set it by; secrets masked."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sandfleet.cli.exit_codes import ExitCode
from sandfleet.setting_names import env_name, flag_name
from sandfleet.settings import (
    CONFIGURABLE_FIELDS,
    ResolvedSettings,
    Settings,
    resolve_settings,
)

MASK = "****"


def register(commands: Any, *, parents: Sequence[argparse.ArgumentParser]) -> None:
    """Add `config` to the subcommands (`commands`: argparse's subparsers action)."""
    from sandfleet.cli.doctor import add_cluster_flags

    parser = commands.add_parser(
        "config",
        parents=list(parents),
        help="show the effective settings and where each came from",
        description="Show every setting as `run` would use it with the same flags, the layer\n"
        "it came from (flag, env VAR, config FILE (key), default) and its flag and\n"
        "variable, by the name a config file uses. The API key is shown masked. Accepts every\n"
        "flag of `run` (not listed here), to show what a command line would use.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--json", dest="as_json", action="store_true",
        help="one JSON object: setting -> {value, source, flag, env}",
    )  # fmt: skip
    add_cluster_flags(parser)
    parser.set_defaults(handler=config_command)


def config_command(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    # Resolved again, for the origins: main() passes only the settings.
    origins = resolve_from_arguments(args).origins
    rows = setting_rows(settings, origins)
    if args.as_json:
        console.out(json.dumps(rows, ensure_ascii=False), highlight=False)
        return ExitCode.OK
    table = Table(box=None, padding=(0, 2, 0, 0))
    for column in ("setting", "value", "source", "flag", "variable"):
        table.add_column(column, style="bold" if column == "setting" else None)
    for name, row in rows.items():
        source = Text(row["source"], style="dim" if row["source"] == "default" else "")
        table.add_row(name, _shown(row["value"]), source, row["flag"] or "", row["env"] or "")
    console.print(table)
    return ExitCode.OK


def resolve_from_arguments(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> ResolvedSettings:
    """The flags the user typed, layered over the environment and the config file, with
    each value's origin and the warnings to print."""
    flags = {name: getattr(args, name) for name in CONFIGURABLE_FIELDS if hasattr(args, name)}
    return resolve_settings(flags=flags, environ=environ, config_path=args.config)


def setting_rows(settings: Settings, origins: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Setting (by its public name, the field's and the config file's key) -> value
    (JSON-able, secrets masked), source, flag and variable."""
    rows: dict[str, dict[str, Any]] = {}
    for field in Settings.model_fields:
        value = getattr(settings, field)
        configurable = field in CONFIGURABLE_FIELDS
        rows[field] = {
            "value": _plain(value),
            "source": origins.get(field, "default"),
            "flag": flag_name(field) if configurable else None,
            "env": env_name(field) if configurable else None,
        }
    return rows


def _plain(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return MASK
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    return value if isinstance(value, str) else json.dumps(value)
