"""`sandfleet trajectory`: the real console script against a store directory and a real operator
HTTP port, plus the pure paths it asks the operator and the API server's service proxy for."""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandfleet.api.trajectories import TrajectoryNameError, trajectory_path
from sandfleet.cli.exit_codes import ExitCode
from sandfleet.kube.access_review import Authenticator
from sandfleet.operator.http_api import RunningHttpServer, build_http_app, serve_http
from sandfleet.operator.trajectory_store import DirectoryTrajectoryStore
from sandfleet.runs.trajectory_sources import service_proxy_path
from sandfleet.trajectory.writer import TrajectoryWriter
from tests.integration.cli.harness import cli_environment, run_cli
from tests.support.gateway_api import running_api
from tests.support.kube_exec_plugin import ExecPlugin, write_kubeconfig

pytestmark = pytest.mark.integration

REPOSITORY = Path(__file__).resolve().parents[3]
SHIPPED = REPOSITORY / "examples" / "trajectories" / "sales_by_region.jsonl"
UID_OLD = "5e0c7b3a-0000-4f00-a000-0000000000aa"
UID_NEW = "5e0c7b3a-0000-4f00-a000-0000000000bb"


@pytest.fixture
def store(tmp_path: Path) -> DirectoryTrajectoryStore:
    return DirectoryTrajectoryStore(tmp_path / "trajectories")


