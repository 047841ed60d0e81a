"""Binding a started sandbox to its session through the runtime API: token, env, files.

This is what lets a warm pool pod serve any session without a restart: the pod spec holds
only the pool's token; the session's token, environment and input files arrive here.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Sequence

from sandfleet.api import EnvVar, FileSource, Label
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandboxLostError, SandfleetError, ToolError
from sandfleet.kube import KubeClient
from sandfleet.logs import get_logger
from sandfleet.operator.consented_keys import Kind, read_consented_key

log = get_logger(__name__)


class BindError(SandfleetError):
    """The runtime would not take the binding (unreachable, or rejected every token)."""


async def resolve_files(
    kube: KubeClient, namespace: str, workdir: str, files: Sequence[FileSource]
) -> list[tuple[str, bytes, int]]:
    """(absolute sandbox path, content, mode) for each input file; reads ConfigMaps and
    Secrets labelled sandfleet.dev/session-files (consented_keys). A missing or unlabelled
    source is a PlanError (the session cannot start until it changes)."""
    resolved = []
    for item in files:
        path = item.path if item.path.startswith("/") else posixpath.join(workdir, item.path)
        resolved.append((path, await _file_content(kube, namespace, item), item.mode))
    return resolved


async def _file_content(kube: KubeClient, namespace: str, item: FileSource) -> bytes:
    if item.content is not None:
        return item.content.encode()
    ref = item.config_map_key_ref or item.secret_key_ref
    assert ref is not None  # the model validator guarantees exactly one source
    kind: Kind = "configmaps" if item.config_map_key_ref is not None else "secrets"
    return await read_consented_key(
        kube, namespace, kind, ref.name, ref.key, label=Label.SESSION_FILES, use=f"file {item.path}"
    )


async def bind_runtime(
    address: str,
    candidate_tokens: Sequence[str],
    session_token: str,
    *,
    session: str,
    env: Sequence[EnvVar],
    files: Sequence[tuple[str, bytes, int]],
    timeout_s: float,
) -> None:
    """Wait for the runtime at `address`, then bind it to the session.

    `candidate_tokens` are the tokens the runtime may hold now, in order (a pool's token,
    or the session's own after an earlier bind): a restarted worker does not know whether
    its predecessor's bind went through, and binding again is harmless.
    """
    env_map = {var.name: var.value for var in env}
    last_error: Exception | None = None
    for token in candidate_tokens:
        client = RuntimeClient(address, token, rpc_timeout_s=timeout_s)
        try:
            await asyncio.wait_for(client.wait_ready(timeout_s), timeout_s + 1)
            await client.bind_session(session_token, env_map, session)
            for path, content, mode in files:
                await client.upload(content, path, mode=mode)
        except (SandboxLostError, ToolError, TimeoutError) as exc:
            last_error = exc
            log.info("runtime_bind_failed", address=address, session=session, error=str(exc))
            continue
        finally:
            await client.close()
        log.info("runtime_bound", address=address, session=session, files=len(files))
        return
    raise BindError(f"binding the runtime at {address} failed: {last_error}")
