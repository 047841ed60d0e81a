"""Settings precedence: flags > SANDFLEET_* environment > config file > defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandfleet.settings import Settings, SettingsError, default_config_path, load_settings


def write_config(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_apply_when_nothing_is_configured(tmp_path: Path) -> None:
    settings = load_settings(flags={}, environ={"HOME": str(tmp_path)})

    assert settings == Settings()
    assert settings.max_turns == 100
    assert settings.api_key is None


def test_a_flag_beats_the_environment_which_beats_the_file(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.toml", 'max_turns = 10\nmodel = "from-file"\n')
    environ = {"HOME": str(tmp_path), "SANDFLEET_MAX_TURNS": "20"}

    all_layers = load_settings(flags={"max_turns": 30}, environ=environ, config_path=config)
    no_flag = load_settings(flags={"max_turns": None}, environ=environ, config_path=config)
    file_only = load_settings(flags={}, environ={"HOME": str(tmp_path)}, config_path=config)

    assert all_layers.max_turns == 30
    assert no_flag.max_turns == 20
    assert file_only.max_turns == 10
    assert all_layers.model == no_flag.model == file_only.model == "from-file"


def test_the_default_config_file_is_read_from_xdg_config_home(tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    write_config(tmp_path / "xdg" / "sandfleet" / "config.toml", 'base_url = "http://x/v1"\n')

    settings = load_settings(environ=environ)

    assert default_config_path(environ) == tmp_path / "xdg" / "sandfleet" / "config.toml"
    assert settings.base_url == "http://x/v1"


def test_the_default_config_file_falls_back_to_home_dot_config(tmp_path: Path) -> None:
    write_config(tmp_path / ".config" / "sandfleet" / "config.toml", "concurrency = 7\n")

    assert load_settings(environ={"HOME": str(tmp_path)}).concurrency == 7


def test_sandfleet_config_names_the_file_and_the_flag_overrides_it(tmp_path: Path) -> None:
    by_env = write_config(tmp_path / "env.toml", "max_turns = 5\n")
    by_flag = write_config(tmp_path / "flag.toml", "max_turns = 6\n")
    environ = {"HOME": str(tmp_path), "SANDFLEET_CONFIG": str(by_env)}

    assert load_settings(environ=environ).max_turns == 5
    assert load_settings(environ=environ, config_path=by_flag).max_turns == 6


def test_an_explicit_config_file_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="config file not found"):
        load_settings(environ={"HOME": str(tmp_path)}, config_path=tmp_path / "missing.toml")


def test_unknown_config_keys_are_reported_by_name(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.toml", 'modle = "typo"\n')

    with pytest.raises(SettingsError, match="unknown key modle; did you mean model"):
        load_settings(environ={"HOME": str(tmp_path)}, config_path=config)


def test_the_api_key_cannot_be_put_in_the_config_file(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.toml", 'api_key = "sk-secret"\n')

    with pytest.raises(
        SettingsError, match="unknown key api_key: the key is never read from a file"
    ):
        load_settings(environ={"HOME": str(tmp_path)}, config_path=config)


def test_the_api_key_comes_from_the_variable_that_api_key_env_names(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.toml", 'api_key_env = "FROM_FILE_KEY"\n')
    environ = {
        "HOME": str(tmp_path),
        "OPENAI_API_KEY": "default-key",
        "FROM_FILE_KEY": "file-key",
        "FLAG_KEY": "flag-key",
    }

    default = load_settings(environ=environ)
    from_file = load_settings(environ=environ, config_path=config)
    from_flag = load_settings(
        flags={"api_key_env": "FLAG_KEY"}, environ=environ, config_path=config
    )

    assert default.api_key is not None and default.api_key.get_secret_value() == "default-key"
    assert from_file.api_key is not None and from_file.api_key.get_secret_value() == "file-key"
    assert from_flag.api_key is not None and from_flag.api_key.get_secret_value() == "flag-key"
    assert "flag-key" not in repr(from_flag)


def test_environment_strings_are_converted_to_the_setting_types(tmp_path: Path) -> None:
    environ = {
        "HOME": str(tmp_path),
        "SANDFLEET_LOG_JSON": "true",
        "SANDFLEET_TEMPERATURE": "0.5",
        "SANDFLEET_RESULTS_DIR": "/tmp/r",
        "SANDFLEET_ISOLATION": "none",
        "SANDFLEET_EGRESS": "all",
    }

    settings = load_settings(environ=environ)

    assert settings.log_json is True
    assert settings.temperature == 0.5
    assert settings.results_dir == Path("/tmp/r")
    assert settings.isolation == "none"
    assert settings.egress == "all"


def test_an_empty_environment_variable_counts_as_unset(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.toml", 'model = "file-model"\n')
    environ = {"HOME": str(tmp_path), "SANDFLEET_MODEL": ""}

    assert load_settings(environ=environ, config_path=config).model == "file-model"


def test_an_invalid_value_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="SANDFLEET_MAX_TURNS"):
        load_settings(environ={"HOME": str(tmp_path), "SANDFLEET_MAX_TURNS": "many"})
    with pytest.raises(SettingsError, match="isolation"):
        load_settings(flags={"isolation": "docker"}, environ={"HOME": str(tmp_path)})


def test_a_malformed_config_file_is_reported_with_its_path(tmp_path: Path) -> None:
    config = write_config(tmp_path / "bad.toml", "max_turns = \n")

    with pytest.raises(SettingsError, match=r"bad\.toml"):
        load_settings(environ={"HOME": str(tmp_path)}, config_path=config)


def test_settings_are_frozen(tmp_path: Path) -> None:
    settings = load_settings(environ={"HOME": str(tmp_path)})

    with pytest.raises(ValueError, match="frozen"):
        settings.max_turns = 3


def test_the_api_key_cannot_come_from_a_sandfleet_variable(tmp_path: Path) -> None:
    settings = load_settings(environ={"HOME": str(tmp_path), "SANDFLEET_API_KEY": "sk-secret"})

    assert settings.api_key is None


def test_settings_built_in_code_read_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDFLEET_MAX_TURNS", "7")

    assert Settings().max_turns == 100
    assert Settings(max_turns=3).max_turns == 3
