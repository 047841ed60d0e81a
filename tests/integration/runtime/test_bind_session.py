"""BindSession on a real runtime over loopback gRPC with real bash: token, env, shells, clock."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandboxLostError, ToolError
from sandfleet_proto.runtime.v1 import bash_service_pb2 as bash_pb
from sandfleet_proto.runtime.v1 import bash_service_pb2_grpc as bash_grpc
from sandfleet_proto.runtime.v1 import system_service_pb2 as system_pb
from sandfleet_proto.runtime.v1 import system_service_pb2_grpc as system_grpc
from sandfleet_runtime.auth import TokenAuthInterceptor
from sandfleet_runtime.bash.sessions import BashSessions
from sandfleet_runtime.binding import Binding, SessionBinder
from sandfleet_runtime.errors import UnauthenticatedError
from sandfleet_runtime.logs import KeyValueJsonFormatter
from sandfleet_runtime.server import RuntimeServer
from sandfleet_runtime.stats import ActivityClock
from tests.support.runtime_server import running_runtime, spawn_runtime_process

pytestmark = pytest.mark.integration


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[tuple[RuntimeServer, str]]:
    async with running_runtime(tmp_path, default_timeout_s=20.0) as started:
        yield started


@pytest.fixture
async def client(runtime: tuple[RuntimeServer, str]) -> AsyncIterator[RuntimeClient]:
    server, token = runtime
    client = RuntimeClient(f"127.0.0.1:{server.port}", token)
    yield client
    await client.close()


def _new_token() -> str:
    return secrets.token_urlsafe(24)


async def _run_with_token(port: int, token: str, command: str) -> bash_pb.RunCommandResponse:
    """RunCommand over a channel of its own, presenting exactly `token`."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        return await bash_grpc.BashServiceStub(channel).RunCommand(
            bash_pb.RunCommandRequest(command=command),
            metadata=(("authorization", f"Bearer {token}"),),
            timeout=20,
        )


