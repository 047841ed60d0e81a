"""CallerToken (sandfleet.clients.grpc_channel): the caller's Kubernetes token on every call of a
gateway channel, read again once it is old (tokens rotate while a long batch runs)."""

from __future__ import annotations

import asyncio

import grpc.aio

from sandfleet.clients.grpc_channel import CallerToken


async def test_the_token_is_added_and_read_again_once_it_is_old() -> None:
    reads: list[int] = []

    def source() -> str:
        reads.append(1)
        return f"token-{len(reads)}"

    caller = CallerToken("x-sandfleet-authorization", source, refresh_s=0.2)
    details = grpc.aio.ClientCallDetails(
        "/sandfleet.runtime.v1.SystemService/GetStats",
        5.0,
        grpc.aio.Metadata(("x-sandfleet-session", "team-a/s1"), ("authorization", "Bearer rt")),
        None,
        None,
    )
    first = await caller.details(details)
    again = await caller.details(details)
    await asyncio.sleep(0.25)
    later = await caller.details(details)

    assert first.metadata is not None and later.metadata is not None
    assert first.metadata["x-sandfleet-authorization"] == "Bearer token-1"
    assert first.metadata["authorization"] == "Bearer rt"  # the runtime token stays
    assert first.metadata["x-sandfleet-session"] == "team-a/s1"
    assert again.metadata == first.metadata
    assert len(reads) == 2  # once at first, once when it was old
    assert later.metadata["x-sandfleet-authorization"] == "Bearer token-2"
    assert (first.method, first.timeout) == (details.method, details.timeout)


def test_there_is_one_interceptor_per_call_type() -> None:
    """grpc.aio files each interceptor under the first call type it implements."""
    kinds = [
        grpc.aio.UnaryUnaryClientInterceptor,
        grpc.aio.UnaryStreamClientInterceptor,
        grpc.aio.StreamUnaryClientInterceptor,
        grpc.aio.StreamStreamClientInterceptor,
    ]
    interceptors = CallerToken("k", lambda: "t").interceptors()
    assert [next(k for k in kinds if isinstance(i, k)) for i in interceptors] == kinds
