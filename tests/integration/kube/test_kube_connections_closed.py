"""Every API server connection the cluster tests' clients open is closed again, on every path.

A socket left for the garbage collector fails a run (ResourceWarning, an error here as in the
cluster tests, surfaces as PytestUnraisableExceptionWarning in whichever test the collector
happens to run in). Both clients the cluster tests use, the harness's synchronous KubeApi
(http.client) and the SDK's KubeClient (aiohttp), talk to a real HTTPS server on 127.0.0.1
here: answers, errors, timeouts, bodies cut short, watches ended, left early, cancelled and
abandoned. After each case no socket of this process may still be connected to the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import http.server
import os
import socketserver
import ssl
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trustme

from sandfleet.kube import KubeApiError, KubeClient, KubeConfig, KubeConnectionError
from tests.cluster.harness.kube_api import ApiError, KubeApi

pytestmark = pytest.mark.integration

EVENT = b'{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"1"}}}\n'
SLOW_S = 6.0  # how long the "slow" answers keep the client waiting; well above its timeouts


class _Handler(http.server.BaseHTTPRequestHandler):
    """What a loaded API server may do: answer, refuse, stall, cut a body, stream a watch."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        route = self.path.split("?")[0]
        if route == "/ok":
            self._json(200, b'{"kind":"Status","message":"ok"}')
        elif route == "/forbidden":
            self._json(403, b'{"kind":"Status","code":403,"message":"no"}')
        elif route == "/slow":
            self.server.stop.wait(SLOW_S)
            self._json(200, b"{}")
        elif route in ("/cut", "/cut-close"):
            # Headers and part of the body, then silence (the client's read times out);
            # with Connection: close http.client hands the socket to the response.
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            if route == "/cut-close":
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b'{"kind":')
            self.wfile.flush()
            self.server.stop.wait(SLOW_S)
            self.close_connection = True
        elif route == "/watch":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for _ in range(2):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(EVENT), EVENT))
            self.wfile.flush()
            if "end=1" not in self.path:
                self.server.stop.wait(SLOW_S)  # a watch that stays open
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        else:
            self._json(404, b'{"kind":"Status","code":404,"message":"not found"}')

    def _json(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.stop = threading.Event()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """An HTTPS server on 127.0.0.1: its URL and its CA file."""
    ca = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca_file = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    httpd = _Server()
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}", ca_file
    finally:
        httpd.stop.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def _connected_to(port: int) -> int:
    """How many of this process's TCP sockets are connected to `port` (/proc: the kernel's
    view, so an unreferenced socket still waiting for the garbage collector counts too)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] in inodes and int(fields[2].rsplit(":", 1)[1], 16) == port:
                    count += 1
    return count


async def _assert_all_closed(url: str, within_s: float = 2.0) -> None:
    """No socket left connected to the server, without help from the garbage collector."""
    port = int(url.rsplit(":", 1)[1])
    for _ in range(int(within_s / 0.02)):  # a close scheduled on the loop takes an iteration
        if not (left := _connected_to(port)):
            break
        await asyncio.sleep(0.02)
    assert left == 0, f"{left} connection(s) to the API server left open"
    gc.collect()  # and nothing for it to find: a leak would warn (an error) here


@pytest.fixture
def kube_api(server: tuple[str, Path]) -> KubeApi:
    url, ca_file = server
    return KubeApi(KubeConfig(server=url, ca_file=str(ca_file), token="t"))


@pytest.fixture
async def kube_client(server: tuple[str, Path]) -> AsyncIterator[KubeClient]:
    url, ca_file = server
    async with KubeClient(
        KubeConfig(server=url, ca_file=str(ca_file), token="t"), timeout_s=1.5
    ) as kube:
        yield kube


# The harness's KubeApi (http.client in worker threads).


async def test_kube_api_answers_and_errors_leave_no_connection(kube_api: KubeApi) -> None:
    assert (await kube_api.request("GET", "/ok")).status == 200
    assert (await kube_api.request("GET", "/missing")).status == 404
    with pytest.raises(ApiError, match="403"):
        await kube_api.checked("GET", "/forbidden")
    await _assert_all_closed(kube_api.server)


@pytest.mark.parametrize("path", ["/slow", "/cut", "/cut-close"])
async def test_kube_api_timeouts_leave_no_connection(kube_api: KubeApi, path: str) -> None:
    with pytest.raises(TimeoutError):
        await kube_api.request("GET", path, timeout_s=0.3)
    await _assert_all_closed(kube_api.server)


async def test_kube_api_a_request_cancelled_by_its_caller_leaves_no_connection(
    kube_api: KubeApi,
) -> None:
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await kube_api.request("GET", "/slow", timeout_s=1.0)
    # The worker thread goes on until its own timeout (1 s), then closes the connection.
    await _assert_all_closed(kube_api.server, within_s=10.0)


async def test_kube_api_watches_ended_left_or_cancelled_leave_no_connection(
    kube_api: KubeApi,
) -> None:
    events = [e async for e in kube_api.watch("/watch?end=1", 5)]
    assert len(events) == 2
    # Left early (the generator closed by `aclosing`, as `async for ... break` does not).
    async with contextlib.aclosing(kube_api.watch("/watch", 5)) as stream:
        async for _ in stream:
            break

    # Cancelled while waiting for the next event.
    async def consume() -> None:
        async for _ in kube_api.watch("/watch", 5):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(ApiError, match="404"):
        async for _ in kube_api.watch("/missing", 5):
            pass
    await _assert_all_closed(kube_api.server)


async def test_kube_api_an_abandoned_watch_leaves_no_connection(kube_api: KubeApi) -> None:
    stream = kube_api.watch("/watch", 5)
    await anext(stream)
    del stream  # never closed: the loop's async-generator finalizer must close it
    await _assert_all_closed(kube_api.server)


# The SDK's KubeClient (aiohttp).


async def test_kube_client_answers_errors_and_timeouts_leave_no_connection(
    kube_client: KubeClient, server: tuple[str, Path]
) -> None:
    await kube_client.get("/ok")
    with pytest.raises(KubeApiError):
        await kube_client.get("/forbidden")
    for path in ("/slow", "/cut", "/cut-close"):
        with pytest.raises(KubeConnectionError):
            await kube_client.get(path)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await kube_client.get("/slow")
    await kube_client.close()
    await _assert_all_closed(server[0])


async def test_kube_client_watches_left_cancelled_or_abandoned_leave_no_connection(
    kube_client: KubeClient, server: tuple[str, Path]
) -> None:
    async with contextlib.aclosing(kube_client.watch("/watch")) as stream:
        async for _ in stream:
            break

    async def consume() -> None:
        async for _ in kube_client.watch("/watch"):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    abandoned = kube_client.watch("/watch")
    await anext(abandoned)
    del abandoned
    await asyncio.sleep(0.1)
    await kube_client.close()
    await _assert_all_closed(server[0])
