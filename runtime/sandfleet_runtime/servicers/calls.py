"""What every servicer shares: running domain work and turning its errors into gRPC statuses."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc

from ..errors import (
    RuntimeToolError,
    tool_error_from,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
Context = grpc.aio.ServicerContext[Any, Any]


async def abort(context: Context, exc: RuntimeToolError) -> NoReturn:
    await context.abort(exc.status, str(exc))
    raise AssertionError("context.abort returned")  # pragma: no cover - abort always raises


def domain_error(exc: RuntimeToolError | ValueError | OSError) -> RuntimeToolError:
    """The domain error for what a tool raised; ValueError/OSError from bad arguments too."""
    if isinstance(exc, RuntimeToolError):
        return exc
    mapped = tool_error_from(exc)
    log.info(
        "request_error",
        extra={
            "error": type(exc).__name__,
            "errno": getattr(exc, "errno", None),
            "status": mapped.status.name,
        },
    )
    return mapped


async def call(context: Context, work: Callable[[], Awaitable[T]]) -> T:
    """Run domain work, translating its errors into status codes with the same message."""
    try:
        return await work()
    except (RuntimeToolError, ValueError, OSError) as exc:
        await abort(context, domain_error(exc))
