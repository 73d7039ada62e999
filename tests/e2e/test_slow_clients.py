"""Clients that ask for a large exposition and never read it: each holds a bounded piece of its answer,
is closed when it takes nothing for http.send_timeout_seconds, and the memory is given back after."""

from __future__ import annotations

import asyncio

from bench.slow_readers import run
from exporter.serve.httpguard import ConnectionGuard, Tracked


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

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted


def test_past_the_stalled_bound_the_oldest_stalled_is_closed_and_a_flowing_one_is_kept():
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
        await asyncio.sleep(0.35)  # 2 and 3 take nothing within the send deadline
        assert [t.aborted for t in transports] == [True, False, True, True]
        assert guard.stats.send_timeout == 2 and guard.open == 1

    asyncio.run(scenario())
