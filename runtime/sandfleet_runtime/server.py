"""Server bootstrap: services, health, reflection, auth, graceful shutdown, bound port for tests."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

# `health.aio` is this module re-exported; importing it by name gives mypy its types.
from grpc_health.v1._async import HealthServicer as AsyncHealthServicer
from grpc_reflection.v1alpha import reflection

from sandfleet_proto.runtime.v1 import (
    bash_service_pb2,
    bash_service_pb2_grpc,
    editor_service_pb2,
    editor_service_pb2_grpc,
    file_service_pb2,
    file_service_pb2_grpc,
    system_service_pb2,
    system_service_pb2_grpc,
)

from .auth import TokenAuthInterceptor
from .bash.detached import DetachedCommands
from .bash.limits import SessionLimits
from .bash.processes import ChildReaper
from .bash.sessions import BashSessions
from .binding import SessionBinder
from .editor.file_editor import FileEditor
from .reset import Resetter
from .servicers import BashServicer, EditorServicer, FileServicer, SystemServicer
from .settings import RuntimeSettings
from .stats import ActivityClock

log = logging.getLogger(__name__)

SERVICE_NAMES = tuple(
    module.DESCRIPTOR.services_by_name[name].full_name
    for module, name in (
        (bash_service_pb2, "BashService"),
        (editor_service_pb2, "EditorService"),
        (file_service_pb2, "FileService"),
        (system_service_pb2, "SystemService"),
    )
)
# Messages up to 16 MiB: a 10,000-character observation is tiny, but file chunks and
# large editor views are not; uploads and downloads stream anyway.
_MAX_MESSAGE_BYTES = 16 * 1024 * 1024


@dataclasses.dataclass(slots=True)
class RuntimeServer:
    """A built (not yet started) runtime server and the parts shutdown needs."""

    server: grpc.aio.Server
    port: int
    health: AsyncHealthServicer
    sessions: BashSessions
    reaper: ChildReaper
    limits: SessionLimits | None
    auth: TokenAuthInterceptor
    editor: EditorServicer

    async def start(self) -> None:
        await self.server.start()
        for name in (*SERVICE_NAMES, ""):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, grace_s: float | None) -> None:
        """Flip health to NOT_SERVING, drain RPCs, then kill every session and its processes."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace_s)
        await self.sessions.close_all()
        self.editor.shutdown()
        if self.limits is not None:
            self.limits.destroy()
        self.reaper.close()


def build_server(settings: RuntimeSettings) -> RuntimeServer:
    if settings.token is None and not settings.allow_no_auth:
        raise ValueError("a runtime token is required (SANDFLEET_RUNTIME_TOKEN or --token-file)")
    reaper = ChildReaper()
    reaper.install(asyncio.get_running_loop())
    limits = SessionLimits.create(
        max_processes=settings.max_processes,
        max_memory_bytes=settings.max_memory_bytes,
        # Unique even across PID namespaces, where every sandbox's agent may be pid 2.
        name=f"sandfleet-runtime-{os.getpid()}-{os.urandom(4).hex()}",
    )
    activity = ActivityClock()
    sessions = BashSessions(
        workdir=settings.workdir,
        env=dict(settings.shell_env),
        default_timeout_s=settings.default_timeout_s,
        max_timeout_s=settings.max_timeout_s,
        default_max_output_chars=settings.default_max_output_chars,
        max_output_chars=settings.max_output_chars,
        max_sessions=settings.max_sessions,
        limits=limits,
        reaper=reaper,
    )
    sessions.on_activity = activity.touch
    editor = FileEditor(max_file_bytes=settings.max_edit_file_bytes, cwd=settings.workdir)

    auth = TokenAuthInterceptor(settings.token)
    server = grpc.aio.server(
        interceptors=(auth,),
        options=(
            ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ),
    )
    detached = DetachedCommands()
    bash_service_pb2_grpc.add_BashServiceServicer_to_server(
        BashServicer(sessions, detached), server
    )
    editor_servicer = EditorServicer(editor, activity)
    editor_service_pb2_grpc.add_EditorServiceServicer_to_server(editor_servicer, server)
    resetter = Resetter(
        sessions=sessions,
        detached=detached,
        workdir=settings.workdir.resolve(),
        baseline_max_bytes=settings.reset_baseline_max_bytes,
        clear_editor_history=editor_servicer.clear_history,
        activity=activity,
        limits=limits,
        owns_process=settings.owns_process,
        extra_roots=settings.reset_paths,
    )
    file_service_pb2_grpc.add_FileServiceServicer_to_server(
        FileServicer(
            activity,
            workdir=settings.workdir.resolve(),
            resetter=resetter,
            max_upload_bytes=settings.max_upload_bytes,
            home=dict(settings.shell_env).get("HOME", ""),
            own_paths=lambda: _own_paths(sessions),
        ),
        server,
    )
    cgroup_memory = None
    if limits is not None:
        cgroup_memory = limits.memory_usage
    binder = SessionBinder(auth, sessions, activity, on_bind=resetter.forget_captured_baseline)
    system_service_pb2_grpc.add_SystemServiceServicer_to_server(
        SystemServicer(
            activity, sessions, binder, auth, resetter=resetter, cgroup_memory=cgroup_memory
        ),
        server,
    )
    health_servicer = AsyncHealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    port = server.add_insecure_port(settings.listen)
    if port == 0:
        raise OSError(f"could not bind {settings.listen}")
    return RuntimeServer(
        server, port, health_servicer, sessions, reaper, limits, auth, editor_servicer
    )


def _own_paths(sessions: BashSessions) -> tuple[Path, ...]:
    """The runtime's files outside the working tree: its shells' driver (in /tmp)."""
    driver = sessions.driver_dir
    return (driver.resolve(),) if driver is not None else ()


async def serve(settings: RuntimeSettings, *, ready_fd: int | None = None) -> None:
    """Serve until SIGTERM/SIGINT, then shut down gracefully."""
    runtime = build_server(settings)
    await runtime.start()
    log.info("runtime_started", extra={"port": runtime.port, "workdir": str(settings.workdir)})
    if ready_fd is not None:
        os.write(ready_fd, f"{runtime.port}\n".encode())
        os.close(ready_fd)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("runtime_stopping", extra={"grace_s": settings.shutdown_grace_s})
    await runtime.stop(settings.shutdown_grace_s)
    log.info("runtime_stopped")
