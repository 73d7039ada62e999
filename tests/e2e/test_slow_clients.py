"""Clients that ask for a large exposition and never read it: each holds a bounded piece of its answer,
is closed when it takes nothing for http.send_timeout_seconds, and the memory is given back after."""

from __future__ import annotations

import asyncio
import socket

from bench.slow_readers import run
from exporter.serve.httpguard import SEND_BUFFER, ConnectionGuard, Tracked, _small_send_buffer, unsent


def test_clients_that_never_read_a_large_answer_hold_little_and_give_it_back():
    r = run(clients=50, gpus=64, hold_s=13.0, settle_s=4.0)
    assert r.exposition_bytes > 3_000_000  # 64 GPUs with --detail all
    # before the bounds each such client held about 2.4 MiB of its answer until the keep-alive deadline
    assert r.rss_peak_mib - r.rss_before_mib < 60, r
    assert r.rss_after_mib - r.rss_before_mib < 30, r
    # closed at the send deadline (10 s); an answer the kernel's socket buffers took whole is not stalled
    assert r.clients_closed_by_server >= 40, r
    assert r.scrapes_failed == 0, r


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.aborted = False
        self.pending = 1 << 16  # bytes its client has not taken

    def get_write_buffer_size(self) -> int:
        return self.pending

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted


def test_past_the_stalled_bound_the_oldest_is_closed_and_one_that_took_its_answer_is_kept():
    async def scenario() -> None:
        guard = ConnectionGuard(max_connections=10, max_stalled=2, send_timeout_s=0.2)
        conns = [Tracked() for _ in range(4)]
        transports = [_Transport() for _ in conns]
        for tracked, transport in zip(conns, transports, strict=True):
            assert guard.admit(tracked, transport)
            guard.busy(tracked)
        guard.stalled(conns[0])
        guard.stalled(conns[1])
        guard.flowing(conns[1])  # it took its answer
        guard.stalled(conns[2])
        guard.stalled(conns[3])  # a third stalled: the oldest stalled (0) goes
        assert [t.aborted for t in transports] == [True, False, False, False]
        transports[3].pending = 0  # it takes the rest of its answer in time
        await asyncio.sleep(0.35)  # 2 takes nothing within the send deadline
        assert [t.aborted for t in transports] == [True, False, True, False]
        assert guard.stats.send_timeout == 1 and guard.open == 2

    asyncio.run(scenario())


def test_an_accepted_connection_has_a_small_kernel_send_buffer_and_its_unsent_bytes_are_counted():
    async def scenario() -> None:
        accepted: list[asyncio.Transport] = []

        class Sink(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                accepted.append(transport)  # type: ignore[arg-type]

        loop = asyncio.get_running_loop()
        server = await loop.create_server(Sink, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        client.setblocking(False)
        await loop.sock_connect(client, ("127.0.0.1", port))
        while not accepted:
            await asyncio.sleep(0.01)
        transport = accepted[0]
        _small_send_buffer(transport)
        sock = transport.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) <= 2 * SEND_BUFFER
        transport.write(b"x" * (1 << 20))  # the client reads none of it
        await asyncio.sleep(0.1)
        # in asyncio's buffer or the kernel's queue, all counted, but what the client's receive buffer took
        assert (1 << 20) - 16 * 1024 < unsent(transport) < 1 << 20
        assert transport.get_write_buffer_size() > (1 << 20) - 4 * SEND_BUFFER  # the kernel took little
        client.close()
        transport.abort()
        server.close()

    asyncio.run(scenario())