async def _eventually(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


async def test_after_binding_the_old_token_is_unauthenticated_and_the_new_one_works(
    runtime: tuple[RuntimeServer, str], client: RuntimeClient
) -> None:
    server, old_token = runtime
    new_token = _new_token()

    await client.bind_session(new_token, {}, session="team-a/session-1")

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _run_with_token(server.port, old_token, "echo old")
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert (await _run_with_token(server.port, new_token, "echo new")).stdout == "new\n"
    # The client switched its own metadata to the new token.
    assert (await client.run_command("echo rotated")).stdout == "rotated\n"
    assert (await client.stats()).session == "team-a/session-1"


async def test_the_bound_env_reaches_new_bash_sessions_over_the_agents_own_env(
    client: RuntimeClient,
) -> None:
    env = {"FOO": "bar baz", "HOME": "/home/session", "MULTI_LINE": "one\ntwo"}

    await client.bind_session(_new_token(), env, session="ns/s")

    result = await client.run_command('echo "$FOO|$HOME|$MULTI_LINE|${PATH:+path-kept}"')
    assert result.stdout == "bar baz|/home/session|one\ntwo|path-kept\n"


async def test_binding_to_a_session_starts_its_default_shell_and_unbinding_does_not(
    client: RuntimeClient,
) -> None:
    token = _new_token()
    await client.bind_session(token, {"BOUND": "yes"}, session="ns/s")

    stats = await client.stats()
    assert (stats.bash_session_names, stats.running_commands) == (("default",), 0)
    assert (await client.run_command('echo "$BOUND"')).stdout == "yes\n"

    await client.bind_session(_new_token(), {}, session="")  # back to a pool (recycling)

    assert (await client.stats()).bash_session_names == ()


async def test_binding_again_replaces_the_earlier_env_and_needs_the_current_token(
    runtime: tuple[RuntimeServer, str], client: RuntimeClient
) -> None:
    server, _ = runtime
    first, second = _new_token(), _new_token()
    await client.bind_session(first, {"FIRST_ONLY": "1"}, session="ns/first")

    await client.bind_session(second, {"SECOND_ONLY": "2"}, session="ns/second")

    result = await client.run_command('echo "${FIRST_ONLY:-unset} ${SECOND_ONLY:-unset}"')
    assert result.stdout == "unset 2\n"
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _run_with_token(server.port, first, "true")
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert (await client.stats()).session == "ns/second"


async def test_binding_closes_open_sessions_and_kills_their_processes(
    runtime: tuple[RuntimeServer, str], client: RuntimeClient
) -> None:
    server, token = runtime
    started = await client.run_command("sleep 300 & echo $!", session="warm")
    background_pid = int(started.stdout)
    assert _alive(background_pid)
    new_token = _new_token()

    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        response = await system_grpc.SystemServiceStub(channel).BindSession(
            system_pb.BindSessionRequest(token=new_token, session="ns/s"),
            metadata=(("authorization", f"Bearer {token}"),),
            timeout=20,
        )

    assert response.closed_sessions == 1
    assert await _eventually(lambda: not _alive(background_pid))
    client.rotate_token(new_token)
    stats = await client.stats()
    # Only the session's own "default" shell, started by the binding, is open.
    assert stats.bash_session_names == ("default",)
    assert stats.last_activity_unix == response.bound_unix


async def test_an_open_session_is_gone_after_binding_through_the_client(
    client: RuntimeClient, tmp_path: Path
) -> None:
    await client.run_command("export LEFTOVER=pool; cd /tmp", session="warm")
    assert (await client.stats()).bash_sessions == 1

    await client.bind_session(_new_token(), {}, session="ns/s")

    assert (await client.stats()).bash_session_names == ("default",)
    again = await client.run_command('echo "${LEFTOVER:-gone}"; pwd', session="warm")
    assert again.stdout == f"gone\n{tmp_path}\n"


@pytest.mark.parametrize(
    ("token", "env", "message"),
    [
        ("", {}, "at least 16"),
        ("short-token", {}, "at least 16"),
        ("sixteen chars with spaces", {}, "visible ASCII"),
        (None, {"1FOO": "x"}, "Invalid environment variable name '1FOO'"),
        (None, {"FOO-BAR": "x"}, "Invalid environment variable name 'FOO-BAR'"),
        (None, {"": "x"}, "Invalid environment variable name ''"),
        (None, {"SANDFLEET_RUNTIME_TOKEN": "x"}, "runtime's credentials"),
        (None, {"SANDFLEET_RUNTIME_TOKEN_FILE": "/x"}, "runtime's credentials"),
        (None, {"SANDFLEET_SESSION_ID": "x"}, "set by the runtime itself"),
        (None, {"FOO": "a\0b"}, "NUL character"),
    ],
)
async def test_an_invalid_binding_is_rejected_and_changes_nothing(
    runtime: tuple[RuntimeServer, str],
    client: RuntimeClient,
    token: str | None,
    env: dict[str, str],
    message: str,
) -> None:
    server, old_token = runtime
    await client.run_command("export KEPT=yes", session="open")

    with pytest.raises(ToolError) as rejected:
        await client.bind_session(_new_token() if token is None else token, env, session="ns/s")

    assert rejected.value.code == "INVALID_ARGUMENT"
    assert message in str(rejected.value)
    # The old token still works (for this client too), the open shell kept its state,
    # and the sandbox is still unbound.
    kept = await _run_with_token(server.port, old_token, "true")
    assert kept.exit_code == 0
    assert (await client.run_command('echo "$KEPT"', session="open")).stdout == "yes\n"
    stats = await client.stats()
    assert (stats.session, stats.bash_sessions) == ("", 2)  # "open" and the raw call's "default"


async def test_a_bound_value_carrying_the_new_token_is_rejected(client: RuntimeClient) -> None:
    token = _new_token()

    with pytest.raises(ToolError, match="contains the new runtime token"):
        await client.bind_session(token, {"LEAK": f"prefix-{token}"})

    assert (await client.run_command("echo still-old-token")).stdout == "still-old-token\n"


async def test_neither_token_ever_reaches_the_shell_env(tmp_path: Path) -> None:
    pool_token, session_token = _new_token(), _new_token()
    proc, port = await asyncio.to_thread(spawn_runtime_process, tmp_path, pool_token)
    client = RuntimeClient(f"127.0.0.1:{port}", pool_token)
    try:
        before = await client.run_command("env; cat /proc/$$/environ | tr '\\0' '\\n'")
        await client.bind_session(session_token, {"FOO": "bar"}, session="ns/s")
        after = await client.run_command("env; cat /proc/$$/environ | tr '\\0' '\\n'")
    finally:
        await client.close()
        proc.terminate()
        await asyncio.to_thread(proc.wait, 10)
    assert "FOO=bar" in after.stdout
    for shown in (before.stdout, after.stdout):
        assert pool_token not in shown and session_token not in shown
        assert "SANDFLEET_RUNTIME_TOKEN" not in shown


async def test_binding_resets_the_idle_clock(client: RuntimeClient) -> None:
    await client.run_command("true")
    idle = await client.stats()
    deadline = time.monotonic() + 10
    while idle.idle_s < 0.5 and time.monotonic() < deadline:
        idle = await client.stats()  # GetStats itself is no activity
    assert idle.idle_s >= 0.5

    await client.bind_session(_new_token(), {}, session="ns/s")

    bound = await client.stats()
    assert bound.idle_s < idle.idle_s
    assert bound.last_activity_unix > idle.last_activity_unix


async def test_of_two_concurrent_bindings_with_the_same_token_exactly_one_wins(
    runtime: tuple[RuntimeServer, str],
) -> None:
    server, token = runtime
    clients = [RuntimeClient(f"127.0.0.1:{server.port}", token) for _ in range(2)]
    winners = [_new_token(), _new_token()]
    try:
        outcomes = await asyncio.gather(
            *(
                c.bind_session(t, {}, session=f"ns/{i}")
                for i, (c, t) in enumerate(zip(clients, winners, strict=True))
            ),
            return_exceptions=True,
        )
        lost = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(lost) == 1 and isinstance(lost[0], SandboxLostError)
        assert "UNAUTHENTICATED" in str(lost[0])
        winner = outcomes.index(None)
        result = await _run_with_token(server.port, winners[winner], "echo bound")
        assert result.stdout == "bound\n"
        assert (await clients[winner].stats()).session == f"ns/{winner}"
    finally:
        for c in clients:
            await c.close()


async def test_a_binding_admitted_with_a_token_rotated_meanwhile_is_unauthenticated(
    sessions: BashSessions,
) -> None:
    # Both calls presented the pool token and passed the interceptor; the first one to
    # take the binder's lock rotates it, so the second must fail rather than rebind.
    pool = _new_token()
    auth = TokenAuthInterceptor(pool)
    binder = SessionBinder(auth, sessions, ActivityClock())
    presented = (("authorization", f"Bearer {pool}"),)
    tokens = [_new_token(), _new_token()]

    outcomes = await asyncio.gather(
        *(
            binder.bind(t, {}, f"ns/{i}", still_authorized=lambda: auth.accepts(presented))
            for i, t in enumerate(tokens)
        ),
        return_exceptions=True,
    )

    assert isinstance(outcomes[0], Binding) and outcomes[0].session == "ns/0"
    assert isinstance(outcomes[1], UnauthenticatedError)
    assert binder.session == "ns/0"
    assert auth.accepts((("authorization", f"Bearer {tokens[0]}"),))
    assert not auth.accepts(presented)


async def test_the_binding_is_logged_with_key_values_and_without_the_token(
    client: RuntimeClient, caplog: pytest.LogCaptureFixture
) -> None:
    token = _new_token()

    with caplog.at_level(logging.INFO, logger="sandfleet_runtime"):
        await client.bind_session(token, {"FOO": "bar", "API_URL": "http://x"}, session="ns/s")

    (record,) = [r for r in caplog.records if r.getMessage() == "session_bound"]
    event = json.loads(KeyValueJsonFormatter().format(record))
    assert event["session"] == "ns/s"
    assert event["env_names"] == ["API_URL", "FOO"]
    assert event["closed_sessions"] == 0
    assert all(token not in KeyValueJsonFormatter().format(r) for r in caplog.records)
