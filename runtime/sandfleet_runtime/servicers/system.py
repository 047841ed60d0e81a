"""The SystemService servicer: stats, binding to a session, reset and the baseline."""

from __future__ import annotations

import logging
from collections.abc import Callable

from sandfleet_proto.runtime.v1 import (
    system_service_pb2 as system_pb,
)
from sandfleet_proto.runtime.v1 import (
    system_service_pb2_grpc as system_grpc,
)

from ..auth import TokenAuthInterceptor
from ..bash.sessions import BashSessions
from ..binding import SessionBinder
from ..reset import Resetter
from ..stats import ActivityClock, collect_stats
from .calls import Context, call

log = logging.getLogger(__name__)


_MEMORY_SOURCES = {
    "cgroup": system_pb.MEMORY_SOURCE_CGROUP,
    "proc": system_pb.MEMORY_SOURCE_PROC,
}


class SystemServicer(system_grpc.SystemServiceServicer):
    def __init__(
        self,
        activity: ActivityClock,
        sessions: BashSessions,
        binder: SessionBinder,
        auth: TokenAuthInterceptor,
        *,
        resetter: Resetter,
        cgroup_memory: Callable[[], tuple[int, int] | None] | None = None,
    ) -> None:
        self._resetter = resetter
        self._activity = activity
        self._sessions = sessions
        self._binder = binder
        self._auth = auth
        self._cgroup_memory = cgroup_memory

    async def GetStats(
        self, request: system_pb.GetStatsRequest, context: Context
    ) -> system_pb.GetStatsResponse:
        snapshot = collect_stats(self._activity, cgroup_memory=self._cgroup_memory)
        return system_pb.GetStatsResponse(
            memory_current_bytes=snapshot.memory_current_bytes,
            memory_peak_bytes=snapshot.memory_peak_bytes,
            memory_source=_MEMORY_SOURCES.get(
                snapshot.memory_source, system_pb.MEMORY_SOURCE_UNSPECIFIED
            ),
            process_count=snapshot.process_count,
            uptime_seconds=snapshot.uptime_s,
            last_activity_unix=snapshot.last_activity_unix,
            idle_seconds=snapshot.idle_s,
            bash_sessions=self._sessions.session_count,
            running_commands=self._sessions.running_count,
            session=self._binder.session,
            bash_session_names=self._sessions.names,
        )

    async def BindSession(
        self, request: system_pb.BindSessionRequest, context: Context
    ) -> system_pb.BindSessionResponse:
        metadata = context.invocation_metadata()
        binding = await call(
            context,
            lambda: self._binder.bind(
                request.token,
                dict(request.env),
                request.session,
                still_authorized=lambda: self._auth.accepts(metadata),
            ),
        )
        return system_pb.BindSessionResponse(
            closed_sessions=binding.closed_sessions, bound_unix=binding.bound_unix
        )

    async def Reset(
        self, request: system_pb.ResetRequest, context: Context
    ) -> system_pb.ResetResponse:
        report = await call(context, self._resetter.reset)
        return system_pb.ResetResponse(
            closed_sessions=report.closed_sessions,
            killed_processes=report.killed_processes,
            removed_paths=report.removed_paths,
            restored_paths=report.restored_paths,
            dropped_commands=report.dropped_commands,
            duration_seconds=report.duration_s,
        )

    async def CaptureBaseline(
        self, request: system_pb.CaptureBaselineRequest, context: Context
    ) -> system_pb.CaptureBaselineResponse:
        baseline = await call(context, self._resetter.capture_baseline)
        return system_pb.CaptureBaselineResponse(paths=baseline.paths, bytes=baseline.size)
