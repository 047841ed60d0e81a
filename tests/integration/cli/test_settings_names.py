"""Settings as the user names them, through the real console script: variables named after
the flags (and the old *_S names, deprecated), warnings for names nobody reads, did-you-mean
for a mistyped subcommand, and `sandfleet config` showing where each value came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.cli.harness import (
    CliResult,
    cli_environment,
    records_of,
    run_cli,
    run_folder,
)
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.integration]


def warnings_of(result: CliResult) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning: ")]


def run_flags(server: ScriptedOpenAIServer, tmp_path: Path) -> list[str]:
    return [
        "--id", "t", "--model", "m", "--base-url", server.base_url, "--max-retries", "0",
        "--results-dir", str(tmp_path / "results"), "--state-dir", str(tmp_path / "state"),
    ]  # fmt: skip


def timeout_observation(tmp_path: Path) -> str:
    trajectory = run_folder(tmp_path / "results", "t") / "trajectory.jsonl"
    observations = [r for r in records_of(trajectory, "observation")]
    return str(observations[0])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variable", "deprecated"),
    [
        ("SANDFLEET_TOOL_TIMEOUT_SECONDS", False),
        ("SANDFLEET_TOOL_TIMEOUT", True),
        ("SANDFLEET_TOOL_TIMEOUT_S", True),
    ],
)
async def test_the_tool_timeout_variable_is_named_after_the_flag_and_the_old_name_still_works(
    tmp_path: Path, variable: str, deprecated: bool
) -> None:
    script = [Reply(tool_calls=[bash("sleep 30")]), Reply(text="done", tool_calls=[submit()])]
    async with ScriptedOpenAIServer(script) as server:
        result = await run_cli(
            "run", "sleep", *run_flags(server, tmp_path),
            env=cli_environment(tmp_path / "home", **{variable: "1"}), cwd=tmp_path,
        )  # fmt: skip

    assert result.returncode == 0, result
    assert "The command timed out after 1 seconds" in timeout_observation(tmp_path)
    expected = [f"warning: {variable} is deprecated: use SANDFLEET_TOOL_TIMEOUT_SECONDS"]
    assert warnings_of(result) == (expected if deprecated else []), result


async def test_a_misspelt_variable_is_a_one_line_warning_with_the_likely_name(
    tmp_path: Path,
) -> None:
    environ = cli_environment(
        tmp_path / "home",
        SANDFLEET_MAX_TRUNS="3",  # a typo of SANDFLEET_MAX_TURNS
        SANDFLEET_OPERATOR_NAMESPACES="x",  # the operator's own: not the CLI's to judge
        SANDFLEET_GATEWAY_TOKEN="t",  # read by the gateway client
    )
    result = await run_cli("config", "--json", env=environ, cwd=tmp_path)

    assert result.returncode == 0, result
    assert warnings_of(result) == [
        "warning: SANDFLEET_MAX_TRUNS is not a sandfleet setting and is ignored; "
        "did you mean SANDFLEET_MAX_TURNS?"
    ]
    assert json.loads(result.stdout)["max_turns"]["value"] == 100


async def test_config_shows_each_value_with_its_source_and_masks_the_key(tmp_path: Path) -> None:
    config = tmp_path / "sandfleet.toml"
    config.write_text('base_url = "http://from-file/v1"\nrequest_timeout_s = 30\n')
    environ = cli_environment(
        tmp_path / "home", SANDFLEET_MAX_TURNS="7", OPENAI_API_KEY="sk-very-secret"
    )
    args = ("config", "--config", str(config), "--model", "flag-model")
    as_json = await run_cli(*args, "--json", env=environ, cwd=tmp_path)
    as_table = await run_cli(*args, env=environ, cwd=tmp_path)

    assert as_json.returncode == 0, as_json
    rows = json.loads(as_json.stdout)
    assert rows["model"] == {
        "value": "flag-model", "source": "flag", "flag": "--model", "env": "SANDFLEET_MODEL",
    }  # fmt: skip
    assert rows["max_turns"]["source"] == "env SANDFLEET_MAX_TURNS"
    assert rows["max_turns"]["value"] == 7
    assert rows["base_url"]["source"] == f"config {config} (base_url)"
    # Listed by the public names, those of the flags and the config file (issue 27 item 7);
    # durations say seconds (issue 21 item 5).
    assert {"tool_timeout_seconds", "request_timeout_seconds", "ttl_seconds", "context"} <= set(
        rows
    )
    assert not {"tool_timeout", "tool_timeout_s", "request_timeout_s", "ttl"} & set(rows)
    assert rows["request_timeout_seconds"]["value"] == 30
    assert rows["request_timeout_seconds"]["env"] == "SANDFLEET_REQUEST_TIMEOUT_SECONDS"
    assert rows["tool_timeout_seconds"] == {
        "value": 120.0, "source": "default", "flag": "--tool-timeout-seconds",
        "env": "SANDFLEET_TOOL_TIMEOUT_SECONDS",
    }  # fmt: skip
    assert rows["api_key"] == {
        "value": "****", "source": "env OPENAI_API_KEY", "flag": None, "env": None,
    }  # fmt: skip
    assert warnings_of(as_json) == [
        f"warning: config file {config}: the key request_timeout_s is deprecated: use "
        "request_timeout_seconds"
    ]
    assert "sk-very-secret" not in as_json.stdout + as_table.stdout + as_table.stderr
    model_line = next(line for line in as_table.stdout.splitlines() if line.startswith("model "))
    assert model_line.split() == ["model", "flag-model", "flag", "--model", "SANDFLEET_MODEL"]
    ttl_line = next(line for line in as_table.stdout.splitlines() if line.startswith("ttl_"))
    assert ttl_line.split() == [
        "ttl_seconds", "3600", "default", "--ttl-seconds", "SANDFLEET_TTL_SECONDS"
    ]  # fmt: skip


async def test_an_unknown_config_file_key_is_an_error_naming_the_likely_key(
    tmp_path: Path,
) -> None:
    config = tmp_path / "sandfleet.toml"
    config.write_text("tool_timout = 5\n")
    result = await run_cli(
        "config", "--config", str(config), env=cli_environment(tmp_path / "home"), cwd=tmp_path
    )

    assert result.returncode == 2, result
    assert result.stderr.startswith(
        f"error: config file {config}: unknown key tool_timout; did you mean tool_timeout_seconds?"
    )
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "suggestion"),
    [(["rnu", "x"], "did you mean 'run'?"), (["run", "x", "--backend", "kubernets"],
                                              "did you mean 'kubernetes'?")],
)  # fmt: skip
async def test_a_mistyped_subcommand_or_choice_suggests_the_closest_and_exits_2(
    tmp_path: Path, argv: list[str], suggestion: str
) -> None:
    result = await run_cli(*argv, env=cli_environment(tmp_path / "home"), cwd=tmp_path)

    assert result.returncode == 2, result
    assert result.stderr.splitlines()[-1].endswith(suggestion), result
    assert "Traceback" not in result.stderr
