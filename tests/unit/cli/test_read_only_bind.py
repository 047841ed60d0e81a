"""--read-only-bind: the one way a local sandbox of the CLI sees host data (repeatable flag,
':'-separated variable); the results dir and what a command hides stay hidden."""

from __future__ import annotations

from pathlib import Path

from sandfleet.cli.execution import sandbox_config
from sandfleet.cli.main import build_parser
from sandfleet.cli.settings_command import resolve_from_arguments
from sandfleet.settings import Settings


def test_the_flag_repeats_and_the_variable_splits_on_colons() -> None:
    args = build_parser().parse_args(
        ["run", "hi", "--read-only-bind", "/data/a", "--read-only-bind", "/data/b"]
    )
    flagged = resolve_from_arguments(args, environ={}).settings
    from_env = resolve_from_arguments(
        build_parser().parse_args(["run", "hi"]),
        environ={"SANDFLEET_READ_ONLY_BIND": "/data/a:/data/b"},
    ).settings

    assert flagged.read_only_bind == from_env.read_only_bind == (Path("/data/a"), Path("/data/b"))


def test_the_sandbox_config_binds_them_and_hides_the_results_and_a_benchmark() -> None:
    settings = Settings(read_only_bind=(Path("/data/a"),), results_dir=Path("/r"))

    config = sandbox_config(settings, hidden=[Path("/bench")])

    assert config.read_only_binds == (Path("/data/a"),)
    assert config.hidden_paths == (Path("/r"), Path("/bench"))