READER = "system:serviceaccount:team-a:reader"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The CLI's environment, with a token the operator's stand-in API server accepts."""
    return cli_environment(tmp_path / "home", SANDFLEET_GATEWAY_TOKEN="reader-token")


@pytest.fixture
async def operator(store: DirectoryTrajectoryStore) -> AsyncIterator[RunningHttpServer]:
    def no_metrics() -> tuple[bytes, str]:
        return b"", "text/plain"

    async with running_api() as (api, kube):
        api.accept("reader-token", READER)
        api.allow(READER, "get", "team-a")
        app = build_http_app(store, no_metrics, Authenticator(kube, server="the operator"))
        async with serve_http(app, "127.0.0.1", 0) as running:
            yield running


def write_run(
    store: DirectoryTrajectoryStore, namespace: str, name: str, uid: str, *, age_s: float = 0
) -> bytes:
    path = store.writer_path(namespace, name, uid)
    with TrajectoryWriter(path) as writer:
        writer.write({"kind": "meta", "task_id": name, "uid": uid})
        writer.write({"kind": "message", "turn": 1, "role": "assistant", "content": "héllo"})
    if age_s:
        stamp = time.time() - age_s
        os.utime(path, (stamp, stamp))
    return path.read_bytes()


def test_the_operator_path_names_namespace_session_and_optionally_the_uid() -> None:
    assert trajectory_path("team-a", "s.1") == "/trajectories/team-a/s.1"
    assert trajectory_path("team-a", "s.1", UID_OLD) == f"/trajectories/team-a/s.1?uid={UID_OLD}"


def test_the_service_proxy_path_goes_through_the_operator_services_http_port() -> None:
    path = service_proxy_path(
        "team-a", "s1", operator_namespace="sandfleet-system", operator_service="sandfleet-operator"
    )

    assert path == (
        "/api/v1/namespaces/sandfleet-system/services/sandfleet-operator:http/proxy"
        "/trajectories/team-a/s1"
    )
    assert (
        service_proxy_path(
            "ns", "s", operator_namespace="ops", operator_service="op", port_name="web", uid=UID_NEW
        )
        == f"/api/v1/namespaces/ops/services/op:web/proxy/trajectories/ns/s?uid={UID_NEW}"
    )


@pytest.mark.parametrize(
    ("namespace", "name", "operator_namespace", "operator_service"),
    [
        ("..", "s", "ops", "op"),
        ("ns", "../../secrets", "ops", "op"),
        ("ns", "s", "ops/x", "op"),
        ("ns", "s", "ops", "op:80"),
    ],
)
def test_proxy_paths_refuse_anything_that_is_not_a_kubernetes_name(
    namespace: str, name: str, operator_namespace: str, operator_service: str
) -> None:
    with pytest.raises(TrajectoryNameError):
        service_proxy_path(
            namespace,
            name,
            operator_namespace=operator_namespace,
            operator_service=operator_service,
        )


async def test_from_a_store_directory_the_latest_run_goes_to_stdout(
    tmp_path: Path, store: DirectoryTrajectoryStore, env: dict[str, str]
) -> None:
    write_run(store, "team-a", "s1", UID_OLD, age_s=600)
    latest = write_run(store, "team-a", "s1", UID_NEW)

    result = await run_cli(
        "trajectory", "s1", "-n", "team-a", "--store", str(store.root), env=env, cwd=tmp_path
    )

    assert result.returncode == 0, result
    assert result.stdout.encode() == latest


async def test_from_a_store_directory_uid_and_output_file_select_and_save_a_run(
    tmp_path: Path, store: DirectoryTrajectoryStore, env: dict[str, str]
) -> None:
    older = write_run(store, "default", "s1", UID_OLD, age_s=600)
    write_run(store, "default", "s1", UID_NEW)
    saved = tmp_path / "out" / "s1.jsonl"
    saved.parent.mkdir()

    result = await run_cli(
        "trajectory", "s1", "--store", str(store.root), "--uid", UID_OLD, "-o", str(saved),
        env=env, cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 0, result
    assert saved.read_bytes() == older
    assert result.stdout == ""
    assert f"wrote {len(older)} bytes of run {UID_OLD} to {saved}" in result.stderr
    assert not saved.with_name("s1.jsonl.part").exists()


async def test_html_writes_the_fetched_runs_page_beside_the_file_and_needs_one(
    tmp_path: Path, store: DirectoryTrajectoryStore, env: dict[str, str]
) -> None:
    write_run(store, "team-a", "s1", UID_NEW)
    saved = tmp_path / "s1.jsonl"

    result = await run_cli(
        "trajectory", "s1", "-n", "team-a", "--store", str(store.root), "-o", str(saved),
        "--html", env=env, cwd=tmp_path,
    )  # fmt: skip
    without_file = await run_cli(
        "trajectory", "s1", "-n", "team-a", "--store", str(store.root), "--html",
        env=env, cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 0, result
    page = saved.with_suffix(".html")
    assert f"wrote {page}" in result.stderr
    assert "héllo" in page.read_text(encoding="utf-8")  # the turn, on the page
    assert without_file.returncode == ExitCode.USAGE
    assert "--html needs -o FILE" in without_file.stderr


async def test_a_session_without_a_stored_trajectory_exits_fetch_failed_and_leaves_no_file(
    tmp_path: Path, store: DirectoryTrajectoryStore, env: dict[str, str]
) -> None:
    write_run(store, "team-a", "s1", UID_OLD)
    saved = tmp_path / "missing.jsonl"

    result = await run_cli(
        "trajectory", "nope", "-n", "team-a", "--store", str(store.root), "-o", str(saved),
        env=env, cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == ExitCode.FETCH_FAILED, result
    assert "no trajectory stored for session team-a/nope" in result.stderr
    assert not saved.exists()
    assert not saved.with_name("missing.jsonl.part").exists()


async def test_an_invalid_session_name_exits_2_before_any_lookup(
    tmp_path: Path, env: dict[str, str]
) -> None:
    result = await run_cli(
        "trajectory", "../../etc/passwd", "--store", str(tmp_path), env=env, cwd=tmp_path
    )

    assert result.returncode == 2, result
    assert "invalid name" in result.stderr


async def test_from_the_operator_url_the_latest_or_the_named_run_is_fetched(
    tmp_path: Path,
    store: DirectoryTrajectoryStore,
    env: dict[str, str],
    operator: RunningHttpServer,
) -> None:
    older = write_run(store, "team-a", "s1", UID_OLD, age_s=600)
    latest = write_run(store, "team-a", "s1", UID_NEW)
    saved = tmp_path / "older.jsonl"

    fetched_latest = await run_cli(
        "trajectory", "s1", "-n", "team-a", "--operator-url", operator.url + "/",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    fetched_older = await run_cli(
        "trajectory", "s1", "-n", "team-a", "--operator-url", operator.url,
        "--uid", UID_OLD, "-o", str(saved), env=env, cwd=tmp_path,
    )  # fmt: skip

    assert fetched_latest.returncode == 0, fetched_latest
    assert fetched_latest.stdout.encode() == latest
    assert fetched_older.returncode == 0, fetched_older
    assert saved.read_bytes() == older


async def test_a_big_trajectory_arrives_whole_over_http(
    tmp_path: Path,
    store: DirectoryTrajectoryStore,
    env: dict[str, str],
    operator: RunningHttpServer,
) -> None:
    path = store.writer_path("team-a", "big", UID_OLD)
    with TrajectoryWriter(path) as writer:
        for turn in range(3000):
            writer.write({"kind": "observation", "turn": turn, "output": "q" * 3000})
    saved = tmp_path / "big.jsonl"

    result = await run_cli(
        "trajectory", "big", "-n", "team-a", "--operator-url", operator.url, "-o", str(saved),
        env=env, cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 0, result
    assert saved.read_bytes() == path.read_bytes()


async def test_render_over_http_keeps_records_whole_across_chunk_boundaries(
    tmp_path: Path,
    store: DirectoryTrajectoryStore,
    env: dict[str, str],
    operator: RunningHttpServer,
) -> None:
    turns = 300
    with TrajectoryWriter(store.writer_path("team-a", "long", UID_OLD)) as writer:
        writer.write({"kind": "meta", "task_id": "long", "model": "m", "max_turns": turns})
        for turn in range(1, turns + 1):
            writer.write({"kind": "message", "turn": turn, "role": "assistant", "content": "."})
            output = f"Exit code: 0 {turn} " + "w" * 5000
            writer.write(
                {"kind": "observation", "turn": turn, "name": "execute_bash", "output": output,
                 "duration_s": 0.5}
            )  # fmt: skip

    result = await run_cli(
        "trajectory", "long", "-n", "team-a", "--operator-url", operator.url, "--render",
        env=env, cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    assert [line for line in lines if line.startswith("turn ")] == [
        f"turn {turn}/{turns}" for turn in range(1, turns + 1)
    ]
    observations = [line for line in lines if line.startswith("    ← 0.50s ")]
    assert len(observations) == turns


async def test_the_operators_404_exits_fetch_failed_with_its_message(
    tmp_path: Path, env: dict[str, str], operator: RunningHttpServer
) -> None:
    result = await run_cli(
        "trajectory", "ghost", "-n", "team-a", "--operator-url", operator.url,
        env=env, cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == ExitCode.FETCH_FAILED, result
    assert "answered 404: no trajectory stored for session team-a/ghost" in result.stderr


async def test_a_token_the_operator_refuses_exits_fetch_failed_and_says_which_token_it_wants(
    tmp_path: Path, env: dict[str, str], operator: RunningHttpServer
) -> None:
    result = await run_cli(
        "trajectory", "s1", "-n", "team-a", "--operator-url", operator.url, "--token", "stolen",
        env=env, cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == ExitCode.FETCH_FAILED, result
    assert "answered 401: the token was not accepted" in result.stderr
    assert "--token or SANDFLEET_GATEWAY_TOKEN" in result.stderr


async def test_an_unreachable_operator_exits_fetch_failed_and_says_so(
    tmp_path: Path, env: dict[str, str]
) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    result = await run_cli(
        "trajectory", "s1", "--operator-url", f"http://127.0.0.1:{port}", env=env, cwd=tmp_path
    )

    assert result.returncode == ExitCode.FETCH_FAILED, result
    assert f"cannot reach the operator at http://127.0.0.1:{port}" in result.stderr


async def test_without_a_source_or_kubernetes_configuration_it_exits_2(
    tmp_path: Path, env: dict[str, str]
) -> None:
    result = await run_cli("trajectory", "s1", env=env, cwd=tmp_path)

    assert result.returncode == 2, result
    assert "no usable Kubernetes configuration" in result.stderr


async def test_render_prints_the_run_as_a_trace_and_its_summary(
    tmp_path: Path, store: DirectoryTrajectoryStore, env: dict[str, str]
) -> None:
    target = store.writer_path("team-a", "sales", UID_OLD)
    target.parent.mkdir(parents=True)
    shutil.copyfile(SHIPPED, target)
    saved = tmp_path / "raw.jsonl"

    result = await run_cli(
        "trajectory", "sales", "-n", "team-a", "--store", str(store.root), "--render",
        "-o", str(saved), env=env, cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    assert lines[0].startswith("task 01_sales_by_region   model scripted-analyst")
    assert "turn 1/100" in lines
    assert any(line.startswith("  → execute_bash ") for line in lines)
    assert any(line.startswith("    ← ") and "exit 0" in line for line in lines)
    assert any(line.startswith("stop reason submitted") for line in lines)
    assert saved.read_bytes() == SHIPPED.read_bytes()


async def test_through_the_api_server_an_exec_plugin_kubeconfig_authenticates(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The API server is a stand-in on 127.0.0.1 (a real one: tests/cluster) that serves the
    service-proxy path only to the plugin's token; the CLI fetches through KubeClient."""
    from aiohttp import web

    plugin = ExecPlugin(tmp_path)
    seen: list[str | None] = []
    passed_on: list[str | None] = []
    body = b'{"kind": "meta", "task_id": "s1"}\n'
    env = {key: value for key, value in env.items() if key != "SANDFLEET_GATEWAY_TOKEN"}

    async def proxy(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        passed_on.append(request.headers.get("X-Sandfleet-Authorization"))
        if request.headers.get("Authorization") != "Bearer exec-token-1":
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        return web.Response(body=body, headers={"X-Sandfleet-Run-Uid": UID_NEW})

    app = web.Application()
    app.router.add_get("/{tail:.*}", proxy)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        server = f"http://127.0.0.1:{runner.addresses[0][1]}"
        config = write_kubeconfig(tmp_path / "kubeconfig", server=server, user=plugin.user())
        result = await run_cli(
            "trajectory", "s1", "-n", "team-a", env={**env, "KUBECONFIG": str(config)},
            cwd=tmp_path,
        )  # fmt: skip
        plugin.set("mode", "fail")
        failed = await run_cli(
            "trajectory", "s1", env={**env, "KUBECONFIG": str(config)}, cwd=tmp_path
        )
    finally:
        await runner.cleanup()

    assert result.returncode == 0, result
    assert result.stdout.encode() == body
    assert seen == ["Bearer exec-token-1"]
    # The API server drops Authorization on its way to the operator: the caller's token
    # goes along in the header it passes on.
    assert passed_on == ["Bearer exec-token-1"]
    assert failed.returncode == 2, failed
    assert failed.stderr.strip().splitlines() == [
        "error: no usable Kubernetes configuration: kubeconfig context 'test': "
        "exec: process returned 3. the token service said no"
    ]
