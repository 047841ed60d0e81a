"""Binding a sandbox to its session: bind_runtime against a real runtime agent on 127.0.0.1
(token candidates, env, input files), and resolve_files' reading of file sources."""

from __future__ import annotations

import base64
import copy
import secrets
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from sandfleet.api import EnvVar, FileSource, Reason
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandboxLostError
from sandfleet.fleet.plans import PlanError
from sandfleet.fleet.pod_index import runtime_address
from sandfleet.kube import KubeClient, NotFoundError
from sandfleet.operator.binding import BindError, bind_runtime, resolve_files
from sandfleet_runtime.server import RuntimeServer
from tests.support.runtime_server import running_runtime

pytestmark = pytest.mark.integration

NS = "team-a"
SESSION = f"{NS}/s1"


class ObjectStore:
    """Stands in for KubeClient.get: the objects by path, a NotFoundError for the rest."""

    def __init__(self, objects: dict[str, dict[str, Any]] | None = None) -> None:
        self.objects = objects or {}

    async def get(self, path: str) -> dict[str, Any]:
        if path not in self.objects:
            raise NotFoundError(404, "NotFound", "not found", {}, method="GET", path=path)
        return copy.deepcopy(self.objects[path])


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def files(*sources: dict[str, Any]) -> list[FileSource]:
    return [FileSource.model_validate(source) for source in sources]


def new_token() -> str:
    return secrets.token_urlsafe(24)


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[tuple[RuntimeServer, str]]:
    """A warm sandbox's runtime: it holds the pool's token until a session binds it."""
    workdir = tmp_path / "testbed"
    workdir.mkdir()
    async with running_runtime(workdir, default_timeout_s=20.0) as started:
        yield started


async def run(address: str, token: str, command: str) -> str:
    client = RuntimeClient(address, token, rpc_timeout_s=20)
    try:
        return (await client.run_command(command)).stdout
    finally:
        await client.close()


# --- bind_runtime --------------------------------------------------------------------------
async def test_a_warm_runtime_takes_the_sessions_token_env_and_files(
    runtime: tuple[RuntimeServer, str], tmp_path: Path
) -> None:
    server, pool_token = runtime
    address = f"127.0.0.1:{server.port}"
    session_token = new_token()
    workdir = str(tmp_path / "testbed")
    inputs = await resolve_files(
        cast(KubeClient, ObjectStore()),
        NS,
        workdir,
        files(
            {"path": "task/problem.md", "content": "fix the bug\n"},
            {"path": str(tmp_path / "abs" / "run.sh"), "content": "echo hi\n", "mode": 0o755},
        ),
    )

    await bind_runtime(
        address,
        [pool_token, session_token],
        session_token,
        session=SESSION,
        env=[EnvVar(name="TASK_ID", value="42 a"), EnvVar(name="EMPTY")],
        files=inputs,
        timeout_s=10,
    )

    listing = await run(
        address,
        session_token,
        'echo "$TASK_ID|${EMPTY-unset}"; cat task/problem.md; stat -c %a ../abs/run.sh',
    )
    assert listing == "42 a|\nfix the bug\n755\n"
    with pytest.raises(SandboxLostError, match="UNAUTHENTICATED"):
        await run(address, pool_token, "true")
    client = RuntimeClient(address, session_token)
    try:
        assert (await client.stats()).session == SESSION
    finally:
        await client.close()


async def test_a_restarted_worker_binds_whichever_candidate_the_runtime_still_holds(
    runtime: tuple[RuntimeServer, str],
) -> None:
    # The first worker's bind went through before it died; the next one cannot know that.
    server, pool_token = runtime
    address = f"127.0.0.1:{server.port}"
    session_token = new_token()
    for round_ in ("1", "2"):
        await bind_runtime(
            address,
            [pool_token, session_token],
            session_token,
            session=SESSION,
            env=[EnvVar(name="ROUND", value=round_)],
            files=[],
            timeout_s=10,
        )

    assert await run(address, session_token, "echo $ROUND") == "2\n"


async def test_a_runtime_that_refuses_every_candidate_token_is_a_bind_error(
    runtime: tuple[RuntimeServer, str],
) -> None:
    server, pool_token = runtime
    address = f"127.0.0.1:{server.port}"

    with pytest.raises(BindError, match=f"binding the runtime at {address} failed"):
        await bind_runtime(
            address,
            [new_token(), new_token()],
            new_token(),
            session=SESSION,
            env=[],
            files=[],
            timeout_s=10,
        )

    assert await run(address, pool_token, "echo still-warm") == "still-warm\n"


