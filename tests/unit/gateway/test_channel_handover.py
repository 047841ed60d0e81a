"""The proxy's channel cache takes the channel a warm claim bound over, so the session's
first proxied call dials nothing; a second channel for an address already cached is closed."""

from __future__ import annotations

import grpc.aio

from sandfleet.gateway.proxy import CHANNEL_OPTIONS, ChannelCache

ADDRESS = "127.0.0.1:1"


async def closed(channel: grpc.aio.Channel) -> bool:
    """A closed channel refuses new calls (the only outward sign grpc gives)."""
    try:
        await channel.unary_unary("/x.Y/Z")(b"", timeout=0.01)
    except grpc.aio.UsageError:
        return True
    except grpc.aio.AioRpcError:
        return False
    return False


async def test_an_adopted_channel_serves_its_address_until_evicted() -> None:
    cache = ChannelCache()
    warmed = grpc.aio.insecure_channel(ADDRESS, options=CHANNEL_OPTIONS)

    cache.adopt(ADDRESS, warmed)

    assert cache.get(ADDRESS).channel is warmed
    cache.evict(ADDRESS)
    await cache.close()
    assert await closed(warmed)


async def test_a_second_channel_for_a_cached_address_is_closed_and_the_first_kept() -> None:
    cache = ChannelCache()
    first = cache.get(ADDRESS).channel
    second = grpc.aio.insecure_channel(ADDRESS, options=CHANNEL_OPTIONS)

    cache.adopt(ADDRESS, second)

    assert cache.get(ADDRESS).channel is first
    assert not await closed(first)
    await cache.close()  # waits for the closing of `second` too
    assert await closed(second)
    assert await closed(first)
