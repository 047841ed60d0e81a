"""Shared gateway channels: one per key and loop across leases, closed after the last lease
lingers out, never handed to another event loop."""

from __future__ import annotations

import asyncio

import grpc.aio

from sandfleet.clients.shared_channels import SharedChannels

ADDRESS = "127.0.0.1:1"


def opener(opened: list[grpc.aio.Channel]) -> grpc.aio.Channel:
    channel = grpc.aio.insecure_channel(ADDRESS)
    opened.append(channel)
    return channel


async def test_leases_of_one_key_share_a_channel_that_outlives_a_gap_between_them() -> None:
    shared: SharedChannels[grpc.aio.Channel] = SharedChannels(linger_s=60)
    opened: list[grpc.aio.Channel] = []

    first = shared.lease(("gateway", ADDRESS), lambda: opener(opened))
    first.release()
    second = shared.lease(("gateway", ADDRESS), lambda: opener(opened))
    other = shared.lease(("runtime", ADDRESS), lambda: opener(opened))

    assert second.channel is first.channel
    assert other.channel is not first.channel
    assert len(opened) == 2
    second.release()
    other.release()
    await shared.close()


async def test_a_channel_nobody_leases_is_closed_after_the_linger() -> None:
    shared: SharedChannels[grpc.aio.Channel] = SharedChannels(linger_s=0.01)
    opened: list[grpc.aio.Channel] = []
    lease = shared.lease(("gateway", ADDRESS), lambda: opener(opened))
    lease.release()
    lease.release()  # a second release changes nothing

    for _ in range(500):  # bounded: the linger is 10 ms, the loop may be slow under load
        await asyncio.sleep(0.01)
        again = shared.lease(("gateway", ADDRESS), lambda: opener(opened))
        again.release()
        if len(opened) == 2:
            break

    assert len(opened) == 2  # the first closed, a new one opened for the later lease
    await shared.close()


def test_a_new_event_loop_gets_a_channel_of_its_own() -> None:
    shared: SharedChannels[grpc.aio.Channel] = SharedChannels(linger_s=60)
    opened: list[grpc.aio.Channel] = []

    async def lease_and_keep() -> None:
        shared.lease(("gateway", ADDRESS), lambda: opener(opened)).release()

    async def lease_and_close() -> None:
        shared.lease(("gateway", ADDRESS), lambda: opener(opened)).release()
        await shared.close()

    asyncio.run(lease_and_keep())
    asyncio.run(lease_and_close())

    assert len(opened) == 2
