"""One public name per setting (the flag's), its variable and config key, deprecated aliases,
and did-you-mean for names nobody reads."""

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


def test_variables_are_named_after_the_flags() -> None:
    assert env_name("tool_timeout_s") == "SANDFLEET_TOOL_TIMEOUT"
    assert env_name("request_timeout_s") == "SANDFLEET_REQUEST_TIMEOUT"
    assert env_name("session_ttl_s") == "SANDFLEET_TTL"
    assert env_name("kube_context") == "SANDFLEET_CONTEXT"
    assert env_name("max_turns") == "SANDFLEET_MAX_TURNS"


def test_the_public_name_wins_over_a_deprecated_alias_set_alongside() -> None:
    layer = environment_values(
        {"SANDFLEET_TOOL_TIMEOUT": "5", "SANDFLEET_TOOL_TIMEOUT_S": "9"}, CONFIGURABLE_FIELDS
    )

    assert layer.values == {"tool_timeout_s": "5"}
    assert layer.sources == {"tool_timeout_s": "SANDFLEET_TOOL_TIMEOUT"}
    assert layer.notices == ["SANDFLEET_TOOL_TIMEOUT_S is deprecated: use SANDFLEET_TOOL_TIMEOUT"]


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
    layer = config_values(
        {"tool_timeout": 3, "request_timeout_s": 4, "modle": "x"}, CONFIGURABLE_FIELDS, where="f"
    )

    assert layer.values == {"tool_timeout_s": 3, "request_timeout_s": 4}
    assert layer.unknown == ["modle"]
    assert layer.notices == [
        "f: the key request_timeout_s is deprecated: use request_timeout",
        "f: unknown key modle; did you mean model?",
    ]


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
