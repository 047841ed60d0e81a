"""A TCP relay on 127.0.0.1 whose live connections a test can cut, as a network blip would.

Clients connect to the relay, which forwards bytes both ways to the real server. `sever()`
closes every connection it carries (the clients see their streams reset) while the relay
keeps listening, so a client's channel reconnects through it afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Self


class TcpRelay:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0
        self.connections = 0
        """Connections accepted so far (a reconnect after `sever` adds one)."""

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._server is not None:
            self._server.close()
        self.sever()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def sever(self) -> int:
        """Cut every live connection (both sides); returns how many there were."""
        writers = list(self._writers)
        for writer in writers:
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._writers.clear()
        return len(writers) // 2

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        pumps = [
            asyncio.create_task(self._pump(reader, up_writer)),
            asyncio.create_task(self._pump(up_reader, writer)),
        ]
        self._tasks.update(pumps)
        await asyncio.gather(*pumps, return_exceptions=True)
        self._tasks.difference_update(pumps)
        for each in (writer, up_writer):
            self._writers.discard(each)
            each.transport.abort()

    @staticmethod
    async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                sink.transport.abort()
