"""One public name per setting (the field's), its flag, variable and config key, deprecated
aliases, and did-you-mean for names nobody reads."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sandfleet.agent.prompts import unknown_placeholders
from sandfleet.cli.arg_parser import suggestion
from sandfleet.cli.consoles import plural
from sandfleet.cli.main import build_parser
from sandfleet.setting_names import config_values, env_name, environment_values, flag_name
from sandfleet.settings import CONFIGURABLE_FIELDS, Settings, resolve_settings


def every_option(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """dest -> option strings, over the parser and all its subcommands."""
    options: dict[str, list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                for dest, strings in every_option(sub).items():
                    options.setdefault(dest, strings)
        elif action.option_strings:
            options.setdefault(action.dest, list(action.option_strings))
    return options


def test_every_setting_flag_is_the_settings_public_name() -> None:
    options = every_option(build_parser())

    for field in CONFIGURABLE_FIELDS:
        if field in options:
            assert flag_name(field) in options[field], (field, options[field])


def test_variables_and_flags_are_named_after_the_fields_and_durations_say_seconds() -> None:
    assert env_name("tool_timeout_seconds") == "SANDFLEET_TOOL_TIMEOUT_SECONDS"
    assert env_name("request_timeout_seconds") == "SANDFLEET_REQUEST_TIMEOUT_SECONDS"
    assert env_name("ttl_seconds") == "SANDFLEET_TTL_SECONDS"
    assert env_name("context") == "SANDFLEET_CONTEXT"
    assert flag_name("ttl_seconds") == "--ttl-seconds"
    durations = [f for f in CONFIGURABLE_FIELDS if "timeout" in f or "ttl" in f]
    assert durations and all(field.endswith("_seconds") for field in durations), durations


def test_the_public_name_wins_over_a_deprecated_alias_set_alongside() -> None:
    layer = environment_values(
        {"SANDFLEET_TOOL_TIMEOUT_SECONDS": "5", "SANDFLEET_TOOL_TIMEOUT": "9"}, CONFIGURABLE_FIELDS
    )

    assert layer.values == {"tool_timeout_seconds": "5"}
    assert layer.sources == {"tool_timeout_seconds": "SANDFLEET_TOOL_TIMEOUT_SECONDS"}
    assert layer.notices == [
        "SANDFLEET_TOOL_TIMEOUT is deprecated: use SANDFLEET_TOOL_TIMEOUT_SECONDS"
    ]


@pytest.mark.parametrize(
    ("old", "field"),
    [
        ("SANDFLEET_TOOL_TIMEOUT", "tool_timeout_seconds"),
        ("SANDFLEET_TOOL_TIMEOUT_S", "tool_timeout_seconds"),
        ("SANDFLEET_REQUEST_TIMEOUT", "request_timeout_seconds"),
        ("SANDFLEET_TTL", "ttl_seconds"),
        ("SANDFLEET_KUBE_CONTEXT", "context"),
    ],
)
def test_an_old_variable_alone_still_sets_its_setting_with_a_warning(old: str, field: str) -> None:
    layer = environment_values({old: "7"}, CONFIGURABLE_FIELDS)

    assert layer.values == {field: "7"}
    assert layer.notices == [f"{old} is deprecated: use {env_name(field)}"]


def test_other_components_variables_and_empty_ones_are_not_reported() -> None:
    environ = {
        "SANDFLEET_OPERATOR_NAMESPACES": "a",
        "SANDFLEET_RUNTIME_TOKEN": "t",
        "SANDFLEET_CONFIG": "/x.toml",
        "SANDFLEET_MODLE": "",  # empty counts as unset, typo or not
        "PATH": "/bin",
    }

    assert environment_values(environ, CONFIGURABLE_FIELDS).notices == []


def test_the_variable_named_by_api_key_env_is_the_key_not_a_typo() -> None:
    environ = {"HOME": "/nonexistent", "SANDFLEET_API_KEY_ENV": "SANDFLEET_API_KEY",
               "SANDFLEET_API_KEY": "sk-1"}  # fmt: skip
    resolved = resolve_settings(environ=environ)

    assert resolved.notices == []
    assert resolved.settings.api_key is not None
    assert resolved.origins["api_key"] == "env SANDFLEET_API_KEY"


def test_sandfleet_api_key_alone_says_how_the_key_is_read() -> None:
    notices = environment_values({"SANDFLEET_API_KEY": "sk"}, CONFIGURABLE_FIELDS).notices

    assert notices[0].startswith("SANDFLEET_API_KEY is not read: the API key comes from")


def test_config_keys_take_the_public_name_and_the_old_one_with_a_notice() -> None:
    table = {"tool_timeout_seconds": 3, "request_timeout": 4, "ttl": 5, "modle": "x"}
    layer = config_values(table, CONFIGURABLE_FIELDS, where="f")

    assert layer.values == {
        "tool_timeout_seconds": 3,
        "request_timeout_seconds": 4,
        "ttl_seconds": 5,
    }
    assert layer.unknown == ["modle"]
    assert layer.notices == [
        "f: the key request_timeout is deprecated: use request_timeout_seconds",
        "f: the key ttl is deprecated: use ttl_seconds",
        "f: unknown key modle; did you mean model?",
    ]


def test_an_old_flag_spelling_still_sets_its_setting_with_a_warning() -> None:
    from sandfleet.cli.renamed_flags import flag_notices

    args = build_parser().parse_args(["run", "--tool-timeout", "7", "--ttl", "9", "task"])

    assert (args.tool_timeout_seconds, args.ttl_seconds) == (7.0, 9)
    assert flag_notices(args) == [
        "--tool-timeout is deprecated: use --tool-timeout-seconds",
        "--ttl is deprecated: use --ttl-seconds",
    ]
    fresh = build_parser().parse_args(["run", "--tool-timeout-seconds", "7", "task"])
    assert (fresh.tool_timeout_seconds, flag_notices(fresh)) == (7.0, [])


INVALID = "argument COMMAND: invalid choice:"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (f"{INVALID} 'rnu' (choose from 'run', 'batch')", "; did you mean 'run'?"),
        (f"{INVALID} 'zzz' (choose from 'run', 'batch')", ""),
        ("the following arguments are required: TASK", ""),
    ],
)  # fmt: skip
def test_only_a_close_invalid_choice_gets_a_suggestion(message: str, expected: str) -> None:
    assert suggestion(message) == expected


def test_unknown_placeholders_are_identifiers_outside_the_known_set() -> None:
    template = 'Use {workdir} and {working_dir}; JSON {"a": 1}; {{literal}}; {workdir} again'

    assert unknown_placeholders(template) == ["workdir"]
    assert unknown_placeholders("stray { brace") == []


def test_plural_counts() -> None:
    assert [plural(n, "task") for n in (0, 1, 2)] == ["0 tasks", "1 task", "2 tasks"]
    assert plural(1, "input file") == "1 input file"


REPOSITORY = Path(__file__).resolve().parents[3]


def test_the_docs_state_the_batch_default_the_code_has() -> None:
    default = Settings.model_fields["concurrency"].default
    page = REPOSITORY / "docs" / "getting-started" / "local.md"
    text = " ".join(page.read_text(encoding="utf-8").split())

    assert f"(`SANDFLEET_CONCURRENCY`, default {default};" in text


def test_gitignore_covers_the_clis_default_outputs() -> None:
    ignored = (REPOSITORY / ".gitignore").read_text(encoding="utf-8").splitlines()
    results_dir = Settings.model_fields["results_dir"].default

    # results.jsonl: the docs' `batch --out` example; eval-results/: eval's default --out.
    assert {f"{results_dir}/", "results.jsonl", "eval-results/"} <= set(ignored)