async def test_a_runtime_nobody_answers_for_is_a_bind_error_after_the_timeout() -> None:
    # Bound but not listening: connections are refused, and nobody else can take the port.
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{held.getsockname()[1]}"

        with pytest.raises(BindError):
            await bind_runtime(
                address,
                [new_token()],
                new_token(),
                session=SESSION,
                env=[],
                files=[],
                timeout_s=0.3,
            )


def test_an_ipv6_pod_address_is_bracketed_for_grpc() -> None:
    assert runtime_address("10.1.2.3") == "10.1.2.3:50051"
    assert runtime_address("fd00::1:2") == "[fd00::1:2]:50051"


# --- resolve_files -------------------------------------------------------------------------
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"
CONSENTED = {"labels": {"sandfleet.dev/session-files": "true"}}
"""Whoever may read the object let sessions copy it into their sandboxes."""


async def resolve(sources: list[FileSource], objects: dict[str, dict[str, Any]]) -> Any:
    return await resolve_files(cast(KubeClient, ObjectStore(objects)), NS, "/testbed", sources)


async def test_file_sources_resolve_to_absolute_paths_contents_and_modes() -> None:
    objects = {
        f"{CONFIGMAPS}/inputs": {
            "metadata": CONSENTED,
            "data": {"setup.py": "print(1)\n"},
            "binaryData": {"blob.bin": b64(b"\x00\xff")},
        },
        f"{SECRETS}/creds": {"metadata": CONSENTED, "data": {"netrc": b64(b"machine x\n")}},
    }

    resolved = await resolve(
        files(
            {"path": "a.txt", "content": "inline"},
            {"path": "src/setup.py", "configMapKeyRef": {"name": "inputs", "key": "setup.py"}},
            {"path": "/data/blob.bin", "configMapKeyRef": {"name": "inputs", "key": "blob.bin"}},
            {
                "path": "/root/.netrc",
                "secretKeyRef": {"name": "creds", "key": "netrc"},
                "mode": 384,
            },
        ),
        objects,
    )

    assert resolved == [
        ("/testbed/a.txt", b"inline", 0o644),
        ("/testbed/src/setup.py", b"print(1)\n", 0o644),
        ("/data/blob.bin", b"\x00\xff", 0o644),
        ("/root/.netrc", b"machine x\n", 0o600),
    ]


@pytest.mark.parametrize(
    ("source", "reason", "message"),
    [
        (
            {"path": "a", "secretKeyRef": {"name": "nope", "key": "k"}},
            Reason.SECRET_NOT_FOUND,
            "file a: secret nope not found",
        ),
        (
            {"path": "a", "configMapKeyRef": {"name": "nope", "key": "k"}},
            Reason.INVALID_SPEC,
            "file a: configmap nope not found",
        ),
        (
            {"path": "a", "configMapKeyRef": {"name": "inputs", "key": "missing"}},
            Reason.INVALID_SPEC,
            "file a: inputs has no key 'missing'",
        ),
        (
            {"path": "a", "secretKeyRef": {"name": "creds", "key": "missing"}},
            Reason.INVALID_SPEC,
            "file a: creds has no key 'missing'",
        ),
        (
            {"path": "a", "secretKeyRef": {"name": "db-credentials", "key": "password"}},
            Reason.SECRET_NOT_LABELLED,
            "file a: secret team-a/db-credentials lacks the label sandfleet.dev/session-files=true",
        ),
        (
            {"path": "a", "configMapKeyRef": {"name": "private", "key": "k"}},
            Reason.SECRET_NOT_LABELLED,
            "file a: configmap team-a/private lacks the label sandfleet.dev/session-files=true",
        ),
    ],
)
async def test_a_missing_file_source_is_a_plan_error_naming_it(
    source: dict[str, Any], reason: Reason, message: str
) -> None:
    objects: dict[str, dict[str, Any]] = {
        f"{CONFIGMAPS}/inputs": {"metadata": CONSENTED, "data": {}},
        f"{SECRETS}/creds": {"metadata": CONSENTED, "data": {}},
        f"{SECRETS}/db-credentials": {"data": {"password": b64(b"hunter2")}},
        f"{CONFIGMAPS}/private": {"metadata": {"labels": {"other": "true"}}, "data": {"k": "v"}},
    }

    with pytest.raises(PlanError) as caught:
        await resolve(files(source), objects)

    assert caught.value.reason == reason
    assert str(caught.value).startswith(message), str(caught.value)
