"""The runtime agent's duration flags say seconds; the old spellings still work, with a warning."""

from __future__ import annotations

import pytest

from sandfleet_runtime.__main__ import renamed_flags_used, settings_from


def test_duration_flags_say_seconds_and_the_old_spellings_still_work(
    capsys: pytest.CaptureFixture[str],
) -> None:
    new, _ = settings_from(
        ["--allow-no-auth", "--default-timeout-seconds", "7", "--max-timeout-seconds", "70"], {}
    )
    assert (new.default_timeout_s, new.max_timeout_s) == (7.0, 70.0)
    assert capsys.readouterr().err == ""

    old, _ = settings_from(["--allow-no-auth", "--default-timeout", "8", "--max-timeout=80"], {})
    assert (old.default_timeout_s, old.max_timeout_s) == (8.0, 80.0)
    assert capsys.readouterr().err.splitlines() == [
        "sandfleet-runtime: --default-timeout is deprecated: use --default-timeout-seconds",
        "sandfleet-runtime: --max-timeout is deprecated: use --max-timeout-seconds",
    ]
    assert renamed_flags_used(["--max-timeout-seconds", "5"]) == []
