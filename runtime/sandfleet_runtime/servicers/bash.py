"""The BashService servicer: commands in the persistent bash sessions, run, streamed, detached."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable

from sandfleet_proto.runtime.v1 import (
    bash_service_pb2 as bash_pb,
)
from sandfleet_proto.runtime.v1 import (
    bash_service_pb2_grpc as bash_grpc,
)

from ..bash.detached import DetachedCommands
from ..bash.sessions import BashSessions, CommandResult, Outcome, OutputStream
from ..errors import (
    RuntimeToolError,
)
from ..streaming import ChunkStream
from .calls import Context, abort, call, domain_error

_OUTCOMES = {
    Outcome.EXITED: bash_pb.COMMAND_OUTCOME_EXITED,
    Outcome.TIMED_OUT: bash_pb.COMMAND_OUTCOME_TIMED_OUT,
    Outcome.INTERRUPTED: bash_pb.COMMAND_OUTCOME_INTERRUPTED,
    Outcome.SHELL_EXITED: bash_pb.COMMAND_OUTCOME_SHELL_EXITED,
}
_STREAMS = {
    OutputStream.STDOUT: bash_pb.OUTPUT_STREAM_STDOUT,
    OutputStream.STDERR: bash_pb.OUTPUT_STREAM_STDERR,
}


def command_response(result: CommandResult) -> bash_pb.RunCommandResponse:
    return bash_pb.RunCommandResponse(
        stdout=result.stdout,
        stderr=result.stderr,
        exit_code=result.exit_code,
        outcome=_OUTCOMES[result.outcome],
        stdout_truncated=result.stdout_truncated,
        stderr_truncated=result.stderr_truncated,
        stdout_total_bytes=result.stdout_total_bytes,
        stderr_total_bytes=result.stderr_total_bytes,
        duration_seconds=result.duration_s,
        cwd=result.cwd,
    )


class BashServicer(bash_grpc.BashServiceServicer):
    def __init__(self, sessions: BashSessions, detached: DetachedCommands) -> None:
        self._sessions = sessions
        self._detached = detached

    async def RunCommand(
        self, request: bash_pb.RunCommandRequest, context: Context
    ) -> bash_pb.RunCommandResponse:
        def run() -> Awaitable[CommandResult]:
            return self._sessions.run(
                request.session,
                request.command,
                timeout_s=request.timeout_seconds,
                max_output_chars=request.max_output_chars,
            )

        if request.command_id:
            # Detached: a dropped call leaves the command running for AttachCommand.
            result = await call(context, lambda: self._detached.run(request.command_id, run))
        else:
            # Without an id a dropped call cancels this handler, which stops the command.
            result = await call(context, run)
        return command_response(result)

    async def AttachCommand(
        self, request: bash_pb.AttachCommandRequest, context: Context
    ) -> bash_pb.RunCommandResponse:
        result = await call(context, lambda: self._detached.attach(request.command_id))
        return command_response(result)

    async def StreamCommand(
        self, request: bash_pb.StreamCommandRequest, context: Context
    ) -> AsyncIterator[bash_pb.StreamCommandResponse]:
        chunks = ChunkStream(self._sessions.output_cap(request.max_output_chars))
        run = asyncio.ensure_future(
            self._sessions.run(
                request.session,
                request.command,
                timeout_s=request.timeout_seconds,
                max_output_chars=request.max_output_chars,
                listener=chunks.put,
            )
        )
        try:
            # Each yield waits for gRPC flow control: a client that does not read stops the
            # queue from draining, which pauses the pipe reader (see streaming.py).
            async for stream, text in chunks.until(run):
                chunk = bash_pb.OutputChunk(stream=_STREAMS[stream], text=text)
                yield bash_pb.StreamCommandResponse(chunk=chunk)
            try:
                result = run.result()
            except (RuntimeToolError, ValueError, OSError) as exc:
                await abort(context, domain_error(exc))
            yield bash_pb.StreamCommandResponse(result=command_response(result))
        finally:
            chunks.close()
            if not run.done():  # the client went away: stop the command it started
                await self._sessions.interrupt(request.session)
                run.cancel()

    async def InterruptCommand(
        self, request: bash_pb.InterruptCommandRequest, context: Context
    ) -> bash_pb.InterruptCommandResponse:
        interrupted = await call(context, lambda: self._sessions.interrupt(request.session))
        return bash_pb.InterruptCommandResponse(interrupted=interrupted)

    async def RestartSession(
        self, request: bash_pb.RestartSessionRequest, context: Context
    ) -> bash_pb.RestartSessionResponse:
        await call(context, lambda: self._sessions.restart(request.session))
        return bash_pb.RestartSessionResponse()

    async def CloseSession(
        self, request: bash_pb.CloseSessionRequest, context: Context
    ) -> bash_pb.CloseSessionResponse:
        await call(context, lambda: self._sessions.close(request.session))
        return bash_pb.CloseSessionResponse()
