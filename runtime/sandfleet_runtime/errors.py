"""Domain errors of the runtime tools; each carries the gRPC status the servicers report.

Messages are written for the model: they say what went wrong and what to do instead,
because the control plane passes them back verbatim as the tool's observation.
"""

from __future__ import annotations

import grpc


class RuntimeToolError(Exception):
    """Base class. `status` is the gRPC code the servicer aborts with."""

    status: grpc.StatusCode = grpc.StatusCode.INTERNAL


class InvalidArgumentError(RuntimeToolError):
    """The request itself is wrong (relative path, bad range, empty command)."""

    status = grpc.StatusCode.INVALID_ARGUMENT


class NotFoundError(RuntimeToolError):
    """A path or session that the request names does not exist."""

    status = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(RuntimeToolError):
    """The request would overwrite something it must not (create on an existing file)."""

    status = grpc.StatusCode.ALREADY_EXISTS


class FailedPreconditionError(RuntimeToolError):
    """The state of the sandbox does not allow the request (old_str not unique, a directory)."""

    status = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhaustedError(RuntimeToolError):
    """A server limit was reached (too many sessions, file too large)."""

    status = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnavailableError(RuntimeToolError):
    """The runtime cannot serve the request now (shutting down, shell failed to start)."""

    status = grpc.StatusCode.UNAVAILABLE


class UnauthenticatedError(RuntimeToolError):
    """The call's token is no longer the expected one (rotated while the call waited)."""

    status = grpc.StatusCode.UNAUTHENTICATED
