"""Credential plugins through kubernetes_asyncio: a real exec plugin script (its token, its
expiry, its failures) and an OIDC auth-provider with an id-token (no network needed while
the token is valid), written as real kubeconfig files in tmp_path."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest

from sandfleet.kube import KubeConfig, KubeConfigError
from tests.support.kube_exec_plugin import EXEC_API_VERSION, ExecPlugin, write_kubeconfig

SERVER = "https://k.example:6443"


@pytest.fixture
def plugin(tmp_path: Path) -> ExecPlugin:
    return ExecPlugin(tmp_path)


def exec_config(tmp_path: Path, plugin: ExecPlugin) -> KubeConfig:
    return KubeConfig.load(write_kubeconfig(tmp_path / "config", server=SERVER, user=plugin.user()))


def test_an_exec_plugin_token_is_used_and_kept_until_it_nears_expiry(
    tmp_path: Path, plugin: ExecPlugin
) -> None:
    config = exec_config(tmp_path, plugin)

    assert config.server == SERVER
    assert config.bearer_token() == "exec-token-1"
    assert config.bearer_token() == "exec-token-1"
    assert plugin.runs == 1  # an hour of validity left: not asked again
    info = json.loads((plugin.state / "exec_info").read_text())
    assert info["apiVersion"] == EXEC_API_VERSION
    assert info["kind"] == "ExecCredential"


def test_an_exec_token_about_to_expire_is_fetched_again(tmp_path: Path, plugin: ExecPlugin) -> None:
    plugin.set("expires_in", 5)  # inside the refresh margin (EXPIRY_SKEW_S) at once
    config = exec_config(tmp_path, plugin)
    # load() fetched token 1, which expires within the margin: fetched again, not handed out
    assert config.bearer_token() == "exec-token-2"

    plugin.set("expires_in", 3600)
    assert config.bearer_token() == "exec-token-3"  # token 2 was as short-lived
    assert config.bearer_token() == "exec-token-3"
    assert plugin.runs == 3


def test_a_forced_refresh_runs_the_plugin_again(tmp_path: Path, plugin: ExecPlugin) -> None:
    config = exec_config(tmp_path, plugin)

    assert config.bearer_token(refresh=True) == "exec-token-2"
    assert plugin.runs == 2


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        (
            "fail",
            r"kubeconfig context 'test': exec: process returned 3\. the token service said no",
        ),
        ("garbage", r"kubeconfig context 'test': exec: failed to decode process output"),
    ],
)
def test_a_failing_plugin_is_one_clear_line(
    tmp_path: Path, plugin: ExecPlugin, mode: str, message: str
) -> None:
    plugin.set("mode", mode)

    with pytest.raises(KubeConfigError, match=message) as caught:
        exec_config(tmp_path, plugin)
    assert "\n" not in str(caught.value)


def test_a_plugin_binary_that_does_not_exist_is_named(tmp_path: Path) -> None:
    user = {"exec": {"apiVersion": EXEC_API_VERSION, "command": "no-such-credential-helper"}}
    path = write_kubeconfig(tmp_path / "config", server=SERVER, user=user)

    with pytest.raises(KubeConfigError, match=r"No such file or directory.*no-such-credential"):
        KubeConfig.load(path)


def test_a_plugin_that_starts_failing_later_fails_the_refresh_clearly(
    tmp_path: Path, plugin: ExecPlugin
) -> None:
    config = exec_config(tmp_path, plugin)
    plugin.set("mode", "fail")

    with pytest.raises(KubeConfigError, match="process returned 3"):
        config.bearer_token(refresh=True)


def test_a_failing_early_refresh_keeps_the_still_valid_token(
    tmp_path: Path, plugin: ExecPlugin
) -> None:
    plugin.set("expires_in", 20)  # due (within the 30 s margin) but valid for 20 s more
    config = exec_config(tmp_path, plugin)
    plugin.set("mode", "fail")

    assert config.bearer_token() == "exec-token-1"  # run 2 failed: the old token goes on
    assert config.bearer_token() == "exec-token-1"  # resting after the failure: no run 3
    assert plugin.runs == 2
    with pytest.raises(KubeConfigError, match="process returned 3"):
        config.bearer_token(refresh=True)  # after a 401 the old token is no use


async def test_a_synchronous_token_read_inside_an_event_loop_runs_the_plugin(
    tmp_path: Path, plugin: ExecPlugin
) -> None:
    """The gateway client reads the token synchronously from async code (current_token)."""
    config = await _load_in_thread(tmp_path, plugin)

    assert config.bearer_token(refresh=True) == "exec-token-2"
    assert await config.auth_header() == "Bearer exec-token-2"


async def _load_in_thread(tmp_path: Path, plugin: ExecPlugin) -> KubeConfig:
    import asyncio

    path = write_kubeconfig(tmp_path / "config", server=SERVER, user=plugin.user())
    return await asyncio.to_thread(KubeConfig.load, path)


def _jwt(claims: dict[str, object]) -> str:
    def part(document: dict[str, object]) -> str:
        return base64.b64encode(json.dumps(document).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


def oidc_user(id_token: str) -> dict[str, object]:
    return {
        "auth-provider": {
            "name": "oidc",
            "config": {
                "client-id": "kubernetes",
                "idp-issuer-url": "https://login.example",
                "id-token": id_token,
            },
        }
    }


# The library's OIDC check uses datetime.utcnow/utcfromtimestamp (deprecated from 3.12).
@pytest.mark.filterwarnings("ignore:datetime.datetime.utc:DeprecationWarning")
def test_an_oidc_id_token_that_is_still_valid_is_sent(tmp_path: Path) -> None:
    token = _jwt({"sub": "alice", "exp": int(time.time()) + 3600})
    path = write_kubeconfig(tmp_path / "config", server=SERVER, user=oidc_user(token))

    assert KubeConfig.load(path).bearer_token() == token


# The library's OIDC check uses datetime.utcnow/utcfromtimestamp (deprecated from 3.12).
@pytest.mark.filterwarnings("ignore:datetime.datetime.utc:DeprecationWarning")
def test_an_expired_oidc_id_token_without_refresh_token_says_so(tmp_path: Path) -> None:
    token = _jwt({"sub": "alice", "exp": int(time.time()) - 60})
    path = write_kubeconfig(tmp_path / "config", server=SERVER, user=oidc_user(token))

    with pytest.raises(KubeConfigError, match="cannot refresh without refresh-token"):
        KubeConfig.load(path)


def test_username_and_password_become_a_basic_header(tmp_path: Path) -> None:
    user = {"username": "admin", "password": "secret"}
    config = KubeConfig.load(write_kubeconfig(tmp_path / "config", server=SERVER, user=user))

    assert config.bearer_token() is None
    assert config.auth.header_blocking() == "Basic " + base64.b64encode(b"admin:secret").decode()
