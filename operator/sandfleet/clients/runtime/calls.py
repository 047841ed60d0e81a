"""What the runtime clients share below the RPCs: results from responses, gRPC errors as
ToolError/SandboxLostError, model text checked before it reaches protobuf."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import grpc

from sandfleet.clients.runtime.results import CommandResult
from sandfleet.errors import SandboxLostError, ToolError
from sandfleet_proto.runtime.v1 import bash_service_pb2 as bash_pb

# Status codes that mean "the request was wrong", which the model can fix itself.
MODEL_FIXABLE = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)
CHUNK = 256 * 1024
# Extra seconds on a command's gRPC deadline beyond its own timeout (kill + drain + transit).
DEADLINE_MARGIN_S = 30.0


def command_result(resp: bash_pb.RunCommandResponse) -> CommandResult:
    return CommandResult(
        stdout=resp.stdout,
        stderr=resp.stderr,
        exit_code=resp.exit_code if resp.HasField("exit_code") else None,
        timed_out=resp.outcome == bash_pb.COMMAND_OUTCOME_TIMED_OUT,
        interrupted=resp.outcome == bash_pb.COMMAND_OUTCOME_INTERRUPTED,
        shell_exited=resp.outcome == bash_pb.COMMAND_OUTCOME_SHELL_EXITED,
        truncated=resp.stdout_truncated or resp.stderr_truncated,
        duration_s=resp.duration_seconds,
        cwd=resp.cwd,
    )


def publish(partial: Path, local: Path, mode: int) -> None:
    partial.chmod(mode)
    partial.replace(local)


@contextlib.contextmanager
def model_text() -> Iterator[None]:
    """Building a request from the model's arguments: protobuf refuses text that is not valid
    Unicode (a lone surrogate such as \\udc80 from a JSON escape) and integers out of range.
    Both are the model's to fix, so they become a ToolError (an observation), not a crash."""
    try:
        yield
    except UnicodeEncodeError as exc:
        where = exc.object[max(0, exc.start - 20) : exc.end + 20]
        raise ToolError(
            f"An argument is not valid Unicode text: it holds a lone surrogate at position"
            f" {exc.start} (near {where!r}). Send plain UTF-8 text.",
            code="INVALID_ARGUMENT",
        ) from None
    except ValueError as exc:
        raise ToolError(f"An argument is out of range: {exc}.", code="INVALID_ARGUMENT") from None


def translate(exc: grpc.aio.AioRpcError) -> ToolError | SandboxLostError:
    code = exc.code()
    details = exc.details() or code.name
    if code in MODEL_FIXABLE:
        return ToolError(details, code=code.name)
    return SandboxLostError(f"runtime call failed: {code.name}: {details}")
