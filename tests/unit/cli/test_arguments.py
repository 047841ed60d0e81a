"""The command line maps onto the settings: typed flags win, absent flags fall through."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandfleet.cli.main import build_parser, settings_from_arguments


def test_typed_flags_override_the_environment_and_absent_ones_fall_through(
    tmp_path: Path,
) -> None:
    environ = {
        "HOME": str(tmp_path),
        "SANDFLEET_MODEL": "env-model",
        "SANDFLEET_MAX_TURNS": "7",
        "SANDFLEET_BASE_URL": "http://env/v1",
    }
    args = build_parser().parse_args(
        [
            "run",
            "Say hi.",
            "--model",
            "flag-model",
            "--tool-timeout-seconds",
            "9",
            "--results-dir",
            "r",
        ]
    )

    settings = settings_from_arguments(args, environ)

    assert settings.model == "flag-model"
    assert settings.tool_timeout_seconds == 9
    assert settings.results_dir == Path("r")
    assert settings.max_turns == 7
    assert settings.base_url == "http://env/v1"


def test_the_config_flag_and_api_key_env_flag_reach_the_settings(tmp_path: Path) -> None:
    config = tmp_path / "sandfleet.toml"
    config.write_text('model = "file-model"\nconcurrency = 3\n')
    environ = {"HOME": str(tmp_path), "MY_KEY": "secret"}
    args = build_parser().parse_args(
        ["batch", "tasks.jsonl", "--out", "o.jsonl", "--config", str(config),
         "--api-key-env", "MY_KEY", "-c", "5"]
    )  # fmt: skip

    settings = settings_from_arguments(args, environ)

    assert settings.model == "file-model"
    assert settings.concurrency == 5
    assert settings.api_key is not None and settings.api_key.get_secret_value() == "secret"


def test_replay_takes_sandbox_flags_but_no_model_flags(tmp_path: Path) -> None:
    parser = build_parser()
    args = parser.parse_args(["replay", "t.jsonl", "--isolation", "none"])

    assert settings_from_arguments(args, {"HOME": str(tmp_path)}).isolation == "none"
    with pytest.raises(SystemExit):
        parser.parse_args(["replay", "t.jsonl", "--model", "m"])


def test_run_collects_repeated_file_flags() -> None:
    args = build_parser().parse_args(["run", "task", "-f", "a.csv", "--file", "docs"])

    assert args.files == [Path("a.csv"), Path("docs")]
